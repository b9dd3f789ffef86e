"""The Hopper wgmma kernel (wcodec.gpu.fixed_wgmma). On any machine with a Triton whose Gluon has
the Hopper ops: it compiles for sm_90 to asynchronous wgmma fed from shared memory, 16-byte
shared stores, no spills for 64-row blocks. On an sm_90 GPU (WCODEC_GPU_TESTS_ON_DEVICE=1): its
outputs match an fp32 reference and the Triton kernel's for escapes, bias, odd shapes, strided x,
every block height and split, every tile config (cp.async stages included); the routing gives it
WGMMA_MIN_M < M <= WGMMA_MAX_M rows (65-128)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch", reason="torch is needed for the fixed-rate kernels")
triton = pytest.importorskip("triton", reason="triton is not installed (pip install triton)")

from wcodec.gpu import fixed as fx  # noqa: E402

from .test_fixed_mma import case, check_kernel  # noqa: E402

ON_GPU = os.environ.get("WCODEC_GPU_TESTS_ON_DEVICE") == "1" and torch.cuda.is_available() \
    and torch.cuda.get_device_capability()[0] == 9
hopper = pytest.mark.skipif(not fx._gluon_available(hopper=True),
                            reason=f"triton {triton.__version__}'s Gluon lacks the Hopper ops")
gpu = pytest.mark.skipif(not ON_GPU, reason="needs an sm_90 GPU (WCODEC_GPU_TESTS_ON_DEVICE=1); CI has none")

#: ahead-of-time compile for sm_90 (no GPU needed), in a fresh process (the interpreter the CPU
#: tests use patches triton.language in place): ``compile_sm90(kernel, consts, num_warps)`` for
#: the code run after it, which prints RESULT and a JSON dict
_COMPILE_HEAD = """
import inspect, json, os, re, subprocess, sys, tempfile
import triton
from triton.backends.compiler import GPUTarget
from triton.experimental.gluon._runtime import GluonASTSource
ptrs = dict(x_ptr="*bf16", lo_ptr="*i64", nib_ptr="*i32", eptr_ptr="*i32", ecol_ptr="*i32", eval_ptr="*i32",
            erow_ptr="*i64", b_ptr="*bf16", y_ptr="*bf16", ws_ptr="*fp32")
ints = dict.fromkeys("M N K G stride_xm stride_ym base MB SPLIT".split(), "i32")
def compile_sm90(kernel, consts, num_warps):
    params = inspect.signature(kernel.fn).parameters.values()
    consts = {**{p.name: p.default for p in params if p.default is not p.empty}, **consts}
    sig = {**ptrs, **ints, **dict.fromkeys(consts, "constexpr")}
    names = list(sig)
    attrs = {(names.index(n),): [["tt.divisibility", 16]] for n in names
             if n.endswith("_ptr") or n in ("K", "G", "stride_xm")}
    return triton.compile(GluonASTSource(kernel, signature=sig, constexprs=consts, attrs=attrs),
                          target=GPUTarget("cuda", 90, 32), options={"num_warps": num_warps})

def stack_bytes(k):  # the compiled kernel's stack frame (spills) in bytes by cuobjdump; None: none said
    f = tempfile.NamedTemporaryFile(suffix=".cubin", delete=False)
    f.write(k.asm["cubin"])
    f.close()
    tool = os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin", "cuobjdump")
    usage = subprocess.run([tool, "--dump-resource-usage", f.name], capture_output=True, text=True).stdout
    stack = re.search(r"STACK:(\\d+)", usage)
    return int(stack.group(1)) if stack else None
"""

_COMPILE = """
from wcodec.gpu.fixed_wgmma import configs, fixed_wgmma_kernel
cfg = configs(64)[0]
k = compile_sm90(fixed_wgmma_kernel, {"XPF": True, "STAGES": 0, **cfg.kwargs, "HAS_BIAS": True}, cfg.num_warps)
ptx = k.asm["ptx"]
print("RESULT " + json.dumps({"wgmma": ptx.count("wgmma.mma_async"), "wait1": ptx.count("wgmma.wait_group.sync.aligned 1"),
                              "st_v4": ptx.count("st.shared.v4"), "stack": stack_bytes(k)}))
"""


def compiled_report(code: str) -> dict:
    """The RESULT dict printed by ``code`` run after _COMPILE_HEAD in a fresh process."""
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["PYTHONPATH"] = os.pathsep.join([str(Path(fx.__file__).parents[2]), env.get("PYTHONPATH", "")])
    run = subprocess.run([sys.executable, "-c", _COMPILE_HEAD + code], env=env, capture_output=True, text=True,
                         timeout=600)
    line = [ln for ln in run.stdout.splitlines() if ln.startswith("RESULT ")]
    assert run.returncode == 0 and line, run.stderr[-3000:]
    return json.loads(line[0][7:])


@hopper
def test_compiles_to_async_wgmma_without_spills():
    got = compiled_report(_COMPILE)
    # one K step in flight while the next is decoded; W and x tiles stored 16 bytes a thread
    assert got["wgmma"] > 0 and got["wait1"] > 0 and got["st_v4"] > 0, got
    assert got["stack"] in (0, None), got


@gpu
@hopper
@pytest.mark.parametrize("N,K,M", [(1000, 4104, 40), (777, 520, 33), (96, 64, 64), (300, 1032, 100),
                                   (4096, 1024, 128), (520, 2048, 256), (130, 264, 250)])
@pytest.mark.parametrize("bias", [False, True])
def test_matches_reference_and_triton_kernel(N, K, M, bias, monkeypatch):
    monkeypatch.setattr(fx, "WS_MAX_M", 0)  # the warp-specialised kernel comes first where it runs
    monkeypatch.setattr(fx, "WGMMA_MAX_M", 256)
    monkeypatch.setattr(fx, "WGMMA_MIN_M", 32)
    monkeypatch.setattr(fx, "WGMMA_MAX_ESCAPES", 1.0)  # the test weights are rich in escapes
    fw, x, b, ref = case(N, K, M, bias)
    assert fx._runs_wgmma(x) and fx.pick_kind(M, x) == "mm"
    check_kernel(fw, x, b, ref, f"wgmma{max(64, 1 << (M - 1).bit_length())}", monkeypatch)


@gpu
@hopper
def test_routing_gives_it_65_to_128_rows(monkeypatch):
    monkeypatch.setattr(fx, "WS_MAX_M", 0)  # where the warp-specialised kernel does not run
    x = torch.zeros(256, 64, dtype=torch.bfloat16, device="cuda")
    assert not fx._runs_wgmma(x[:fx.WGMMA_MIN_M]) and fx._runs_wgmma(x[:fx.WGMMA_MIN_M + 1])
    assert fx._runs_wgmma(x[:fx.WGMMA_MAX_M]) and not fx._runs_wgmma(x[:fx.WGMMA_MAX_M + 1])
    assert fx.pick_kind(100, x[:100]) == "mm" and fx.pick_kind(fx.WGMMA_MAX_M + 1, x) == "decode"


@gpu
@hopper
@pytest.mark.parametrize("bm", [64, 128])
def test_every_config_matches_reference(bm, monkeypatch):
    """Each tile config the autotuner may pick (register prefetch or cp.async stages), rows and K
    slices ending inside a tile, escapes and bias, at 1 and 3 K slices."""
    from wcodec.gpu.fixed_wgmma import configs

    from .test_fixed_mma import rel
    monkeypatch.setattr(fx, "WS_MAX_M", 0)
    monkeypatch.setattr(fx, "WGMMA_MAX_M", 256)
    monkeypatch.setattr(fx, "WGMMA_MIN_M", 32)
    monkeypatch.setattr(fx, "WGMMA_MAX_ESCAPES", 1.0)  # the test weights are rich in escapes
    fw, x, b, ref = case(300, 1032, bm - 3, True)
    M = x.shape[0]
    for cfg in configs(bm):
        for split in (1, 3):
            fx._BEST[(f"wgmma{bm}", (fw.N, fw.K, 1 << (M - 1).bit_length(), x.dtype, b.dtype, split))] = cfg
            assert rel(fx.linear(x, fw, b, split=split), ref) < 5e-3, (cfg, split)
