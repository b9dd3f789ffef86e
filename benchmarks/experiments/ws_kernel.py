"""The warp-specialised wgmma kernel (``wcodec.gpu.fixed_ws``) against cuBLAS bf16 and the
current route (``fixed.linear``) at M = 17-256, per config and K split, Gaussian and Student-t
weights. Every config's output is checked against an fp32 reference first (relative error
< 5e-3, every element written). Needs an sm_90 GPU.

    PYTHONPATH=src python3 benchmarks/experiments/ws_kernel.py [--shapes 0,1] [--ms 32,64,128,256]
        [--splits 2,4] [--configs 0,1] [--route] [--heavy]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from fused_matmul import graph_time, weight_copies  # noqa: E402
from serving_kernels import SHAPES, rel, weight  # noqa: E402

from wcodec.gpu import fixed as fx  # noqa: E402
from wcodec.gpu.fixed_ws import configs, fixed_ws_kernel  # noqa: E402


def weights(si: int, dist: str):
    """Shape si's weight (``dist``), its copies (more than the L2 holds) encoded, the graph's
    repeat count and the seeded generator (for x)."""
    N, K = SHAPES[si]
    g = torch.Generator(device="cuda").manual_seed(si)
    w = weight(N, K, dist, g)
    ws_ = weight_copies(w)
    return w, ws_, [fx.encode_weight(w_) for w_ in ws_], 20 // len(ws_) + 1, g


def call(x, f, cfg, split, y, ws, kernel=fixed_ws_kernel, b=None, **extra):
    """y = x @ W.T (+ b) by ``kernel`` (one of the swapped Gluon kernels: grid (N tiles, split))
    with ``cfg`` in ``split`` K slices (ws: their fp32 scratch); returns the compiled kernel."""
    M, K = x.shape
    kw = dict(cfg.kwargs)
    k = kernel[(fx._cdiv(f.N, kw["BN"]), split)](
        x, f.lo, f.nib, f.eptr, f.ecol, f.eval, f.erow, y if b is None else b, y, ws, M, f.N, K, f.kpad // 8,
        x.stride(0), y.stride(0), f.base, kw["BM"], split, HAS_BIAS=b is not None, num_warps=cfg.num_warps,
        **({"maxnreg": cfg.maxnreg} if cfg.maxnreg else {}), **kw, **extra)
    if split > 1:
        fx._reduce(ws, y if b is None else b, y, split, b is not None, None, 0)
    return k


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--shapes", default="0,1")
    ap.add_argument("--ms", default="32,64,128,256")
    ap.add_argument("--splits", default="2,4")
    ap.add_argument("--configs", default="0,1")
    ap.add_argument("--route", action="store_true", help="also time fixed.linear (the current route)")
    ap.add_argument("--heavy", action="store_true", help="Student-t weights too")
    ap.add_argument("--once", action="store_true", help="one call of each config, no timing (for ncu)")
    a = ap.parse_args(argv)
    t0 = time.time()
    print(f"device {torch.cuda.get_device_name()}, torch {torch.__version__}", flush=True)
    rows = []
    for si in map(int, a.shapes.split(",")):
        N, K = SHAPES[si]
        for dist in ("normal", "t3") if a.heavy else ("normal",):
            w, ws_, fws, rep, g = weights(si, dist)
            for M in map(int, a.ms.split(",")):
                x = torch.randn(M, K, device="cuda", generator=g).to(torch.bfloat16)
                ref = x.float() @ w.float().T
                r = dict(N=N, K=K, M=M, dist=dist, cublas=graph_time(torch, [lambda w_=w_: F.linear(x, w_)
                                                                             for w_ in ws_] * rep) * 1e6)
                if a.route:  # the route without this kernel (as before it)
                    ws_max, fx.WS_MAX_M = fx.WS_MAX_M, 0
                    try:
                        r["route_kind"] = fx.pick_kind(M, x, fws[0])
                        r["route"] = graph_time(torch, [lambda f=f: fx.linear(x, f) for f in fws] * rep) * 1e6
                    finally:
                        fx.WS_MAX_M = ws_max
                best = None
                cfgs = configs(max(32, fx._pow2(M)))
                for ci in (int(c) for c in a.configs.split(",") if int(c) < len(cfgs)):
                    cfg = cfgs[ci]
                    for split in map(int, a.splits.split(",")):
                        y = torch.full((M, N), float("nan"), dtype=torch.bfloat16, device="cuda")
                        wsb = torch.empty((split, M, N), dtype=torch.float32, device="cuda") if split > 1 else y
                        try:
                            call(x, fws[0], cfg, split, y, wsb)
                            torch.cuda.synchronize()
                        except Exception as e:  # report and go on: a config may not compile on this Triton
                            print("FAIL", ci, split, type(e).__name__, str(e)[:2000], flush=True)
                            continue
                        if a.once:
                            continue
                        e = rel(y, ref)
                        ok = e < 5e-3 and not torch.isnan(y).any()
                        t = graph_time(torch, [lambda f=f: call(x, f, cfg, split, y, wsb) for f in fws] * rep) * 1e6
                        r[f"c{ci}s{split}"] = round(t, 2) if ok else f"BAD {e:.3g}"
                        if ok and (best is None or t < best[0]):
                            best = (t, f"c{ci}s{split}")
                            r["ws_kwargs"] = dict(cfg.kwargs, num_warps=cfg.num_warps, maxnreg=cfg.maxnreg)
                if best:
                    r["ws"], r["ws_cfg"] = best
                    r["ws/cublas"] = best[0] / r["cublas"]
                    if "route" in r:
                        r["route/cublas"] = r["route"] / r["cublas"]
                rows.append(r)
                print(json.dumps({k: round(v, 3) if isinstance(v, float) else v for k, v in r.items()}),
                      f"{time.time() - t0:.0f} s", flush=True)
            del ws_, fws
            torch.cuda.empty_cache()
    out = os.environ.get("OUT", ".")
    with open(os.path.join(out, "ws_kernel.json"), "w") as f:
        json.dump(rows, f, indent=1)
    print("\n| W | dist | M | cuBLAS us | ws us (cfg) | ws/cuBLAS | route us | route/cuBLAS |")
    print("|---|---|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        print(f"| {r['N']}x{r['K']} | {r['dist']} | {r['M']} | {r['cublas']:.2f} | {r.get('ws', float('nan')):.2f} "
              f"({r.get('ws_cfg')}) | {r.get('ws/cublas', float('nan')):.3f} | {r.get('route', float('nan')):.2f} | "
              f"{r.get('route/cublas', float('nan')):.3f} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
