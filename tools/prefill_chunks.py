"""Prototype for issue 28's prefill targets: decode + cuBLAS variants at large M and for a
Mixtral-shaped experts block at prefill, timed in CUDA graphs (benchmarks/fused_matmul.graph_time,
weight copies beyond the L2; METHOD.md). Needs a CUDA GPU.

    PYTHONPATH=src python3 tools/prefill_chunks.py [--ms 256,1024,4096] [--shapes 0,1,2,3] [--moe 512] [--out DIR]

Dense variants (time / cuBLAS bf16 on the uncompressed weight, same run):
- ``decode``: the whole W decoded into a bf16 scratch, then cuBLAS (today's path above 128 rows);
- ``chunk<MB>``: W decoded ``MB`` megabytes of rows at a time into ONE reused scratch (sized to
  stay in the 50 MB L2), each chunk multiplied right after its decode into its columns of y;
- ``pipe<MB>``: the same with two scratches, chunk i+1 decoded on a side stream while chunk i
  multiplies (``carve<c>``: cuBLAS asked to leave c SMs to the decode, the experimental
  ``torch._C._set_sm_carveout_experimental``).
MoE variants (us per experts forward, 8 experts, top-2, hidden 4096, intermediate 14336):
bf16 ``torch._grouped_mm`` (transformers' grouped_mm path), our fused grouped kernel with
several tiles, all experts decoded in one launch per projection + grouped_mm, and chunks of
rows of every expert decoded into an L2-sized scratch + grouped_mm per chunk.
Every output is checked against a reference first. Prints one line per shape or token count last
(times and ratios); JSON to DIR. Outcome (H100, 2026-11-26): benchmarks/RESULTS.md, "Prefill sizes"
and "MoE experts block"; HISTORY.md, "Prefill on compressed weights".
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

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
from fused_matmul import graph_time, weight_copies  # noqa: E402
from moe_kernels import E, H, I, TOP, sorted_routing as routing  # noqa: E402

from wcodec.gpu import fixed as fx  # noqa: E402
from wcodec.gpu import fixed_grouped as fg  # noqa: E402

SHAPES = [(4096, 4096), (11008, 4096), (4096, 11008), (14336, 4096)]
_SIDE: dict = {}


def side_stream():
    if "s" not in _SIDE:
        _SIDE["s"] = torch.cuda.Stream()
    return _SIDE["s"]


def chunk_rows(fw, mb):
    return max(16, (mb << 20) // (2 * fw.kpad) // 16 * 16)


def chunked(x, fw, mb):
    R = chunk_rows(fw, mb)
    y = torch.empty((x.shape[0], fw.N), dtype=x.dtype, device=x.device)
    buf = torch.empty(min(R, fw.N) * fw.kpad, dtype=torch.bfloat16, device=x.device)
    for r0 in range(0, fw.N, R):
        n = min(R, fw.N - r0)
        torch.mm(x, fx.decode_rows(fw, r0, n, buf).T, out=y[:, r0:r0 + n])
    return y


def piped(x, fw, mb, carve=0):
    R = chunk_rows(fw, mb)
    y = torch.empty((x.shape[0], fw.N), dtype=x.dtype, device=x.device)
    bufs = [torch.empty(min(R, fw.N) * fw.kpad, dtype=torch.bfloat16, device=x.device) for _ in range(2)]
    main, side = torch.cuda.current_stream(), side_stream()
    side.wait_stream(main)
    done = [None, None]
    if carve:
        torch._C._set_sm_carveout_experimental(carve)
    try:
        for i, r0 in enumerate(range(0, fw.N, R)):
            n = min(R, fw.N - r0)
            with torch.cuda.stream(side):
                if done[i % 2] is not None:
                    side.wait_event(done[i % 2])
                w = fx.decode_rows(fw, r0, n, bufs[i % 2])
                ready = torch.cuda.Event()
                ready.record(side)
            main.wait_event(ready)
            torch.mm(x, w.T, out=y[:, r0:r0 + n])
            done[i % 2] = torch.cuda.Event()
            done[i % 2].record(main)
    finally:
        if carve:
            torch._C._set_sm_carveout_experimental(None)
    return y


def dense(shapes, ms, rows, t0):
    for i in shapes:
        N, K = SHAPES[i]
        g = torch.Generator(device="cuda").manual_seed(i)
        w = (torch.randn(N, K, device="cuda", generator=g) * 0.02).to(torch.bfloat16)
        ws = weight_copies(w)
        fws = [fx.encode_weight(c) for c in ws]
        rep = 20 // len(ws) + 1
        for M in ms:
            x = torch.randn(M, K, device="cuda", generator=g).to(torch.bfloat16)
            ref = x.float() @ w.float().T
            variants = {"cublas": lambda c, f: F.linear(x, c),
                        "decode": lambda c, f: fx.linear(x, f, kind="decode")}
            for mb in (4, 8, 16):
                variants[f"chunk{mb}"] = lambda c, f, mb=mb: chunked(x, f, mb)
            for mb in (4, 8):
                variants[f"pipe{mb}"] = lambda c, f, mb=mb: piped(x, f, mb)
            variants["pipe8carve8"] = lambda c, f: piped(x, f, 8, carve=8)
            variants["cublas_carve8"] = lambda c, f: _carved(lambda: F.linear(x, c), 8)
            r = dict(N=N, K=K, M=M)
            for name, fn in variants.items():
                try:
                    y = fn(ws[0], fws[0])
                    torch.cuda.synchronize()
                    e = float((y.float() - ref).norm() / ref.norm())
                    assert e < 5e-3, (name, e)
                    r[name] = graph_time(torch, [lambda c=c, f=f: fn(c, f) for c, f in zip(ws, fws)] * rep) * 1e6
                except Exception as ex:  # noqa: BLE001  (a variant this torch cannot run: reported)
                    r[name] = f"{type(ex).__name__}: {str(ex)[:160]}"
            rows.append(r)
            print(json.dumps({k: round(v, 1) if isinstance(v, float) else v for k, v in r.items()}),
                  f"{time.time() - t0:.0f} s", flush=True)
        del ws, fws
        torch.cuda.empty_cache()


def _carved(fn, c):
    torch._C._set_sm_carveout_experimental(c)
    try:
        return fn()
    finally:
        torch._C._set_sm_carveout_experimental(None)




def combine(x, y, order, perm, wts):
    y = y * wts.reshape(-1)[perm, None]
    return torch.zeros_like(x).index_add_(0, order, y.to(x.dtype))


def moe_bf16(x, idx, wts, w_gu, w_down):
    order, offsets, perm = routing(idx)
    offs = offsets[1:].to(torch.int32)
    gu = torch._grouped_mm(x[order], w_gu.transpose(-2, -1), offs=offs)
    gate, up = gu.chunk(2, dim=-1)
    y = torch._grouped_mm(F.silu(gate) * up, w_down.transpose(-2, -1), offs=offs)
    return combine(x, y, order, perm, wts)


def moe_fused(x, idx, wts, gu, down, tiles):
    order, offsets, perm = routing(idx)
    saved = fg.PREFILL_TILE
    if tiles is not None:
        fg.PREFILL_TILE = tiles
    try:
        h = fg.grouped_linear(x, gu, order, offsets)
        gate, up = h.chunk(2, dim=-1)
        h = F.silu(gate) * up
        y = fg.grouped_linear(h, down, torch.arange(h.shape[0], device=x.device), offsets)
    finally:
        if tiles is not None:
            fg.PREFILL_TILE = saved
    return combine(x, y, order, perm, wts)


def moe_decode_all(x, idx, wts, gu, down, scratch):
    order, offsets, perm = routing(idx)
    offs = offsets[1:].to(torch.int32)
    a = fg.decode_experts(gu, scratch[0])
    h = torch._grouped_mm(x[order], a.transpose(-2, -1), offs=offs)
    gate, up = h.chunk(2, dim=-1)
    b = fg.decode_experts(down, scratch[1])
    y = torch._grouped_mm(F.silu(gate) * up, b.transpose(-2, -1), offs=offs)
    return combine(x, y, order, perm, wts)


def moe_chunked(x, idx, wts, gu, down, n_gu, n_dn):
    """gate_up: rows r0..r0+n of every expert's gate half and of its up half (2E groups of I
    rows) decoded into one [E, 2n, K] scratch, grouped_mm -> [S, 2n] = gate | up of those
    columns, SiLU(gate) * up into h's columns; down: n_dn rows of every expert into [E, n, I]."""
    order, offsets, perm = routing(idx)
    offs = offsets[1:].to(torch.int32)
    S = order.numel()
    xs = x[order]
    bases2 = gu.bases.repeat_interleave(2)
    buf = torch.empty(E * 2 * n_gu * gu.kpad, dtype=torch.bfloat16, device=x.device)
    h = torch.empty((S, I), dtype=x.dtype, device=x.device)
    for r0 in range(0, I, n_gu):
        n = min(n_gu, I - r0)
        w = buf[:E * 2 * n * gu.kpad].view(E, 2 * n, gu.kpad)
        fx.decode_launch(w, gu, 0, r0, n, groups=2 * E, group_rows=I, bases=bases2)
        o = torch._grouped_mm(xs, w.transpose(-2, -1), offs=offs)
        torch.mul(F.silu(o[:, :n]), o[:, n:], out=h[:, r0:r0 + n])
    y = torch.empty((S, H), dtype=x.dtype, device=x.device)
    buf2 = torch.empty(E * n_dn * down.kpad, dtype=torch.bfloat16, device=x.device)
    for r0 in range(0, H, n_dn):
        n = min(n_dn, H - r0)
        w = buf2[:E * n * down.kpad].view(E, n, down.kpad)
        fx.decode_launch(w, down, 0, r0, n, groups=E, group_rows=H, bases=down.bases)
        y[:, r0:r0 + n] = torch._grouped_mm(h, w.transpose(-2, -1), offs=offs)
    return combine(x, y, order, perm, wts)


#: (BM, BN, BI, warps, stages, prefetch) of the fused grouped kernel
TILES = [(64, 64, 16, 4, 3, 0, 0), (128, 64, 16, 8, 3, 0, 0), (128, 64, 16, 8, 3, 1, 0), (128, 64, 16, 4, 3, 1, 1),
         (128, 64, 16, 4, 2, 1, 1), (128, 64, 16, 4, 3, 0, 1), (128, 128, 8, 8, 3, 1, 1), (256, 64, 16, 8, 3, 1, 1)]


def moe(tokens, rows, t0):
    g = torch.Generator(device="cuda").manual_seed(0)
    w_gu = (torch.randn(E, 2 * I, H, device="cuda", generator=g) * 0.02).to(torch.bfloat16)
    w_dn = (torch.randn(E, H, I, device="cuda", generator=g) * 0.02).to(torch.bfloat16)
    gu = fg.stack_experts([fx.encode_weight(w_gu[e]) for e in range(E)])
    down = fg.stack_experts([fx.encode_weight(w_dn[e]) for e in range(E)])
    scratch = (torch.empty_like(w_gu), torch.empty_like(w_dn))
    assert torch.equal(fg.decode_experts(gu, scratch[0]).view(torch.int16), w_gu.view(torch.int16))
    assert torch.equal(fg.decode_experts(down, scratch[1]).view(torch.int16), w_dn.view(torch.int16))
    for T in tokens:
        x = torch.randn(T, H, device="cuda", generator=g).to(torch.bfloat16)
        logits = torch.randn(T, E, device="cuda", generator=g)
        wts, idx = torch.topk(logits.softmax(-1), TOP, dim=-1)
        wts = (wts / wts.sum(-1, keepdim=True)).to(torch.bfloat16)
        ref = moe_bf16(x, idx, wts, w_gu, w_dn).float()
        variants = {"bf16 grouped_mm": lambda: moe_bf16(x, idx, wts, w_gu, w_dn),
                    "fused (routed)": lambda: moe_fused(x, idx, wts, gu, down, None),
                    "decode all + grouped_mm": lambda: moe_decode_all(x, idx, wts, gu, down, scratch)}
        for tile in TILES:
            variants["fused %dx%dx%d w%d s%d p%d swap%d" % tile] = lambda t=tile: moe_fused(x, idx, wts, gu, down, t)
        for n_gu, n_dn in ((128, 64), (256, 128), (512, 256), (1024, 512)):
            variants[f"chunk {n_gu}/{n_dn}"] = lambda a=n_gu, b=n_dn: moe_chunked(x, idx, wts, gu, down, a, b)
        r = dict(tokens=T)
        for name, fn in variants.items():
            try:
                with torch.no_grad():
                    y = fn()
                    torch.cuda.synchronize()
                    e = float((y.float() - ref).norm() / ref.norm())
                    assert e < 2e-2, (name, e)
                    r[name] = graph_time(torch, [fn] * 5, reps=10) * 1e6
            except Exception as ex:  # noqa: BLE001
                r[name] = f"{type(ex).__name__}: {str(ex)[:160]}"
            print(T, name, r[name] if isinstance(r[name], str) else round(r[name], 1), f"{time.time() - t0:.0f} s",
                  flush=True)
        rows.append(r)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ms", default="256,1024,4096")
    ap.add_argument("--shapes", default="0,1,2,3")
    ap.add_argument("--moe", default="512")
    ap.add_argument("--out", default=os.environ.get("OUT", "."))
    a = ap.parse_args()
    t0 = time.time()
    print(f"device {torch.cuda.get_device_name()}, torch {torch.__version__}", flush=True)
    rows: list = []
    if a.moe:
        moe([int(t) for t in a.moe.split(",")], rows, t0)
    if a.shapes:
        dense([int(s) for s in a.shapes.split(",")], [int(m) for m in a.ms.split(",")], rows, t0)
    os.makedirs(a.out, exist_ok=True)
    with open(os.path.join(a.out, "prefill_chunks.json"), "w") as f:
        json.dump(rows, f, indent=1)
    for r in rows:
        base = r.get("cublas") or r.get("bf16 grouped_mm")
        head = f"{r['N']}x{r['K']} M={r['M']}" if "N" in r else f"MoE {r['tokens']} tokens"
        cells = [f"{k} {v:.1f} ({v / base:.2f}x)" if isinstance(v, float) else f"{k} ERR"
                 for k, v in r.items() if k not in ("N", "K", "M", "tokens")]
        print(head + ": " + ", ".join(cells))
    return 0


if __name__ == "__main__":
    sys.exit(main())
