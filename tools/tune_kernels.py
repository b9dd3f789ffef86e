#!/usr/bin/env python
"""Tune the fused fixed-layout kernels on this GPU and write the configs shipped for its
architecture (``src/wcodec/gpu/configs/sm<major><minor>.json``, read by ``wcodec.gpu.shipped``),
so serving never autotunes. Needs a CUDA GPU.

    PYTHONPATH=src python3 tools/tune_kernels.py [--shapes 4096x4096,11008x4096,...]
        [--ms 1,2,4,8,16,32,64,128,256] [--out DIR] [--write]

For every weight shape [N, K] and activation row count M (one per M bucket the kernels are
keyed by) it runs each kernel that can take M: GEMV (M <= 2), the Gluon mma kernel (3-64 rows), the
warp-specialised kernel (17-256 rows, sm_90),
the wide Triton tiled kernel (33-256 rows), decode + cuBLAS (M >= 64). Each is autotuned by
Triton at the split-K count of ``fixed.split_k``; the chosen tile is then timed at every split
(1, 2, 4, 8 with >= 512 columns a slice) as ``benchmarks/fused_matmul.py`` times (CUDA graphs,
weight copies beyond the L2, cuBLAS bf16 in the same run), after a check against an fp32
reference. An entry (kernel, M bucket, N, K, fastest split, tile) is kept per kernel; the table
printed last gives every path's time over cuBLAS, which sets the routing constants of
``wcodec.gpu.fixed``. The file goes to DIR/sm<cc>.json (DIR: --out, default $OUT or .), and
into the package with --write. Synthetic weights (normal, std 0.02).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

os.environ["WCODEC_SHIPPED_CONFIGS"] = "0"  # tune from scratch, whatever is shipped today
ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

SHAPES = "4096x4096,11008x4096,4096x11008,14336x4096,4096x14336,1024x4096"
SPLITS = (1, 2, 4, 8)


def paths(M: int, mma: bool, wgmma: bool, only: str = "", ws: bool = False) -> list[str]:
    """The kernels that can serve M rows (bf16 x); ``only``: those named (comma-separated)."""
    out = ["gemv"] if M <= 2 else []
    if mma and 3 <= M <= 64:
        out.append("mma")
    if ws and 16 < M <= 256:
        out.append("ws")
    if wgmma and 32 < M <= 256:
        out.append("wgmma")
    if 32 < M <= 256:
        out.append("wide")
    if M >= 64:
        out.append("decode")
    return [p for p in out if not only or p in only.split(",")]


def run_path(fx, path: str, x, fw, split):
    """fx.linear(x, fw) through ``path`` at ``split`` K slices (None: the kernel's rule)."""
    saved = fx.MMA_MAX_M, fx.MMA_ENABLED, fx.WGMMA_MIN_M, fx.WGMMA_MAX_M, fx.WS_MIN_M, fx.WS_MAX_M
    try:
        fx.MMA_MAX_M = 256 if path == "mma" else 0
        fx.MMA_ENABLED = path in ("mma", "wgmma", "ws")
        fx.WGMMA_MIN_M, fx.WGMMA_MAX_M = (32, 256) if path == "wgmma" else (32, 0)
        fx.WS_MIN_M, fx.WS_MAX_M = (16, 256) if path == "ws" else (16, 0)
        kind = {"gemv": "gemv", "decode": "decode"}.get(path, "mm")
        return fx.linear(x, fw, kind=kind, split=split)
    finally:
        fx.MMA_MAX_M, fx.MMA_ENABLED, fx.WGMMA_MIN_M, fx.WGMMA_MAX_M, fx.WS_MIN_M, fx.WS_MAX_M = saved


def merged(path: str, entries: list) -> list:
    """``entries`` and those of the configs file ``path`` that no entry here replaces."""
    if not path:
        return entries
    new = {(e["kind"], e["mb"], e["N"], e["K"]) for e in entries}
    with open(path) as f:
        old = [e for e in json.load(f)["entries"] if (e["kind"], e["mb"], e["N"], e["K"]) not in new]
    return old + entries


def save(a, arch: str, entries: list, rows: list) -> None:
    import torch
    import triton
    doc = dict(arch=arch, device=torch.cuda.get_device_name(), torch=torch.__version__, triton=triton.__version__,
               date=time.strftime("%Y-%m-%d", time.gmtime()), tool="tools/tune_kernels.py", entries=entries)
    os.makedirs(a.out, exist_ok=True)
    for d in [a.out] + ([str(ROOT / "src" / "wcodec" / "gpu" / "configs")] if a.write else []):
        os.makedirs(d, exist_ok=True)
        with open(os.path.join(d, f"{arch}.json"), "w") as f:
            json.dump(doc, f, indent=1)
    with open(os.path.join(a.out, f"tune_{arch}_rows.json"), "w") as f:
        json.dump(rows, f, indent=1)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--shapes", default=SHAPES)
    ap.add_argument("--ms", default="1,2,4,8,16,32,64,128,256")
    ap.add_argument("--paths", default="", help="only these kernels (gemv,mma,ws,wgmma,wide,decode)")
    ap.add_argument("--merge", default="", help="a configs file whose entries of other kernels and buckets are kept")
    ap.add_argument("--out", default=os.environ.get("OUT", "."))
    ap.add_argument("--write", action="store_true", help="also write the file into src/wcodec/gpu/configs/")
    a = ap.parse_args()
    import torch
    import torch.nn.functional as F
    import triton
    from fused_matmul import graph_time, weight_copies

    from wcodec.gpu import fixed as fx
    dev = torch.device("cuda")
    arch = fx._arch(dev)
    t0 = time.time()
    print(f"device {torch.cuda.get_device_name()}, {arch}, torch {torch.__version__}, triton {triton.__version__}",
          flush=True)
    entries, rows = [], []
    g = torch.Generator(device="cuda").manual_seed(0)
    for shape in a.shapes.split(","):
        N, K = (int(v) for v in shape.split("x"))
        w = (torch.randn(N, K, device="cuda", generator=g) * 0.02).to(torch.bfloat16)
        ws = weight_copies(w)
        fws = [fx.encode_weight(w_) for w_ in ws]
        rep = 20 // len(ws) + 1
        for M in (int(m) for m in a.ms.split(",")):
            x = torch.randn(M, K, device="cuda", generator=g).to(torch.bfloat16)
            ref = x.float() @ w.float().T
            row = dict(N=N, K=K, M=M, cublas=graph_time(torch, [lambda w_=w_: F.linear(x, w_) for w_ in ws] * rep) * 1e6)
            for path in paths(M, fx._mma_ready(x), fx._wgmma_ready(x), a.paths, fx._ws_ready(x)):
                before = set(fx._BEST)
                run_path(fx, path, x, fws[0], None)  # tunes at the rule's split
                new = [k for k in fx._BEST if k not in before]
                if path == "decode":
                    row[path] = graph_time(torch, [lambda f=f: run_path(fx, path, x, f, None) for f in fws] * rep) * 1e6
                    continue
                (kind, key), = [k for k in new if not k[0].startswith("splitk")] or [(None, None)]
                if kind is None:
                    print(f"  {N}x{K} M={M} {path}: tuned nothing new", flush=True)
                    continue
                cfg = fx._BEST[(kind, key)]
                times = {}
                for s in SPLITS:
                    if s > 1 and K // s < 512 or path == "gemv" and s > 1:
                        continue
                    fx._BEST[(kind, key[:-1] + (s,) if path != "gemv" else key)] = cfg
                    err = float((run_path(fx, path, x, fws[0], s).float() - ref).norm() / ref.norm())
                    assert err < 5e-3, (N, K, M, path, s, err)
                    times[s] = graph_time(torch, [lambda f=f: run_path(fx, path, x, f, s) for f in fws] * rep) * 1e6
                best = min(times, key=times.get)
                row[path] = times[best]
                row[path + "_splits"] = {s: round(t, 2) for s, t in times.items()}
                entries.append(dict(kind=kind, mb=key[2], N=N, K=K, split=best, us=round(times[best], 2),
                                    cublas_us=round(row["cublas"], 2),
                                    config=dict(kwargs=cfg.kwargs, num_warps=cfg.num_warps, num_stages=cfg.num_stages,
                                                **({"maxnreg": cfg.maxnreg} if cfg.maxnreg else {}))))
            rows.append(row)
            print(json.dumps({k: round(v, 2) if isinstance(v, float) else v for k, v in row.items()}),
                  f"{time.time() - t0:.0f} s", flush=True)
        del ws, fws
        torch.cuda.empty_cache()
        save(a, arch, merged(a.merge, entries), rows)  # after every shape: a run cut short keeps what it measured
    print("\n| W [N x K] | M | cuBLAS us | gemv | mma (split) | ws (split) | wgmma (split) | wide (split) | decode |"
          "  (time / cuBLAS)")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        def cell(p):
            if p not in r:
                return "-"
            sp = r.get(p + "_splits")
            s = f" ({min(sp, key=sp.get)})" if sp and p != "gemv" else ""
            return f"{r[p] / r['cublas']:.3f}{s}"
        print(f"| {r['N']}x{r['K']} | {r['M']} | {r['cublas']:.1f} | {cell('gemv')} | {cell('mma')} | {cell('ws')} | "
              f"{cell('wgmma')} | {cell('wide')} | "
              f"{cell('decode')} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
