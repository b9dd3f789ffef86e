"""Triton kernels over the fp16 fixed-rate layout (codec "fixed16", docs/CODEC_LAYOUT.md).

As the bf16 kernels (:mod:`wcodec.gpu.fixed_kernels`), a weight row is read in groups of 8
columns: one u32 word of nibbles, one u64 word of low bytes, and here the u32 ``m2`` word of the
group's 16 columns (word ``gi // 2``; group ``gi`` reads its bits from ``4 * (gi % 2)``).
``_group16`` rebuilds the 8 fp16 values as four u32 words of pairs with SWAR operations: the
high byte of each lane is ``sign << 7 | (base + d) << 2 | m2``. Escapes (exponents outside the
tensor's 7-exponent window) decode to a placeholder with the exponent ``base + 7``; the GEMV adds
``x * (value - placeholder)`` for the escapes of its rows (CSR list), the decoder's caller
overwrites them (``fixed_kernels.fixed_escape_patch_kernel``).
"""

from __future__ import annotations

import triton
import triton.language as tl

from .fixed_kernels import PER_WEIGHT, _escapes, _natural_pairs, _store_y, _x_lanes


@triton.jit
def _group16(nw, mw, lo, base8):
    """nibble word, m2 word (shifted to this group) (u32), lo word (u64) -> (e02_h0, e13_h0,
    e02_h1, e13_h1): u32 fp16 pairs of columns 4h+0 / 4h+2 and 4h+1 / 4h+3. Works on u64 words
    whose low half is nibble half h = 0 and high half h = 1 (the lo word's order)."""
    n = (nw & 0x0F0F0F0F).to(tl.uint64) | (((nw >> 4) & 0x0F0F0F0F).to(tl.uint64) << 32)
    m = (mw & 0x03030303).to(tl.uint64) | (((mw >> 2) & 0x03030303).to(tl.uint64) << 32)
    hi = ((n & 0x0808080808080808) << 4) | (((n & 0x0707070707070707) + base8) << 2) | m
    even = (lo & 0x00FF00FF00FF00FF) | ((hi & 0x00FF00FF00FF00FF) << 8)
    odd = ((lo >> 8) & 0x00FF00FF00FF00FF) | (hi & 0xFF00FF00FF00FF00)
    return ((even & 0xFFFFFFFF).to(tl.uint32), (odd & 0xFFFFFFFF).to(tl.uint32),
            (even >> 32).to(tl.uint32), (odd >> 32).to(tl.uint32))


@triton.jit
def _f16_lo(e):
    return (e & 0xFFFF).to(tl.uint16).to(tl.float16, bitcast=True).to(tl.float32)


@triton.jit
def _f16_hi(e):
    return (e >> 16).to(tl.uint16).to(tl.float16, bitcast=True).to(tl.float32)


@triton.jit
def _load_group16(lo_ptr, nib_ptr, m2_ptr, rows, gi, N, G, base):
    """The 4 pair words of groups gi [1, BI] of rows [BN, 1] (lo: int64 words, nib: int32 words,
    m2: int32 words of 16 columns, G // 2 a row)."""
    m = (rows < N) & (gi < G)
    r64 = rows.to(tl.int64)
    nw = tl.load(nib_ptr + r64 * G + gi, mask=m, other=0, eviction_policy="evict_first").to(tl.uint32, bitcast=True)
    lo = tl.load(lo_ptr + r64 * G + gi, mask=m, other=0, eviction_policy="evict_first").to(tl.uint64, bitcast=True)
    mw = tl.load(m2_ptr + r64 * (G // 2) + gi // 2, mask=m, other=0).to(tl.uint32, bitcast=True)
    mw = mw >> ((gi % 2) * 4).to(tl.uint32)
    # a u64 tensor times base: also when Triton passes base = 1 as a constant
    return _group16(nw, mw, lo, tl.full((1,), 0x0101010101010101, tl.uint64) * base)


@triton.jit(**PER_WEIGHT)
def fixed16_gemv_kernel(x_ptr, lo_ptr, nib_ptr, m2_ptr, eptr_ptr, ecol_ptr, eval_ptr, b_ptr, y_ptr,
                        M, N, K, G, stride_xm, stride_ym, base, MB,
                        BM: tl.constexpr, BN: tl.constexpr, BI: tl.constexpr, EB: tl.constexpr,
                        HAS_BIAS: tl.constexpr):
    """y[M, N] = x[M, K] @ W.T (+ bias) with CUDA-core FMAs for M <= 4: one program per BN rows
    of W and BM (1, 2 or 4) rows of x, the whole K; each W tile is decoded once and multiplied
    into a [BM, BN, BI] fp32 accumulator, reduced once at the end. x: any float dtype.
    MB: autotuning key only."""
    n0 = tl.program_id(0) * BN
    om = tl.program_id(1) * BM + tl.arange(0, BM)
    xm = om[:, None] < M
    rows = n0 + tl.arange(0, BN)[:, None]
    acc = tl.zeros((BM, BN, BI), tl.float32)
    for g0 in range(0, G, BI):
        gi = g0 + tl.arange(0, BI)[None, :]
        e02_0, e13_0, e02_1, e13_1 = _load_group16(lo_ptr, nib_ptr, m2_ptr, rows, gi, N, G, base)
        x0, x1, x2, x3, x4, x5, x6, x7 = _x_lanes(x_ptr, x_ptr, om, stride_xm, gi, K, xm, False)
        acc += _f16_lo(e02_0)[None] * x0[:, None, :] + _f16_lo(e13_0)[None] * x1[:, None, :] \
            + _f16_hi(e02_0)[None] * x2[:, None, :] + _f16_hi(e13_0)[None] * x3[:, None, :] \
            + _f16_lo(e02_1)[None] * x4[:, None, :] + _f16_lo(e13_1)[None] * x5[:, None, :] \
            + _f16_hi(e02_1)[None] * x6[:, None, :] + _f16_hi(e13_1)[None] * x7[:, None, :]
    y = tl.sum(acc, axis=2)
    y = _escapes(y, x_ptr, om, stride_xm, xm, eptr_ptr, ecol_ptr, eval_ptr, n0, N, base, BN, EB, False, True)
    _store_y(y, b_ptr, y_ptr, om, n0, M, N, stride_ym, BN, HAS_BIAS)


@triton.jit(**PER_WEIGHT)
def fixed16_decode_kernel(lo_ptr, nib_ptr, m2_ptr, out_ptr, N, G, base, BN: tl.constexpr, BI: tl.constexpr):
    """Decode to out[N, kpad] fp16, natural column order (escapes hold their placeholder: the
    caller writes their values)."""
    rows = tl.program_id(0) * BN + tl.arange(0, BN)[:, None]
    g0 = tl.program_id(1) * BI
    gi = g0 + tl.arange(0, BI)[None, :]
    e02_0, e13_0, e02_1, e13_1 = _load_group16(lo_ptr, nib_ptr, m2_ptr, rows, gi, N, G, base)
    w0, w1, w2, w3 = _natural_pairs(e02_0, e13_0, e02_1, e13_1)
    words = tl.reshape(tl.join(tl.join(w0, w2), tl.join(w1, w3)), (BN, 4 * BI))
    halves = tl.join((words & 0xFFFF).to(tl.uint16), (words >> 16).to(tl.uint16))
    wt = tl.reshape(halves, (BN, 8 * BI)).to(tl.float16, bitcast=True)
    cols = 8 * g0 + tl.arange(0, 8 * BI)[None, :]
    tl.store(out_ptr + rows.to(tl.int64) * (8 * G) + cols, wt, mask=(rows < N) & (cols < 8 * G))
