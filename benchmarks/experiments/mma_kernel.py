"""The Gluon mma kernel (``wcodec.gpu.fixed_mma``, bf16 x of 3-16 rows) against the Triton
kernels it replaces there (``WCODEC_MMA=0``: the tiled kernel, or the GEMV up to 4 rows) and
cuBLAS bf16, through ``wcodec.gpu.fixed.linear`` as a model calls it (auto split, autotuned
tiles). Llama-2-7B and Llama-3-8B shapes; SYNTHETIC weights (normal, std 0.02, bf16) and one
weight with 0.3 % escapes (the top of real models' range). Needs a CUDA GPU.

    PYTHONPATH=src python3 benchmarks/experiments/mma_kernel.py [--m 16,8,4,3] [--sweep]

Every output is checked against fp32 first. Times: median GPU time per call of a CUDA graph of
20+ calls rotating over more weight copies than the L2 holds (``fused_matmul.graph_time``), the
split-K sum included. ``--sweep`` also times every split of 1, 2, 4, 8 at M = 16 (the evidence
for ``split_k(mma=True)``). One table last, with a Llama-2-7B decoder layer's sum.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the suites: benchmarks/
from fused_matmul import graph_time, weight_copies  # noqa: E402

from wcodec.gpu import fixed as fx  # noqa: E402

SHAPES = [(4096, 4096), (11008, 4096), (4096, 11008), (32000, 4096), (1024, 4096), (14336, 4096),
          (4096, 14336), (128256, 4096), ("esc", 4096)]
#: a Llama-2-7B decoder layer: q, k, v, o, gate, up, down
LAYER = {(4096, 4096): 4, (11008, 4096): 2, (4096, 11008): 1}
SPLITS = (1, 2, 4, 8)


def weight(N, K, g):
    if N == "esc":  # 11008 x K with 0.3 % of the weights below the 14-exponent window
        w = torch.randn(11008, K, device="cuda", generator=g) * 0.02
        w[torch.rand(w.shape, device="cuda", generator=g) < 0.003] *= 1e-4
        return w.to(torch.bfloat16)
    return (torch.randn(N, K, device="cuda", generator=g) * 0.02).to(torch.bfloat16)


def timed(x, fws, rep, **kw):
    return graph_time(torch, [lambda f=f: fx.linear(x, f, **kw) for f in fws] * rep) * 1e6


def measure(N, K, ms, sweep, t0):
    g = torch.Generator(device="cuda").manual_seed(hash((N, K)) % 1000)
    w = weight(N, K, g)
    ws = weight_copies(w)
    fws = [fx.encode_weight(w_) for w_ in ws]
    rep = 20 // len(ws) + 1
    for M in ms:
        x = torch.randn(M, K, device="cuda", generator=g).to(torch.bfloat16)
        ref = x.float() @ w.float().T
        r = dict(N=N, K=K, M=M, escapes=round(100 * fws[0].ecol.numel() / w.numel(), 3),
                 split=fx.split_k(M, w.shape[0], K, x.device, mma=True))
        r["cublas"] = graph_time(torch, [lambda w_=w_: F.linear(x, w_) for w_ in ws] * rep) * 1e6
        for name, on in (("mma", True), ("triton", False)):
            fx.MMA_ENABLED = on
            e = float((fx.linear(x, fws[0]).float() - ref).norm() / ref.norm())
            assert e < 5e-3, (N, K, M, name, e)
            r[name] = timed(x, fws, rep)
        fx.MMA_ENABLED = True
        if sweep and M == 16:
            for s in SPLITS:
                r[f"mma/s{s}"] = timed(x, fws, rep, split=s)
        print(json.dumps(r), f"{time.time() - t0:.0f} s", flush=True)
        yield r
    del ws, fws
    torch.cuda.empty_cache()


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--m", default="16,8,4,3", help="activation rows to time (3-16 run the mma kernel)")
    ap.add_argument("--sweep", action="store_true", help="also time splits 1, 2, 4, 8 at M = 16")
    args = ap.parse_args(argv)
    ms = [int(m) for m in args.m.split(",")]
    t0 = time.time()
    import triton
    print(f"# {torch.cuda.get_device_name()}, torch {torch.__version__}, triton {triton.__version__}, "
          f"SYNTHETIC weights, mma kernel ready: {fx._mma_ready(torch.zeros(1, dtype=torch.bfloat16, device='cuda'))}",
          flush=True)
    rows = [r for N, K in SHAPES for r in measure(N, K, ms, args.sweep, t0)]
    print("\n| N x K | escapes % | M | cuBLAS us | Triton kernel us | mma kernel us (split) | mma / cuBLAS |"
          " mma / Triton |" + ("".join(f" s{s} |" for s in SPLITS) if args.sweep else ""))
    print("|---|---:|---:|---:|---:|---:|---:|---:|" + ("---:|" * len(SPLITS) if args.sweep else ""))
    for r in rows:
        sw = "".join(f" {r[f'mma/s{s}']:.1f} |" if f"mma/s{s}" in r else " |" for s in SPLITS) if args.sweep else ""
        print(f"| {r['N']}x{r['K']} | {r['escapes']} | {r['M']} | {r['cublas']:.1f} | {r['triton']:.1f} | "
              f"{r['mma']:.1f} ({r['split']}) | {r['mma'] / r['cublas']:.3f} | {r['mma'] / r['triton']:.3f} |" + sw)
    for M in ms:
        tot = {k: sum(n * r[k] for r in rows for (N, K), n in LAYER.items() if (r["N"], r["K"], r["M"]) == (N, K, M))
               for k in ("cublas", "triton", "mma")}
        if tot["cublas"]:
            print(f"Llama-2-7B layer, M = {M}: cuBLAS {tot['cublas']:.1f} us, Triton kernel {tot['triton']:.1f} us, "
                  f"mma kernel {tot['mma']:.1f} us ({tot['mma'] / tot['cublas']:.3f}x cuBLAS)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
