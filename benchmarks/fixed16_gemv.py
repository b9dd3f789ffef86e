"""The fp16 fixed-rate layout on a GPU (codec "fixed16", wcodec.gpu.fixed16): the fused GEMV and
decode + cuBLAS against cuBLAS on the dense fp16 weight, Llama-7B-shaped layers.

    PYTHONPATH=src python benchmarks/fixed16_gemv.py            # needs a CUDA GPU

Per shape: bits/weight of the layout (N(0, 0.02) weights), the decode kernel's time and memory
throughput (read compressed + write fp16), and for M = 1, 2, 4 (GEMV) and 16, 256 (decode +
cuBLAS) the time of ``fixed16.linear`` and of ``F.linear`` on the dense weight (CUDA events,
median of 50 after warmup/tuning), with the relative error of the result.
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "src"), str(ROOT / "benchmarks")]
from gpu_decode import bench_call  # noqa: E402
from wcodec.gpu import fixed16 as fx16  # noqa: E402

SHAPES = [(4096, 4096), (11008, 4096), (4096, 11008), (32000, 4096)]
ROWS = (1, 2, 4, 16, 256)


def timed(fn) -> float:
    """Median microseconds of one call (CUDA events around it, as benchmarks/gpu_decode.py)."""
    return 1e6 * bench_call(fn, torch, reps=50, warm=5)


def main() -> None:
    if not torch.cuda.is_available():
        raise SystemExit("needs a CUDA GPU")
    print(torch.cuda.get_device_name(), torch.__version__)
    g = torch.Generator(device="cuda").manual_seed(0)
    for n, k in SHAPES:
        w = (torch.randn(n, k, device="cuda", generator=g) * 0.02).half()
        fw = fx16.encode_weight(w)
        assert torch.equal(fx16.decode(fw), w)
        t_dec = timed(lambda: fx16.decode(fw))
        gbs = (fw.nbytes + 2 * n * k) / t_dec / 1e3
        print(f"[{n}x{k}] {fw.bits_per_weight:.2f} bits/weight, decode {t_dec:.1f} us ({gbs:.0f} GB/s)")
        for m in ROWS:
            x = torch.randn(m, k, device="cuda", generator=g).half()
            y = fx16.linear(x, fw)
            ref = torch.nn.functional.linear(x, w)
            err = float((y.float() - ref.float()).norm() / ref.float().norm())
            t_fx = timed(lambda: fx16.linear(x, fw))
            t_ref = timed(lambda: torch.nn.functional.linear(x, w))
            print(f"  M={m:<4} {fx16.pick_kind(m):<7} {t_fx:8.1f} us   cuBLAS fp16 {t_ref:8.1f} us   "
                  f"x{t_fx / t_ref:.2f}   rel. err {err:.1e}")


if __name__ == "__main__":
    main()
