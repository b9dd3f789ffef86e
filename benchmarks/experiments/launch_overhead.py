"""Host time per call of one linear layer in eager inference: nn.Linear (cuBLAS) against
CompressedLinear with replayed launches (wcodec.gpu.replay) and without (WCODEC_REPLAY=0's path).

Eager generation at batch 1 is bound by this host time (224 linear layers a token in a 7B
Llama), not by the GPU. Host us: Python time per call of 200 calls back to back (fewer than the
launch queue holds, so the host never waits for the GPU), the median of 15 rounds in which the
three variants alternate (the host's speed drifts); wall us: per call of 2000 calls including the
final synchronize (the larger of host and GPU time). Needs a CUDA GPU; synthetic weights (normal,
std 0.02).

    PYTHONPATH=src python3 benchmarks/experiments/launch_overhead.py
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch
from torch import nn

from wcodec.gpu import replay
from wcodec.torch.linear import CompressedLinear

SHAPES = ((4096, 4096), (11008, 4096), (4096, 11008), (32000, 4096))


def host_us(f, calls: int = 200) -> float:
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(calls):
        f()
    t = time.perf_counter() - t0
    torch.cuda.synchronize()
    return 1e6 * t / calls


def wall_us(f, calls: int = 2000) -> float:
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(calls):
        f()
    torch.cuda.synchronize()
    return 1e6 * (time.perf_counter() - t0) / calls


def compare(fs: list, rounds: int) -> list[tuple[float, float]]:
    """[(median host us, wall us)] of each callable, rounds alternating between them."""
    for f in fs:
        wall_us(f, 100)  # warm-up: tuning, recording
    hosts = [[host_us(f) for f in fs] for _ in range(rounds)]
    return [(statistics.median(h[i] for h in hosts), wall_us(f)) for i, f in enumerate(fs)]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--ms", default="1,16", help="activation rows M, comma-separated")
    args = ap.parse_args()
    torch.manual_seed(0)
    rows = []
    for n, k in SHAPES:
        lin = nn.Linear(k, n, bias=False, device="cuda", dtype=torch.bfloat16)
        with torch.no_grad():
            lin.weight.normal_(0, 0.02)
        fast, slow = CompressedLinear.from_linear(lin), CompressedLinear.from_linear(lin)
        for m in map(int, args.ms.split(",")):
            x = torch.randn(1, m, k, device="cuda", dtype=torch.bfloat16)

            def without_replay():
                replay.ENABLED = False
                try:
                    slow(x)
                finally:
                    replay.ENABLED = True

            with torch.inference_mode():
                rows.append((f"{n}x{k}", m, *compare([lambda: lin(x), lambda: fast(x), without_replay], args.rounds)))
        del fast, slow
    print(f"device: {torch.cuda.get_device_name()}, torch {torch.__version__}, median of {args.rounds} rounds")
    print(f"{'N x K':>11s} {'M':>3s} | {'nn.Linear host/wall us':>22s} | {'replayed host/wall':>18s} | "
          f"{'not replayed host/wall':>22s} | replayed host vs nn.Linear")
    for name, m, b, f, s in rows:
        print(f"{name:>11s} {m:3d} | {b[0]:10.1f} {b[1]:11.1f} | {f[0]:8.1f} {f[1]:9.1f} | "
              f"{s[0]:10.1f} {s[1]:11.1f} | {f[0] / b[0]:.2f}x")


if __name__ == "__main__":
    main()
