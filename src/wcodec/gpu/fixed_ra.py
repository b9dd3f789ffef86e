"""The fixed-rate tile decoded straight into ``wgmma``'s register A operand (16-64 rows of bf16
x; Gluon, sm_90). Routed for 17-32 rows (``fixed.RA_MIN_M``, ``RA_MAX_M``).

One role: every warpgroup owns 64 rows of W, loads the words of its W tile, decodes them into
the registers wgmma reads as A (no shared-memory store of W, no hand-off between warps, as
:mod:`wcodec.gpu.fixed_mma` does for mma.sync's B operand) and multiplies them by x.T's tile
[8*BG, BM], which sits in shared memory (wgmma's B operand, all rows of x; shared by the
program's warpgroups where it has two). The product is computed swapped (y.T = W x.T), issued
asynchronously and waited one step behind, so the next tile's loads and decode run on the CUDA
cores while the tensor cores multiply this one. H200, 2026-12-01, time / cuBLAS at M = 32 on
the four Llama shapes: 1.09-1.36x (the mma kernel: 1.38-1.85x). It does not reach cuBLAS: x's
tile is copied from L2 for every 64 rows of W (without those copies, an ablation, 10-27 % faster
at 32-128 rows) and W's stream alone runs at about 2 TB/s, latency-bound with two programs of
4 warps an SM; at 64 rows it ties the warp-specialised kernel, at 128-256 it loses to it and to
decode + cuBLAS (benchmarks/HISTORY.md, "kern7").

Why x is permuted. A bf16 wgmma's register A fragment holds, per thread, k = 2c, 2c+1, 2c+8,
2c+9 of each 16-column slice (c = lane % 4): two columns of each of four 8-column groups, where
the fixed layout's cheap decode wants whole groups per thread (``fixed_kernels._pairs``). A dot
product is order-free in k, so each thread decodes whole groups and the k axis is relabelled:
within a K step of 8*BG columns (4*BG column pairs), pair q of thread c's groups, physical pair
c*BG + q, becomes logical pair 4q + c. x's columns get the same relabelling on their way into
shared memory: a transpose of the step's column pairs viewed as [4, BG] -> [BG, 4], done by
4-byte cp.async copies (each thread copies pairs of one row of x; a warp covers 32 consecutive
logical pairs of a row, so the shared stores hit 32 banks). The words a thread loads are four
consecutive groups of rows r and r+8 (16-byte loads), loaded one step ahead in registers (WST
0) or copied XS - 2 steps ahead into shared buffers of its own (WST > 0).

Escapes: added after the main loop by CUDA-core FMAs (``fixed_mma._escapes_fma``, T=True: the
accumulator is y.T's tile). Layout of the weights: docs/CODEC_LAYOUT.md.
"""

from __future__ import annotations

import triton
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.ampere import async_copy as cp
from triton.experimental.gluon.language.nvidia.hopper import fence_async_shared, warpgroup_mma, warpgroup_mma_wait

from .fixed_kernels import PER_WEIGHT, _pairs
from .fixed_mma import _cp, _esc_load, _esc_rows, _escapes_fma, _store
from .fixed_ws import _barrier

# a shared buffer seen as another dtype/shape is ``reinterpret`` in Triton 3.7+, ``_reinterpret``
# before; chosen here, not in a constexpr branch (see fixed_mma._cp)
if hasattr(gl.shared_memory_descriptor, "reinterpret"):
    @gluon.jit
    def _view(smem, dtype: gl.constexpr, shape: gl.constexpr, layout: gl.constexpr):
        return smem.reinterpret(dtype, shape, layout)
else:
    @gluon.jit
    def _view(smem, dtype: gl.constexpr, shape: gl.constexpr, layout: gl.constexpr):
        return smem._reinterpret(dtype, shape, layout)


@gluon.constexpr_function
def _log2(n):
    return (int(n) - 1).bit_length()


@gluon.constexpr_function
def words_layout(BN, BG):
    """Layout of the W tile's words [BN, BG] (BN = 16 per warp): the thread of lane 4r + c in warp w
    holds rows 16w + r and 16w + r + 8, groups c*BG/4 .. c*BG/4 + BG/4 - 1 (consecutive: 16-byte
    loads), which after ``_a_tile`` are exactly its k of the wgmma A fragment."""
    BN, BG = int(BN), int(BG)
    a_bits = _log2(BG // 4)
    regs = [[0, 1 << i] for i in range(a_bits)] + [[8, 0]]
    lanes = [[0, (BG // 4) << i] for i in range(2)] + [[1 << i, 0] for i in range(3)]
    warps = [[16 << i, 0] for i in range(_log2(BN // 16))]
    return gl.DistributedLinearLayout(regs, lanes, warps, [], [BN, BG])


@gluon.constexpr_function
def copy_layout(BM, BG, NW):
    """Layout of x's pair pointers [BM, BG, 4] (row, q, c) for the cp.async copies: the lanes of a
    warp take c = 0..3 and q = 0..7 of one row (logical pairs 4q + c: 32 consecutive words of
    shared memory; for BG < 8 the rest of the lanes take more rows), registers the rest of q,
    warps and registers the rows."""
    BM, BG, NW = int(BM), int(BG), int(NW)
    q_lanes = min(3, _log2(BG))
    m_lanes = 3 - q_lanes
    lanes = [[0, 0, 1], [0, 0, 2]] + [[0, 1 << i, 0] for i in range(q_lanes)] + [[1 << i, 0, 0] for i in range(m_lanes)]
    w_bits = _log2(NW)
    warps = [[1 << (m_lanes + i), 0, 0] for i in range(w_bits)]
    regs = [[0, 1 << i, 0] for i in range(q_lanes, _log2(BG))]
    regs += [[1 << i, 0, 0] for i in range(m_lanes + w_bits, _log2(BM))]
    return gl.DistributedLinearLayout(regs, lanes, warps, [], [BM, BG, 4])


@gluon.constexpr_function
def x_layout(BG, bits):
    """Shared layout of x's tile: [BM, 4*BG] int32 column pairs (bits 32, for the copies) or the
    same bytes as bf16 [BM, 8*BG] (bits 16, wgmma's B operand), swizzled in rows of <= 128 bytes."""
    return gl.NVMMASharedLayout(swizzle_byte_width=min(128, 16 * int(BG)), element_bitwidth=int(bits), rank=2)


@gluon.jit
def _a_tile(nw, lo, base4, aL: gl.constexpr):
    """Words [BN, BG] (``words_layout``) -> W's tile as wgmma's register A operand [BN, 8*BG] bf16
    in layout aL, its k axis relabelled: logical column 32a + 16b2 + 8b1 + 2c + b0 holds physical
    column 8*(c*BG/4 + a) + 4b2 + 2b1 + b0 of the step (no data moves: assert_trivial)."""
    BN: gl.constexpr = nw.shape[0]
    BG: gl.constexpr = nw.shape[1]
    lo = lo.to(gl.uint64, bitcast=True)
    w0, w1, w2, w3 = _pairs(nw.to(gl.uint32, bitcast=True), (lo & 0xFFFFFFFF).to(gl.uint32), (lo >> 32).to(gl.uint32),
                            base4)
    t = gl.join(gl.join(w0, w1), gl.join(w2, w3))  # [BN, BG, b1, b2]: pair word 2*b2 + b1
    h = gl.join((t & 0xFFFF).to(gl.uint16), (t >> 16).to(gl.uint16))  # [.., b0]: column 4b2 + 2b1 + b0
    h = gl.reshape(h, [BN, 4, BG // 4, 2, 2, 2])  # group c*BG/4 + a
    h = gl.permute(h, (0, 2, 4, 3, 1, 5))  # [BN, a, b2, b1, c, b0]
    return gl.convert_layout(gl.reshape(h, [BN, 8 * BG]).to(gl.bfloat16, bitcast=True), aL, assert_trivial=True)


@gluon.jit
def _x_copy(x_s, xp, xcol, g0, k_left):
    """Start the copies of x's columns 8*g0 .. 8*g0 + 8*BG - 1 of the K slice into x_s (int32
    [BM, 4*BG], logical pair order), one commit group. xp: pointers [BM, BG, 4] to the slice's
    first step's pair c*BG + q of each row (rows past M read row M - 1: those columns of y are
    not stored); xcol [1, BG, 4]: its column in the step. Columns >= k_left (past K) are
    zero-filled: masks only there."""
    BM: gl.constexpr = xp.shape[0]
    BG: gl.constexpr = xp.shape[1]
    ptrs = gl.reshape(xp + 4 * g0, [BM, 4 * BG])
    if 8 * (g0 + BG) <= k_left:
        _cp(x_s, ptrs, None)
    else:
        mask, _ = gl.broadcast(xcol < k_left - 8 * g0, xp)
        _cp(x_s, ptrs, gl.reshape(mask, [BM, 4 * BG]))
    cp.commit_group()


@gluon.jit
def _w_words(nib_ptr, lo_ptr, roff, gi, g0, g_hi):
    """The nibble and low-byte words of groups g0 + gi [1, BG] of this thread's rows (roff: row
    offsets, rows clamped to the weight), zeros past g_hi: masks only there."""
    BG: gl.constexpr = gi.shape[1]
    if g0 + BG <= g_hi:
        nw = gl.load(nib_ptr + roff + g0 + gi, eviction_policy="evict_first")
        lo = gl.load(lo_ptr + roff + g0 + gi, eviction_policy="evict_first")
    else:
        m = g0 + gi < g_hi
        nw = gl.load(nib_ptr + roff + g0 + gi, mask=m, other=0, eviction_policy="evict_first")
        lo = gl.load(lo_ptr + roff + g0 + gi, mask=m, other=0, eviction_policy="evict_first")
    return nw, lo


@gluon.jit
def _w_copy(nib_s, lo_s, nib_ptr, lo_ptr, roff, gi, g0, g_hi):
    """Start copying the words of ``_w_words`` into the shared buffers nib_s, lo_s [BN, BG] by
    cp.async (no commit): each thread copies the words it decodes, so it reads them back with no
    barrier."""
    BG: gl.constexpr = gi.shape[1]
    if g0 + BG <= g_hi:
        _cp(nib_s, nib_ptr + roff + g0 + gi, None)
        _cp(lo_s, lo_ptr + roff + g0 + gi, None)
    else:
        m, _ = gl.broadcast(g0 + gi < g_hi, roff)
        _cp(nib_s, nib_ptr + roff + g0 + gi, m)
        _cp(lo_s, lo_ptr + roff + g0 + gi, m)


@gluon.jit
def _mma_step(acc, nw, lo, base4, x_s, xp, xcol, i, k_left, w_s, wargs, aL: gl.constexpr, wL: gl.constexpr,
              WST: gl.constexpr):
    """K step i of the slice: decode its words into the A registers; wait for x's tile i (this
    thread's copies, the proxy fence, then a barrier for every thread's); issue the wgmma; refill
    the x buffer of step i - 2 with step i + XS - 2 (every thread passed step i - 1's wait, so
    every warpgroup's product of step i - 2 is done); wait for step i - 1's product. Called twice
    per loop trip, so the two steps' A operands are distinct registers: a wgmma in flight reads
    its A registers until a wait retires it. WST > 0: the words come from the shared buffers
    w_s = (nib_s, lo_s), copied with x's tile (one commit group a step, XS - 2 steps ahead) and
    refilled with step i + XS - 2 (this thread read step i - 1's words: its buffer is free); nw,
    lo unused. wargs: (nib_ptr, lo_ptr, roff, gi, g_lo, g_hi)."""
    XS: gl.constexpr = x_s.shape[0]
    BM: gl.constexpr = x_s.shape[1]
    BG: gl.constexpr = x_s.shape[2] // 4
    if WST > 0:
        cp.wait_group(XS - 3)  # this thread's words and x copies of step i are in
        nib_s, lo_s = w_s
        nw = nib_s.index(i % WST).load(wL)
        lo = lo_s.index(i % WST).load(wL)
    a = _a_tile(nw, lo, base4, aL)
    if WST == 0:
        cp.wait_group(XS - 3)
    fence_async_shared()  # the copies' generic-proxy writes before wgmma's async-proxy reads
    _barrier()
    xt = _view(x_s.index(i % XS), gl.bfloat16, [BM, 8 * BG], x_layout(BG, 16))
    acc = warpgroup_mma(a, xt.permute((1, 0)), acc, is_async=True)
    nxt = i + XS - 2
    if WST > 0:
        nib_ptr, lo_ptr, roff, gi, g_lo, g_hi = wargs
        nib_s, lo_s = w_s
        _w_copy(nib_s.index(nxt % WST), lo_s.index(nxt % WST), nib_ptr, lo_ptr, roff, gi, g_lo + nxt * BG, g_hi)
    _x_copy(x_s.index(nxt % XS), xp, xcol, nxt * BG, k_left)
    return warpgroup_mma_wait(num_outstanding=1, deps=[acc])


@gluon.jit(**PER_WEIGHT)
def fixed_ra_kernel(x_ptr, lo_ptr, nib_ptr, eptr_ptr, ecol_ptr, eval_ptr, erow_ptr, b_ptr, y_ptr, ws_ptr,
                    M, N, K, G, stride_xm, stride_ym, base, MB, SPLIT,
                    BM: gl.constexpr, BN: gl.constexpr, BG: gl.constexpr, HAS_BIAS: gl.constexpr,
                    XS: gl.constexpr = 4, WST: gl.constexpr = 0):
    """y[M, N] = x[M, K] @ W.T (+ bias), x bf16 of M <= BM rows (BM 16, 32 or 64; K and x's row
    stride even, x 4-byte aligned), on an sm_90 GPU. Program (n tile of BN = 16 * num_warps rows
    of W: one warpgroup a 64 rows, K slice): grid (cdiv(N, BN), SPLIT); SPLIT > 1 writes fp32
    partial sums to ws[split, M, N] for ``splitk_reduce_kernel`` (escapes dealt among the
    slices). XS >= 3: shared buffers of x's tile (copied XS - 2 steps ahead); WST: 0, W's words
    loaded a step ahead in registers, else XS - 1: through that many shared buffers by cp.async,
    XS - 2 steps ahead. MB: autotuning key only."""
    NW: gl.constexpr = gl.num_warps()
    gl.static_assert(BN == 16 * NW and BM <= 64 and XS >= 3 and (WST == 0 or WST == XS - 1))
    acc_l: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[NW, 1], instr_shape=[16, BM, 16])
    aL: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=acc_l, k_width=2)
    wL: gl.constexpr = words_layout(BN, BG)
    qL: gl.constexpr = copy_layout(BM, BG, NW)
    n0 = gl.program_id(0) * BN
    split = gl.program_id(1)
    g_len = gl.cdiv(gl.cdiv(G, SPLIT), BG) * BG
    g_lo = split * g_len
    g_hi = gl.minimum(G, g_lo + g_len)
    # W's words: this thread's groups of rows r, r + 8 (rows past N read row N - 1: not stored)
    gi = gl.arange(0, BG, layout=gl.SliceLayout(0, wL))[None, :]
    rows = gl.minimum(n0 + gl.arange(0, BN, layout=gl.SliceLayout(1, wL))[:, None], N - 1)
    roff = rows.to(gl.int64) * G
    base4 = (base * 0x01010101).to(gl.uint32)
    # x as column pairs: pointers to pair c*BG + q of each row at the slice's first step
    xm = gl.minimum(gl.arange(0, BM, layout=gl.SliceLayout(1, gl.SliceLayout(2, qL)))[:, None, None], M - 1)
    xq = gl.arange(0, BG, layout=gl.SliceLayout(0, gl.SliceLayout(2, qL)))[None, :, None]
    xc = gl.arange(0, 4, layout=gl.SliceLayout(0, gl.SliceLayout(1, qL)))[None, None, :]
    xp = x_ptr.to(gl.pointer_type(gl.int32), bitcast=True) + xm.to(gl.int64) * (stride_xm // 2) + 4 * g_lo \
        + (xc * BG + xq)
    xcol = 2 * (xc * BG + xq)
    k_left = K - 8 * g_lo
    # first escapes: loaded now, used at the end
    e_start, e_end = _esc_rows(eptr_ptr, n0, N, split, acc_l, BN, True)
    c0, v0 = _esc_load(ecol_ptr, eval_ptr, e_start, e_end)
    c1, v1 = _esc_load(ecol_ptr, eval_ptr, e_start + SPLIT, e_end)
    c2, v2 = _esc_load(ecol_ptr, eval_ptr, e_start + 2 * SPLIT, e_end)
    c3, v3 = _esc_load(ecol_ptr, eval_ptr, e_start + 3 * SPLIT, e_end)
    x_s = gl.allocate_shared_memory(gl.int32, [XS, BM, 4 * BG], x_layout(BG, 32))
    wargs = (nib_ptr, lo_ptr, roff, gi, g_lo, g_hi)
    if WST > 0:
        wsL: gl.constexpr = gl.SwizzledSharedLayout(1, 1, 1, [1, 0])
        w_s = (gl.allocate_shared_memory(gl.int32, [WST, BN, BG], wsL),
               gl.allocate_shared_memory(gl.int64, [WST, BN, BG], wsL))
    else:
        w_s = (x_s, x_s)  # not used
    for st in gl.static_range(XS - 2):
        if WST > 0:
            _w_copy(w_s[0].index(st), w_s[1].index(st), nib_ptr, lo_ptr, roff, gi, g_lo + st * BG, g_hi)
        _x_copy(x_s.index(st), xp, xcol, st * BG, k_left)
    if WST > 0:  # placeholders (the words come from w_s)
        nw0 = gi
        lo0 = gi
        nw1 = gi
        lo1 = gi
    else:
        nw0, lo0 = _w_words(nib_ptr, lo_ptr, roff, gi, g_lo, g_hi)
    acc = gl.zeros([BN, BM], gl.float32, acc_l)
    steps = gl.maximum(gl.cdiv(g_hi - g_lo, BG), 0)
    for j in range(steps // 2):
        # each step's words are loaded a step ahead: their latency hides behind a step
        if WST == 0:
            nw1, lo1 = _w_words(nib_ptr, lo_ptr, roff, gi, g_lo + (2 * j + 1) * BG, g_hi)
        acc = _mma_step(acc, nw0, lo0, base4, x_s, xp, xcol, 2 * j, k_left, w_s, wargs, aL, wL, WST)
        if WST == 0:
            nw0, lo0 = _w_words(nib_ptr, lo_ptr, roff, gi, g_lo + (2 * j + 2) * BG, g_hi)
        acc = _mma_step(acc, nw1, lo1, base4, x_s, xp, xcol, 2 * j + 1, k_left, w_s, wargs, aL, wL, WST)
    if steps % 2 == 1:
        acc = _mma_step(acc, nw0, lo0, base4, x_s, xp, xcol, steps - 1, k_left, w_s, wargs, aL, wL, WST)
    acc = warpgroup_mma_wait(num_outstanding=0, deps=[acc])
    cp.wait_group(0)
    acc = _escapes_fma(acc, x_ptr, stride_xm, M, ecol_ptr, eval_ptr, base, e_start, e_end, SPLIT, c0, v0, c1, v1,
                       c2, v2, c3, v3, acc_l, BM, True)
    _store(acc, b_ptr, y_ptr, ws_ptr, 0, n0, M, N, stride_ym, split, SPLIT, acc_l, BM, BN, HAS_BIAS, True)


def configs(bm: int) -> list:
    """Configs for ``bm`` rows of x (16, 32, 64): 64 rows of W (4 warps), K steps of 8*BG columns,
    XS buffers of x, W's words in registers (WST 0) or through XS - 1 shared buffers. H200,
    2026-12-01 (benchmarks/experiments/ra_kernel.py, the four Llama shapes; HISTORY.md "kern7"):
    at 32 rows 128-column steps took every shape (64-column ones 6-29 % slower, 128 rows of W a
    program with 8 warps sharing x's tile 8-14 % slower); W's words through shared buffers were
    2-14 % faster at one or two K slices on Gaussian weights, 3 % slower at four, 13-25 %
    slower on Student-t ones (the registers' prefetch was shipped everywhere). ptxas for sm_90
    (Triton 3.6): 158-246 registers, no spills. Taller blocks (128-256 rows) were built and
    measured slower than the routes there and left out."""
    def C(**kw):
        return triton.Config({"BM": bm, "BN": 64, **kw}, num_warps=4, num_stages=1)
    if bm <= 32:
        return [C(BG=16, XS=4), C(BG=16, XS=4, WST=3)]
    return [C(BG=16, XS=4, WST=3), C(BG=8, XS=5)]


__all__ = ["fixed_ra_kernel", "configs", "words_layout", "copy_layout"]
