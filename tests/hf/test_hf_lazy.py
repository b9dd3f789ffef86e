"""keep_compressed loads read stored records without decoding them where they are kept as they are
(wcodec.hf.checkpoint.StoredTensor): a fixed record fused, any record kept just in time; every
other use decodes, and the outputs stay exact."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from wcodec.hf import checkpoint as ck  # noqa: E402
from wcodec.hf import keep as keep_mod  # noqa: E402

from . import _arch  # noqa: E402


@pytest.fixture(scope="module")
def cell(tmp_path_factory):
    return _arch.make_cell("mixtral", tmp_path_factory.mktemp("lazy"))


@pytest.fixture
def decoded(monkeypatch):
    """Names of the stored records decoded through StoredTensor during the test."""
    names = []
    real = ck.materialize

    def spy(t):
        if isinstance(t, ck.StoredTensor):
            names.append(t.stored_name)
        return real(t)

    monkeypatch.setattr(ck, "materialize", spy)
    monkeypatch.setattr(keep_mod, "materialize", spy)
    return names


def test_fixed_folder_fuses_stored_records_without_decoding_them(cell, decoded):
    rep = _arch.check_load(cell, "fixed", "keep")  # outputs exact against the bf16 original
    fused = set(rep["fused"])
    assert fused and not fused & set(decoded), f"fused records were decoded: {sorted(fused & set(decoded))}"
    # what is not fused as stored is decoded: norms, the router, the per-expert tensors that
    # transformers stacks into its 3-D experts parameters
    assert any(".experts." in n for n in decoded) and any("norm" in n for n in decoded)


def test_jit_reads_no_record_at_load(cell, decoded):
    model = _arch.load("mixtral", cell.converted["lossless"], keep="jit")
    compressed = set(model.wcodec_weights.report["compressed"])
    assert compressed and not compressed & set(decoded)
    _arch.assert_same_outputs(_arch.outputs(model, cell.feed), cell.want, "jit outputs")


def test_stored_tensor_moves_without_decoding_and_decodes_on_use(cell):
    folder = cell.converted["lossless"]
    ck.keep_lazily(folder, True)
    try:
        view = ck.CheckpointView(folder)
    finally:
        ck.keep_lazily(folder, False)
    with view:
        name = next(n for n in view.keys() if n.endswith("q_proj.weight"))
        t = view.get_slice(name)[...]
        assert isinstance(t, ck.StoredTensor) and t.device.type == "cpu"
        moved = t.to("cpu", copy=True)
        assert isinstance(moved, ck.StoredTensor) and moved.dtype == t.dtype and moved.shape == t.shape
        want = view.get_tensor(name)
        assert not isinstance(want, ck.StoredTensor)
        assert torch.equal(t * 1, want) and torch.equal(torch.stack([t, t])[1], want)
        half = t.to(torch.float16)  # a cast decodes
        assert type(half) is torch.Tensor and torch.equal(half, want.half())
        assert torch.equal(ck.materialize(t), want)


def test_a_plain_load_clears_a_left_over_mark(cell):
    folder = cell.converted["fixed"]
    ck.keep_lazily(folder, True)  # as a keep_compressed load that failed half way would leave it
    model = _arch.load("mixtral", folder)
    assert not any(isinstance(p, ck.StoredTensor) for p in model.parameters())
    assert not ck.CheckpointView(folder).lazy
    _arch.assert_same_outputs(_arch.outputs(model, cell.feed), cell.want, "plain outputs")


@pytest.mark.parametrize("keep", [True, "jit"])
def test_stored_3d_expert_records_are_taken_as_stored(cell, tmp_path, monkeypatch, keep):
    """A folder whose experts are stored as whole [E, N, K] tensors (transformers 5's own state
    dict, as our save_pretrained writes it) keeps them compressed straight from the fixed records:
    no expert is decoded and re-encoded, outputs stay exact."""
    from safetensors.torch import save_file

    from wcodec.torch import experts as ex

    src = tmp_path / "src"
    src.mkdir()
    sd = {k: v.contiguous() for k, v in cell.ref.state_dict().items()}
    assert any(k.endswith("experts.gate_up_proj") for k in sd)
    save_file(sd, str(src / "model.safetensors"), metadata={"format": "pt"})
    cell.ref.config.save_pretrained(src)
    folder = _arch.convert(src, tmp_path / "fixed", "fixed")

    def refuse(*a, **k):
        raise AssertionError("an expert record was decoded and re-encoded")

    monkeypatch.setattr(ex, "compress_expert_param", refuse)
    model = _arch.load("mixtral", folder, keep=keep)
    rep = model.wcodec_weights.report
    kept = rep["fused" if keep is True else "compressed"]
    assert sum(".experts." in n for n in kept) == 2 * cell.ref.config.num_hidden_layers
    _arch.assert_same_outputs(_arch.outputs(model, cell.feed), cell.want, "outputs")
