"""The fixed-rate tile decoded straight into the tensor cores' registers (3-32 rows of x, routed
by ``fixed.MMA_MAX_M``; built for blocks of 16-128 rows).

``fixed_mm_kernel`` (Triton) decodes a W tile in a layout of its own choosing; ``tl.dot`` then
moves it through shared memory into the layout the tensor cores read. At 16 activation rows
that move, not the bytes, set the pace: a Llama-2-7B layer took 1.13x cuBLAS's time while
reading 0.75x the bytes; with this kernel 1.02x, and 0.88-0.94x at 3-8 rows (H100,
benchmarks/mma_kernel.py, benchmarks/RESULTS.md). This kernel is written in Gluon (Triton's explicit-layout
language) so the layouts are ours: every thread loads exactly the groups of 8 columns whose
values it holds as ``mma.sync``'s B operand (``DotOperandLayout`` with k_width 8: a thread holds
8 consecutive k of one output row per 32 columns), decodes them with the SWAR steps of
``fixed_kernels._pairs`` and hands the registers to ``mma_v2`` as they are: no shared memory at
all (``convert_layout(..., assert_trivial=True)`` proves it at compile time). The next K step's
words are loaded before this step is decoded (a register prefetch), since Gluon does not
pipeline loops by itself.

The mma layout repeats the 16-row instruction over a block of BM rows of x, so each W tile is
decoded once per block and its B registers serve all of them. Escapes (``ESC_FMA``, the
default) are added after the main loop with CUDA-core FMAs: the accumulator moves once to a
layout where each thread holds one output column, and each thread walks its row's CSR list,
x[m, col] * (value - placeholder) in fp32; the first four escapes of every row are loaded
before the main loop. H100, Student-t weights (0.2 % escapes), M = 16: 0.98-1.08x cuBLAS where
the one-hot mma blocks below (``ESC_FMA=False``: two more ``mma_v2`` per 32 escapes, x times
the value minus x times the placeholder, exact bf16 operands) took 1.31-1.39x. bf16 activations only; needs Triton with Gluon (3.5+) and an NVIDIA
GPU of compute capability 8.0 or more (``fixed._mma_ready`` checks both before this module is
imported). Layout of the weights: docs/CODEC_LAYOUT.md.
"""

from __future__ import annotations

import triton
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.ampere import async_copy as cp
from triton.experimental.gluon.language.nvidia.ampere import mma_v2

from .fixed_kernels import PER_WEIGHT, _pairs


@gluon.jit
def _w_tile(nw, lo, base4, bL: gl.constexpr, BG: gl.constexpr, BN: gl.constexpr):
    """Words of groups [BG, BN] -> W.T tile [8*BG, BN] bf16 in the B-operand layout bL."""
    lo = lo.to(gl.uint64, bitcast=True)
    w0, w1, w2, w3 = _pairs(nw.to(gl.uint32, bitcast=True), (lo & 0xFFFFFFFF).to(gl.uint32), (lo >> 32).to(gl.uint32),
                            base4)
    t = gl.join(gl.join(w0, w2), gl.join(w1, w3))  # [BG, BN, i, j]: pair word 2i + j
    h = gl.join((t & 0xFFFF).to(gl.uint16), (t >> 16).to(gl.uint16))  # column 4i + 2j + half
    h = gl.permute(h, (0, 2, 3, 4, 1))
    wt = gl.reshape(h, [8 * BG, BN]).to(gl.bfloat16, bitcast=True)
    return gl.convert_layout(wt, bL, assert_trivial=True)


@gluon.jit
def _escape_meta(ecol_ptr, eval_ptr, erow_ptr, e0, e_end, aL: gl.constexpr, bL: gl.constexpr, EB: gl.constexpr):
    """Column (for the x gather), bf16 bits and row of escapes e0 .. e0+EB-1 (those < e_end)."""
    ea = e0 + gl.arange(0, EB, layout=gl.SliceLayout(0, aL))
    col = gl.load(ecol_ptr + ea, mask=ea < e_end, other=0)
    eb = e0 + gl.arange(0, EB, layout=gl.SliceLayout(1, bL))
    v = gl.load(eval_ptr + eb, mask=eb < e_end, other=0) & 0xFFFF
    r = gl.load(erow_ptr + eb, mask=eb < e_end, other=-1).to(gl.int32)
    return col, v, r


@gluon.jit
def _escapes(acc, x_ptr, stride_xm, M, eptr_ptr, ecol_ptr, eval_ptr, erow_ptr, n0, N, base, split, SPLIT,
             aL: gl.constexpr, bL: gl.constexpr, BM: gl.constexpr, BN: gl.constexpr, EB: gl.constexpr):
    """acc[m, n] += x[m, col] * value - x[m, col] * placeholder over the escapes of rows
    n0..n0+BN-1, blocks of EB escapes dealt round-robin to the SPLIT K slices (each adds its
    share to its partial sum). Software-pipelined by hand, two blocks deep (Gluon does not
    pipeline): the next block's x gather and the one after's column/value/row loads are in
    flight while this block multiplies, so a tile with many escapes does not wait on memory
    latency once per block."""
    e_end = gl.load(eptr_ptr + gl.minimum(n0 + BN, N))
    e_first = gl.load(eptr_ptr + n0) + split * EB
    step = EB * SPLIT
    xm = gl.arange(0, BM, layout=gl.SliceLayout(1, aL))[:, None]
    xrow = x_ptr + xm.to(gl.int64) * stride_xm
    xmask = xm < M
    on = n0 + gl.arange(0, BN, layout=gl.SliceLayout(0, bL))[None, :]
    col, v, r = _escape_meta(ecol_ptr, eval_ptr, erow_ptr, e_first, e_end, aL, bL, EB)
    xe = gl.load(xrow + col[None, :], mask=xmask, other=0.0)
    col, v_next, r_next = _escape_meta(ecol_ptr, eval_ptr, erow_ptr, e_first + step, e_end, aL, bL, EB)
    for e0 in range(e_first, e_end, step):
        xe_next = gl.load(xrow + col[None, :], mask=xmask, other=0.0)
        col, v_after, r_after = _escape_meta(ecol_ptr, eval_ptr, erow_ptr, e0 + 2 * step, e_end, aL, bL, EB)
        hit = r[:, None] == on
        neg_ph = ((v & 0x80FF) | ((base + 7) << 8)) ^ 0x8000
        acc = mma_v2(xe, gl.where(hit, v[:, None], 0).to(gl.uint16).to(gl.bfloat16, bitcast=True), acc)
        acc = mma_v2(xe, gl.where(hit, neg_ph[:, None], 0).to(gl.uint16).to(gl.bfloat16, bitcast=True), acc)
        xe = xe_next
        v = v_next
        r = r_next
        v_next = v_after
        r_next = r_after
    return acc


@gluon.jit
def _esc_rows(eptr_ptr, n0, N, split, eL: gl.constexpr, BN: gl.constexpr, T: gl.constexpr = False):
    """CSR range of the escapes of rows n0 .. n0+BN-1 (one row a thread column of eL; T: a
    thread row of eL, for an accumulator of y.T), the first moved on by this K slice's index:
    slice s takes escapes s, s + SPLIT, ... of a row."""
    on = n0 + gl.arange(0, BN, layout=gl.SliceLayout(1 if T else 0, eL))
    return gl.load(eptr_ptr + gl.minimum(on, N)) + split, gl.load(eptr_ptr + gl.minimum(on + 1, N))


@gluon.jit
def _esc_load(ecol_ptr, eval_ptr, e, end):
    """Column and bf16 bits of escape e of each row (e < end; else column 0, value 0)."""
    em = e < end
    return gl.load(ecol_ptr + e, mask=em, other=0), gl.load(eval_ptr + e, mask=em, other=0)


@gluon.jit
def _esc_fma(acc, xrow, xmask, col, v, em, base, T: gl.constexpr = False):
    """acc[m, n] += x[m, col[n]] * (value[n] - placeholder[n]) in fp32 where em[n] (T: acc[n, m],
    xrow and xmask [1, BM])."""
    v = v & 0xFFFF
    ph = (v & 0x80FF) | ((base + 7) << 8)
    d = gl.where(em, (v << 16).to(gl.float32, bitcast=True) - (ph << 16).to(gl.float32, bitcast=True), 0.0)
    if T:
        acc += gl.load(xrow + col[:, None], mask=xmask & em[:, None], other=0.0).to(gl.float32) * d[:, None]
    else:
        acc += gl.load(xrow + col[None, :], mask=xmask & em[None, :], other=0.0).to(gl.float32) * d[None, :]
    return acc


@gluon.jit
def _escapes_fma(acc, x_ptr, stride_xm, M, ecol_ptr, eval_ptr, base, start, end, SPLIT, c0, v0, c1, v1, c2, v2,
                 c3, v3, eL: gl.constexpr, BM: gl.constexpr, T: gl.constexpr = False):
    """acc (layout eL: each thread holds rows of one output column n) += the escapes of each row n
    with CUDA-core FMAs: every thread walks its own row's CSR list, off the tensor cores and with
    no one-hot blocks. The first four escapes of each row (c0, v0 .. c3, v3) were loaded before
    the main loop, so their latency hid behind it; rows with more take them two at a time, the
    next two's columns and values loaded while these two multiply. T: acc is y.T's tile [BN, BM]
    (eL any layout of it: the wgmma accumulator's own, no conversion)."""
    if T:
        om = gl.arange(0, BM, layout=gl.SliceLayout(0, eL))[None, :]
    else:
        om = gl.arange(0, BM, layout=gl.SliceLayout(1, eL))[:, None]
    xrow = x_ptr + om.to(gl.int64) * stride_xm
    xmask = om < M
    acc = _esc_fma(acc, xrow, xmask, c0, v0, start < end, base, T)
    acc = _esc_fma(acc, xrow, xmask, c1, v1, start + SPLIT < end, base, T)
    most = gl.max(end - start, axis=0)
    for j in range(2 * SPLIT, most, 2 * SPLIT):
        c0, v0 = _esc_load(ecol_ptr, eval_ptr, start + j + 2 * SPLIT, end)
        c1, v1 = _esc_load(ecol_ptr, eval_ptr, start + j + 3 * SPLIT, end)
        acc = _esc_fma(acc, xrow, xmask, c2, v2, start + j < end, base, T)
        acc = _esc_fma(acc, xrow, xmask, c3, v3, start + j + SPLIT < end, base, T)
        c2 = c0
        v2 = v0
        c3 = c1
        v3 = v1
    return acc


@gluon.jit
def _store(acc, b_ptr, y_ptr, ws_ptr, m0, n0, M, N, stride_ym, split, SPLIT, L: gl.constexpr, BM: gl.constexpr,
           BN: gl.constexpr, HAS_BIAS: gl.constexpr, T: gl.constexpr = False):
    """acc [BM, BN] (layout L; T: [BN, BM], y.T's tile) -> y rows m0.., columns n0.. (bias
    added), or ws[split] for SPLIT > 1."""
    if T:
        om = m0 + gl.arange(0, BM, layout=gl.SliceLayout(0, L))[None, :]
        on = n0 + gl.arange(0, BN, layout=gl.SliceLayout(1, L))[:, None]
    else:
        om = m0 + gl.arange(0, BM, layout=gl.SliceLayout(1, L))[:, None]
        on = n0 + gl.arange(0, BN, layout=gl.SliceLayout(0, L))[None, :]
    ym = (om < M) & (on < N)
    if SPLIT == 1:
        if HAS_BIAS:
            acc += gl.load(b_ptr + on, mask=on < N, other=0.0).to(gl.float32)
        gl.store(y_ptr + om.to(gl.int64) * stride_ym + on, acc.to(y_ptr.dtype.element_ty), mask=ym)
    else:
        gl.store(ws_ptr + (split.to(gl.int64) * M + om) * N + on, acc, mask=ym)


@gluon.jit
def _w_loads(nib_ptr, lo_ptr, roff, rmask, gi, g0, g_hi):
    """The nibble and low-byte words of groups g0 + gi (those < g_hi)."""
    g = g0 + gi
    m = rmask & (g < g_hi)
    return gl.load(nib_ptr + roff + g, mask=m, other=0), gl.load(lo_ptr + roff + g, mask=m, other=0)


@gluon.jit
def _w_copies(nib_s, lo_s, nib_ptr, lo_ptr, roff, rmask, gi, g0, g_hi):
    """Start copying the nibble and low-byte words of groups g0 + gi (those < g_hi) into the shared
    buffers nib_s, lo_s (cp.async, one commit group): each thread copies the words it decodes."""
    g = g0 + gi
    m = rmask & (g < g_hi)
    _cp(nib_s, nib_ptr + roff + g, m)
    _cp(lo_s, lo_ptr + roff + g, m)
    cp.commit_group()


# cp.async into shared memory is ``async_load`` in Triton 3.7+, ``async_copy_global_to_shared``
# before. Chosen here, not by a constexpr branch: Triton hashes every function a kernel's source
# names, in either branch, and a name missing from the installed Triton fails that hash (seen on
# Triton 3.6 with ``async_load``)
if hasattr(cp, "async_load"):
    @gluon.jit
    def _cp(smem, ptrs, mask):
        """Start a cp.async copy of ``ptrs`` (where ``mask``) into ``smem``, each thread its own
        elements (no commit)."""
        cp.async_load(smem, ptrs, mask=mask)
else:
    @gluon.jit
    def _cp(smem, ptrs, mask):
        """Start a cp.async copy of ``ptrs`` (where ``mask``) into ``smem``, each thread its own
        elements (no commit)."""
        cp.async_copy_global_to_shared(smem, ptrs, mask=mask)


@gluon.jit
def _w_stream(nib_ptr, lo_ptr, roff, rmask, gi, g_lo, g_hi, wsL: gl.constexpr, STAGES: gl.constexpr,
              BG: gl.constexpr):
    """STAGES shared buffers for the words of K steps of BG groups (shape that of roff + gi) and the
    copies of the first STAGES - 1 steps started (see ``_w_stream_next``)."""
    shape: gl.constexpr = (roff + gi).shape
    nib_s = gl.allocate_shared_memory(gl.int32, [STAGES, shape[0], shape[1]], wsL)
    lo_s = gl.allocate_shared_memory(gl.int64, [STAGES, shape[0], shape[1]], wsL)
    for st in gl.static_range(STAGES - 1):
        _w_copies(nib_s.index(st), lo_s.index(st), nib_ptr, lo_ptr, roff, rmask, gi, g_lo + st * BG, g_hi)
    return nib_s, lo_s


@gluon.jit
def _w_stream_next(nib_s, lo_s, nib_ptr, lo_ptr, roff, rmask, gi, i, g0, g_hi, L: gl.constexpr,
                   STAGES: gl.constexpr, BG: gl.constexpr):
    """Step i (groups g0..): start the copy of step i + STAGES - 1's words into the buffer step
    i - 1 read, wait for step i's, and return them (nibble, low-byte words) in layout L. Each
    thread copies and reads only its own words, so no barrier is needed: waiting on its own copy
    groups makes them visible to it, and it refills a buffer only after it consumed its reads."""
    nxt = (i + STAGES - 1) % STAGES
    _w_copies(nib_s.index(nxt), lo_s.index(nxt), nib_ptr, lo_ptr, roff, rmask, gi, g0 + (STAGES - 1) * BG, g_hi)
    cp.wait_group(STAGES - 1)
    cur = i % STAGES
    return nib_s.index(cur).load(L), lo_s.index(cur).load(L)


@gluon.jit
def _w_stream_end():
    """Wait for the copies started past the last step (their buffers are freed with the program)."""
    cp.wait_group(0)


@gluon.jit
def _x_loads(xrow, xk, xmask, g0, K):
    """x's columns of groups g0 .. g0 + BG - 1."""
    cols = 8 * g0 + xk
    return gl.load(xrow + cols, mask=xmask & (cols < K), other=0.0)


@gluon.jit
def _step_loads(nib_ptr, lo_ptr, roff, rmask, gi, g0, g_hi, xrow, xk, xmask, K):
    """The nibble and low-byte words of groups g0 + gi (those < g_hi) and x's columns for them."""
    nw, lo = _w_loads(nib_ptr, lo_ptr, roff, rmask, gi, g0, g_hi)
    return nw, lo, _x_loads(xrow, xk, xmask, g0, K)


@gluon.jit
def _x_tile(x_ptr, stride_xm, m_left, L: gl.constexpr, BM: gl.constexpr, BG: gl.constexpr):
    """Column offsets [1, 8*BG], row pointers [BM, 1] and row mask of x's tile in layout L."""
    xm = gl.arange(0, BM, layout=gl.SliceLayout(1, L))[:, None]
    return (gl.arange(0, 8 * BG, layout=gl.SliceLayout(0, L))[None, :], x_ptr + xm.to(gl.int64) * stride_xm,
            xm < m_left)


@gluon.jit
def _program(x_ptr, stride_xm, M, BM: gl.constexpr, BN: gl.constexpr):
    """This program's K slice, first row of x and of W, x's pointer at its row block and the rows
    left from there: program axis 0 walks the row blocks of x fastest (the programs that decode
    one W tile run together: its second read comes from L2)."""
    pid = gl.program_id(0)
    n_mb = gl.cdiv(M, BM)
    m0 = (pid % n_mb) * BM
    return gl.program_id(1), m0, (pid // n_mb) * BN, x_ptr + m0.to(gl.int64) * stride_xm, M - m0


@gluon.jit(**PER_WEIGHT)
def fixed_mma_kernel(x_ptr, lo_ptr, nib_ptr, eptr_ptr, ecol_ptr, eval_ptr, erow_ptr, b_ptr, y_ptr, ws_ptr,
                     M, N, K, G, stride_xm, stride_ym, base, MB, SPLIT,
                     BM: gl.constexpr, BN: gl.constexpr, BG: gl.constexpr, EB: gl.constexpr,
                     HAS_BIAS: gl.constexpr, XPF: gl.constexpr = True, ESC_FMA: gl.constexpr = True,
                     STAGES: gl.constexpr = 0):
    """y[M, N] = x[M, K] @ W.T (+ bias), x bf16; program (m block + n tile, K slice): axis 0 walks
    the cdiv(M, BM) row blocks of x fastest, so the programs that decode one W tile run together
    (its second read comes from L2). Each W tile is decoded once per program and multiplied into
    all BM rows: the mma layout repeats the 16-row instruction BM / 16 times over the B registers
    it already holds. SPLIT > 1: slice s writes its fp32 partial sum to ws[s, M, N] (its share of
    the escapes included) for ``splitk_reduce_kernel``; SPLIT == 1 writes y (bias added).
    ESC_FMA: escapes by CUDA-core FMAs, each thread walking one row's list (``_escapes_fma``);
    False: by one-hot mma blocks (``_escapes``). XPF: prefetch x's next tile with W's words (False: load it in the step that uses it, which
    holds one [BM, 8*BG] tile of x in every warp's registers instead of two). STAGES > 0: W's words
    come through that many shared-memory buffers filled by cp.async (x as with XPF); 0: W's next
    words are prefetched in registers. MB: autotuning key only."""
    NW: gl.constexpr = gl.num_warps()
    mma: gl.constexpr = gl.NVMMADistributedLayout(version=[2, 0], warps_per_cta=[1, NW], instr_shape=[16, 8])
    aL: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=mma, k_width=8)
    bL: gl.constexpr = gl.DotOperandLayout(operand_index=1, parent=mma, k_width=8)
    # groups [BG, BN]: lanes 0-1 walk 4 groups, lanes 2-4 8 rows, warps the row blocks: bL / 8 in k
    gL: gl.constexpr = gl.BlockedLayout([1, 1], [4, 8], [1, NW], [0, 1])
    split, m0, n0, x_ptr, m_left = _program(x_ptr, stride_xm, M, BM, BN)
    gi = gl.arange(0, BG, layout=gl.SliceLayout(1, gL))[:, None]
    rows = n0 + gl.arange(0, BN, layout=gl.SliceLayout(0, gL))[None, :]
    roff = rows.to(gl.int64) * G
    rmask = rows < N
    xk, xrow, xmask = _x_tile(x_ptr, stride_xm, m_left, aL, BM, BG)
    base4 = (base * 0x01010101).to(gl.uint32)
    acc = gl.zeros([BM, BN], gl.float32, mma)
    g_len = gl.cdiv(gl.cdiv(G, SPLIT), BG) * BG
    g_lo = split * g_len
    g_hi = gl.minimum(G, g_lo + g_len)
    # escapes' layout: a thread holds rows of one output column (TM threads share a column)
    TM: gl.constexpr = 32 * NW // BN
    eL: gl.constexpr = gl.BlockedLayout([BM // TM, 1], [TM, 32 // TM], [1, NW], [0, 1])
    if ESC_FMA:  # the first four escapes of each row: loaded now, used after the main loop
        e_start, e_end = _esc_rows(eptr_ptr, n0, N, split, eL, BN)
        c0, v0 = _esc_load(ecol_ptr, eval_ptr, e_start, e_end)
        c1, v1 = _esc_load(ecol_ptr, eval_ptr, e_start + SPLIT, e_end)
        c2, v2 = _esc_load(ecol_ptr, eval_ptr, e_start + 2 * SPLIT, e_end)
        c3, v3 = _esc_load(ecol_ptr, eval_ptr, e_start + 3 * SPLIT, e_end)
    if STAGES > 0:
        # W's words stream through STAGES shared buffers by cp.async, STAGES - 1 steps ahead: more
        # bytes in flight than a register prefetch can hold (H100 ncu, one step ahead: warps
        # stalled on global loads half the time at 12 % occupancy, DRAM 44-48 % busy)
        nib_s, lo_s = _w_stream(nib_ptr, lo_ptr, roff, rmask, gi, g_lo, g_hi, gl.SwizzledSharedLayout(1, 1, 1, [0, 1]),
                                STAGES, BG)
        xt = _x_loads(xrow, xk, xmask, g_lo, K)
    else:
        nw, lo, xt = _step_loads(nib_ptr, lo_ptr, roff, rmask, gi, g_lo, g_hi, xrow, xk, xmask, K)
    i = 0
    for g0 in range(g_lo, g_hi, BG):
        # the next step's words first: their latency hides behind this step's decode
        if STAGES > 0:
            xt_next = _x_loads(xrow, xk, xmask, g0 + BG, K)
            nw, lo = _w_stream_next(nib_s, lo_s, nib_ptr, lo_ptr, roff, rmask, gi, i, g0, g_hi, gL, STAGES, BG)
        elif XPF:
            nw_next, lo_next, xt_next = _step_loads(nib_ptr, lo_ptr, roff, rmask, gi, g0 + BG, g_hi, xrow, xk, xmask,
                                                    K)
        else:
            nw_next, lo_next = _w_loads(nib_ptr, lo_ptr, roff, rmask, gi, g0 + BG, g_hi)
            xt = _x_loads(xrow, xk, xmask, g0, K)
        acc = mma_v2(xt, _w_tile(nw, lo, base4, bL, BG, BN), acc)
        if STAGES == 0:
            nw = nw_next
            lo = lo_next
        if XPF or STAGES > 0:
            xt = xt_next
        i += 1
    if STAGES > 0:
        _w_stream_end()
    if ESC_FMA:
        acc = _escapes_fma(gl.convert_layout(acc, eL), x_ptr, stride_xm, m_left, ecol_ptr, eval_ptr, base,
                           e_start, e_end, SPLIT, c0, v0, c1, v1, c2, v2, c3, v3, eL, BM)
        _store(acc, b_ptr, y_ptr, ws_ptr, m0, n0, M, N, stride_ym, split, SPLIT, eL, BM, BN, HAS_BIAS)
    else:
        acc = _escapes(acc, x_ptr, stride_xm, m_left, eptr_ptr, ecol_ptr, eval_ptr, erow_ptr, n0, N, base, split,
                       SPLIT, aL, bL, BM, BN, EB)
        _store(acc, b_ptr, y_ptr, ws_ptr, m0, n0, M, N, stride_ym, split, SPLIT, mma, BM, BN, HAS_BIAS)


def configs(bm: int = 16) -> list:
    """Autotuning configs for up to ``bm`` rows of x (16, 32, 64, 128): BM rows of x x BN rows of W
    x 8*BG columns per K step (a block of BM < bm rows decodes each W tile once per block). On the
    H100 at M = 16 one of the 16-row ones was the fastest tile on each of 8 Llama shapes; 128 x 128
    with 8 warps and 64 x 64 never were (benchmarks/RESULTS.md). Taller blocks take shorter K
    steps: every warp holds x's [BM, 8*BG] tile in registers (twice with XPF; ptxas for sm_90:
    BM = 64 with BG = 8 and BM = 128 with XPF spill). STAGES: W's words through 3 shared buffers by
    cp.async instead of registers (the prefetch one step ahead left half the warps' time on global
    loads, H100 ncu); H100 tuning, 2026-11-26: never chosen at 16 and 32 rows (3 and 4 stages
    offered), chosen at 64 rows on 14336x4096 only, timing as the register prefetch: not offered
    at 16-32 rows."""
    C = lambda nw=4, **kw: triton.Config(kw, num_warps=nw, num_stages=1)  # noqa: E731
    if bm == 16:
        return [C(BM=16, BN=64, BG=16), C(BM=16, BN=64, BG=32), C(BM=16, BN=32, BG=16), C(BM=16, BN=32, BG=32),
                C(BM=16, BN=128, BG=8)]
    if bm == 32:
        return [C(BM=32, BN=64, BG=8), C(BM=32, BN=64, BG=16), C(8, BM=32, BN=128, BG=8), C(BM=32, BN=128, BG=8),
                C(BM=16, BN=64, BG=16)]
    if bm == 64:
        return [C(BM=64, BN=64, BG=4), C(8, BM=64, BN=128, BG=4), C(BM=32, BN=64, BG=8), C(BM=64, BN=64, BG=8, XPF=False),
                C(BM=64, BN=64, BG=8, STAGES=3), C(BM=32, BN=64, BG=16, STAGES=3)]
    return [C(BM=64, BN=64, BG=4), C(8, BM=64, BN=128, BG=4), C(BM=128, BN=64, BG=4, XPF=False),
            C(8, BM=128, BN=128, BG=4, XPF=False), C(BM=64, BN=64, BG=8, STAGES=3)]


__all__ = ["fixed_mma_kernel", "configs"]
