"""Where the tiled fused kernel's time goes at batch 16: variants of its W-tile decode, timed
against cuBLAS and against the same Triton kernel reading plain bf16 weights. Needs a CUDA GPU.

    PYTHONPATH=src python3 benchmarks/experiments/tile_variants.py [--variants nat,prmt,bf16] [--splits 1,4]

Variants of one experimental kernel (``tile_kernel`` below; the shipped one is
``wcodec.gpu.fixed_kernels.fixed_mm_kernel``), each with and without "-swap" (``y.T = W @ x.T``:
W becomes the first tl.dot operand, which Hopper's wgmma may take from registers):

- nat: the shipped decode (``_tile``: SWAR pairs, interleaved into natural column order);
- perm: no interleave; the W tile's columns in the order the words give, x permuted to match;
- lanes: no tile at all; eight tl.dots per step, one per lane (column 8i + r) of W and x;
- prmt: the natural-order pairs built by the PTX byte permute (``prmt``), about 40 % fewer
  integer operations than nat; prmt16 also splits the pairs into halves with one ``mov``;
- bf16: plain bf16 weights, the same kernel without a decode (the bound for this kernel shape).

Weights are SYNTHETIC (normal, std 0.02, bf16); every output is checked against fp32 first
(a failed check prints BAD and skips the variant). Times: median GPU time per call in CUDA graphs
rotating over more weight copies than the L2 holds (``fused_matmul.graph_time``), the split-K
sum included; each variant autotuned over its own tiles, per split. One table last (best split).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F
import triton
import triton.language as tl

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the suites: benchmarks/
from fused_matmul import graph_time, weight_copies  # noqa: E402

from wcodec.gpu import fixed as fx  # noqa: E402
from wcodec.gpu.fixed_kernels import _escapes, _load_group, _store_y, _tile, splitk_reduce_kernel  # noqa: E402
from wcodec.gpu.fixed_kernels import _interleave as _prmt  # noqa: E402  (bytes a0 b0 a1 b1, or a2 b2 a3 b3)

SHAPES = [(4096, 4096), (11008, 4096), (4096, 11008), (32000, 4096)]
#: name -> (MODE, SWAP) of tile_kernel
VARIANTS = {"nat": (0, False), "nat-swap": (0, True), "perm": (1, False), "perm-swap": (1, True),
            "lanes": (3, False), "lanes-swap": (3, True), "prmt": (4, False), "prmt-swap": (4, True),
            "prmt16": (5, False), "bf16": (2, False)}


@triton.jit
def _halves(words, rows: tl.constexpr, cols: tl.constexpr, ASM: tl.constexpr):
    """u32 words [rows, cols / 2] of bf16 pairs -> [rows, cols] bf16 (low half first)."""
    if ASM:
        a, b = tl.inline_asm_elementwise("mov.b32 {$0, $1}, $2;", "=h,=h,r", [words],
                                         dtype=(tl.uint16, tl.uint16), is_pure=True, pack=1)
    else:
        a, b = (words & 0xFFFF).to(tl.uint16), (words >> 16).to(tl.uint16)
    return tl.reshape(tl.join(a, b), (rows, cols)).to(tl.bfloat16, bitcast=True)


@triton.jit
def _tile_prmt(lo_ptr, nib_ptr, rows, g0, N, G, base, BI: tl.constexpr, ASM: tl.constexpr):
    """``_tile`` (natural column order) with the pairs built by ``prmt``."""
    gi = g0 + tl.arange(0, BI)[None, :]
    m = (rows < N) & (gi < G)
    r64 = rows.to(tl.int64)
    nw = tl.load(nib_ptr + r64 * G + gi, mask=m, other=0, eviction_policy="evict_first").to(tl.uint32, bitcast=True)
    lo = tl.load(lo_ptr + r64 * G + gi, mask=m, other=0, eviction_policy="evict_first").to(tl.uint64, bitcast=True)
    lo0 = (lo & 0xFFFFFFFF).to(tl.uint32)
    lo1 = (lo >> 32).to(tl.uint32)
    base4 = (base * 0x01010101).to(tl.uint32)
    c0 = nw & 0x0F0F0F0F
    c1 = (nw >> 4) & 0x0F0F0F0F
    h0 = ((c0 & 0x08080808) << 4) | ((c0 & 0x07070707) + base4)
    h1 = ((c1 & 0x08080808) << 4) | ((c1 & 0x07070707) + base4)
    words = tl.join(tl.join(_prmt(lo0, h0, False), _prmt(lo1, h1, False)),
                    tl.join(_prmt(lo0, h0, True), _prmt(lo1, h1, True)))
    return _halves(tl.reshape(words, (rows.shape[0], 4 * BI)), rows.shape[0], 8 * BI, ASM)


@triton.jit
def _lane_words(lo_ptr, nib_ptr, rows, gi, N, G, base):
    """(e02_0, e13_0, e02_1, e13_1): columns 0|2, 1|3, 4|6, 5|7 of each group (from the natural
    pair words that fixed_kernels._load_group gives since 2026-11-26)."""
    p0, p1, p2, p3 = _load_group(lo_ptr, nib_ptr, rows, gi, N, G, base)
    return ((p0 & 0xFFFF) | (p1 << 16), (p0 >> 16) | (p1 & 0xFFFF0000), (p2 & 0xFFFF) | (p3 << 16),
            (p2 >> 16) | (p3 & 0xFFFF0000))


@triton.jit
def _tile_perm(lo_ptr, nib_ptr, rows, g0, N, G, base, BI: tl.constexpr):
    """W tile [BN, 8 BI] with column c = 8i + 4a + 2b + h holding natural column 8i + 4a + b + 2h."""
    gi = g0 + tl.arange(0, BI)[None, :]
    e02_0, e13_0, e02_1, e13_1 = _lane_words(lo_ptr, nib_ptr, rows, gi, N, G, base)
    words = tl.reshape(tl.join(tl.join(e02_0, e02_1), tl.join(e13_0, e13_1)), (rows.shape[0], 4 * BI))
    return _halves(words, rows.shape[0], 8 * BI, False)


@triton.jit
def _bf(e, HI: tl.constexpr):
    if HI:
        return (e >> 16).to(tl.uint16).to(tl.bfloat16, bitcast=True)
    else:
        return (e & 0xFFFF).to(tl.uint16).to(tl.bfloat16, bitcast=True)


@triton.jit
def _dot(acc, w, x, SWAP: tl.constexpr):
    if SWAP:
        return tl.dot(w, tl.trans(x), acc)
    else:
        return tl.dot(x, tl.trans(w), acc)


@triton.jit
def _lanes(acc, lo_ptr, nib_ptr, rows, g0, N, G, base, xt, BM: tl.constexpr, BI: tl.constexpr,
           SWAP: tl.constexpr):
    """acc += the step's product as eight dots, one per lane r (columns 8i + r) of W and x."""
    e02_0, e13_0, e02_1, e13_1 = _lane_words(lo_ptr, nib_ptr, rows, g0 + tl.arange(0, BI)[None, :], N, G, base)
    xs = tl.permute(tl.reshape(xt, (BM, BI, 2, 2, 2)), (0, 1, 3, 4, 2))  # natural col 8i + 4a + 2m + l
    xa0, xa1 = tl.split(xs)
    x00, x01 = tl.split(tl.permute(xa0, (0, 1, 3, 2)))
    x10, x11 = tl.split(tl.permute(xa1, (0, 1, 3, 2)))
    x0, x1 = tl.split(x00)
    x2, x3 = tl.split(x01)
    x4, x5 = tl.split(x10)
    x6, x7 = tl.split(x11)
    acc = _dot(acc, _bf(e02_0, False), x0, SWAP)
    acc = _dot(acc, _bf(e13_0, False), x1, SWAP)
    acc = _dot(acc, _bf(e02_0, True), x2, SWAP)
    acc = _dot(acc, _bf(e13_0, True), x3, SWAP)
    acc = _dot(acc, _bf(e02_1, False), x4, SWAP)
    acc = _dot(acc, _bf(e13_1, False), x5, SWAP)
    acc = _dot(acc, _bf(e02_1, True), x6, SWAP)
    return _dot(acc, _bf(e13_1, True), x7, SWAP)


@triton.jit
def tile_kernel(x_ptr, lo_ptr, nib_ptr, w16_ptr, eptr_ptr, ecol_ptr, eval_ptr, y_ptr, ws_ptr,
                M, N, K, G, stride_xm, stride_ym, base,
                BM: tl.constexpr, BN: tl.constexpr, BI: tl.constexpr, SPLIT: tl.constexpr,
                MODE: tl.constexpr, SWAP: tl.constexpr):
    """fixed_mm_kernel's split-K structure (no bias, no M grouping) with W-tile decode MODE:
    0 nat, 1 perm, 2 plain bf16 (w16_ptr), 3 lanes, 4 prmt, 5 prmt16."""
    pid = tl.program_id(0)
    split = tl.program_id(1)
    num_n = tl.cdiv(N, BN)
    n0 = (pid % num_n) * BN
    rows = n0 + tl.arange(0, BN)[:, None]
    om = (pid // num_n) * BM + tl.arange(0, BM)
    xm = om[:, None] < M
    xrow = x_ptr + om[:, None].to(tl.int64) * stride_xm
    if SWAP:
        acc = tl.zeros((BN, BM), tl.float32)
    else:
        acc = tl.zeros((BM, BN), tl.float32)
    g_len = tl.cdiv(tl.cdiv(G, SPLIT), BI) * BI
    g_lo = split * g_len
    for g0 in range(g_lo, tl.minimum(G, g_lo + g_len), BI):
        cols = 8 * g0 + tl.arange(0, 8 * BI)[None, :]
        xt = tl.load(xrow + cols, mask=xm & (cols < K), other=0.0)
        if MODE == 3:
            acc = _lanes(acc, lo_ptr, nib_ptr, rows, g0, N, G, base, xt, BM, BI, SWAP)
        else:
            if MODE == 0:
                wt = _tile(lo_ptr, nib_ptr, rows, g0, N, G, base, BI)
            elif MODE == 1:
                wt = _tile_perm(lo_ptr, nib_ptr, rows, g0, N, G, base, BI)
                # natural x -> the tile's order: swap the last two bits of the column
                xt = tl.reshape(tl.permute(tl.reshape(xt, (BM, 2 * BI, 2, 2)), (0, 1, 3, 2)), (BM, 8 * BI))
            elif MODE == 2:
                wt = tl.load(w16_ptr + rows.to(tl.int64) * K + cols, mask=(rows < N) & (cols < K), other=0.0,
                             eviction_policy="evict_first")
            else:
                wt = _tile_prmt(lo_ptr, nib_ptr, rows, g0, N, G, base, BI, MODE == 5)
            acc = _dot(acc, wt, xt, SWAP)
    if SWAP:
        acc = tl.trans(acc)
    if MODE != 2:
        if split == 0:
            acc = _escapes(acc, x_ptr, om, stride_xm, xm, eptr_ptr, ecol_ptr, eval_ptr, n0, N, base, BN, 32,
                           True)
    if SPLIT == 1:
        _store_y(acc, y_ptr, y_ptr, om, n0, M, N, stride_ym, BN, False)
    else:
        _store_y(acc, y_ptr, ws_ptr + split.to(tl.int64) * M * N, om, n0, M, N, N, BN, False)


def _cfg(warps, stages, **kw):
    return triton.Config(kw, num_warps=warps, num_stages=stages)


#: swapped: BN is wgmma's M (64 per warpgroup); not swapped: the shipped kernel's M <= 16 tiles
CONFIGS = {True: [_cfg(4, 3, BN=64, BI=16), _cfg(4, 4, BN=64, BI=8), _cfg(4, 3, BN=64, BI=32),
                  _cfg(8, 3, BN=128, BI=8), _cfg(8, 3, BN=128, BI=16), _cfg(4, 5, BN=64, BI=16)],
           False: [_cfg(4, 3, BN=32, BI=16), _cfg(4, 3, BN=64, BI=16), _cfg(4, 3, BN=32, BI=32),
                   _cfg(4, 4, BN=64, BI=8), _cfg(4, 3, BN=16, BI=32), _cfg(4, 4, BN=16, BI=64)]}
_TUNED: dict = {}


def _lane_tiles(configs, named_args, **kw):
    """lanes: each per-lane dot has K = BI, and tl.dot needs K >= 16."""
    return [c for c in configs if kw.get("MODE") != 3 or c.kwargs["BI"] >= 16]


def run(x, fw, w16, mode: int, swap: bool, split: int) -> torch.Tensor:
    """x [M, K] bf16 (M <= 16) @ W.T with variant (mode, swap) in ``split`` K slices."""
    M, K = x.shape
    N = fw.N
    if swap not in _TUNED:
        _TUNED[swap] = triton.autotune(CONFIGS[swap], key=["N", "K", "SPLIT", "MODE"],
                                       prune_configs_by={"early_config_prune": _lane_tiles})(tile_kernel)
    y = torch.empty((M, N), dtype=x.dtype, device=x.device)
    ws = torch.empty((split, M, N), dtype=torch.float32, device=x.device) if split > 1 else y
    grid = lambda meta: (triton.cdiv(N, meta["BN"]), split)  # noqa: E731
    _TUNED[swap][grid](x, fw.lo, fw.nib, w16, fw.eptr, fw.ecol, fw.eval, y, ws, M, N, K, fw.kpad // 8,
                       x.stride(0), y.stride(0), fw.base, BM=16, SPLIT=split, MODE=mode, SWAP=swap)
    if split > 1:
        splitk_reduce_kernel[(triton.cdiv(M * N, 1024),)](ws, y, y, M, N, y.stride(0), SPLIT=split,
                                                          HAS_BIAS=False, BLOCK=1024, num_warps=4)
    return y


def measure(N: int, K: int, M: int, variants: list, splits: list) -> dict:
    g = torch.Generator(device="cuda").manual_seed(N + K)
    w = (torch.randn(N, K, device="cuda", generator=g) * 0.02).to(torch.bfloat16)
    ws = weight_copies(w)
    copies = len(ws)
    fws = [fx.encode_weight(w_) for w_ in ws]
    rep = 20 // copies + 1
    x = torch.randn(M, K, device="cuda", generator=g).to(torch.bfloat16)
    ref = x.float() @ w.float().T
    r = {"N": N, "K": K, "M": M,
         "cublas": graph_time(torch, [lambda w_=w_: F.linear(x, w_) for w_ in ws] * rep) * 1e6,
         "shipped": graph_time(torch, [lambda f=f: fx.linear(x, f, kind="mm") for f in fws] * rep) * 1e6}
    for name in variants:
        mode, swap = VARIANTS[name]
        for s in splits:
            try:
                e = float((run(x, fws[0], w, mode, swap, s).float() - ref).norm() / ref.norm())
            except Exception as ex:  # a variant the compiler refuses: reported, the others go on
                print(f"FAIL {name} split {s}: {type(ex).__name__}: {str(ex)[-200:]}", flush=True)
                continue
            if not e < 5e-3:
                print(f"BAD {name} split {s} {N}x{K}: rel. err {e:.3g}", flush=True)
                continue
            r[f"{name}/{s}"] = graph_time(torch, [lambda f=f, w_=w_: run(x, f, w_, mode, swap, s)
                                                  for f, w_ in zip(fws, ws)] * rep) * 1e6
            r[f"{name}/{s}/config"] = str(_TUNED[swap].best_config)
    return r


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--variants", default=",".join(VARIANTS), help=f"comma-separated, of {', '.join(VARIANTS)}")
    ap.add_argument("--splits", default="1,2,4,8", help="K slices to time each variant at")
    ap.add_argument("--m", type=int, default=16, help="activation rows (at most 16: one 16-row tile)")
    args = ap.parse_args(argv)
    variants = args.variants.split(",")
    unknown = sorted(set(variants) - set(VARIANTS))
    if unknown or not 1 <= args.m <= 16:
        ap.error(f"unknown variants {unknown}" if unknown else "--m must be in [1, 16]")
    splits = [int(s) for s in args.splits.split(",")]
    t0 = time.time()
    print(f"# {torch.cuda.get_device_name()}, torch {torch.__version__}, triton {triton.__version__}, "
          f"SYNTHETIC weights, M = {args.m}", flush=True)
    rows = []
    for N, K in SHAPES:
        rows.append(measure(N, K, args.m, variants, splits))
        print(json.dumps(rows[-1]), f"{time.time() - t0:.0f} s", flush=True)
    print("\n| N x K | cuBLAS us | shipped us | " + " | ".join(f"{v} us (split)" for v in variants) + " |")
    print("|---|---:|---:|" + "---:|" * len(variants))
    for r in rows:
        cells = []
        for v in variants:
            got = {s: r[f"{v}/{s}"] for s in splits if f"{v}/{s}" in r}
            s = min(got, key=got.get) if got else None
            cells.append(f"{got[s]:.1f} ({s})" if got else "-")
        print(f"| {r['N']}x{r['K']} | {r['cublas']:.1f} | {r['shipped']:.1f} | " + " | ".join(cells) + " |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
