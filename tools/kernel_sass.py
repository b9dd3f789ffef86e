#!/usr/bin/env python
"""SASS instruction counts of the fixed-layout kernels for sm_90, without a GPU (Triton's bundled
ptxas and nvdisasm): the instructions of each kernel's main loop (the largest backward-branch
loop; the whole kernel where there is none), by opcode, and the registers. An instruction
budget per decoded weight that needs no device time.

    PYTHONPATH=src python3 tools/kernel_sass.py [--kernels mma32,mma32s3,mma16s3,gemv,decode]

Weights per thread per loop trip: mma32 (BM 32, BN 64, BG 16, 4 warps) 64; gemv (BN 4, BI 64)
16; decode (BN 16, BI 64; no loop) 64.
"""

from __future__ import annotations

import argparse
import collections
import os
import sys
from pathlib import Path

os.environ.setdefault("TRITON_DEFAULT_FP_FUSION", "1")
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from gpu_sass import main_loop_count, resources, sass  # noqa: E402

PTRS = dict(x_ptr="*bf16", lo_ptr="*i64", nib_ptr="*i32", eptr_ptr="*i32", ecol_ptr="*i32", eval_ptr="*i32",
            erow_ptr="*i64", b_ptr="*bf16", y_ptr="*bf16", ws_ptr="*fp32")
INTS = dict.fromkeys("M N K G stride_xm stride_ym base MB SPLIT".split(), "i32")


def _attrs(names):
    return {(names.index(n),): [["tt.divisibility", 16]] for n in names
            if n.endswith("_ptr") or n in ("K", "G", "stride_xm")}


def _compile(src, nw: int, ns: int = 1):
    import triton
    from triton.backends.compiler import GPUTarget
    return triton.compile(src, target=GPUTarget("cuda", 90, 32), options={"num_warps": nw, "num_stages": ns})


def mma(stages: int, bm: int = 32):
    from triton.experimental.gluon._runtime import GluonASTSource

    from wcodec.gpu.fixed_mma import fixed_mma_kernel
    consts = dict(BM=bm, BN=64, BG=16, EB=32, HAS_BIAS=False, XPF=True, ESC_FMA=True, STAGES=stages)
    sig = {**PTRS, **INTS, **dict.fromkeys(consts, "constexpr")}
    return _compile(GluonASTSource(fixed_mma_kernel, signature=sig, constexprs=consts, attrs=_attrs(list(sig))), 4)


def gemv():
    from triton.compiler import ASTSource

    from wcodec.gpu.fixed_kernels import fixed_gemv_kernel
    sig = {"x_ptr": "*bf16", "x64_ptr": "*i64",
           **{k: v for k, v in PTRS.items() if k not in ("x_ptr", "erow_ptr", "ws_ptr")},
           **{k: v for k, v in INTS.items() if k != "SPLIT"}}
    consts = dict(BM=1, BN=4, BI=64, EB=32, HAS_BIAS=False, X64=True)
    sig.update(dict.fromkeys(consts, "constexpr"))
    return _compile(ASTSource(fixed_gemv_kernel, sig, consts, attrs=_attrs(list(sig))), 4, 2)


def decode():
    from triton.compiler import ASTSource

    from wcodec.gpu.fixed_kernels import fixed_decode_kernel
    sig = {"lo_ptr": "*i64", "nib_ptr": "*i32", "out_ptr": "*bf16", "G": "i32", "base": "i32",
           "eptr_ptr": "*i32", "ecol_ptr": "*i32", "eval_ptr": "*i32", "erow_ptr": "*i64", "bases_ptr": "*i32",
           "row0": "i32", "rows": "i32", "group_rows": "i32"}
    consts = dict(BN=16, BI=64, EB=64, PATCH=False, BASES=False)
    sig.update(dict.fromkeys(consts, "constexpr"))
    return _compile(ASTSource(fixed_decode_kernel, sig, consts, attrs=_attrs(list(sig))), 4)


KERNELS = {"mma32": lambda: mma(0), "mma32s3": lambda: mma(3), "mma16s3": lambda: mma(3, 16), "gemv": gemv,
           "decode": decode}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--kernels", default=",".join(KERNELS))
    a = ap.parse_args()
    for name in a.kernels.split(","):
        k = KERNELS[name]()
        text = sass(k)
        n, body = main_loop_count(text)
        if n <= 4:  # no loop (the decode kernel): the whole kernel
            body = [ln.split("*/", 1)[1].strip().rstrip(";") for ln in text.splitlines()
                    if ln.strip().startswith("/*") and "*/" in ln and ln.split("*/", 1)[1].strip()]
        ops = collections.Counter((b.split()[1] if b.startswith("@") else b.split()[0]).split(".")[0] for b in body)
        print(f"{name}: {resources(k)}, {'loop' if n > 4 else 'kernel'} {len(body)} instructions | "
              + ", ".join(f"{o} {c}" for o, c in ops.most_common(10)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
