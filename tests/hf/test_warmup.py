"""wcodec.hf.warmup: the row counts and buckets it covers, the distinct weights it tunes, the
sweep itself (run on the CPU path), the no-op on the CPU, and the quantizer's after-load call."""

from __future__ import annotations

import dataclasses
import json

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
    top = max(fx.LARGE_M, fx.WGMMA_MAX_M, fx.WS_MAX_M)  # the ws / wgmma kernels' rows (sm_90) are tuned too
    assert rs == list(range(1, top + 2))  # and one above both: the decode kernel compiles at load
    assert fx.pick_kind(fx.LARGE_M) == "decode" and fx.pick_kind(fx.LARGE_M - 1) != "decode"
    x = torch.zeros(rs[-1], 8, dtype=torch.bfloat16)
    assert fx.pick_kind(rs[-1], x) == "decode"
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
    monkeypatch.setattr(fx, "WS_MAX_M", 12)
    assert warmup.warm_module(lin, torch.bfloat16) == 21
    assert seen == [(m, True, torch.bfloat16) for m in range(1, 22)]
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


# -- wcodec.gpu.precompile: the cold-cache workers (their compiles need a GPU; the plumbing does not)
from wcodec.gpu import precompile  # noqa: E402


def test_tasks_describe_the_weight_and_a_stand_in_runs_the_same_kernels():
    lin = _lin(48, 40, bias=True)
    fw = lin.fixed_weight
    task = precompile.task_of(fw, True, torch.bfloat16, range(1, 20))
    assert (task.N, task.K, task.escapes, task.base, task.bias, task.dtype) == \
        (48, 40, fw.ecol.numel(), fw.base, True, "bfloat16")
    assert task.ms == tuple(range(1, 20))
    w, bias = precompile.stand_in(task, "cpu")
    assert (w.N, w.K, w.base, w.ecol.numel()) == (48, 40, fw.base, fw.ecol.numel())
    assert [t.shape for t in w.tensors().values()] == [t.shape for t in fw.tensors().values()]
    assert not w.lo.any() and bias.dtype == torch.bfloat16 and not bias.any()


def test_worker_spec_runs_end_to_end_on_the_cpu(monkeypatch):
    seen = []
    real = fx.linear
    monkeypatch.setattr(fx, "linear", lambda x, fw, bias=None, **kw: seen.append(x.shape[0]) or real(x, fw, bias))
    lin = _lin(32, 24)
    task = precompile.task_of(lin.fixed_weight, False, torch.bfloat16, (1, 2, 3, 40))
    spec = json.loads(json.dumps({"device": "cpu", "tasks": [dataclasses.asdict(task)]}))
    assert precompile.run_spec(spec) == 4 and sorted(seen) == [1, 2, 3, 40]


def test_worker_count_needs_two_and_obeys_the_cap(monkeypatch):
    monkeypatch.setattr(precompile.os, "cpu_count", lambda: 16)
    monkeypatch.delenv("WCODEC_WARMUP_WORKERS", raising=False)
    assert precompile.worker_count(30, "cpu") == precompile.MAX_WORKERS
    assert precompile.worker_count(1, "cpu") == 0  # one worker is no faster than the caller
    monkeypatch.setenv("WCODEC_WARMUP_WORKERS", "3")
    assert precompile.worker_count(30, "cpu") == 3
    monkeypatch.setenv("WCODEC_WARMUP_WORKERS", "0")
    assert precompile.worker_count(30, "cpu") == 0 and precompile.precompile([], "cpu")["workers"] == 0
    monkeypatch.setattr(precompile.os, "cpu_count", lambda: 2)
    monkeypatch.delenv("WCODEC_WARMUP_WORKERS")
    assert precompile.worker_count(30, "cpu") == 0  # a 2-core host keeps one core for the caller


def test_workers_run_their_tasks_and_a_failure_is_reported_not_raised(monkeypatch):
    # real worker processes, on the CPU: one sweeps a valid stand-in, the other is handed a
    # stand-in with escapes, which the CPU decoder rejects (the GPU kernels do not validate)
    monkeypatch.setattr(precompile, "worker_count", lambda n, device: 2)
    monkeypatch.setattr(fx, "_cuda_index", lambda device: "cpu")
    good = precompile.Task(32, 24, 0, 1, False, "bfloat16", (1, 3))
    bad = precompile.Task(16, 24, 3, 1, False, "bfloat16", (1,))
    out = precompile.precompile([good, bad], "cpu", timeout=120)
    assert (out["workers"], out["tasks"], out["failed"]) == (2, 2, 1)
    assert "CorruptDataError" in out["errors"][0] and out["seconds"] > 0
    assert out["warnings"] == []  # the good worker's stderr held no warning of wcodec's
