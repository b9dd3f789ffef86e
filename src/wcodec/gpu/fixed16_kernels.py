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

from .fixed_kernels import _escape_rows, _fma8, _natural_pairs, _store_y


@triton.jit
def _group16(nw, mw, lo0, lo1, base4):
    """nibble word, m2 word (shifted to this group), two lo words (u32) -> (e02_h0, e13_h0,
    e02_h1, e13_h1): fp16 pairs of columns 4h+0 / 4h+2 and 4h+1 / 4h+3."""
    c0 = nw & 0x0F0F0F0F
    c1 = (nw >> 4) & 0x0F0F0F0F
    h0 = ((c0 & 0x08080808) << 4) | (((c0 & 0x07070707) + base4) << 2) | (mw & 0x03030303)
    h1 = ((c1 & 0x08080808) << 4) | (((c1 & 0x07070707) + base4) << 2) | ((mw >> 2) & 0x03030303)
    e02_0 = (lo0 & 0x00FF00FF) | ((h0 & 0x00FF00FF) << 8)
    e13_0 = ((lo0 >> 8) & 0x00FF00FF) | (h0 & 0xFF00FF00)
    e02_1 = (lo1 & 0x00FF00FF) | ((h1 & 0x00FF00FF) << 8)
    e13_1 = ((lo1 >> 8) & 0x00FF00FF) | (h1 & 0xFF00FF00)
    return e02_0, e13_0, e02_1, e13_1


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
    lo0 = (lo & 0xFFFFFFFF).to(tl.uint32)
    lo1 = (lo >> 32).to(tl.uint32)
    base4 = (base * 0x01010101).to(tl.uint32)
    return _group16(nw, mw, lo0, lo1, base4)


@triton.jit
def _escape_delta16(val, base):
    """fp32 (value - placeholder) of escapes, val: fp16 bits as int32."""
    v = val & 0xFFFF
    dec = (v & 0x83FF) | ((base + 7) << 10)
    return v.to(tl.uint16).to(tl.float16, bitcast=True).to(tl.float32) - \
        dec.to(tl.uint16).to(tl.float16, bitcast=True).to(tl.float32)


@triton.jit
def fixed16_gemv_kernel(x_ptr, lo_ptr, nib_ptr, m2_ptr, eptr_ptr, ecol_ptr, eval_ptr, b_ptr, y_ptr,
                        M, N, K, G, stride_xm, stride_ym, base, MB,
                        BM: tl.constexpr, BN: tl.constexpr, BI: tl.constexpr, EB: tl.constexpr,
                        HAS_BIAS: tl.constexpr):
    """y[M, N] = x[M, K] @ W.T (+ bias) with CUDA-core FMAs for M <= 4: one program per BN rows
    of W and BM (1, 2 or 4) rows of x, the whole K; each W tile decoded once, multiplied into one
    [BN, BI] fp32 accumulator per activation row. x: any float dtype. MB: autotuning key only."""
    pid_n = tl.program_id(0)
    m0 = tl.program_id(1) * BM
    n0 = pid_n * BN
    rows = n0 + tl.arange(0, BN)[:, None]
    a0 = tl.zeros((BN, BI), tl.float32)
    a1 = tl.zeros((BN, BI), tl.float32)
    a2 = tl.zeros((BN, BI), tl.float32)
    a3 = tl.zeros((BN, BI), tl.float32)
    for g0 in range(0, G, BI):
        gi = g0 + tl.arange(0, BI)[None, :]
        e02_0, e13_0, e02_1, e13_1 = _load_group16(lo_ptr, nib_ptr, m2_ptr, rows, gi, N, G, base)
        w0, w1, w2, w3 = _f16_lo(e02_0), _f16_lo(e13_0), _f16_hi(e02_0), _f16_hi(e13_0)
        w4, w5, w6, w7 = _f16_lo(e02_1), _f16_lo(e13_1), _f16_hi(e02_1), _f16_hi(e13_1)
        a0 = _fma8(a0, w0, w1, w2, w3, w4, w5, w6, w7, x_ptr, x_ptr, m0, stride_xm, gi, K, M, False)
        if BM > 1:
            a1 = _fma8(a1, w0, w1, w2, w3, w4, w5, w6, w7, x_ptr, x_ptr, m0 + 1, stride_xm, gi, K, M, False)
        if BM > 2:
            a2 = _fma8(a2, w0, w1, w2, w3, w4, w5, w6, w7, x_ptr, x_ptr, m0 + 2, stride_xm, gi, K, M, False)
            a3 = _fma8(a3, w0, w1, w2, w3, w4, w5, w6, w7, x_ptr, x_ptr, m0 + 3, stride_xm, gi, K, M, False)
    om = m0 + tl.arange(0, BM)
    sel = om[:, None] - m0
    y = tl.where(sel == 0, tl.sum(a0, axis=1)[None, :], 0.0)
    if BM > 1:
        y += tl.where(sel == 1, tl.sum(a1, axis=1)[None, :], 0.0)
    if BM > 2:
        y += tl.where(sel == 2, tl.sum(a2, axis=1)[None, :], 0.0)
        y += tl.where(sel == 3, tl.sum(a3, axis=1)[None, :], 0.0)
    # the escapes of rows n0..n0+BN-1: y[m, n] += x[m, col] * (value - placeholder)
    e_start = tl.load(eptr_ptr + n0).to(tl.int64)
    e_end = tl.load(eptr_ptr + tl.minimum(n0 + BN, N)).to(tl.int64)
    xm = om[:, None] < M
    for e0 in range(e_start, e_end, EB):
        e = e0 + tl.arange(0, EB)
        em = e < e_end
        ecol = tl.load(ecol_ptr + e, mask=em, other=0).to(tl.int64)
        d = tl.where(em, _escape_delta16(tl.load(eval_ptr + e, mask=em, other=0).to(tl.int32), base), 0.0)
        onehot = _escape_rows(eptr_ptr, n0, e, N, BN) & em[:, None]
        xe = tl.load(x_ptr + om[:, None].to(tl.int64) * stride_xm + ecol[None, :], mask=xm & em[None, :],
                     other=0.0).to(tl.float32)
        y += tl.sum(xe[:, :, None] * tl.where(onehot, d[:, None], 0.0)[None, :, :], axis=1)
    _store_y(y, b_ptr, y_ptr, om, n0, M, N, stride_ym, BN, HAS_BIAS)


@triton.jit
def fixed16_decode_kernel(lo_ptr, nib_ptr, m2_ptr, out_ptr, N, G, base, BN: tl.constexpr, BI: tl.constexpr):
    """Decode to out[N, kpad] fp16, natural column order (escapes hold their placeholder: the
    caller writes their values)."""
    rows = tl.program_id(0) * BN + tl.arange(0, BN)[:, None]
    g0 = tl.program_id(1) * BI
    gi = g0 + tl.arange(0, BI)[None, :]
    w0, w1, w2, w3 = _natural_pairs(*_load_group16(lo_ptr, nib_ptr, m2_ptr, rows, gi, N, G, base))
    words = tl.reshape(tl.join(tl.join(w0, w2), tl.join(w1, w3)), (BN, 4 * BI))
    halves = tl.join((words & 0xFFFF).to(tl.uint16), (words >> 16).to(tl.uint16))
    wt = tl.reshape(halves, (BN, 8 * BI)).to(tl.float16, bitcast=True)
    cols = 8 * g0 + tl.arange(0, 8 * BI)[None, :]
    tl.store(out_ptr + rows.to(tl.int64) * (8 * G) + cols, wt, mask=(rows < N) & (cols < 8 * G))
