"""fp16 fixed-rate kernels (wcodec.gpu.fixed16) under TRITON_INTERPRET=1 on small odd shapes: the
device encoder equals the numpy codec, the decode kernel is bit-exact for special values, the
fused GEMV matches an fp32 reference with escapes and bias, decode + F.linear equals nn.Linear.
On a GPU (WCODEC_GPU_TESTS_ON_DEVICE=1) the same tests run the compiled kernels, plus larger
shapes."""

from __future__ import annotations

import math
import os

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="torch is needed for the fixed-rate kernels")
pytest.importorskip("triton", reason="triton is not installed (pip install triton)")

from wcodec.codecs import fixed16 as F  # noqa: E402
from wcodec.errors import UnsupportedError  # noqa: E402
from wcodec.gpu import fixed16 as fx16  # noqa: E402

ON_GPU = os.environ.get("WCODEC_GPU_TESTS_ON_DEVICE") == "1" and torch.cuda.is_available()
DEVICE = "cuda" if ON_GPU else "cpu"
# NaN with a payload, -NaN, inf, -inf, -0, 0, smallest subnormal, a subnormal, 65504, -1000
SPECIALS = [0x7E01, -512, 0x7C00, -1024, -32768, 0, 1, 0x0155, 0x7BFF, -7328]
gpu = pytest.mark.skipif(not ON_GPU, reason="needs a CUDA GPU (WCODEC_GPU_TESTS_ON_DEVICE=1); CI has none")


@pytest.fixture(autouse=True)
def _triton_on_cpu(monkeypatch):
    monkeypatch.setenv("WCODEC_FIXED_TRITON", "1")
    if not ON_GPU:
        monkeypatch.setenv("TRITON_INTERPRET", "1")


def weight(N, K, seed=0, specials=False, tiny=0):
    g = torch.Generator().manual_seed(seed)
    w = (torch.randn(N, K, generator=g) * 0.05).half()
    flat = w.view(torch.int16).view(-1)
    if specials:
        flat[:len(SPECIALS)] = torch.tensor(SPECIALS, dtype=torch.int16)
    if tiny:  # finite escapes below the window (matmul-safe)
        idx = torch.randperm(flat.numel(), generator=g)[:tiny]
        w.view(-1)[idx] = w.view(-1)[idx] * 1e-4
    return w.to(DEVICE)


def bits_of(w):
    return w.view(torch.int16).cpu().numpy().view(np.uint16).reshape(-1)


@pytest.mark.parametrize("N,K", [(1, 1), (7, 13), (5, 40), (16, 64), (3, 200)])
def test_encode_matches_codec_and_decodes_bit_exact(N, K):
    w = weight(N, K, specials=N * K >= len(SPECIALS))
    before = w.clone()
    fw = fx16.encode_weight(w, max_bits=math.inf)
    assert torch.equal(w.view(torch.int16), before.view(torch.int16))  # input untouched
    params, sections = F.encode_bits(bits_of(w), N, K, max_bits=math.inf)
    p2, s2 = fx16.to_sections(fw)
    assert p2 == params and sections.keys() == s2.keys()
    for k in sections:
        assert np.array_equal(sections[k], s2[k]), k
    assert torch.equal(fx16.decode(fw).view(torch.int16), w.view(torch.int16))
    back = fx16.from_sections(params, sections, (N, K), DEVICE)
    assert torch.equal(fx16.decode(back).view(torch.int16), w.view(torch.int16))
    packed = fx16.unpack(fx16.pack(fw), fw.base, N, K)
    assert torch.equal(fx16.decode(packed).view(torch.int16), w.view(torch.int16))


def test_device_encoder_refuses_what_would_not_save():
    g = torch.Generator().manual_seed(1)
    wide = (torch.rand(16, 64, generator=g) * 30 - 20).exp2().half().to(DEVICE)
    with pytest.raises(UnsupportedError, match="would not save"):
        fx16.encode_weight(wide)
    with pytest.raises(UnsupportedError, match="float16"):
        fx16.encode_weight(wide.float())


@pytest.mark.parametrize("M,bias", [(1, False), (3, True)])  # 3 rows: a 4-row block with one masked
def test_gemv_matches_fp32_reference(M, bias):
    N, K = 19, 72
    w = weight(N, K, seed=M, tiny=20)
    fw = fx16.encode_weight(w, max_bits=math.inf)
    assert fw.planes.ecol.numel() >= 10  # the escape path runs
    g = torch.Generator().manual_seed(7)
    x = torch.randn(M, K, generator=g).to(DEVICE)
    b = torch.randn(N, generator=g).to(DEVICE) if bias else None
    y = fx16.linear(x, fw, b, kind="gemv")
    ref = x.double() @ w.double().T + (b.double() if bias else 0)
    assert y.dtype == torch.float32 and y.shape == (M, N)
    assert torch.allclose(y.double(), ref, rtol=1e-5, atol=1e-5)
    yh = fx16.linear(x.half(), fw, None if b is None else b.half(), kind="gemv")  # fp16 activations
    assert yh.dtype == torch.float16
    assert torch.allclose(yh.double(), (x.half().double() @ w.double().T + (b.half().double() if bias else 0)),
                          rtol=2e-3, atol=2e-3)


def test_gemv_nonfinite_weights_propagate():
    w = weight(8, 32, specials=True)
    fw = fx16.encode_weight(w, max_bits=math.inf)
    x = torch.ones(1, 32, device=DEVICE)
    y = fx16.linear(x, fw, kind="gemv")
    assert torch.isnan(y[0, 0])  # row 0 holds NaN and +-inf


@pytest.mark.parametrize("M", [1, 5])
def test_decode_kind_equals_nn_linear(M):
    w = weight(24, 48, tiny=5)
    fw = fx16.encode_weight(w, max_bits=math.inf)
    x = torch.randn(M, 3, 48).half().to(DEVICE)
    b = torch.randn(24).half().to(DEVICE)
    assert torch.equal(fx16.linear(x, fw, b, kind="decode"), torch.nn.functional.linear(x, w, b))
    assert fx16.pick_kind(M) == ("gemv" if M <= fx16.GEMV_MAX_M else "decode")
    with pytest.raises(ValueError, match="features"):
        fx16.linear(x[..., :40], fw)


@gpu
@pytest.mark.parametrize("N,K", [(4096, 4096), (11008, 4096), (4096, 11008), (1000, 1000)])
def test_gpu_large_shapes(N, K):
    g = torch.Generator(device="cuda").manual_seed(0)
    w = (torch.randn(N, K, device="cuda", generator=g) * 0.02).half()
    fw = fx16.encode_weight(w, max_bits=math.inf)
    assert torch.equal(fx16.decode(fw).view(torch.int16), w.view(torch.int16))
    for M in (1, 4, 64):
        x = torch.randn(M, K, device="cuda", generator=g).half()
        y = fx16.linear(x, fw)
        ref = (x.float() @ w.float().T)
        assert float((y.float() - ref).norm() / ref.norm()) < 2e-3


#: compiles the kernels ahead of time for an NVIDIA architecture (no GPU needed), in a fresh
#: process: the interpreter of the other tests patches triton.language in place
_COMPILE = """
import sys
import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource
from wcodec.gpu.fixed16 import _gemv_configs
from wcodec.gpu.fixed16_kernels import fixed16_decode_kernel, fixed16_gemv_kernel
target = GPUTarget("cuda", int(sys.argv[1]), 32)
cfg = _gemv_configs()[int(sys.argv[2])]
ptrs = dict(x_ptr="*fp16", lo_ptr="*i64", nib_ptr="*i32", m2_ptr="*i32", eptr_ptr="*i32", ecol_ptr="*i32",
            eval_ptr="*i32", b_ptr="*fp16", y_ptr="*fp16")
ints = dict.fromkeys("M N K G stride_xm stride_ym MB".split(), "i32")
consts = {**cfg.kwargs, "BM": 4, "EB": 32, "HAS_BIAS": True, "base": 1}  # base 1: Triton passes it as a constant
sig = {**ptrs, **ints, **dict.fromkeys(consts, "constexpr")}
triton.compile(ASTSource(fixed16_gemv_kernel, signature=sig, constexprs=consts), target=target,
               options={"num_warps": cfg.num_warps, "num_stages": cfg.num_stages})
sig = dict(lo_ptr="*i64", nib_ptr="*i32", m2_ptr="*i32", out_ptr="*fp16", N="i32", G="i32", base="i32",
           BN="constexpr", BI="constexpr")
triton.compile(ASTSource(fixed16_decode_kernel, signature=sig, constexprs={"BN": 16, "BI": 64}), target=target,
               options={"num_warps": 4})
print("COMPILED")
"""


def test_kernels_compile_for_the_h100(capability=90, config=3):
    """The GEMV (a 4-row block, base passed as a constant) and the decode kernel compile for
    sm_90 (about 20 s on a 2-vCPU host, most of it the fresh process's imports)."""
    import subprocess
    import sys
    from pathlib import Path

    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["PYTHONPATH"] = os.pathsep.join([str(Path(fx16.__file__).parents[2]), env.get("PYTHONPATH", "")])
    run = subprocess.run([sys.executable, "-c", _COMPILE, str(capability), str(config)], env=env,
                         capture_output=True, text=True, timeout=600)
    assert run.returncode == 0 and "COMPILED" in run.stdout, run.stderr[-3000:]
