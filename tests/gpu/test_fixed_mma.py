"""The Gluon mma kernel (wcodec.gpu.fixed_mma). On any machine with a Triton that has Gluon: it
compiles for Ampere and Hopper with no shared memory (the decoded tile goes from the loads to
mma.sync in registers). On a CUDA GPU (WCODEC_GPU_TESTS_ON_DEVICE=1): ``linear`` routes bf16
activations of 3-16 rows to it; its outputs match an fp32 reference and the Triton kernel's for
escapes, bias, odd shapes, strided x and every split; a kernel that fails at its first launch
leaves a warning and the Triton kernel's result."""

from __future__ import annotations

import importlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch", reason="torch is needed for the fixed-rate kernels")
triton = pytest.importorskip("triton", reason="triton is not installed (pip install triton)")

from wcodec.gpu import fixed as fx  # noqa: E402

ON_GPU = os.environ.get("WCODEC_GPU_TESTS_ON_DEVICE") == "1" and torch.cuda.is_available()
gluon = pytest.mark.skipif(not fx._gluon_available(), reason=f"triton {triton.__version__} lacks the Gluon API "
                           "the mma kernel uses (Triton >= 3.5)")
gpu = pytest.mark.skipif(not ON_GPU, reason="needs a CUDA GPU (WCODEC_GPU_TESTS_ON_DEVICE=1); CI has none")


#: compiles the kernel ahead of time for a GPU architecture (no GPU needed) and prints what the
#: test checks; run in a fresh process: Triton's interpreter, which the CPU tests use in this
#: one, patches triton.language in place and breaks a real compile afterwards
_COMPILE = """
import json, re, sys
import triton
from triton.backends.compiler import GPUTarget
from triton.experimental.gluon._runtime import GluonASTSource
from wcodec.gpu.fixed_mma import configs, fixed_mma_kernel
ptrs = dict(x_ptr="*bf16", lo_ptr="*i64", nib_ptr="*i32", eptr_ptr="*i32", ecol_ptr="*i32", eval_ptr="*i32",
            erow_ptr="*i64", b_ptr="*bf16", y_ptr="*bf16", ws_ptr="*fp32")
ints = dict.fromkeys("M N K G stride_xm stride_ym base MB SPLIT".split(), "i32")
cfg = configs(int(sys.argv[2]))[0]
consts = {"XPF": True, "ESC_FMA": sys.argv[3] == "1", "STAGES": 0, **cfg.kwargs, "EB": 32, "HAS_BIAS": True}
src = GluonASTSource(fixed_mma_kernel, signature={**ptrs, **ints, **dict.fromkeys(consts, "constexpr")},
                     constexprs=consts)
k = triton.compile(src, target=GPUTarget("cuda", int(sys.argv[1]), 32), options={"num_warps": cfg.num_warps})
ptx = k.asm["ptx"]
print("RESULT " + json.dumps({"shared": k.metadata.shared, "mma": ptx.count("mma.sync"),
                              "smem_ops": len(re.findall(r"\\b(ld|st)\\.shared|ldmatrix", ptx))}))
"""


@gluon
@pytest.mark.parametrize("capability,rows,esc_fma", [(80, 16, 0), (90, 16, 0), (90, 64, 0), (90, 16, 1)])
def test_compiles_without_shared_memory(capability, rows, esc_fma):
    """The main loop keeps the decoded tile in registers; with ESC_FMA the accumulator takes one
    trip through shared memory after it (to the escapes' one-column-a-thread layout)."""
    if not hasattr(importlib.import_module("triton.experimental.gluon._runtime"), "GluonASTSource"):
        pytest.skip(f"triton {triton.__version__} has no ahead-of-time Gluon compile entry point")
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["PYTHONPATH"] = os.pathsep.join([str(Path(fx.__file__).parents[2]), env.get("PYTHONPATH", "")])
    run = subprocess.run([sys.executable, "-c", _COMPILE, str(capability), str(rows), str(esc_fma)], env=env, capture_output=True,
                         text=True, timeout=600)
    line = [ln for ln in run.stdout.splitlines() if ln.startswith("RESULT ")]
    assert run.returncode == 0 and line, run.stderr[-3000:]
    got = json.loads(line[0][7:])
    if esc_fma:
        assert 0 < got["shared"] <= 4 * rows * 64 and got["mma"] > 0, got
    else:
        assert got["shared"] == 0 and got["smem_ops"] == 0 and got["mma"] > 0, got


def weight(N, K, seed, escapes=0.01):
    g = torch.Generator(device="cuda").manual_seed(seed)
    w = torch.randn(N, K, device="cuda", generator=g) * 0.02
    w[torch.rand(N, K, device="cuda", generator=g) < escapes / 2] *= 1e-4  # below the window
    w[torch.rand(N, K, device="cuda", generator=g) < escapes / 2] *= 1e3  # above it
    return w.to(torch.bfloat16)


def case(N, K, M, bias):
    """A fixed weight with escapes, strided bf16 x of M rows, a bias or None, and the fp32 reference."""
    w = weight(N, K, seed=N + K + M)
    fw = fx.encode_weight(w)
    assert fw.ecol.numel() > 0
    g = torch.Generator(device="cuda").manual_seed(M)
    x = torch.randn(M, 2 * K, device="cuda", generator=g).to(torch.bfloat16)[:, ::2]  # strided rows
    b = torch.randn(N, device="cuda", generator=g).to(torch.bfloat16) if bias else None
    return fw, x, b, x.float() @ w.float().T + (b.float() if bias else 0)


def rel(a, b):
    return float((a.float() - b.float()).norm() / b.float().norm())


@gpu
@gluon
@pytest.mark.parametrize("N,K,M", [(96, 64, 3), (1000, 4104, 16), (777, 520, 5), (64, 4096, 16), (33, 70, 9),
                                   (4096, 1024, 16), (1000, 4104, 40), (777, 520, 17), (96, 64, 33),
                                   (300, 1032, 100), (4096, 1024, 128), (520, 2048, 256), (130, 264, 250)])
@pytest.mark.parametrize("bias", [False, True])
def test_matches_reference_and_triton_kernel(N, K, M, bias, monkeypatch):
    """Every row block of the kernel (16-128 rows, several blocks above 128), whatever M the
    routing gives it today (MMA_MAX_M; the register-A kernel, first at 17-32 rows on sm_90, off)."""
    monkeypatch.setattr(fx, "MMA_MAX_M", 256)
    monkeypatch.setattr(fx, "RA_MAX_M", 0)
    fw, x, b, ref = case(N, K, M, bias)
    assert fx.pick_kind(M, x) == "mm"
    check_kernel(fw, x, b, ref, fx._mma_kind(M), monkeypatch)


@gpu
@gluon
@pytest.mark.parametrize("bm", [16, 32, 64, 128])
def test_every_config_matches_reference(bm, monkeypatch):
    """Each tile config the autotuner may pick (register prefetch or cp.async stages) on a weight
    whose rows and K slices end inside a tile, with escapes and bias, at 1 and 3 K slices."""
    from wcodec.gpu.fixed_mma import configs
    monkeypatch.setattr(fx, "MMA_MAX_M", 256)
    monkeypatch.setattr(fx, "RA_MAX_M", 0)
    fw, x, b, ref = case(300, 1032, bm - 3, True)
    M = x.shape[0]
    kind, mb = fx._mma_kind(M), 1 << (M - 1).bit_length()
    for cfg in configs(bm):
        for split in (1, 3):
            fx._BEST[(kind, (fw.N, fw.K, mb, x.dtype, b.dtype, split))] = cfg
            y = fx.linear(x, fw, b, split=split)
            assert rel(y, ref) < 5e-3, (cfg, split)


def check_kernel(fw, x, b, ref, kind: str, monkeypatch) -> None:
    """linear(x, fw, b) runs kernel ``kind``, matches ``ref`` at every split, and the Triton
    kernel agrees with it."""
    y = fx.linear(x, fw, b)
    assert any(k[0] == kind for k in fx._BEST), f"{kind} did not run"
    assert y.dtype == torch.bfloat16 and y.shape == (x.shape[0], fw.N)
    assert rel(y, ref) < 5e-3
    for split in (1, 2, 3, 8):
        assert rel(fx.linear(x, fw, b, split=split), ref) < 5e-3
    monkeypatch.setattr(fx, "MMA_ENABLED", False)
    assert rel(fx.linear(x, fw, b), y) < 5e-3  # the Triton kernel agrees


def test_row_blocks():
    assert [fx._mma_rows(m) for m in (3, 16, 17, 32, 33, 64, 100, 128, 129, 256)] == \
        [16, 16, 32, 32, 64, 64, 128, 128, 128, 128]
    assert fx._mma_kind(40) == "mma64"


@gpu
@gluon
def test_routing_by_rows():
    x = torch.zeros(256, 64, dtype=torch.bfloat16, device="cuda")
    assert fx._runs_mma(x[:fx.MMA_MAX_M]) and not fx._runs_mma(x[:fx.MMA_MAX_M + 1])
    assert fx.pick_kind(fx.MMA_MAX_M + 1, x) == "mm" and fx.pick_kind(max(fx.LARGE_M, fx.WGMMA_MAX_M + 1), x) == "decode"
    # from LARGE_M rows: the wgmma kernel where it runs (sm_90, up to WGMMA_MAX_M), else decode + cuBLAS
    assert fx.pick_kind(fx.LARGE_M, x) == ("mm" if fx._wgmma_ready(x) and fx.LARGE_M <= fx.WGMMA_MAX_M else "decode")


@gpu
@gluon
def test_gemv_keeps_two_rows_and_other_dtypes_keep_the_triton_kernel():
    x = torch.zeros(2, 64, dtype=torch.bfloat16, device="cuda")
    assert fx.pick_kind(2, x) == "gemv" and fx.pick_kind(3, x[:1].expand(3, 64)) == "mm"
    assert fx.pick_kind(3, x.float()) == "gemv"  # fp32 x: the Triton kernels, GEMV up to GEMV_MAX_M
    assert not fx._mma_ready(x.half())


@gpu
@gluon
def test_a_failing_kernel_warns_once_and_falls_back(monkeypatch):
    w = weight(200, 136, seed=3)
    fw = fx.encode_weight(w)
    x = torch.randn(7, 136, device="cuda").to(torch.bfloat16)
    break_kernel("mma", monkeypatch)
    monkeypatch.setattr(fx, "_MMA_OK", {})
    monkeypatch.setattr(fx, "_BEST", {})
    with pytest.warns(RuntimeWarning, match="simulated compile failure"):
        y = fx.linear(x, fw)
    assert rel(y, x.float() @ w.float().T) < 5e-3
    assert not fx._mma_ready(x)  # off for the rest of the process: no second warning


def break_kernel(prefix: str, monkeypatch) -> None:
    """Make the kernels of kinds starting with ``prefix`` fail wherever they are touched: launched,
    or their function asked for (the shipped configs' lookup reads it before a launch)."""
    real = fx._kernel

    class Broken:
        def __getitem__(self, grid):
            raise RuntimeError("simulated compile failure")

        @property
        def fn(self):
            raise RuntimeError("simulated compile failure")

    monkeypatch.setattr(fx, "_kernel", lambda kind: (Broken(), {}) if kind.startswith(prefix) else real(kind))
