"""The fixed-rate tile decoded by producer warps into shared memory and multiplied by a consumer
warpgroup's ``wgmma`` (warp specialisation; 17-256 rows of bf16 x; Gluon, sm_90). Routed for
33-128 rows (``fixed.WS_MIN_M``, ``WS_MAX_M``).

Why: the single-role kernels (:mod:`wcodec.gpu.fixed_mma`, :mod:`wcodec.gpu.fixed_wgmma`) run
load, decode and MMA in series in every warp; with 111-255 registers a thread they keep 8-16 warps
per SM, and half the warps' cycles wait on global loads (H100 ncu, benchmarks/HISTORY.md). Here
the roles are split (``gl.warp_specialize``):

- the decoder partition (DW warps, no accumulator) streams W's words through WST shared buffers
  by cp.async, WST - 1 steps ahead, and x's tiles by cp.async into the consumer's buffers, XL
  steps ahead; it decodes the words with the SWAR steps of ``fixed_kernels._pairs``, stores the
  bf16 tile into one of STAGES buffers and arrives on its ``ready`` barrier;
- the default partition (one warpgroup) waits on ``ready``, issues ``wgmma`` asynchronously and
  releases a buffer (``empty`` barrier) once the product that read it is done; after the loop it
  adds the escapes and stores y (or the K slice's fp32 partial sum);
- optionally (EW > 0) an escape partition sums the slice's escapes, x[m, col] * (value -
  placeholder), into shared memory while the main loop runs; the consumer adds that block.

The product is computed swapped (y.T = W x.T): W's tile is wgmma's A operand ([64, 8*BG]) and x's
tile the B operand ([8*BG, BM], BM = all rows of x, 32-256), so each W tile is decoded once per
program for all rows of x. H100, 2026-11-26 (benchmarks/RESULTS.md, fourth round): 1.21-1.56x
cuBLAS at 64 rows, 1.59-2.15x at 128 (the route before: 1.44-1.70x, 1.92-2.37x). Layout of the
weights: docs/CODEC_LAYOUT.md.
"""

from __future__ import annotations

import inspect

import triton
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.ampere import async_copy as cp
from triton.experimental.gluon.language.nvidia.hopper import (fence_async_shared, mbarrier, warpgroup_mma,
                                                              warpgroup_mma_wait)

from .fixed_kernels import PER_WEIGHT
from .fixed_mma import _cp, _esc_load, _esc_rows, _escapes_fma, _store, _w_copies
from .fixed_wgmma import _decode_rows, _tile_rows

#: Triton 3.6+ takes ``warp_specialize([(fn, args), ...], warps, regs)``; 3.5 took the default
#: partition's args and function, then the workers' (the kernel is compiled for the one installed)
_WS_LIST = "functions_and_args" in inspect.signature(gl.warp_specialize).parameters
# the CTA (here: partition) barrier is ``gl.barrier`` in Triton 3.7+, ``gl.thread_barrier`` before;
# chosen here, not in a constexpr branch (see fixed_mma._cp)
if hasattr(gl, "barrier"):
    @gluon.jit
    def _barrier():
        gl.barrier()
else:
    @gluon.jit
    def _barrier():
        gl.thread_barrier()


@gluon.jit
def _x_copy(x_s, xrow, xk, xmask, g0, K):
    """Start copying x's columns of groups g0 .. g0 + BG - 1 into x_s (cp.async, one commit group)."""
    cols = 8 * g0 + xk
    _cp(x_s, xrow + cols, xmask & (cols < K))
    cp.commit_group()


@gluon.jit
def _decoder(lo_ptr, nib_ptr, x_ptr, ecol_ptr, eval_ptr, eptr_ptr, w_s, x_s, nib_s, lo_s, e_s, ready, empty, esc_bar,
             stride_xm, M, N, K, G, base, n0, split, SPLIT, g_lo, g_hi, BM: gl.constexpr, BN: gl.constexpr,
             BG: gl.constexpr, DW: gl.constexpr, XL: gl.constexpr, VG: gl.constexpr, EW: gl.constexpr):
    """Producer: for each K step i of BG groups, W's decoded tile and x's tile into buffer
    i % STAGES, then ``ready``. Nothing waits in registers: W's words come through WST shared
    buffers by cp.async, WST - 1 steps ahead (each thread copies and reads back its own words),
    x's tile by cp.async straight into the buffer of step i + XL once the consumer released it
    (XL <= STAGES - 2: the consumer releases a buffer when it takes the step after).
    Why: with the words loaded one step ahead in registers, each step waited a global load's
    latency (H100, 4096x4096, M = 32: 28 us, 2x cuBLAS), and a [256, 64] x tile with its
    prefetch took 128 registers a thread (10x cuBLAS at 256 rows). The workers share one
    signature (``_escaper``'s): Triton 3.5's warp_specialize passes one argument tuple to all."""
    STAGES: gl.constexpr = w_s.shape[0]
    WST: gl.constexpr = nib_s.shape[0]
    # words [BN, BG]: a thread copies and decodes VG consecutive groups of a row (VG = 4: 16-byte
    # cp.async of the nibble words, two of the low bytes; VG = 1: one 4- and one 8-byte copy a group)
    TG: gl.constexpr = min(BG // VG, 32)
    wL: gl.constexpr = gl.BlockedLayout([1, VG], [32 // TG, TG], [DW, 1], [1, 0])
    TX: gl.constexpr = min(BG, 32)
    xL: gl.constexpr = gl.BlockedLayout([1, 8], [32 // TX, TX], [DW, 1], [1, 0])
    gi, roff, rmask, xk, xrow, xmask, base4 = _tile_rows(x_ptr, stride_xm, M, n0, N, G, base, wL, xL, BM, BN, BG)
    # commit groups in issue order: x_0 .. x_{XL-1}, w_0 .. w_{WST-2}, then per step i: x_{i+XL},
    # w_{i+WST-1}. x_i has 2 XL + 1 groups after it when step i needs it (XL + WST at i = 0), w_i
    # 2 WST - 2 (WST at i = 0): waiting until at most min(2 XL + 1, WST) are pending covers both
    PENDING: gl.constexpr = min(2 * XL + 1, WST)
    for st in gl.static_range(XL):  # fresh buffers
        _x_copy(x_s.index(st), xrow, xk, xmask, g_lo + st * BG, K)
    for st in gl.static_range(WST - 1):
        _w_copies(nib_s.index(st), lo_s.index(st), nib_ptr, lo_ptr, roff, rmask, gi, g_lo + st * BG, g_hi)
    i = 0
    for g0 in range(g_lo, g_hi, BG):
        s = i % STAGES
        # step i + XL's buffer, once the consumer released it: it did so on taking step
        # i + XL + 1 - STAGES <= i - 1, which this loop already handed over
        nxt = (i + XL) % STAGES
        mbarrier.wait(empty.index(nxt), (((i + XL) // STAGES) & 1) ^ 1)  # a fresh barrier passes phase 1
        _x_copy(x_s.index(nxt), xrow, xk, xmask, g0 + XL * BG, K)  # past the slice: masked by K, or never read
        # into the words buffer step i - 1 read (this thread's own words: read, so free)
        _w_copies(nib_s.index((i + WST - 1) % WST), lo_s.index((i + WST - 1) % WST), nib_ptr, lo_ptr, roff, rmask,
                  gi, g0 + (WST - 1) * BG, g_hi)
        cp.wait_group(PENDING)  # x_i and w_i are in
        nw = nib_s.index(i % WST).load(wL)
        lo = lo_s.index(i % WST).load(wL)
        w_s.index(s).store(_decode_rows(nw, lo, base4))  # its buffer was waited for a step ago
        fence_async_shared()  # generic-proxy stores before wgmma's async-proxy reads
        _barrier()  # every decoder thread's stores and copies are in before the arrive
        mbarrier.arrive(ready.index(s), count=1)
        i += 1
    cp.wait_group(0)  # the copies started past the last step


@gluon.jit
def _escaper(lo_ptr, nib_ptr, x_ptr, ecol_ptr, eval_ptr, eptr_ptr, w_s, x_s, nib_s, lo_s, e_s, ready, empty, esc_bar,
             stride_xm, M, N, K, G, base, n0, split, SPLIT, g_lo, g_hi, BM: gl.constexpr, BN: gl.constexpr,
             BG: gl.constexpr, DW: gl.constexpr, XL: gl.constexpr, VG: gl.constexpr, EW: gl.constexpr):
    """Escape partition (EW warps): this K slice's share of the escapes of rows n0 .. n0+BN-1,
    sum x[m, col] * (value - placeholder) into e_s [BN, BM] fp32 (y.T's tile), column blocks of
    16 rows of x at a time (few registers), then ``esc_bar``. It runs while the decoder and the
    consumer stream the K slice, so heavy-tailed weights (Student t: 0.2 % escapes, ~8 a row of
    4096) add their escapes off the critical path; the consumer only adds e_s at the end."""
    EC: gl.constexpr = 16
    TC: gl.constexpr = 32 * EW // BN
    eL: gl.constexpr = gl.BlockedLayout([1, max(1, EC // TC)], [32 // TC, TC], [EW, 1], [0, 1])
    e_start, e_end = _esc_rows(eptr_ptr, n0, N, split, eL, BN, True)
    for j in gl.static_range(BM // EC):
        c0, v0 = _esc_load(ecol_ptr, eval_ptr, e_start, e_end)
        c1, v1 = _esc_load(ecol_ptr, eval_ptr, e_start + SPLIT, e_end)
        c2, v2 = _esc_load(ecol_ptr, eval_ptr, e_start + 2 * SPLIT, e_end)
        c3, v3 = _esc_load(ecol_ptr, eval_ptr, e_start + 3 * SPLIT, e_end)
        part = _escapes_fma(gl.zeros([BN, EC], gl.float32, eL), x_ptr + j * EC * stride_xm, stride_xm, M - j * EC,
                            ecol_ptr, eval_ptr, base, e_start, e_end, SPLIT, c0, v0, c1, v1, c2, v2, c3, v3, eL, EC,
                            True)
        e_s.slice(j * EC, EC, dim=1).store(part)
    _barrier()  # every thread's block is in before the arrive
    mbarrier.arrive(esc_bar, count=1)


@gluon.jit
def _consumer(w_s, x_s, c_s, e_s, ready, empty, esc_bar, x_ptr, ecol_ptr, eval_ptr, eptr_ptr, b_ptr, y_ptr, ws_ptr,
              stride_xm, stride_ym, M, N, base, n0, split, SPLIT, g_lo, g_hi, BM: gl.constexpr, BN: gl.constexpr,
              BG: gl.constexpr, HAS_BIAS: gl.constexpr, EPI: gl.constexpr, EW: gl.constexpr):
    """Default partition (one or two warpgroups): wgmma over the buffers as they become ready,
    then the escapes and the store: in the accumulator's own layout (EPI = 0), or (EPI > 0)
    through the shared buffer c_s [BN, BM] in column blocks of EPI rows of x, each thread one row
    of W. Why the blocks: the escapes gather x[m, col] for every m a thread holds, and at 128-256
    rows of x the accumulator's layout holds 64-128 of them (one pointer each): ptxas spilled
    0.4-2 KB a thread there. EW > 0: the escapes come summed in e_s from the escape partition
    (``_escaper``), added once ``esc_bar`` completes."""
    NW: gl.constexpr = gl.num_warps()
    STAGES: gl.constexpr = w_s.shape[0]
    acc_l: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[NW, 1], instr_shape=[16, BM, 16])
    TC: gl.constexpr = 32 * NW // BN  # threads per row of W in the column blocks
    cL: gl.constexpr = gl.BlockedLayout([1, max(1, EPI // TC)], [32 // TC, TC], [NW, 1], [0, 1])
    eL: gl.constexpr = cL if EPI > 0 else acc_l
    # first escapes: loaded now, used at the end (EW > 0: not used; the loads cost little)
    e_start, e_end = _esc_rows(eptr_ptr, n0, N, split, eL, BN, True)
    c0, v0 = _esc_load(ecol_ptr, eval_ptr, e_start, e_end)
    c1, v1 = _esc_load(ecol_ptr, eval_ptr, e_start + SPLIT, e_end)
    c2, v2 = _esc_load(ecol_ptr, eval_ptr, e_start + 2 * SPLIT, e_end)
    c3, v3 = _esc_load(ecol_ptr, eval_ptr, e_start + 3 * SPLIT, e_end)
    acc = gl.zeros([BN, BM], gl.float32, acc_l)
    i = 0
    for g0 in range(g_lo, g_hi, BG):
        s = i % STAGES
        mbarrier.wait(ready.index(s), (i // STAGES) & 1)
        acc = warpgroup_mma(w_s.index(s), x_s.index(s).permute((1, 0)), acc, is_async=True)
        # the previous step's product is done: its buffer goes back to the decoder
        acc = warpgroup_mma_wait(num_outstanding=1, deps=[acc])
        mbarrier.arrive(empty.index((i + STAGES - 1) % STAGES), count=1, pred=i > 0)
        i += 1
    acc = warpgroup_mma_wait(num_outstanding=0, deps=[acc])
    if EW > 0:
        mbarrier.wait(esc_bar, 0)
    if EPI > 0:
        c_s.store(acc)
        _barrier()
        for j in gl.static_range(BM // EPI):
            part = c_s.slice(j * EPI, EPI, dim=1).load(cL)
            if EW > 0:
                part += e_s.slice(j * EPI, EPI, dim=1).load(cL)
            else:
                part = _escapes_fma(part, x_ptr + j * EPI * stride_xm, stride_xm, M - j * EPI, ecol_ptr, eval_ptr,
                                    base, e_start, e_end, SPLIT, c0, v0, c1, v1, c2, v2, c3, v3, cL, EPI, True)
            _store(part, b_ptr, y_ptr, ws_ptr, j * EPI, n0, M, N, stride_ym, split, SPLIT, cL, EPI, BN, HAS_BIAS, True)
    else:
        if EW > 0:
            acc += e_s.load(acc_l)
        else:
            acc = _escapes_fma(acc, x_ptr, stride_xm, M, ecol_ptr, eval_ptr, base, e_start, e_end, SPLIT, c0, v0, c1,
                               v1, c2, v2, c3, v3, acc_l, BM, True)
        _store(acc, b_ptr, y_ptr, ws_ptr, 0, n0, M, N, stride_ym, split, SPLIT, acc_l, BM, BN, HAS_BIAS, True)


@gluon.jit(**PER_WEIGHT)
def fixed_ws_kernel(x_ptr, lo_ptr, nib_ptr, eptr_ptr, ecol_ptr, eval_ptr, erow_ptr, b_ptr, y_ptr, ws_ptr,
                    M, N, K, G, stride_xm, stride_ym, base, MB, SPLIT,
                    BM: gl.constexpr, BN: gl.constexpr, BG: gl.constexpr, HAS_BIAS: gl.constexpr,
                    STAGES: gl.constexpr = 3, DW: gl.constexpr = 4, DREGS: gl.constexpr = 128, EPI: gl.constexpr = 0,
                    WST: gl.constexpr = 4, XL: gl.constexpr = 1, VG: gl.constexpr = 1, EW: gl.constexpr = 0,
                    EREGS: gl.constexpr = 96,
                    WS_LIST: gl.constexpr = _WS_LIST):
    """y[M, N] = x[M, K] @ W.T (+ bias), x bf16 of M <= BM rows (BM 16-256, a power of two), on
    an sm_90 GPU. Program (n tile of BN = 64 rows of W, K slice): grid (cdiv(N, BN), SPLIT);
    SPLIT > 1 writes fp32 partial sums to ws[split, M, N] for ``splitk_reduce_kernel`` (escapes
    dealt among the slices). num_warps 4 (the consumer warpgroup) + DW decoder warps with DREGS
    registers each; STAGES shared buffers of W's decoded tile and x's tile; EPI: the epilogue's
    column blocks (0: none; see ``_consumer``); WST: shared buffers of W's words (>= 3); XL: x's
    tiles are copied XL steps ahead (1 <= XL <= STAGES - 2); VG: consecutive groups a decoder
    thread copies and decodes; EW: warps of an escape partition with EREGS registers (0: the
    consumer adds the escapes after its loop). MB: autotuning key only."""
    SW: gl.constexpr = 128 if BG >= 8 else 16 * BG
    sL: gl.constexpr = gl.NVMMASharedLayout(swizzle_byte_width=SW, element_bitwidth=16, rank=2)
    n0 = gl.program_id(0) * BN
    split = gl.program_id(1)
    g_len = gl.cdiv(gl.cdiv(G, SPLIT), BG) * BG
    g_lo = split * g_len
    g_hi = gl.minimum(G, g_lo + g_len)
    w_s = gl.allocate_shared_memory(gl.bfloat16, [STAGES, BN, 8 * BG], sL)
    x_s = gl.allocate_shared_memory(gl.bfloat16, [STAGES, BM, 8 * BG], sL)
    ready = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    empty = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    wsL: gl.constexpr = gl.SwizzledSharedLayout(1, 1, 1, [1, 0])
    nib_s = gl.allocate_shared_memory(gl.int32, [WST, BN, BG], wsL)
    lo_s = gl.allocate_shared_memory(gl.int64, [WST, BN, BG], wsL)
    if EPI > 0:
        c_s = gl.allocate_shared_memory(gl.float32, [BN, BM], gl.SwizzledSharedLayout(1, 1, 1, [1, 0]))
    else:
        c_s = w_s  # not used
    if EW > 0:
        e_s = gl.allocate_shared_memory(gl.float32, [BN, BM], gl.SwizzledSharedLayout(1, 1, 1, [1, 0]))
    else:
        e_s = w_s  # not used
    esc_bar = gl.allocate_shared_memory(gl.int64, [1], mbarrier.MBarrierLayout())
    mbarrier.init(esc_bar, count=1)
    for s in gl.static_range(STAGES):
        mbarrier.init(ready.index(s), count=1)
        mbarrier.init(empty.index(s), count=1)
    # the argument tuples are written in the calls: a tuple assigned to a name first would turn
    # its constexprs into tensors
    if WS_LIST and EW > 0:
        gl.warp_specialize([(_consumer, (w_s, x_s, c_s, e_s, ready, empty, esc_bar, x_ptr, ecol_ptr, eval_ptr, eptr_ptr,
                                         b_ptr, y_ptr, ws_ptr, stride_xm, stride_ym, M, N, base, n0, split, SPLIT, g_lo,
                                         g_hi, BM, BN, BG, HAS_BIAS, EPI, EW)),
                            (_decoder, (lo_ptr, nib_ptr, x_ptr, ecol_ptr, eval_ptr, eptr_ptr, w_s, x_s, nib_s, lo_s,
                                        e_s, ready, empty, esc_bar, stride_xm, M, N, K, G, base, n0, split, SPLIT,
                                        g_lo, g_hi, BM, BN, BG, DW, XL, VG, EW)),
                            (_escaper, (lo_ptr, nib_ptr, x_ptr, ecol_ptr, eval_ptr, eptr_ptr, w_s, x_s, nib_s, lo_s,
                                        e_s, ready, empty, esc_bar, stride_xm, M, N, K, G, base, n0, split, SPLIT,
                                        g_lo, g_hi, BM, BN, BG, DW, XL, VG, EW))], [DW, EW], [DREGS, EREGS])
    elif WS_LIST:
        gl.warp_specialize([(_consumer, (w_s, x_s, c_s, e_s, ready, empty, esc_bar, x_ptr, ecol_ptr, eval_ptr, eptr_ptr,
                                         b_ptr, y_ptr, ws_ptr, stride_xm, stride_ym, M, N, base, n0, split, SPLIT, g_lo,
                                         g_hi, BM, BN, BG, HAS_BIAS, EPI, EW)),
                            (_decoder, (lo_ptr, nib_ptr, x_ptr, ecol_ptr, eval_ptr, eptr_ptr, w_s, x_s, nib_s, lo_s,
                                        e_s, ready, empty, esc_bar, stride_xm, M, N, K, G, base, n0, split, SPLIT,
                                        g_lo, g_hi, BM, BN, BG, DW, XL, VG, EW))], [DW], [DREGS])
    elif EW > 0:
        gl.warp_specialize((w_s, x_s, c_s, e_s, ready, empty, esc_bar, x_ptr, ecol_ptr, eval_ptr, eptr_ptr, b_ptr,
                            y_ptr, ws_ptr, stride_xm, stride_ym, M, N, base, n0, split, SPLIT, g_lo, g_hi, BM, BN, BG,
                            HAS_BIAS, EPI, EW), _consumer,
                           (lo_ptr, nib_ptr, x_ptr, ecol_ptr, eval_ptr, eptr_ptr, w_s, x_s, nib_s, lo_s, e_s, ready,
                            empty, esc_bar, stride_xm, M, N, K, G, base, n0, split, SPLIT, g_lo, g_hi, BM, BN, BG, DW,
                            XL, VG, EW), [_decoder, _escaper], [DW, EW], [DREGS, EREGS])
    else:
        gl.warp_specialize((w_s, x_s, c_s, e_s, ready, empty, esc_bar, x_ptr, ecol_ptr, eval_ptr, eptr_ptr, b_ptr,
                            y_ptr, ws_ptr, stride_xm, stride_ym, M, N, base, n0, split, SPLIT, g_lo, g_hi, BM, BN, BG,
                            HAS_BIAS, EPI, EW), _consumer,
                           (lo_ptr, nib_ptr, x_ptr, ecol_ptr, eval_ptr, eptr_ptr, w_s, x_s, nib_s, lo_s, e_s, ready,
                            empty, esc_bar, stride_xm, M, N, K, G, base, n0, split, SPLIT, g_lo, g_hi, BM, BN, BG, DW,
                            XL, VG, EW), [_decoder], [DW], [DREGS])


def configs(bm: int) -> list:
    """Autotuning configs for ``bm`` rows of x (32, 64, 128, 256): 64 rows of W (one consumer
    warpgroup) x 128 columns a K step (BG 16), 8 decoder warps, 3-4 buffers. H100, 2026-11-26
    (benchmarks/experiments/ws_kernel.py, four Llama shapes, M = 32-128): these four took every
    cell; BN = 128 with two consumer warpgroups, 4 decoder warps, 64-column steps, deeper word
    buffers (WST 6) and two programs an SM (128 registers) were 5-60 % slower. 256 rows (not
    routed: decode + cuBLAS is faster there) get one config that fits shared memory. Measured
    and left out (H100, 2026-11-26, session 6, ws_kernel.py, M = 64 and 128, four shapes,
    Gaussian and Student-t, best config and split against best): 16 decoder warps (4 a
    scheduler, 2 groups a thread) 0.5-5.6 % slower than 8; 128 rows of W a program with one
    consumer warpgroup (half of x's bytes from L2 per weight) 21-35 % slower on Gaussian weights;
    slack between the roles (the decoder STAGES - 2 - XL >= 1 steps ahead of the consumer; these
    configs have none) 0.5-2.7 % slower at 128-column steps, 16-22 % at the 64-column steps that
    fit 6 buffers for 128 rows."""
    def C(**kw):
        return triton.Config({"BM": bm, "BN": 64, "DW": 8, "DREGS": 96, **kw}, num_warps=4, num_stages=1)
    epi = 32 if bm >= 128 else 0  # the epilogue through shared memory where registers spilled
    if bm > 128:
        return [C(BG=8, STAGES=3, EPI=epi)]
    out = [C(BG=16, STAGES=3, EPI=epi), C(BG=16, STAGES=3, EPI=epi, VG=4)]
    if bm <= 64:  # x two steps ahead (shared memory: 4 buffers)
        out += [C(BG=16, STAGES=4, XL=2), C(BG=16, STAGES=4, XL=2, VG=4)]
    # an escape partition of 4 warps
    out += [C(BG=16 if bm <= 64 else 8, STAGES=3, EPI=epi, EW=4)]
    if bm <= 64:
        out += [C(BG=16, STAGES=4, XL=2, VG=4, EW=4, DREGS=88, EREGS=88)]
    return out


__all__ = ["fixed_ws_kernel", "configs"]
