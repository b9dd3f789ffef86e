"""keep_compressed="jit" keeps compressed the weights that transformers' loader splits, merges or
renames (no single stored record): HRM-Text's checkpoint holds fused ``attn.gqkv_proj`` and
``mlp.gate_up_proj``, which transformers 5.x chunks into gate / q / k / v and gate / up on load.
Each such weight is encoded in memory and decoded just in time; the outputs stay the bf16 model's
bit for bit, and save_pretrained writes the original tensors."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from . import _arch  # noqa: E402

_arch.ARCHS.setdefault("hrm_text", _arch.Arch(
    "hrm_text", "AutoModelForCausalLM",
    dict(vocab_size=512, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
         head_dim=16, pad_token_id=0, bos_token_id=1, eos_token_id=2), "text"))

_SPLIT = ("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.gate_proj", "mlp.gate_proj",
          "mlp.up_proj")


@pytest.fixture(scope="module")
def cell(tmp_path_factory):
    try:
        transformers.AutoConfig.for_model("hrm_text")
    except (KeyError, ValueError):
        pytest.skip("this transformers has no hrm_text")
    return _arch.make_cell("hrm_text", tmp_path_factory.mktemp("split"))


def _linear_weights(model) -> dict:
    return {f"{n}.weight": m for n, m in model.named_modules() if isinstance(m, torch.nn.Linear)}


def _dense_linear_numel(model) -> int:
    """Elements of nn.Linear weights the model holds as ordinary tensors (a just-in-time weight is
    a JitWeight over the shared scratch)."""
    from wcodec.torch.jit import JitWeight

    return sum(m.weight.numel() for m in _linear_weights(model).values() if not isinstance(m.weight, JitWeight))


def test_the_loader_splits_these_weights(cell):
    from wcodec.format import CheckpointReader

    with CheckpointReader(cell.converted["lossless"]) as r:
        stored = set(r.keys())
    assert any(k.endswith("attn.gqkv_proj.weight") for k in stored)
    assert any(k.endswith("mlp.gate_up_proj.weight") for k in stored)
    split = [n for n in _linear_weights(cell.ref) if n.rpartition(".")[0].endswith(_SPLIT)]
    assert split and not set(split) & stored


@pytest.mark.parametrize("codec", _arch.CODECS)
def test_jit_keeps_split_weights_compressed_and_exact(cell, codec):
    model = _arch.cell_model(cell, codec, "jit")
    _arch.assert_same_outputs(_arch.outputs(model, cell.feed), cell.want, "jit outputs")
    rep = _arch.report(model)
    linears = _linear_weights(model)
    assert set(linears) <= set(rep["compressed"]), sorted(set(linears) - set(rep["compressed"]))
    assert not set(linears) & set(rep["decoded"])
    assert _dense_linear_numel(model) == 0
    cw = model.wcodec_weights
    loaded = {k: w for k, w in cw.weights.items() if k.endswith("(encoded on load)")}
    split = [n for n in linears if n.rpartition(".")[0].endswith(_SPLIT)]
    assert sorted(k.removesuffix(" (encoded on load)") for k in loaded) == sorted(split)
    # the fixed folder's split weights take its fixed-rate layout, the lossless one's the policy's codec
    codecs = {w.decoder.record.codec for w in loaded.values()}
    assert codecs == {"fixed"} if codec == "fixed" else "fixed" not in codecs
    # compressed: the records of the split weights hold fewer bytes than their bf16 values
    assert sum(w.decoder.nbytes for w in loaded.values()) < sum(linears[n].weight.numel() * 2 for n in split)


def test_jit_model_saves_the_original_tensors(cell, tmp_path):
    _arch.check_save_reload(cell, "lossless", "jit", tmp_path / "saved")
    again = _arch.load("hrm_text", tmp_path / "saved", "jit")
    _arch.assert_same_outputs(_arch.outputs(again, cell.feed), cell.want, "saved and loaded jit again")
    assert _dense_linear_numel(again) == 0


def test_jit_from_a_safetensors_source(cell):
    """No stored record at all: every Linear weight is encoded on load."""
    model = _arch.load("hrm_text", cell.src, "jit")
    _arch.assert_same_outputs(_arch.outputs(model, cell.feed), cell.want, "jit outputs")
    assert _dense_linear_numel(model) == 0


def test_what_stays_dense_says_why(cell, monkeypatch):
    """A weight no codec takes (here: the encoder refuses it) stays dense, named with that reason."""
    from wcodec import codecs
    from wcodec.errors import UnsupportedError

    real = codecs.encode_tensor

    def refuse(array, dtype, name="", **kw):
        if name.endswith("mlp.up_proj.weight"):
            raise UnsupportedError(f"tensor '{name}': refused for this test")
        return real(array, dtype, name=name, **kw)

    monkeypatch.setattr(codecs, "encode_tensor", refuse)
    with pytest.warns(UserWarning, match="kept dense"):
        model = _arch.load("hrm_text", cell.converted["lossless"], "jit")
    _arch.assert_same_outputs(_arch.outputs(model, cell.feed), cell.want, "jit outputs")
    rep = _arch.report(model)
    dense = sorted(n for n in rep["decoded"] if n.endswith("mlp.up_proj.weight"))
    assert len(dense) == 4 and not set(dense) & set(rep["compressed"])  # 2 layers in each of H and L
    assert all("no codec for it" in rep["kept"][n] and "refused for this test" in rep["kept"][n] for n in dense)
    assert _dense_linear_numel(model) == sum(_linear_weights(model)[n].weight.numel() for n in dense)


def test_fused_load_of_a_safetensors_source_keeps_the_tied_embedding_compressed(tmp_path):
    """keep_compressed=True on a safetensors source: the tied embedding (not fused: tied) is
    encoded on load and decoded just in time, and the output layer tied to it is fused from it."""
    from wcodec.torch.linear import CompressedLinear

    _arch.ARCHS.setdefault("llama_tied", _arch.Arch("llama", "AutoModelForCausalLM",
                                                    {**_arch._DEC, "tie_word_embeddings": True}, "text"))
    src = _arch.build_source("llama_tied", tmp_path / "src")
    ref = _arch.load("llama_tied", src)
    feed = _arch.inputs("llama_tied", ref.config, ref.dtype)
    model = _arch.load("llama_tied", src, True)
    _arch.assert_same_outputs(_arch.outputs(model, feed), _arch.outputs(ref, feed), "fused outputs")
    rep = _arch.report(model)
    assert isinstance(model.lm_head, CompressedLinear) and "lm_head.weight" in rep["fused"]
    assert "model.embed_tokens.weight" in rep["compressed"] and not rep["decoded"]
