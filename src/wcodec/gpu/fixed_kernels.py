"""Triton kernels over the fixed-rate layout (codec "fixed", docs/CODEC_LAYOUT.md).

A weight row is read in groups of 8 columns: one u32 word of nibbles (``nib``) and one u64 word
of low bytes (``lo``). ``_pairs`` rebuilds the 8 bf16 values as four u32 words of column pairs in
natural order (columns 2p | 2p+1 << 16): the high bytes of columns 0-3 and 4-7 by four SWAR
operations each (no table, no scan), then one byte permute (PRMT) per pair word. The GEMV takes
the 8 columns of a group as separate [rows, groups] tiles multiplied by the activations of
columns 8i + r (no interleaving); the tensor-core kernels and the decoder interleave the pair
words into a natural-order tile (``_tile``). Escapes (values outside the tensor's 14-exponent window) decode to a
placeholder with the exponent ``2*(base+7)+e0``; each kernel adds ``x * (value - placeholder)``
for the escapes of its rows (CSR list, rare: 0.01-0.3 % of real weights).
"""

from __future__ import annotations

import os

import triton
import triton.language as tl

#: byte permutes as PTX ``prmt`` on a GPU; under the interpreter (which runs no PTX) the same bytes
#: by shifts and masks. sm_90 SASS of the mma kernel's main loop (tools/kernel_sass.py, Triton
#: 3.6): 8.4 instructions per weight with the former shift-and-mask pair words, 6.9 with prmt; the
#: H100 times barely moved (the kernels wait on memory latency, tools/profile_serving.py)
_PTX = tl.constexpr(os.environ.get("TRITON_INTERPRET") != "1")

#: Arguments a fused kernel must not be specialised on, because they differ between weights of one
#: shape: the escape values' and rows' offsets in a packed weight follow its escape count
#: (``fixed.pack``: eval at 4E, erow at 8E bytes past ecol, so their 16-byte alignment goes with
#: E mod 4), the window ``base`` and the escape count ``E`` are each weight's own (Triton
#: specialises integers on == 1 and divisibility by 16), the embedding's indices are the
#: caller's. Specialised, the load-time warm-up of one weight per shape (wcodec.hf.warmup) left
#: the other layers' variants to compile while serving (H200, 2026-12-03, benchmarks/serve.py
#: --cold: 15 kernels, 0.3-1 s each). They feed gathers and integer adds, where the
#: specialisation buys nothing.
PER_WEIGHT = {"do_not_specialize": ["base", "E"], "do_not_specialize_on_alignment": ["eval_ptr", "erow_ptr", "idx_ptr"]}


@triton.jit
def _interleave(a, b, HIGH: tl.constexpr):
    """u32 words a, b -> bytes (a0, b0, a1, b1) (HIGH False) or (a2, b2, a3, b3): one ``prmt``."""
    if _PTX:
        if HIGH:
            return tl.inline_asm_elementwise("prmt.b32 $0, $1, $2, 0x7362;", "=r,r,r", [a, b], dtype=tl.uint32,
                                             is_pure=True, pack=1)
        else:
            return tl.inline_asm_elementwise("prmt.b32 $0, $1, $2, 0x5140;", "=r,r,r", [a, b], dtype=tl.uint32,
                                             is_pure=True, pack=1)
    else:
        if HIGH:
            return ((a >> 16) & 0xFF) | ((b >> 8) & 0xFF00) | ((a >> 8) & 0xFF0000) | (b & 0xFF000000)
        else:
            return (a & 0xFF) | ((b & 0xFF) << 8) | ((a & 0xFF00) << 8) | ((b & 0xFF00) << 16)


@triton.jit
def _pairs(nw, lo0, lo1, base4):
    """nibble word + two lo words (u32) of one group -> the 4 u32 words of bf16 pairs in natural
    order (columns 2p | 2p+1 << 16). High bytes: h0 of columns 0-3 (low nibbles of nw's bytes),
    h1 of columns 4-7 (high nibbles): sign << 7 | (base + d); base + d <= 126, so the add never
    carries into the sign bit or the next byte."""
    h0 = ((nw & 0x07070707) + base4) | ((nw << 4) & 0x80808080)
    h1 = (((nw >> 4) & 0x07070707) + base4) | (nw & 0x80808080)
    return (_interleave(lo0, h0, False), _interleave(lo0, h0, True), _interleave(lo1, h1, False),
            _interleave(lo1, h1, True))


@triton.jit
def _f32_lo(e):
    return (e << 16).to(tl.float32, bitcast=True)


@triton.jit
def _f32_hi(e):
    return (e & 0xFFFF0000).to(tl.float32, bitcast=True)


@triton.jit
def _load_words(lo_ptr, nib_ptr, rows, gi, N, G):
    """The raw words of groups gi [1, BI] of rows [BN, 1]: (nibble words u32, low-byte words u64),
    zeros outside the weight. lo_ptr: int64 words (8 low bytes = one group), nib_ptr: int32
    words (8 nibbles)."""
    m = (rows < N) & (gi < G)
    r64 = rows.to(tl.int64)
    gi = tl.max_contiguous(tl.multiple_of(gi, (1, 4)), (1, 4))
    # weights are read once per call: stream them past L1/L2 (evict_first) to keep x cached
    nw = tl.load(nib_ptr + r64 * G + gi, mask=m, other=0, eviction_policy="evict_first").to(tl.uint32, bitcast=True)
    lo = tl.load(lo_ptr + r64 * G + gi, mask=m, other=0, eviction_policy="evict_first").to(tl.uint64, bitcast=True)
    return nw, lo


@triton.jit
def _word_pairs(nw, lo, base):
    """Raw words (``_load_words``) -> the 4 pair words of each group (``_pairs``)."""
    lo0 = (lo & 0xFFFFFFFF).to(tl.uint32)
    lo1 = (lo >> 32).to(tl.uint32)
    base4 = (base * 0x01010101).to(tl.uint32)
    return _pairs(nw, lo0, lo1, base4)


@triton.jit
def _load_group(lo_ptr, nib_ptr, rows, gi, N, G, base):
    """Load the words of groups gi [1, BI] of rows [BN, 1]; returns the 4 pair words (``_pairs``)."""
    nw, lo = _load_words(lo_ptr, nib_ptr, rows, gi, N, G)
    return _word_pairs(nw, lo, base)


@triton.jit
def _natural_pairs(e02_0, e13_0, e02_1, e13_1):
    """Pair words (columns 0|2, 1|3, 4|6, 5|7 in halves: ``fixed16_kernels``' group) -> the 4 u32
    words of bf16 pairs in natural order (columns 2p, 2p+1)."""
    return ((e02_0 & 0xFFFF) | (e13_0 << 16), (e02_0 >> 16) | (e13_0 & 0xFFFF0000),
            (e02_1 & 0xFFFF) | (e13_1 << 16), (e02_1 >> 16) | (e13_1 & 0xFFFF0000))


@triton.jit
def _words_tile(nw, lo, base, BN: tl.constexpr, BI: tl.constexpr):
    """Raw words of a [BN, BI] block of groups -> the W tile in natural column order: [BN, 8*BI] bf16."""
    w0, w1, w2, w3 = _word_pairs(nw, lo, base)
    words = tl.reshape(tl.join(tl.join(w0, w2), tl.join(w1, w3)), (BN, 4 * BI))
    halves = tl.join((words & 0xFFFF).to(tl.uint16), (words >> 16).to(tl.uint16))
    return tl.reshape(halves, (BN, 8 * BI)).to(tl.bfloat16, bitcast=True)


@triton.jit
def _tile(lo_ptr, nib_ptr, rows, g0, N, G, base, BI: tl.constexpr):
    """The W tile of rows [BN, 1] and columns 8*g0 .. 8*(g0+BI) in natural order: [BN, 8*BI] bf16."""
    nw, lo = _load_words(lo_ptr, nib_ptr, rows, g0 + tl.arange(0, BI)[None, :], N, G)
    return _words_tile(nw, lo, base, rows.shape[0], BI)


@triton.jit
def _dot_step(acc, wt, xrow, xm, g0, K, BI: tl.constexpr, DOT: tl.constexpr, SWAP: tl.constexpr):
    """acc plus x tile @ wt.T ([BM, BN]), or with SWAP wt @ x tile.T ([BN, BM]: W's rows are the
    instruction's M, the decoded tile may stay in registers as its A operand)."""
    cols = 8 * g0 + tl.arange(0, 8 * BI)[None, :]
    xt = tl.load(xrow + cols, mask=xm & (cols < K), other=0.0)
    if DOT == 0:
        xt = xt.to(tl.bfloat16)
    else:
        xt = xt.to(tl.float32)
        wt = wt.to(tl.float32)
    if SWAP:
        return tl.dot(wt, tl.trans(xt), acc)
    else:
        return tl.dot(xt, tl.trans(wt), acc)


@triton.jit
def _dot_tiles(acc, lo_ptr, nib_ptr, rows, n_rows, base, xrow, xm, g_start, g_stop, G, K,
               BI: tl.constexpr, DOT: tl.constexpr, PREFETCH: tl.constexpr = False, SWAP: tl.constexpr = False):
    """acc [BM, BN] fp32 (SWAP: [BN, BM], see _dot_step) plus x @ W.T over the column groups
    g_start..g_stop (step BI): W's rows [BN, 1] (below n_rows) decoded tile by tile, each tile
    once for all BM rows of x (xrow: their row pointers [BM, 1], xm: their mask); DOT 0
    multiplies in bf16, else in fp32. PREFETCH: the raw words of tile i+1 are loaded before
    tile i is decoded and multiplied (their latency behind that work: Triton's pipeliner does
    not stage loads that reach the dot through the decode arithmetic)."""
    if PREFETCH:
        gi = tl.arange(0, BI)[None, :]
        nw, lo = _load_words(lo_ptr, nib_ptr, rows, g_start + gi, n_rows, G)
        for g0 in range(g_start, g_stop, BI):
            nw_next, lo_next = _load_words(lo_ptr, nib_ptr, rows, g0 + BI + gi, n_rows, G)
            acc = _dot_step(acc, _words_tile(nw, lo, base, rows.shape[0], BI), xrow, xm, g0, K, BI, DOT, SWAP)
            nw, lo = nw_next, lo_next
    else:
        for g0 in range(g_start, g_stop, BI):
            acc = _dot_step(acc, _tile(lo_ptr, nib_ptr, rows, g0, n_rows, G, base, BI), xrow, xm, g0, K, BI, DOT,
                            SWAP)
    return acc


@triton.jit
def _escape_delta(val, base):
    """fp32 (value - placeholder) of escapes, val: u16 bits as int32."""
    v = val & 0xFFFF
    dec = (v & 0x80FF) | ((base + 7) << 8)
    return (v << 16).to(tl.float32, bitcast=True) - (dec << 16).to(tl.float32, bitcast=True)


@triton.jit
def _escape_delta16(val, base):
    """fp32 (value - placeholder) of escapes of the fp16 layout (codec fixed16), val: fp16 bits as int32."""
    v = val & 0xFFFF
    dec = (v & 0x83FF) | ((base + 7) << 10)
    return v.to(tl.uint16).to(tl.float16, bitcast=True).to(tl.float32) - \
        dec.to(tl.uint16).to(tl.float16, bitcast=True).to(tl.float32)


@triton.jit
def _escape_rows(ptr_ptr, n0, e, N, BN: tl.constexpr):
    """Local row (0..BN-1) of each escape index e [EB] of the rows n0..n0+BN-1 -> [EB, BN] one-hot."""
    rn = n0 + 1 + tl.arange(0, BN)
    ends = tl.load(ptr_ptr + tl.minimum(rn, N)).to(tl.int64)
    local = tl.sum((e[:, None] >= ends[None, :]).to(tl.int32), axis=1)
    return local[:, None] == tl.arange(0, BN)[None, :]


@triton.jit
def _x_lanes(x_ptr, x64_ptr, om, stride_xm, gi, K, xm, X64: tl.constexpr):
    """Activations of columns 8*gi + r (r = 0..7) as 8 fp32 tensors [BM, BI]. X64: x is bf16 with
    K % 8 == 0, read as two int64 words per group; otherwise 8 strided loads of any float dtype."""
    if X64:
        m = xm & (8 * gi < K)
        p = x64_ptr + om[:, None].to(tl.int64) * (stride_xm // 4) + 2 * gi
        xa = tl.load(p, mask=m, other=0).to(tl.uint64, bitcast=True)
        xb = tl.load(p + 1, mask=m, other=0).to(tl.uint64, bitcast=True)
        a0 = (xa & 0xFFFFFFFF).to(tl.uint32)
        a1 = (xa >> 32).to(tl.uint32)
        b0 = (xb & 0xFFFFFFFF).to(tl.uint32)
        b1 = (xb >> 32).to(tl.uint32)
        return (_f32_lo(a0), _f32_hi(a0), _f32_lo(a1), _f32_hi(a1),
                _f32_lo(b0), _f32_hi(b0), _f32_lo(b1), _f32_hi(b1))
    else:
        p = x_ptr + om[:, None].to(tl.int64) * stride_xm + 8 * gi
        c = 8 * gi
        return (tl.load(p + 0, mask=xm & (c + 0 < K), other=0.0).to(tl.float32),
                tl.load(p + 1, mask=xm & (c + 1 < K), other=0.0).to(tl.float32),
                tl.load(p + 2, mask=xm & (c + 2 < K), other=0.0).to(tl.float32),
                tl.load(p + 3, mask=xm & (c + 3 < K), other=0.0).to(tl.float32),
                tl.load(p + 4, mask=xm & (c + 4 < K), other=0.0).to(tl.float32),
                tl.load(p + 5, mask=xm & (c + 5 < K), other=0.0).to(tl.float32),
                tl.load(p + 6, mask=xm & (c + 6 < K), other=0.0).to(tl.float32),
                tl.load(p + 7, mask=xm & (c + 7 < K), other=0.0).to(tl.float32))


@triton.jit
def _escapes(acc, x_ptr, om, stride_xm, xm, eptr_ptr, ecol_ptr, eval_ptr, n0, N, base,
             BN: tl.constexpr, EB: tl.constexpr, DOT: tl.constexpr, F16: tl.constexpr = False):
    """acc[m, n] += x[m, col] * (value - placeholder) over the escapes of rows n0..n0+BN-1
    (values bf16 bits; fp16 bits of the fp16 layout with F16)."""
    e_start = tl.load(eptr_ptr + n0).to(tl.int64)
    e_end = tl.load(eptr_ptr + tl.minimum(n0 + BN, N)).to(tl.int64)
    xrow = x_ptr + om[:, None].to(tl.int64) * stride_xm
    for e0 in range(e_start, e_end, EB):
        e = e0 + tl.arange(0, EB)
        em = e < e_end
        ecol = tl.load(ecol_ptr + e, mask=em, other=0).to(tl.int64)
        val = tl.load(eval_ptr + e, mask=em, other=0).to(tl.int32)
        if F16:
            d = tl.where(em, _escape_delta16(val, base), 0.0)
        else:
            d = tl.where(em, _escape_delta(val, base), 0.0)
        onehot = _escape_rows(eptr_ptr, n0, e, N, BN) & em[:, None]
        xe = tl.load(xrow + ecol[None, :], mask=xm & em[None, :], other=0.0).to(tl.float32)
        if DOT:
            acc += tl.dot(xe, tl.where(onehot, d[:, None], 0.0), input_precision="ieee")
        else:
            acc += tl.sum(xe[:, :, None] * tl.where(onehot, d[:, None], 0.0)[None, :, :], axis=1)
    return acc


@triton.jit
def _store_y(acc, b_ptr, y_ptr, om, n0, M, N, stride_ym, BN: tl.constexpr, HAS_BIAS: tl.constexpr):
    on = n0 + tl.arange(0, BN)
    if HAS_BIAS:
        acc += tl.load(b_ptr + on, mask=on < N, other=0.0).to(tl.float32)[None, :]
    ym = (om[:, None] < M) & (on[None, :] < N)
    tl.store(y_ptr + om[:, None].to(tl.int64) * stride_ym + on[None, :],
             acc.to(y_ptr.dtype.element_ty), mask=ym)


@triton.jit
def _fma8(acc, w0, w1, w2, w3, w4, w5, w6, w7, x_ptr, x64_ptr, m, stride_xm, gi, K, M, X64: tl.constexpr):
    """acc[BN, BI] += sum over the 8 lanes of w_r * x[m, 8*gi + r] (one activation row m)."""
    om = tl.full((1,), 0, tl.int32) + m
    x0, x1, x2, x3, x4, x5, x6, x7 = _x_lanes(x_ptr, x64_ptr, om, stride_xm, gi, K, om[:, None] < M, X64)
    return acc + (w0 * x0 + w1 * x1 + w2 * x2 + w3 * x3 + w4 * x4 + w5 * x5 + w6 * x6 + w7 * x7)


@triton.jit(**PER_WEIGHT)
def fixed_gemv_kernel(x_ptr, x64_ptr, lo_ptr, nib_ptr, eptr_ptr, ecol_ptr, eval_ptr, b_ptr, y_ptr,
                      M, N, K, G, stride_xm, stride_ym, base, MB,
                      BM: tl.constexpr, BN: tl.constexpr, BI: tl.constexpr, EB: tl.constexpr,
                      HAS_BIAS: tl.constexpr, X64: tl.constexpr):
    """y[M, N] = x[M, K] @ W.T (+ bias) with CUDA-core FMAs for M <= 4: one program per BN rows
    of W and BM (1, 2 or 4) rows of x, the whole K. Each W tile is decoded once and multiplied
    into one [BN, BI] accumulator per activation row; reduced once at the end.
    W: the fixed layout, G = kpad / 8 groups per row. MB: autotuning key only."""
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
        p0, p1, p2, p3 = _load_group(lo_ptr, nib_ptr, rows, gi, N, G, base)
        w0, w1, w2, w3 = _f32_lo(p0), _f32_hi(p0), _f32_lo(p1), _f32_hi(p1)
        w4, w5, w6, w7 = _f32_lo(p2), _f32_hi(p2), _f32_lo(p3), _f32_hi(p3)
        a0 = _fma8(a0, w0, w1, w2, w3, w4, w5, w6, w7, x_ptr, x64_ptr, m0, stride_xm, gi, K, M, X64)
        if BM > 1:
            a1 = _fma8(a1, w0, w1, w2, w3, w4, w5, w6, w7, x_ptr, x64_ptr, m0 + 1, stride_xm, gi, K, M, X64)
        if BM > 2:
            a2 = _fma8(a2, w0, w1, w2, w3, w4, w5, w6, w7, x_ptr, x64_ptr, m0 + 2, stride_xm, gi, K, M, X64)
            a3 = _fma8(a3, w0, w1, w2, w3, w4, w5, w6, w7, x_ptr, x64_ptr, m0 + 3, stride_xm, gi, K, M, X64)
    om = m0 + tl.arange(0, BM)
    sel = om[:, None] - m0
    y = tl.where(sel == 0, tl.sum(a0, axis=1)[None, :], 0.0)
    if BM > 1:
        y += tl.where(sel == 1, tl.sum(a1, axis=1)[None, :], 0.0)
    if BM > 2:
        y += tl.where(sel == 2, tl.sum(a2, axis=1)[None, :], 0.0)
        y += tl.where(sel == 3, tl.sum(a3, axis=1)[None, :], 0.0)
    y = _escapes(y, x_ptr, om, stride_xm, om[:, None] < M, eptr_ptr, ecol_ptr, eval_ptr, n0, N, base,
                 BN, EB, False)
    _store_y(y, b_ptr, y_ptr, om, n0, M, N, stride_ym, BN, HAS_BIAS)


@triton.jit(**PER_WEIGHT)
def fixed_mm_kernel(x_ptr, lo_ptr, nib_ptr, eptr_ptr, ecol_ptr, eval_ptr, b_ptr, y_ptr, ws_ptr,
                    M, N, K, G, stride_xm, stride_ym, base, MB,
                    BM: tl.constexpr, BN: tl.constexpr, BI: tl.constexpr, EB: tl.constexpr,
                    GROUP_M: tl.constexpr, HAS_BIAS: tl.constexpr, DOT: tl.constexpr, SPLIT: tl.constexpr,
                    SWAP: tl.constexpr = 0):
    """y[M, N] = x[M, K] @ W.T (+ bias) on the tensor cores: tiles of BM x BN; per K-step the
    W tile [BN, 8*BI] is decoded in registers in natural column order and fed to one tl.dot.
    DOT 0: bf16 operands, 1: fp32 (tf32) for other activation dtypes. MB: autotuning key only.
    SPLIT > 1 (split-K, for few output tiles: more programs in flight): program axis 1 takes
    one of SPLIT slices of the groups and writes its fp32 partial sum to ws[slice, M, N] (the
    escapes in slice 0); ``splitk_reduce_kernel`` then adds the slices in order and the bias.
    SWAP: multiply W tile @ x tile.T into a [BN, BM] accumulator (W's rows are the instruction's
    M: Hopper's wgmma takes 64 of them a warpgroup, and the decoded tile may stay in registers as
    its A operand; few x rows need no padding to 64), transposed once at the end."""
    pid = tl.program_id(0)
    split = tl.program_id(1)
    num_m = tl.cdiv(M, BM)
    num_n = tl.cdiv(N, BN)
    width = GROUP_M * num_n
    first_m = (pid // width) * GROUP_M
    gsize = tl.minimum(num_m - first_m, GROUP_M)
    pid_m = first_m + (pid % width) % gsize
    pid_n = (pid % width) // gsize
    n0 = pid_n * BN
    rows = n0 + tl.arange(0, BN)[:, None]
    om = pid_m * BM + tl.arange(0, BM)
    xm = om[:, None] < M
    xrow = x_ptr + om[:, None].to(tl.int64) * stride_xm
    g_len = tl.cdiv(tl.cdiv(G, SPLIT), BI) * BI
    g_lo = split * g_len
    if SWAP:
        acc = tl.trans(_dot_tiles(tl.zeros((BN, BM), tl.float32), lo_ptr, nib_ptr, rows, N, base, xrow, xm,
                                  g_lo, tl.minimum(G, g_lo + g_len), G, K, BI, DOT, SWAP=True))
    else:
        acc = _dot_tiles(tl.zeros((BM, BN), tl.float32), lo_ptr, nib_ptr, rows, N, base, xrow, xm,
                         g_lo, tl.minimum(G, g_lo + g_len), G, K, BI, DOT)
    if SPLIT == 1:
        acc = _escapes(acc, x_ptr, om, stride_xm, xm, eptr_ptr, ecol_ptr, eval_ptr, n0, N, base, BN, EB, True)
        _store_y(acc, b_ptr, y_ptr, om, n0, M, N, stride_ym, BN, HAS_BIAS)
    else:
        if split == 0:
            acc = _escapes(acc, x_ptr, om, stride_xm, xm, eptr_ptr, ecol_ptr, eval_ptr, n0, N, base, BN, EB, True)
        _store_y(acc, b_ptr, ws_ptr + split.to(tl.int64) * M * N, om, n0, M, N, N, BN, False)


@triton.jit
def _expert_ptrs(tab_ptr, bases_ptr, e, lo_ptr, nib_ptr, eptr_ptr, ecol_ptr, eval_ptr, ALIGNED: tl.constexpr):
    """Expert e's lo, nib, eptr, ecol, eval pointers and window base: the base pointers moved by
    row e of the offset table (int64 [E, 5], in elements of each pointer's dtype; see
    ``fixed_grouped.FixedExperts``), so one kernel reads a stacked layout and a module's
    per-expert packed buffer alike. ALIGNED: the lo and nib offsets are 16-byte multiples (said
    to the compiler, which cannot see it in a loaded offset: vector loads of the words)."""
    t = tab_ptr + 5 * e.to(tl.int64)
    lo_off = tl.load(t)
    nib_off = tl.load(t + 1)
    if ALIGNED:
        lo_off = tl.multiple_of(lo_off, 2)
        nib_off = tl.multiple_of(nib_off, 4)
    return (lo_ptr + lo_off, nib_ptr + nib_off, eptr_ptr + tl.load(t + 2), ecol_ptr + tl.load(t + 3),
            eval_ptr + tl.load(t + 4), tl.load(bases_ptr + e).to(tl.int32))


@triton.jit
def fixed_grouped_mm_kernel(x_ptr, order_ptr, offs_ptr, lo_ptr, nib_ptr, eptr_ptr, ecol_ptr, eval_ptr, tab_ptr,
                            bases_ptr, y_ptr, N, K, G, stride_xm, stride_ym,
                            BM: tl.constexpr, BN: tl.constexpr, BI: tl.constexpr, EB: tl.constexpr,
                            DOT: tl.constexpr, PREFETCH: tl.constexpr = False, SWAP: tl.constexpr = False,
                            ALIGNED: tl.constexpr = False):
    """y[s, :] = x[order[s], :] @ W_e.T for the routed slots s of expert e = program axis 2
    (offsets[e] <= s < offsets[e+1]); axis 0: BM slots of that expert (programs past its count do
    nothing), axis 1: BN columns of y; the row blocks of one W tile are launched side by side, so
    an expert's second block (more than BM slots) reads the tile's words from the L2. W_e: the
    fixed layout at row e of the offset table (``_expert_ptrs``), window bases[e]. PREFETCH,
    SWAP: see ``_dot_tiles``."""
    e = tl.program_id(2)
    s_end = tl.load(offs_ptr + e + 1)
    s0 = tl.load(offs_ptr + e) + tl.program_id(0) * BM
    if s0 < s_end:
        n0 = tl.program_id(1) * BN
        lo_e, nib_e, eptr_e, ecol_e, eval_e, base = _expert_ptrs(tab_ptr, bases_ptr, e, lo_ptr, nib_ptr, eptr_ptr,
                                                                  ecol_ptr, eval_ptr, ALIGNED)
        slots = s0 + tl.arange(0, BM)
        sm = slots < s_end
        tok = tl.load(order_ptr + slots, mask=sm, other=0)
        xm = sm[:, None]
        xrow = x_ptr + tok[:, None].to(tl.int64) * stride_xm
        rows = n0 + tl.arange(0, BN)[:, None]
        if SWAP:
            acc = tl.trans(_dot_tiles(tl.zeros((BN, BM), tl.float32), lo_e, nib_e, rows, N, base, xrow, xm,
                                      0, G, G, K, BI, DOT, PREFETCH, SWAP))
        else:
            acc = _dot_tiles(tl.zeros((BM, BN), tl.float32), lo_e, nib_e, rows, N, base, xrow, xm,
                             0, G, G, K, BI, DOT, PREFETCH)
        acc = _escapes(acc, x_ptr, tok, stride_xm, xm, eptr_e, ecol_e, eval_e, n0, N, base, BN, EB, True)
        _store_y(acc, y_ptr, y_ptr, slots, n0, s_end, N, stride_ym, BN, False)


@triton.jit
def fixed_grouped_gemv_kernel(x_ptr, x64_ptr, order_ptr, offs_ptr, lo_ptr, nib_ptr, eptr_ptr, ecol_ptr, eval_ptr,
                              tab_ptr, bases_ptr, y_ptr, T, N, K, G, E, stride_xm, stride_ym,
                              BN: tl.constexpr, BI: tl.constexpr, EB: tl.constexpr, EP: tl.constexpr,
                              X64: tl.constexpr, ALIGNED: tl.constexpr = False):
    """y[s, :] = x[order[s], :] @ W_e.T with CUDA-core FMAs, one routed slot s per program of axis
    1 (its expert e: the number of offsets[1..E] <= s; a slot past offsets[E], an expert-parallel
    sentinel, takes expert E-1 and the caller masks it), BN rows of y per program of axis 0: the
    GEMV of ``fixed_gemv_kernel`` over the experts' layout (``_expert_ptrs``), for decode steps
    where each expert takes a slot or two (the tiled grouped kernel pads each expert's slots to
    16 rows). EP: E rounded up to a power of two. T: rows of x. X64: x read as int64 words
    (``_x_lanes``)."""
    s = tl.program_id(1)
    ends = tl.load(offs_ptr + 1 + tl.arange(0, EP), mask=tl.arange(0, EP) < E, other=2147483647)
    e = tl.minimum(tl.sum((ends <= s).to(tl.int32), axis=0), E - 1)
    tok = tl.load(order_ptr + s)
    n0 = tl.program_id(0) * BN
    lo_e, nib_e, eptr_e, ecol_e, eval_e, base = _expert_ptrs(tab_ptr, bases_ptr, e, lo_ptr, nib_ptr, eptr_ptr,
                                                              ecol_ptr, eval_ptr, ALIGNED)
    rows = n0 + tl.arange(0, BN)[:, None]
    acc = tl.zeros((BN, BI), tl.float32)
    for g0 in range(0, G, BI):
        gi = g0 + tl.arange(0, BI)[None, :]
        p0, p1, p2, p3 = _load_group(lo_e, nib_e, rows, gi, N, G, base)
        acc = _fma8(acc, _f32_lo(p0), _f32_hi(p0), _f32_lo(p1), _f32_hi(p1), _f32_lo(p2), _f32_hi(p2), _f32_lo(p3),
                    _f32_hi(p3), x_ptr, x64_ptr, tok, stride_xm, gi, K, T, X64)
    om = tl.full((1,), 0, tl.int64) + tok
    y = _escapes(tl.sum(acc, axis=1)[None, :], x_ptr, om, stride_xm, om[:, None] < T, eptr_e, ecol_e, eval_e,
                 n0, N, base, BN, EB, False)
    _store_y(y, y_ptr, y_ptr, tl.full((1,), 0, tl.int32) + s, n0, s + 1, N, stride_ym, BN, False)


@triton.jit
def splitk_reduce_kernel(ws_ptr, b_ptr, y_ptr, M, N, stride_ym, SPLIT: tl.constexpr, HAS_BIAS: tl.constexpr,
                         BLOCK: tl.constexpr):
    """y[m, n] = ws[0, m, n] + ws[1, m, n] + ... (in this order) (+ bias[n]): the split-K sum of
    ``fixed_mm_kernel``, the same bits on every call."""
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < M * N
    acc = tl.load(ws_ptr + offs, mask=mask, other=0.0)
    for s in tl.static_range(1, SPLIT):
        acc += tl.load(ws_ptr + s * M * N + offs, mask=mask, other=0.0)
    n = offs % N
    if HAS_BIAS:
        acc += tl.load(b_ptr + n, mask=mask, other=0.0).to(tl.float32)
    tl.store(y_ptr + (offs // N) * stride_ym + n, acc.to(y_ptr.dtype.element_ty), mask=mask)


@triton.jit(**PER_WEIGHT)
def fixed_grad_input_kernel(g_ptr, lo_ptr, nib_ptr, gx_ptr, M, N, K, G, stride_gm, stride_xm, base, MB,
                            BM: tl.constexpr, BN: tl.constexpr, BI: tl.constexpr, DOT: tl.constexpr):
    """gx[M, K] = g[M, N] @ W (escapes excluded: the caller adds them). One program per BM rows
    of g and 8*BI columns of W, looping over N; W tiles decoded in registers."""
    pid_m = tl.program_id(0)
    pid_g = tl.program_id(1)
    om = pid_m * BM + tl.arange(0, BM)
    acc = tl.zeros((BM, 8 * BI), tl.float32)
    for n0 in range(0, N, BN):
        rows = n0 + tl.arange(0, BN)[:, None]
        on = n0 + tl.arange(0, BN)
        gt = tl.load(g_ptr + om[:, None].to(tl.int64) * stride_gm + on[None, :],
                     mask=(om[:, None] < M) & (on[None, :] < N), other=0.0)
        wt = _tile(lo_ptr, nib_ptr, rows, pid_g * BI, N, G, base, BI)
        if DOT == 0:
            acc = tl.dot(gt.to(tl.bfloat16), wt, acc)
        else:
            acc = tl.dot(gt.to(tl.float32), wt.to(tl.float32), acc)
    cols = pid_g * 8 * BI + tl.arange(0, 8 * BI)[None, :]
    tl.store(gx_ptr + om[:, None].to(tl.int64) * stride_xm + cols, acc.to(gx_ptr.dtype.element_ty),
             mask=(om[:, None] < M) & (cols < K))


@triton.jit(**PER_WEIGHT)
def fixed_decode_kernel(lo_ptr, nib_ptr, out_ptr, G, base, eptr_ptr, ecol_ptr, eval_ptr, erow_ptr, bases_ptr,
                        row0, rows, group_rows,
                        BN: tl.constexpr, BI: tl.constexpr, EB: tl.constexpr = 64, PATCH: tl.constexpr = False,
                        BASES: tl.constexpr = False):
    """Decode rows ``group * group_rows + row0 + r`` (r < rows) of the layout, for each group =
    program axis 2, to out[group * rows + r, :kpad] bf16 (kpad = 8*G). One group with row0 = 0
    and rows = N decodes a whole weight; a row range (``rows`` from ``row0``) decodes a chunk of
    it into a small scratch (``fixed.decode_rows``); groups of ``group_rows`` rows take the same
    range of each expert of a stacked experts layout (``fixed_grouped``), whose window base is
    bases[group] (BASES), else ``base``. PATCH: each program then writes the escapes of its tile
    (its rows' CSR lists, those in its columns) over the placeholders, after a barrier that
    orders them behind the tile's stores; else escapes hold their placeholder and the caller
    patches them (``fixed_escape_patch_kernel``: one launch more, 2-4 us on the H100). Every
    program scans all escapes of its rows, so PATCH is for rows of ordinary width. Grid (column
    groups, row blocks, groups): axis 0 takes 2^31 - 1 programs, so a record of long rows (a 3-D
    experts tensor [E, N, K] stored as E rows) fits; axes 1 and 2 stop at 65535."""
    pid_g = tl.program_id(0)
    pid_n = tl.program_id(1)
    grp = tl.program_id(2)
    if BASES:
        base = tl.load(bases_ptr + grp)
    src0 = grp.to(tl.int64) * group_rows + row0  # source row of local row 0
    local = pid_n * BN + tl.arange(0, BN)[:, None]
    wt = _tile(lo_ptr, nib_ptr, src0 + local, pid_g * BI, src0 + rows, G, base, BI)
    cols = pid_g * 8 * BI + tl.arange(0, 8 * BI)[None, :]
    dst0 = grp.to(tl.int64) * rows  # output row of local row 0
    tl.store(out_ptr + (dst0 + local) * (8 * G) + cols, wt, mask=(local < rows) & (cols < 8 * G))
    if PATCH:
        tl.debug_barrier()  # bar.sync: the tile's stores reach memory before the escapes overwrite them
        c0 = pid_g * 8 * BI
        e_end = tl.load(eptr_ptr + src0 + tl.minimum(pid_n * BN + BN, rows))
        for e0 in range(tl.load(eptr_ptr + src0 + pid_n * BN), e_end, EB):
            e = e0 + tl.arange(0, EB)
            c = tl.load(ecol_ptr + e, mask=e < e_end, other=-1)
            m = (c >= c0) & (c < c0 + 8 * BI)
            r = tl.load(erow_ptr + e, mask=m, other=0) - src0 + dst0
            v = tl.load(eval_ptr + e, mask=m, other=0).to(tl.int16).to(tl.bfloat16, bitcast=True)
            tl.store(out_ptr + r * (8 * G) + c, v, mask=m)


@triton.jit(**PER_WEIGHT)
def fixed_escape_patch_kernel(erow_ptr, ecol_ptr, eval_ptr, out_ptr, E, stride, BLOCK: tl.constexpr):
    """out[erow[e], ecol[e]] = eval[e] (bf16 bits) for the E escapes: the values
    ``fixed_decode_kernel`` left as placeholders; out viewed as int16."""
    e = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = e < E
    r = tl.load(erow_ptr + e, mask=m, other=0)
    c = tl.load(ecol_ptr + e, mask=m, other=0).to(tl.int64)
    v = tl.load(eval_ptr + e, mask=m, other=0)
    tl.store(out_ptr + r * stride + c, v.to(tl.int16), mask=m)


@triton.jit(**PER_WEIGHT)
def fixed_rows_kernel(idx_ptr, lo_ptr, nib_ptr, eptr_ptr, ecol_ptr, eval_ptr, out_ptr, N, K, G, base,
                      BI: tl.constexpr, EB: tl.constexpr):
    """out[i, :] = W[idx[i], :] (an embedding lookup), escapes included: one program per index
    and 8*BI columns. Indices outside [0, N) read nothing and give a row of zeros."""
    i = tl.program_id(0)
    g0 = tl.program_id(1) * BI
    row = tl.load(idx_ptr + i).to(tl.int64)
    ok = (row >= 0) & (row < N)
    row = tl.where(ok, row, N)  # N is masked out by _load_group: zeros, no out-of-bounds read
    rows = row + tl.zeros((1, 1), tl.int64)
    bits = _tile(lo_ptr, nib_ptr, rows, g0, N, G, base, BI).to(tl.int16, bitcast=True)
    cols = 8 * g0 + tl.arange(0, 8 * BI)
    e_start = tl.load(eptr_ptr + tl.minimum(row, N)).to(tl.int64)
    e_end = tl.load(eptr_ptr + tl.minimum(row + 1, N)).to(tl.int64)
    for e0 in range(e_start, e_end, EB):  # the row's escapes (CSR), rare: patch them in
        e = e0 + tl.arange(0, EB)
        em = e < e_end
        ecol = tl.load(ecol_ptr + e, mask=em, other=-1)
        hit = (ecol[:, None] == cols[None, :]) & em[:, None]
        val = tl.load(eval_ptr + e, mask=em, other=0)
        patch = tl.sum(tl.where(hit, val[:, None], 0), axis=0)
        found = tl.max(hit.to(tl.int32), axis=0)
        bits = tl.where(found[None, :] > 0, patch.to(tl.int16)[None, :], bits)
    bits = tl.where(ok, bits, 0)
    tl.store(out_ptr + i.to(tl.int64) * K + cols[None, :], bits.to(tl.bfloat16, bitcast=True),
             mask=cols[None, :] < K)
