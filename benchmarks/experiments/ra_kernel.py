"""The register-A wgmma kernel (``wcodec.gpu.fixed_ra``) checked and timed against cuBLAS bf16 and
the current route (``fixed.linear``) at M = 9-64, per config and K split, Gaussian and Student-t
weights, in one process. Needs an sm_90 GPU.

    PYTHONPATH=src python3 benchmarks/experiments/ra_kernel.py [--shapes 0,1,2,3] [--ms 16,24,32,64]
        [--heavy-ms 16,32] [--splits 1,2,4,8] [--configs all] [--workers 12] [--no-time]

First every config is checked (each of its row buckets): fresh weights rich in escapes above
and below the window, fresh Gaussian and Student-t ones, odd M (9, 17, 33), bias and
none, strided x, K slices 1 and 3, the output poisoned with NaN before each run, the relative
error to an fp32 reference < 5e-3, and three runs bit-identical. Then the timings (median GPU
time per call of CUDA graphs rotating over weight copies beyond the L2, ``fused_matmul.graph_time``),
each timed config's output on the timing weight checked first. ``--workers`` processes compile
the configs into Triton's cache first (the same launches, untimed), so the main process only
loads them. Rows go to $OUT/ra_kernel.json; a table is printed last.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))
from fused_matmul import graph_time  # noqa: E402
from serving_kernels import SHAPES, rel, weight  # noqa: E402
from ws_kernel import call as ws_call, weights  # noqa: E402

from wcodec.gpu import fixed as fx  # noqa: E402
from wcodec.gpu.fixed_ra import configs, fixed_ra_kernel  # noqa: E402



#: variants beside the shipped configs: (bucket, base config index, overrides, name); a name
#: with "abl" marks an ablation (wrong by design: not checked, timed only). 2026-11-27, second
#: round: the in-kernel split-K sum (the tile's last slice sums, no second launch), 8 warps (128
#: rows of W a program), 128- and 256-row blocks and the ablations without the proxy fence and
#: without x's copies were measured here, then taken out of the kernel (HISTORY.md, "kern7")
VARIANTS = [(16, 1, dict(XS=5, WST=4), "d"), (32, 1, dict(XS=5, WST=4), "d")]
BUCKETS = (16, 32, 64)
ODD = {16: 9, 32: 17, 64: 33}


def all_configs():
    """[(bucket, name, config)] of every bucket's configs and the variants."""
    import triton
    out = [(bm, f"c{i}", c) for bm in BUCKETS for i, c in enumerate(configs(bm))]
    for bm, i, over, name in VARIANTS:
        c = configs(bm)[i]
        out.append((bm, f"c{i}{name}", triton.Config({**c.kwargs, **over}, num_warps=c.num_warps, num_stages=1)))
    return out


def call(x, f, cfg, split, y, ws, b=None):
    """y = x @ W.T (+ b) by fixed_ra_kernel with ``cfg`` in ``split`` K slices (ws: their scratch)."""
    return ws_call(x, f, cfg, split, y, ws, fixed_ra_kernel, b)


def run_checked(x, f, cfg, split, ref, b=None, repeats=3):
    """Run ``repeats`` times on NaN-poisoned outputs; (relative error, bit-identical, compiled kernel)."""
    outs, k = [], None
    for _ in range(repeats):
        y = torch.full((x.shape[0], f.N), float("nan"), dtype=torch.bfloat16, device="cuda")
        ws = torch.full((split, x.shape[0], f.N), float("nan"), dtype=torch.float32, device="cuda") if split > 1 else y
        k = call(x, f, cfg, split, y, ws, b)
        outs.append(y)
    torch.cuda.synchronize()
    e = rel(outs[0], ref) if not torch.isnan(outs[0]).any() else float("inf")
    same = all(torch.equal(o.view(torch.int16), outs[0].view(torch.int16)) for o in outs[1:])
    return e, same, k


def escape_rich(N, K, g, escapes=0.01):
    w = torch.randn(N, K, device="cuda", generator=g) * 0.02
    w[torch.rand(N, K, device="cuda", generator=g) < escapes / 2] *= 1e-4  # below the window
    w[torch.rand(N, K, device="cuda", generator=g) < escapes / 2] *= 1e3  # above it
    return w.to(torch.bfloat16)


def checks(cfgs, log, regs=None):
    """Every config on small odd weights: returns the failures (regs: {config: (registers,
    spills)} filled in)."""
    bad = []
    cases = [(300, 1040, "rich"), (777, 528, "normal"), (130, 272, "t3"), (1000, 4112, "rich")]
    for bm, ci, cfg in cfgs:
        if "abl" in ci:
            continue
        for n_case, (N, K, dist) in enumerate(cases):
            g = torch.Generator(device="cuda").manual_seed(1000 * bm + 10 * sum(map(ord, ci)) + n_case)
            w = escape_rich(N, K, g) if dist == "rich" else weight(N, K, dist, g)
            f = fx.encode_weight(w)
            for M in (ODD[bm], bm):
                # rows strided (a view of a wider tensor) or contiguous
                x = torch.randn(M, 2 * K if n_case % 2 else K, device="cuda", generator=g).to(torch.bfloat16)[:, :K]
                b = torch.randn(N, device="cuda", generator=g).to(torch.bfloat16) if (M + n_case) % 2 else None
                ref = x.float() @ w.float().T + (b.float() if b is not None else 0)
                for split in (1, 3):
                    e, same, k = run_checked(x, f, cfg, split, ref, b)
                    ok = e < 5e-3 and same
                    if regs is not None:
                        regs.setdefault(f"ra{bm}{ci} {cfg}", (getattr(k, "n_regs", None), getattr(k, "n_spills", None)))
                    if not ok:
                        bad.append(dict(bm=bm, cfg=ci, N=N, K=K, M=M, dist=dist, split=split, err=e, same=same))
                    log(f"check ra{bm}{ci} {N}x{K} {dist} M={M} split={split} bias={b is not None}: err {e:.2e} "
                        f"same {same} regs {getattr(k, 'n_regs', '?')} spills {getattr(k, 'n_spills', '?')}"
                        + ("" if ok else "  <-- BAD"))
    return bad


def timings(cfgs, shapes, ms, heavy_ms, splits, timed, log, route=True):
    rows = []
    for si in shapes:
        N, K = SHAPES[si]
        for dist in ("normal", "t3"):
            dms = ms if dist == "normal" else heavy_ms
            if not dms:
                continue
            w, wc, fws, rep, g = weights(si, dist)
            for M in dms:
                x = torch.randn(M, K, device="cuda", generator=g).to(torch.bfloat16)
                ref = x.float() @ w.float().T
                r = dict(N=N, K=K, M=M, dist=dist, escapes_pct=round(100 * fws[0].ecol.numel() / w.numel(), 3))
                if timed:
                    r["cublas"] = graph_time(torch, [lambda w_=w_: F.linear(x, w_) for w_ in wc] * rep) * 1e6
                    r["route_kind"] = fx.pick_kind(M, x, fws[0])
                    assert rel(fx.linear(x, fws[0]), ref) < 5e-3
                    r["route"] = graph_time(torch, [lambda f=f: fx.linear(x, f) for f in fws] * rep) * 1e6
                elif route:
                    fx.linear(x, fws[0])
                best = None
                for bm, ci, cfg in cfgs:
                    if bm != max(16, fx._pow2(M)):
                        continue
                    for split in splits:
                        if split > 1 and K // split < 512:
                            continue
                        y = torch.empty((M, N), dtype=torch.bfloat16, device="cuda")
                        ws = torch.empty((split, M, N), dtype=torch.float32, device="cuda") if split > 1 else y
                        e, same, _ = run_checked(x, fws[0], cfg, split, ref, repeats=2)
                        name = f"{ci}s{split}"
                        if not (e < 5e-3 and same) and "abl" not in ci:
                            r[name] = f"BAD {e:.3g} same={same}"
                            continue
                        if not timed:
                            continue
                        t = graph_time(torch, [lambda f=f: call(x, f, cfg, split, y, ws) for f in fws] * rep) * 1e6
                        r[name] = round(t, 2)
                        if "abl" not in ci and (best is None or t < best[0]):
                            best = (t, name)
                if best:
                    r["ra"], r["ra_cfg"] = best
                    r["ra/cublas"] = best[0] / r["cublas"]
                    r["route/cublas"] = r["route"] / r["cublas"]
                rows.append(r)
                log(json.dumps({k: round(v, 3) if isinstance(v, float) else v for k, v in r.items()}))
            del wc, fws
            torch.cuda.empty_cache()
    return rows


def worker(args):
    """Compile (run untimed) the configs ``idx`` of all_configs() into Triton's cache."""
    idx, a, route = args
    cfgs = [c for i, c in enumerate(all_configs()) if i in idx]
    quiet = lambda s: None  # noqa: E731
    try:
        checks(cfgs, quiet)
        timings(cfgs, a["shapes"], a["ms"], a["heavy_ms"], a["splits"], False, quiet, route)
    except Exception as e:  # the main process runs (and reports) the same launches
        return f"worker {idx}: {type(e).__name__}: {str(e)[:300]}"
    return f"worker {idx}: ok"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--shapes", default="0,1,2,3")
    ap.add_argument("--ms", default="16,24,32,64")
    ap.add_argument("--heavy-ms", default="16,32")
    ap.add_argument("--splits", default="1,2,4,8")
    ap.add_argument("--configs", default="all", help="indices into all_configs(), or all")
    ap.add_argument("--workers", type=int, default=12)
    ap.add_argument("--no-time", action="store_true")
    a = ap.parse_args(argv)
    t0 = time.time()
    out = os.environ.get("OUT", ".")
    logf = open(os.path.join(out, "ra_kernel.log"), "w")

    def log(s):
        print(s, f"[{time.time() - t0:.0f} s]", file=logf, flush=True)

    ints = lambda s: [int(v) for v in s.split(",") if v]  # noqa: E731
    todo = list(range(len(all_configs()))) if a.configs == "all" else ints(a.configs)
    spec = dict(shapes=ints(a.shapes), ms=ints(a.ms), heavy_ms=ints(a.heavy_ms), splits=ints(a.splits))
    print(f"device {torch.cuda.get_device_name()}, torch {torch.__version__}, configs {len(todo)}", flush=True)
    if a.workers > 0:
        parts = [todo[i::a.workers] for i in range(min(a.workers, len(todo)))]
        with mp.get_context("spawn").Pool(len(parts)) as pool:
            for msg in pool.imap_unordered(worker, [(p, spec, i == 0) for i, p in enumerate(parts)]):
                print(msg, f"{time.time() - t0:.0f} s", flush=True)
    cfgs = [c for i, c in enumerate(all_configs()) if i in todo]
    regs = {}
    bad = checks(cfgs, log, regs)
    print(f"checks: {len(bad)} failures {time.time() - t0:.0f} s", flush=True)
    for name, (r, sp) in regs.items():
        print(f"  {name}: {r} registers, {sp} spills", flush=True)
    for b in bad[:20]:
        print("BAD", b, flush=True)
    rows = timings(cfgs, spec["shapes"], spec["ms"], spec["heavy_ms"], spec["splits"], not a.no_time, log)
    with open(os.path.join(out, "ra_kernel.json"), "w") as f:
        json.dump(dict(bad=bad, rows=rows, regs=regs), f, indent=1)
    print(f"done {time.time() - t0:.0f} s")
    print("\n| W | dist | M | cuBLAS us | route us (kind) | route/cuBLAS | ra us (cfg) | ra/cuBLAS |")
    print("|---|---|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        print(f"| {r['N']}x{r['K']} | {r['dist']} | {r['M']} | {r.get('cublas', float('nan')):.2f} | "
              f"{r.get('route', float('nan')):.2f} ({r.get('route_kind')}) | {r.get('route/cublas', float('nan')):.3f} | "
              f"{r.get('ra', float('nan')):.2f} ({r.get('ra_cfg')}) | {r.get('ra/cublas', float('nan')):.3f} |")
    return 1 if bad else 0


if __name__ == "__main__":
    raise SystemExit(main())
