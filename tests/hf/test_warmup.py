"""wcodec.hf.warmup: the row counts and buckets it covers, the distinct weights it tunes, the
sweep itself (run on the CPU path), the no-op on the CPU, and the quantizer's after-load call."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys

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


#: prints, for each fused kernel, the arguments it does not specialise on; a fresh process without
#: Triton's interpreter (whose functions keep no parameter flags), no GPU needed to decorate
_FLAGS = """
import json
from wcodec.gpu import fixed_kernels as k, fixed16_kernels as k16
kernels = [k.fixed_gemv_kernel, k.fixed_mm_kernel, k.fixed_grad_input_kernel, k.fixed_decode_kernel,
           k.fixed_escape_patch_kernel, k.fixed_rows_kernel, k16.fixed16_gemv_kernel, k16.fixed16_decode_kernel]
from wcodec.gpu import fixed as fx
if fx._gluon_available():
    from wcodec.gpu import fixed_mma, fixed_ra, fixed_wgmma, fixed_ws
    kernels += [fixed_mma.fixed_mma_kernel, fixed_ra.fixed_ra_kernel, fixed_wgmma.fixed_wgmma_kernel,
                fixed_ws.fixed_ws_kernel]
print(json.dumps({f.fn.__name__: {p.name: [p.do_not_specialize, p.do_not_specialize_on_alignment]
                                  for p in f.params} for f in kernels}))
"""


def test_fused_kernels_do_not_specialise_on_what_differs_between_weights_of_one_shape():
    """One module per shape warms every layer of that shape (distinct_weights) only if no kernel
    specialises on a weight's own values: its escape count moves the escape values' and rows'
    16-byte alignment in the packed buffer, and its window base is an integer argument."""
    pytest.importorskip("triton", reason="triton decorates the kernels")
    # the packed layout does move them: eval at 4E, erow at 8E bytes past ecol
    offs = {e: fx.unpack(torch.zeros(fx.packed_size(8, 16, e), dtype=torch.uint8), 120, 8, 16) for e in (4, 5, 6)}
    assert len({fw.eval.data_ptr() % 16 for fw in offs.values()}) == 3
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    p = subprocess.run([sys.executable, "-c", _FLAGS], capture_output=True, text=True, env=env, timeout=300)
    assert p.returncode == 0, p.stderr[-2000:]
    flags = json.loads(p.stdout.strip().splitlines()[-1])
    assert len(flags) >= 8 and all("base" in p or "E" in p for p in flags.values())
    for name, params in flags.items():
        for arg in ("base", "E"):  # the window base, the escape count
            if arg in params:
                assert params[arg][0], f"{name} specialises on {arg}"
        for ptr in ("eval_ptr", "erow_ptr", "idx_ptr"):
            if ptr in params:
                assert params[ptr][1], f"{name} specialises on the alignment of {ptr}"
        assert not params.get("lo_ptr", [False, False])[1]  # the planes stay aligned: their loads vectorise


def test_warm_module_looks_up_int64_and_int32_token_ids(monkeypatch):
    emb = CompressedEmbedding(fx.encode_weight((torch.randn(40, 32) * 0.02).to(torch.bfloat16)))
    seen = []
    real = fx.embedding
    monkeypatch.setattr(fx, "embedding", lambda idx, fw: seen.append(idx.dtype) or real(idx, fw))
    assert warmup.warm_module(emb, torch.bfloat16) == 2
    assert seen == [torch.int64, torch.int32]


ON_GPU = os.environ.get("WCODEC_GPU_TESTS_ON_DEVICE") == "1" and torch.cuda.is_available()


def _weights_apart(n: int, k: int):
    """Two bf16 [n, k] weights of one shape whose escape counts differ mod 4 and whose window
    bases differ in divisibility by 16: what varies between the layers of a model."""
    w = torch.randn(n, k, generator=torch.Generator().manual_seed(0)) * 0.02

    def scaled(j, tiny=0):
        v = w * 2.0 ** j
        v.view(-1)[:tiny] = 1e-30  # values below the window: escapes
        v = v.to(torch.bfloat16)
        return v, fx.encode_weight(v)

    a, fa = next((v, fw) for v, fw in map(scaled, range(0, 80, 2)) if fw.base % 16 == 0)  # base: exponent / 2
    b = next(v for v, fw in (scaled(2, t) for t in range(4)) if (fw.ecol.numel() - fa.ecol.numel()) % 4)
    return a, b


@pytest.mark.skipif(not ON_GPU, reason="needs a CUDA GPU (WCODEC_GPU_TESTS_ON_DEVICE=1); CI has none")
def test_one_weight_warms_every_weight_of_its_shape_on_the_gpu():
    """After one weight's kernels ran (the warm-up's one module per shape), another weight of the
    shape, of another escape count and window base, compiles nothing: on every route (GEMV,
    mma, register-A, warp-specialised, wgmma, decode + cuBLAS) and the row lookup."""
    from triton import knobs

    from wcodec.gpu.precompile import sweep

    a, b = (fx.encode_weight(w.cuda()) for w in _weights_apart(4096, 4096))
    assert a.base % 16 == 0 and b.base % 16 and (a.ecol.numel() - b.ecol.numel()) % 4
    ms = (1, 2, 3, 8, 16, 17, 32, 33, 64, 65, 100, 128, 129, 200)
    ids = torch.arange(9, device="cuda", dtype=torch.int32)
    sweep(a, None, torch.bfloat16, ms)
    fx.embedding(ids, a)
    compiled = []
    knobs.runtime.jit_post_compile_hook = lambda *, fn, **_: compiled.append(fn.name)
    try:
        sweep(b, None, torch.bfloat16, ms)
        fx.embedding(ids[1:], b)  # another weight, indices at another alignment
        torch.cuda.synchronize()
    finally:
        knobs.runtime.jit_post_compile_hook = None
    assert compiled == []
