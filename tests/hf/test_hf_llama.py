"""stories260K as a Hugging Face Llama folder: convert_folder, then from_pretrained and
keep_compressed=True give logits and greedy generations identical to transformers' own loading.
A tiny random Llama checks the Triton just-in-time path under TRITON_INTERPRET=1 (CPU)."""

from __future__ import annotations

import json
import os

import pytest

torch = pytest.importorskip("torch", reason="torch is needed for wcodec.hf")
transformers = pytest.importorskip("transformers", reason="transformers is needed for wcodec.hf")
pytest.importorskip("safetensors", reason="safetensors writes the source folder")

from wcodec.hf import WCodecModel, convert_folder, read_codec_config  # noqa: E402

IDS = [[1, 400, 300, 20, 17]]


@pytest.fixture(scope="module")
def folders(stories_folders):
    return stories_folders


def test_convert_records_codec_and_config_still_loads(folders):
    src, dst = folders
    q = read_codec_config(dst)
    assert q["quant_method"] == "wcodec" and q["mode"] == "lossless" and q["format_version"] >= 1
    assert (dst / "model.wcodec").is_file() and not list(dst.glob("*.safetensors"))
    cfg = transformers.AutoConfig.from_pretrained(str(dst))  # an unknown quant_method must not break it
    assert cfg.model_type == "llama"
    assert json.loads((src / "config.json").read_text()).get("quantization_config") is None


def test_identical_logits_and_generation(folders):
    src, dst = folders
    ref = transformers.LlamaForCausalLM.from_pretrained(str(src)).eval()
    plain = WCodecModel.from_pretrained(dst)
    jit = WCodecModel.from_pretrained(dst, keep_compressed=True)
    assert type(plain) is transformers.LlamaForCausalLM and type(jit) is transformers.LlamaForCausalLM
    rep = jit.wcodec_weights.report
    assert "lm_head.weight" in rep["compressed"] and not rep["decoded"]
    assert len(rep["compressed"]) == 2 + 7 * ref.config.num_hidden_layers
    ids = torch.tensor(IDS)
    with torch.no_grad():
        want = ref(ids).logits
        assert torch.equal(plain(ids).logits, want)
        assert torch.equal(jit(ids).logits, want)
        g = ref.generate(ids, max_new_tokens=6, do_sample=False)
        assert torch.equal(plain.generate(ids, max_new_tokens=6, do_sample=False), g)
        assert torch.equal(jit.generate(ids, max_new_tokens=6, do_sample=False), g)


def test_keep_compressed_casts_to_requested_dtype(folders):
    src, dst = folders
    ref = transformers.LlamaForCausalLM.from_pretrained(str(src), dtype=torch.bfloat16).eval()
    jit = WCodecModel.from_pretrained(dst, keep_compressed=True, torch_dtype="bfloat16")
    assert jit.dtype == torch.bfloat16 and jit.wcodec_weights.raw is not None
    with torch.no_grad():
        ids = torch.tensor(IDS)
        assert torch.equal(jit(ids).logits, ref(ids).logits)


def test_keep_compressed_triton_decoder(tmp_path):
    pytest.importorskip("triton", reason="triton is not installed (pip install triton)")
    # small: the interpreter decodes every weight serially (time ~ weights); all 9 still coded
    cfg = transformers.LlamaConfig(hidden_size=32, intermediate_size=32, num_hidden_layers=1,
                                   num_attention_heads=2, num_key_value_heads=1, vocab_size=64,
                                   tie_word_embeddings=False)
    torch.manual_seed(0)
    ref = transformers.LlamaForCausalLM(cfg).to(torch.bfloat16).eval()
    ref.save_pretrained(tmp_path / "src")
    convert_folder(tmp_path / "src", tmp_path / "wc")
    ref = transformers.LlamaForCausalLM.from_pretrained(str(tmp_path / "src")).eval()
    dev = "cuda" if os.environ.get("WCODEC_GPU_TESTS_ON_DEVICE") == "1" else "cpu"
    jit = WCodecModel.from_pretrained(tmp_path / "wc", device=dev, keep_compressed="jit", decoder="triton")
    assert len(jit.wcodec_weights.report["compressed"]) == 9
    with torch.no_grad():
        ids = torch.tensor([[1, 5, 9]])
        assert torch.equal(jit(ids.to(dev)).logits.cpu(), ref(ids).logits)
