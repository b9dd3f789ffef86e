"""wcodec.hf.warmup: the row counts and buckets it covers, the distinct weights it tunes, the
sweep itself (run on the CPU path), the no-op on the CPU, and the quantizer's after-load call."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch", reason="torch is needed for wcodec.hf")
transformers = pytest.importorskip("transformers", reason="transformers is needed for wcodec.hf")
pytest.importorskip("safetensors", reason="safetensors writes the source folder")

import wcodec  # noqa: E402,F401  (registers with transformers)
from wcodec.gpu import fixed as fx  # noqa: E402
from wcodec.hf import WcodecConfig, convert_folder, warmup  # noqa: E402
from wcodec.torch.embedding import CompressedEmbedding  # noqa: E402
from wcodec.torch.linear import CompressedLinear  # noqa: E402


def _lin(n, k, bias=False, seed=0):
    g = torch.Generator().manual_seed(seed)
    w = (torch.randn(n, k, generator=g) * 0.02).to(torch.bfloat16)
    return CompressedLinear.from_weight(w, torch.randn(n, generator=g).to(torch.bfloat16) if bias else None)


def test_rows_reach_every_bucket_and_the_decode_path():
    rs = list(warmup.rows())
    top = max(fx.LARGE_M, fx.WGMMA_MAX_M)  # the wgmma kernel's rows (sm_90) are tuned too
    assert rs == list(range(1, top + 1))
    assert fx.pick_kind(fx.LARGE_M) == "decode" and fx.pick_kind(fx.LARGE_M - 1) != "decode"
    assert warmup.buckets() == sorted({fx._bucket(m) for m in range(1, top + 1)})
    assert warmup.buckets()[0] == 1 and warmup.buckets()[-1] == fx._bucket(top)


def test_distinct_weights_one_per_kernel_key():
    model = torch.nn.Sequential(_lin(64, 32), _lin(64, 32, seed=1), _lin(64, 32, bias=True), _lin(32, 64),
                                CompressedEmbedding(fx.encode_weight((torch.randn(40, 32) * 0.02).to(torch.bfloat16))))
    keys = warmup.distinct_weights(model)
    cpu = torch.device("cpu")
    assert set(keys) == {("linear", 64, 32, False, cpu), ("linear", 64, 32, True, cpu),
                         ("linear", 32, 64, False, cpu), ("embedding", 40, 32, cpu)}
    assert keys[("linear", 64, 32, False, cpu)] is model[0]  # the first of two sharing a key


def test_warm_module_runs_every_row_count_with_the_bias(monkeypatch):
    lin = _lin(48, 32, bias=True)
    before = {k: v.clone() for k, v in lin.state_dict().items() if isinstance(v, torch.Tensor)}
    seen = []
    real = fx.linear

    def spy(x, fw, bias=None, **kw):
        seen.append((x.shape[0], x.is_contiguous(), bias is not None and bias.dtype))
        return real(x, fw, bias, **kw)

    monkeypatch.setattr(fx, "linear", spy)
    monkeypatch.setattr(fx, "LARGE_M", 20)  # the sweep's length follows the routing's constants
    monkeypatch.setattr(fx, "WGMMA_MAX_M", 12)
    assert warmup.warm_module(lin, torch.bfloat16) == 20
    assert seen == [(m, True, torch.bfloat16) for m in range(1, 21)]
    after = {k: v for k, v in lin.state_dict().items() if isinstance(v, torch.Tensor)}
    assert all(torch.equal(before[k], after[k]) for k in before)


def test_warmup_is_a_no_op_on_the_cpu(monkeypatch):
    calls = []
    monkeypatch.setattr(warmup, "warm_module", lambda *a: calls.append(a) or 1)
    out = warmup.warmup(torch.nn.Sequential(_lin(64, 32)))
    assert out["skipped"] and out["calls"] == 0 and not calls
    assert warmup.after_load(torch.nn.Sequential(), False) is None
    with pytest.raises(ValueError, match="warmup"):
        warmup.after_load(torch.nn.Sequential(), "yes")
    with pytest.raises(ValueError, match="warmup"):
        WcodecConfig(keep_compressed=True, warmup="always")


def test_quantizer_calls_it_after_loading(tmp_path):
    cfg = transformers.LlamaConfig(hidden_size=64, intermediate_size=128, num_hidden_layers=1, num_attention_heads=4,
                                   num_key_value_heads=2, vocab_size=96)
    torch.manual_seed(0)
    transformers.LlamaForCausalLM(cfg).to(torch.bfloat16).save_pretrained(tmp_path / "src")
    convert_folder(tmp_path / "src", tmp_path / "fixed", codec="fixed")
    auto = transformers.AutoModelForCausalLM.from_pretrained
    model = auto(str(tmp_path / "fixed"), quantization_config=WcodecConfig(keep_compressed=True, warmup=True))
    assert model.wcodec_warmup["skipped"] == "no fused weight on a CUDA device"
    assert len(warmup.distinct_weights(model)) == 6  # q/o, k/v, gate/up, down, lm_head, embedding
    for option in (False, None):  # off by default until its cost on a fresh GPU is measured
        model = auto(str(tmp_path / "fixed"), quantization_config=WcodecConfig(keep_compressed=True, warmup=option))
        assert model.wcodec_warmup is None
