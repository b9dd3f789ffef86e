"""fp16 checkpoints kept compressed (issue 26, must-have 4): a tiny Llama that transformers builds
and saves in float16, converted lossless and with ``--codec fixed``, loads with
keep_compressed=True with its nn.Linear weights in the fp16 fixed-rate layout
(CompressedLinear16), outputs exact against the fp16 model on the CPU; a weight the layout would
not shrink stays as loaded, named with the reason (a warning with the count when held dense);
save_pretrained stores the fixed16 records and reloads with identical outputs."""

from __future__ import annotations

import json
import warnings

import pytest

torch = pytest.importorskip("torch", reason="torch is needed for wcodec.hf")
transformers = pytest.importorskip("transformers", reason="transformers is needed for wcodec.hf")
pytest.importorskip("safetensors", reason="safetensors writes the source folder")

from tests.hf import _arch as A  # noqa: E402
from wcodec.hf import WcodecConfig, convert_folder  # noqa: E402
from wcodec.torch.linear16 import CompressedLinear16  # noqa: E402

WIDE = "model.layers.1.mlp.down_proj.weight"  # exponents over 2^-12 .. 2^2: the layout would not save


@pytest.fixture(scope="module")
def fp16_folders(tmp_path_factory):
    root = tmp_path_factory.mktemp("fp16_llama")
    arch = A.ARCHS["llama"]
    config = transformers.AutoConfig.for_model(arch.model_type, **arch.config)
    torch.manual_seed(A.SEED)
    model = transformers.AutoModelForCausalLM.from_config(config, dtype=torch.float16)
    with torch.no_grad():
        w = model.get_parameter(WIDE)
        w.copy_(torch.sign(torch.randn(w.shape)) * (torch.rand(w.shape) * 14 - 12).exp2())
    model.save_pretrained(root / "src")
    for codec in A.CODECS:
        convert_folder(root / "src", root / codec, mode="lossless", codec=None if codec == "lossless" else codec)
    ref = transformers.AutoModelForCausalLM.from_pretrained(str(root / "src")).eval()
    assert ref.dtype == torch.float16
    feed = A.inputs("llama", ref.config, ref.dtype)
    return root, ref, feed, A.outputs(ref, feed)


def _keep(folder, **kw):
    return transformers.AutoModelForCausalLM.from_pretrained(
        str(folder), quantization_config=WcodecConfig(keep_compressed=True, **kw)).eval()


@pytest.mark.parametrize("codec", A.CODECS)
def test_fp16_linears_stay_compressed_exact(fp16_folders, codec):
    root, ref, feed, want = fp16_folders
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        model = _keep(root / codec)
    assert not [w for w in caught if "kept dense" in str(w.message)]  # nothing is held dense
    assert model.dtype == torch.float16
    A.assert_same_outputs(A.outputs(model, feed), want, f"{codec} kept")
    rep = A.report(model)
    linears = [n for n in A.must_stay_compressed(ref) if n != WIDE]
    assert sorted(rep["fused"]) == linears
    assert all(type(model.get_submodule(n.rsplit(".", 1)[0])) is CompressedLinear16 for n in linears)
    assert "would not save" in rep["kept"][WIDE] and WIDE in rep["compressed"]  # decoded just in time
    assert "float16" in rep["kept"]["model.embed_tokens.weight"]
    assert not rep["decoded"]


def test_dense_weights_are_named_and_counted(fp16_folders):
    root, _, feed, want = fp16_folders
    with pytest.warns(UserWarning, match=r"wcodec: 2 Linear/Embedding/expert weight\(s\) kept dense"):
        model = _keep(root / "fixed", jit_embeddings=False)
    rep = A.report(model)
    assert sorted(rep["decoded"]) == sorted([WIDE, "model.embed_tokens.weight"])
    assert "would not save" in rep["kept"][WIDE]
    A.assert_same_outputs(A.outputs(model, feed), want, "dense")


def test_save_pretrained_stores_fixed16_records(fp16_folders, tmp_path):
    root, ref, feed, want = fp16_folders
    model = _keep(root / "lossless")
    model.save_pretrained(tmp_path / "saved")
    cfg = json.loads((tmp_path / "saved" / "config.json").read_text())
    assert cfg["quantization_config"]["codec"] == "fixed"
    from wcodec.format.sharded import CheckpointReader

    reader = CheckpointReader(tmp_path / "saved")
    assert reader.entry("model.layers.0.self_attn.q_proj.weight")["codec"] == "fixed16"
    for kept in (True, None):
        again = A.load("llama", tmp_path / "saved", keep=kept)
        A.assert_same_outputs(A.outputs(again, feed), want, f"reloaded (keep={kept})")
    again = A.load("llama", tmp_path / "saved")
    A.assert_same_weights(again, ref, "reloaded plain")


@pytest.mark.skipif(not torch.cuda.is_available(), reason="the fp16 kernels' GPU path needs a CUDA GPU (CI has none)")
@pytest.mark.parametrize("keep", [True, "jit", None])  # None: a plain load (fixed16 records decoded on the GPU)
def test_kept_fp16_model_on_gpu_follows_the_fp16_logits(fp16_folders, keep):
    """On the GPU the GEMV (one token per step: M = 2) sums in another order than cuBLAS, so the
    logits match the fp16 model's to rounding; decode + cuBLAS (the 16-row prompt, and every
    step of ``keep_compressed="jit"``, which decodes the fixed16 records with their own kernel)
    gives the fp16 model's logits exactly."""
    root, _, feed, _ = fp16_folders
    dense = transformers.AutoModelForCausalLM.from_pretrained(str(root / "src"), device_map="cuda").eval()
    kw = {} if keep is None else {"quantization_config": WcodecConfig(keep_compressed=keep)}
    model = transformers.AutoModelForCausalLM.from_pretrained(str(root / "fixed"), device_map="cuda", **kw).eval()
    if keep is True:
        q = model.get_submodule("model.layers.0.self_attn.q_proj")
        assert type(q) is CompressedLinear16 and q.w_packed.is_cuda
    ids = feed["input_ids"].cuda()
    with torch.no_grad():
        assert torch.equal(model(ids).logits, dense(ids).logits)  # 16 rows: decode + cuBLAS
        want = dense.generate(ids, max_new_tokens=8, do_sample=False)
        got, ref = model(ids, use_cache=True), dense(ids, use_cache=True)
        for n in range(ids.shape[1], want.shape[1]):  # one token a step, 2 rows: the GEMV
            step = want[:, n:n + 1]
            got = model(step, past_key_values=got.past_key_values, use_cache=True)
            ref = dense(step, past_key_values=ref.past_key_values, use_cache=True)
            a, b = got.logits[:, -1].float(), ref.logits[:, -1].float()
            assert float((a - b).norm() / b.norm()) < 1e-2
        x = torch.randn(2, 64, device="cuda", dtype=torch.float16)
        lin = dense.get_submodule("model.layers.0.self_attn.q_proj")
        got = model.get_submodule("model.layers.0.self_attn.q_proj")(x)
        assert float((got.float() - lin(x).float()).norm() / lin(x).float().norm()) < 2e-3


def test_tied_output_layer_is_fused_from_the_embedding(tmp_path):
    config = transformers.AutoConfig.for_model("llama", **{**A.ARCHS["llama"].config, "tie_word_embeddings": True})
    torch.manual_seed(A.SEED)
    transformers.AutoModelForCausalLM.from_config(config, dtype=torch.float16).save_pretrained(tmp_path / "src")
    convert_folder(tmp_path / "src", tmp_path / "fixed", mode="lossless", codec="fixed")
    ref = transformers.AutoModelForCausalLM.from_pretrained(str(tmp_path / "src")).eval()
    feed = A.inputs("llama", ref.config, ref.dtype)
    model = _keep(tmp_path / "fixed")
    assert type(model.lm_head) is CompressedLinear16 and "lm_head.weight" not in A.report(model)["kept"]
    A.assert_same_outputs(A.outputs(model, feed), A.outputs(ref, feed), "tied, kept")
