"""GPU decode throughput of the fp8 codec (Triton byte-plane kernel + one copy) beside a plain
device copy of the same FP8 bytes, on LLM layer shapes.

    PYTHONPATH=src python3 benchmarks/experiments/fp8_gpu.py                 # H100/H200: 4096x4096, 11008x4096, 4096x11008
    TRITON_INTERPRET=1 PYTHONPATH=src python3 benchmarks/experiments/fp8_gpu.py --device cpu --shapes 64x96 --reps 1

Weights: Gaussian (std 0.02) cast to float8_e4m3fn with a per-tensor scale. Each decode is
checked bit-exact against the CPU decoder before it is timed. GB/s = FP8 bytes written / median
GPU time (CUDA events; wall clock on the CPU interpreter). Prints one table last.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "src"))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--shapes", default="4096x4096,11008x4096,4096x11008")
    ap.add_argument("--reps", type=int, default=50)
    a = ap.parse_args()
    import torch

    from wcodec.codecs import decode_tensor, encode_tensor
    from wcodec.gpu.decode import Prepared, build_plan, check, fill_host, run
    dev = torch.device(a.device)
    cuda = dev.type == "cuda"

    def timed(fn) -> float:
        fn()
        ts = []
        for _ in range(a.reps):
            if cuda:
                s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                s.record()
                fn()
                e.record()
                torch.cuda.synchronize()
                ts.append(s.elapsed_time(e) / 1e3)
            else:
                t = time.perf_counter()
                fn()
                ts.append(time.perf_counter() - t)
        return statistics.median(ts)

    rows = []
    for spec in a.shapes.split(","):
        shape = tuple(int(x) for x in spec.split("x"))
        w = torch.randn(shape, generator=torch.Generator().manual_seed(0)) * 0.02
        b = (w / (w.abs().max() / 448)).to(torch.float8_e4m3fn).view(torch.uint8).numpy()
        rec = encode_tensor(b, "F8_E4M3")
        plan = build_plan([("w", rec)])
        host = np.zeros(plan.buf_nbytes, np.uint8)
        fill_host(plan, host)
        buf = torch.from_numpy(host).to(dev)
        out = torch.full((max(plan.out_nbytes, 16),), 0xAB, dtype=torch.uint8, device=dev)  # poisoned
        prep = Prepared(plan, dev)
        check(plan, run(prep, buf, out))
        assert np.array_equal(out[:b.size].cpu().numpy(), decode_tensor(rec).reshape(-1)), spec
        t_dec = timed(lambda: run(prep, buf, out))
        src = torch.from_numpy(b.reshape(-1).copy()).to(dev)
        dst = torch.empty_like(src)
        t_cp = timed(lambda: dst.copy_(src))
        rows.append((spec, rec.bits_per_weight, rec.params["data"]["chunk_steps"], b.size / t_dec / 1e9,
                     b.size / t_cp / 1e9))
    name = torch.cuda.get_device_name(dev) if cuda else "CPU (Triton interpreter)"
    print(f"# {name}, torch {torch.__version__}, median of {a.reps}")
    print("| shape | bits/w | steps/chunk | fp8 decode GB/s | device copy GB/s |")
    print("|---|---:|---:|---:|---:|")
    for spec, bpw, steps, gd, gc in rows:
        print(f"| {spec} | {bpw:.3f} | {steps} | {gd:.1f} | {gc:.1f} |")


if __name__ == "__main__":
    main()
