"""Split-K of the tiled fused kernels (``wcodec.gpu.fixed.linear(kind="mm", split=s)``: the Gluon
mma kernel at M <= 16 where it runs, the Triton kernel otherwise) against cuBLAS bf16, for the
Llama-2-7B layer shapes and its lm_head at M = 8, 16 and 64. Needs a CUDA GPU.

    PYTHONPATH=src python3 benchmarks/experiments/split_k.py

Weights are SYNTHETIC (normal, std 0.02, rounded to bf16). Every output is checked against an
fp32 reference first. Times: median GPU time per call of a CUDA graph of 20+ calls rotating over
enough weight copies to exceed the L2 (``fused_matmul.graph_time``); a split time includes the
scratch allocation and the reduction launch. "auto" is the split ``split_k`` picks. One table last.
"""
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

SHAPES = [(4096, 4096), (11008, 4096), (4096, 11008), (14336, 4096), (4096, 14336), (32000, 4096)]
SPLITS = (1, 2, 4, 8)
#: a Llama-2-7B decoder layer: q, k, v, o, gate, up, down
LAYER = {(4096, 4096): 4, (11008, 4096): 2, (4096, 11008): 1}


def measure(N, K, ms, t0):
    g = torch.Generator(device="cuda").manual_seed(N + K)
    w = (torch.randn(N, K, device="cuda", generator=g) * 0.02).to(torch.bfloat16)
    fw = fx.encode_weight(w)
    ws = weight_copies(w)
    copies = len(ws)
    fws = [fw] + [fx.encode_weight(w_) for w_ in ws[1:]]
    rep = 20 // copies + 1
    for M in ms:
        x = torch.randn(M, K, device="cuda", generator=g).to(torch.bfloat16)
        ref = x.float() @ w.float().T
        r = dict(N=N, K=K, M=M, auto=fx.split_k(M, N, K, x.device, mma=fx._runs_mma(x)))
        r["cublas"] = graph_time(torch, [lambda w_=w_: F.linear(x, w_) for w_ in ws] * rep) * 1e6
        for s in SPLITS:
            y = fx.linear(x, fw, kind="mm", split=s)
            e = float((y.float() - ref).norm() / ref.norm())
            assert e < 5e-3, (N, K, M, s, e)
            r[f"s{s}"] = graph_time(torch, [lambda f=f: fx.linear(x, f, kind="mm", split=s) for f in fws] * rep) * 1e6
        print(json.dumps(r), f"{time.time() - t0:.0f} s", flush=True)
        yield r


def main():
    t0 = time.time()
    print(f"# {torch.cuda.get_device_name()}, torch {torch.__version__}, SYNTHETIC weights", flush=True)
    rows = [r for N, K in SHAPES for r in measure(N, K, (8, 16, 64), t0)]
    print("| N x K | M | cuBLAS us | " + " | ".join(f"split {s} us" for s in SPLITS)
          + " | auto split | auto / cuBLAS | split 1 / cuBLAS |")
    print("|---|---:|---:|" + "---:|" * len(SPLITS) + "---:|---:|---:|")
    for r in rows:
        auto = r[f"s{r['auto']}"]
        print(f"| {r['N']}x{r['K']} | {r['M']} | {r['cublas']:.1f} | " + " | ".join(f"{r[f's{s}']:.1f}" for s in SPLITS)
              + f" | {r['auto']} | {auto / r['cublas']:.3f} | {r['s1'] / r['cublas']:.3f} |")
    for M in (8, 16, 64):
        layer = [(r, LAYER[(r["N"], r["K"])]) for r in rows if r["M"] == M and (r["N"], r["K"]) in LAYER]
        tot = {k: sum(r[k] * c for r, c in layer) for k in ("cublas", "s1")}
        auto = sum(r[f"s{r['auto']}"] * c for r, c in layer)
        print(f"# Llama-2-7B layer, M = {M}: cuBLAS {tot['cublas']:.1f} us, split 1 {tot['s1']:.1f} us "
              f"({tot['s1'] / tot['cublas']:.3f}x), auto {auto:.1f} us ({auto / tot['cublas']:.3f}x)")


if __name__ == "__main__":
    # no options: --help says what it measures, without starting the measurement
    argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter).parse_args()
    main()
