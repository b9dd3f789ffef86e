"""Fused kernels at serving batch sizes (issue 28): ``wcodec.gpu.fixed.linear`` as a model calls
it (routing by M, autotuned tiles, split-K sums included) against cuBLAS bf16 in the same run, on
the four Llama shapes, for Gaussian weights (normal, std 0.02) and heavy-tailed ones (Student t,
3 degrees of freedom, scaled to std 0.02: more escapes); plus the decode-to-scratch kernel's
bandwidth over a few tiles. Needs a CUDA GPU.

    PYTHONPATH=src python3 benchmarks/serving_kernels.py [--ms 1,16,32,64,128,256] [--shapes 0,1,2,3]
        [--heavy-ms 1,16,64] [--kinds] [--decode] [--out DIR]
    PYTHONPATH=src python3 benchmarks/serving_kernels.py --first-forward 1,16,64,256

Times: median GPU time per call of a CUDA graph replaying 20+ calls that rotate over more weight
copies than the L2 holds (``fused_matmul.graph_time``). Every output is checked against an fp32
reference first (relative error < 5e-3). ``--kinds`` also times the other kernels for each M
(the Triton tiled kernel with ``WCODEC_MMA`` off, decode + cuBLAS). Prints one table last; the
rows go to DIR/serving_kernels.json (DIR: --out, default $OUT or .). ``--first-forward``: fresh
processes (empty Triton cache) against warm ones, with and without the shipped kernel configs
(``wcodec.gpu.shipped``): the first fused forward of a Llama-2-7B layer's linears per M.
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

sys.path.insert(0, str(Path(__file__).resolve().parent))
from fused_matmul import graph_time, weight_copies  # noqa: E402

from wcodec.gpu import fixed as fx  # noqa: E402

SHAPES = [(4096, 4096), (11008, 4096), (4096, 11008), (14336, 4096)]


def weight(N, K, dist, g):
    if dist == "t3":  # Student t, 3 dof (variance 3): scaled to std 0.02
        z = torch.randn(N, K, device="cuda", generator=g)
        chi = sum(torch.randn(N, K, device="cuda", generator=g) ** 2 for _ in range(3))
        return (z / (chi / 3).sqrt() * (0.02 / 3 ** 0.5)).to(torch.bfloat16)
    return (torch.randn(N, K, device="cuda", generator=g) * 0.02).to(torch.bfloat16)


def rel(y, ref):
    return float((y.float() - ref).norm() / ref.norm())


def decode_sweep(fw, fws, rep):
    """Decode-to-scratch: the shipped launch and a few tiles of fixed_decode_kernel (escapes
    written by its own programs), in GB/s of bytes read (lo + nib) plus bf16 written."""
    from wcodec.gpu.fixed_kernels import fixed_decode_kernel
    G = fw.kpad // 8
    ref = fx.decode(fw)
    outs = [torch.empty((fw.N, fw.kpad), dtype=torch.bfloat16, device="cuda") for _ in fws]
    moved = fw.N * fw.kpad * (1.5 + 2)
    res = {"shipped": moved / graph_time(torch, [lambda f=f: fx.decode(f) for f in fws] * rep) / 1e9}
    for bn, bi, nw in ((16, 32, 4), (32, 32, 4), (16, 64, 4), (32, 64, 8), (64, 32, 8), (8, 128, 4), (64, 64, 8)):
        def call(f, o, bn=bn, bi=bi, nw=nw):
            fixed_decode_kernel[(fx._cdiv(G, bi), fx._cdiv(f.N, bn), 1)](f.lo, f.nib, o, G, f.base, f.eptr, f.ecol,
                                                                          f.eval, f.erow, f.eptr, 0, f.N, 0, BN=bn,
                                                                          BI=bi, PATCH=True, num_warps=nw)
        outs[0].fill_(-1)
        call(fw, outs[0])
        got = outs[0][:, :fw.K].clone()
        assert torch.equal(got.view(torch.int16), ref.view(torch.int16)), (bn, bi, nw)
        res[f"{bn}x{bi}w{nw}"] = moved / graph_time(torch, [lambda f=f, o=o: call(f, o) for f, o in zip(fws, outs)]
                                                    * rep) / 1e9
    return res


def measure(N, K, dist, ms, kinds, t0, decode):
    g = torch.Generator(device="cuda").manual_seed(hash((N, K, dist)) % 1000)
    w = weight(N, K, dist, g)
    ws = weight_copies(w)
    fws = [fx.encode_weight(w_) for w_ in ws]
    assert torch.equal(fx.decode(fws[0]).view(torch.int16), w.view(torch.int16))
    rep = 20 // len(ws) + 1
    esc = 100 * fws[0].ecol.numel() / w.numel()
    rows = []
    for M in ms:
        x = torch.randn(M, K, device="cuda", generator=g).to(torch.bfloat16)
        ref = x.float() @ w.float().T
        r = dict(N=N, K=K, M=M, dist=dist, escapes_pct=round(esc, 3), bits=round(fws[0].bits_per_weight, 3),
                 kind=fx.pick_kind(M, x, fws[0]))
        r["cublas"] = graph_time(torch, [lambda w_=w_: F.linear(x, w_) for w_ in ws] * rep) * 1e6
        e = rel(fx.linear(x, fws[0]), ref)
        assert e < 5e-3, (N, K, M, dist, e)
        r["err"] = e
        r["ours"] = graph_time(torch, [lambda f=f: fx.linear(x, f) for f in fws] * rep) * 1e6
        r["ratio"] = r["ours"] / r["cublas"]
        if kinds and M > fx.MMA_GEMV_MAX_M:
            fx.MMA_ENABLED = False
            try:
                if M < 1024:
                    assert rel(fx.linear(x, fws[0], kind="mm"), ref) < 5e-3
                    r["triton_mm"] = graph_time(torch, [lambda f=f: fx.linear(x, f, kind="mm") for f in fws] * rep) * 1e6
            finally:
                fx.MMA_ENABLED = True
            r["decode_cublas"] = graph_time(torch, [lambda f=f: fx.linear(x, f, kind="decode") for f in fws] * rep) * 1e6
        rows.append(r)
        print(json.dumps({k: round(v, 4) if isinstance(v, float) else v for k, v in r.items()}),
              f"{time.time() - t0:.0f} s", flush=True)
    if decode:
        d = decode_sweep(fws[0], fws, rep)
        print(json.dumps(dict(N=N, K=K, dist=dist, decode_GBps={k: round(v, 1) for k, v in d.items()})), flush=True)
        rows.append(dict(N=N, K=K, dist=dist, decode_GBps=d))
    del ws, fws
    torch.cuda.empty_cache()
    return rows


#: one process's first fused forward through a Llama-2-7B layer's seven linears (q k v o gate up
#: down) at each M of argv[1]: wall ms of the first call (compiles, and tunes where nothing is
#: shipped or cached) and of the second
FIRST_CHILD = r"""
import json, sys, time, torch
from wcodec.gpu import fixed as fx
g = torch.Generator(device="cuda").manual_seed(0)
shapes = [(4096, 4096)] * 4 + [(11008, 4096)] * 2 + [(4096, 11008)]
fws = [fx.encode_weight((torch.randn(n, k, device="cuda", generator=g) * 0.02).to(torch.bfloat16)) for n, k in shapes]
out = {}
for m in map(int, sys.argv[1].split(",")):
    xs = {k: torch.randn(m, k, device="cuda", generator=g).to(torch.bfloat16) for k in (4096, 11008)}
    for run in ("first", "second"):
        torch.cuda.synchronize()
        t = time.perf_counter()
        for fw in fws:
            fx.linear(xs[fw.K], fw)
        torch.cuda.synchronize()
        out.setdefault(m, {})[run] = (time.perf_counter() - t) * 1e3
print("RESULT " + json.dumps(out))
"""


def first_forward(ms: str) -> list:
    """Fresh processes (an empty TRITON_CACHE_DIR: a fresh machine) then warm ones (the same
    cache again), with the shipped configs and without (WCODEC_SHIPPED_CONFIGS=0)."""
    import subprocess
    import tempfile
    rows = []
    for shipped in ("1", "0"):
        cache = tempfile.mkdtemp(prefix="triton_cache_")
        for state in ("fresh", "warm"):
            env = {**os.environ, "TRITON_CACHE_DIR": cache, "WCODEC_SHIPPED_CONFIGS": shipped}
            t = time.perf_counter()
            r = subprocess.run([sys.executable, "-c", FIRST_CHILD, ms], capture_output=True, text=True, env=env,
                               timeout=900)
            wall = time.perf_counter() - t
            assert r.returncode == 0, r.stderr[-3000:]
            res = json.loads(r.stdout.split("RESULT ", 1)[1])
            rows.append(dict(shipped=shipped == "1", state=state, process_s=round(wall, 2),
                             tuned_notice="autotuning" in r.stderr,
                             first_ms={m: round(v["first"], 1) for m, v in res.items()},
                             second_ms={m: round(v["second"], 2) for m, v in res.items()}))
            print(json.dumps(rows[-1]), flush=True)
    return rows


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ms", default="1,16,32,64,128,256")
    ap.add_argument("--heavy-ms", default="1,16,64")
    ap.add_argument("--shapes", default="0,1,2,3")
    ap.add_argument("--kinds", action="store_true")
    ap.add_argument("--decode", action="store_true", help="also sweep the decode-to-scratch kernel's tiles")
    ap.add_argument("--first-forward", metavar="MS", default="",
                    help="only measure fresh and warm processes' first forward at these M (e.g. 1,16,64,256)")
    ap.add_argument("--out", default=os.environ.get("OUT", "."))
    a = ap.parse_args(argv)
    t0 = time.time()
    print(f"device {torch.cuda.get_device_name()}, torch {torch.__version__}", flush=True)
    if a.first_forward:
        rows = first_forward(a.first_forward)
        os.makedirs(a.out, exist_ok=True)
        with open(os.path.join(a.out, "first_forward.json"), "w") as f:
            json.dump(rows, f, indent=1)
        ms = a.first_forward.split(",")
        print("\n| shipped configs | process | " + " | ".join(f"M={m} first ms (second)" for m in ms)
              + " | process s | autotuned |")
        print("|---|---|" + "---:|" * len(ms) + "---:|---|")
        for r in rows:
            print(f"| {'yes' if r['shipped'] else 'no'} | {r['state']} | "
                  + " | ".join(f"{r['first_ms'][m]} ({r['second_ms'][m]})" for m in ms)
                  + f" | {r['process_s']} | {'yes' if r['tuned_notice'] else 'no'} |")
        return 0
    rows = []
    for i in a.shapes.split(","):
        N, K = SHAPES[int(i)]
        rows += measure(N, K, "normal", [int(m) for m in a.ms.split(",")], a.kinds, t0, a.decode)
        if a.heavy_ms:
            rows += measure(N, K, "t3", [int(m) for m in a.heavy_ms.split(",")], a.kinds, t0, False)
    os.makedirs(a.out, exist_ok=True)
    with open(os.path.join(a.out, "serving_kernels.json"), "w") as f:
        json.dump({"rows": rows, "configs": fx.tuned_configs()}, f, indent=1)
    print("\n| W [N x K] | weights | escapes % | M | kernel | cuBLAS us | ours us | ours/cuBLAS | Triton mm us | decode+cuBLAS us |")
    print("|---|---|---:|---:|---|---:|---:|---:|---:|---:|")
    for r in rows:
        if "ours" not in r:
            continue
        f = lambda k: f"{r[k]:.1f}" if k in r else "-"  # noqa: E731
        print(f"| {r['N']}x{r['K']} | {r['dist']} | {r['escapes_pct']} | {r['M']} | {r['kind']} | {r['cublas']:.1f} | "
              f"{r['ours']:.1f} | **{r['ratio']:.3f}** | {f('triton_mm')} | {f('decode_cublas')} |")
    for r in rows:
        if "decode_GBps" in r:
            print(f"decode {r['N']}x{r['K']}: " + ", ".join(f"{k} {v:.0f}" for k, v in r["decode_GBps"].items()) + " GB/s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
