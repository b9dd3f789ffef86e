"""The fixed-rate tile decoded by producer warps into shared memory and multiplied by a consumer
warpgroup's ``wgmma`` (warp specialisation; 17-256 rows of bf16 x; Gluon, sm_90).

Why: the single-role kernels (:mod:`wcodec.gpu.fixed_mma`, :mod:`wcodec.gpu.fixed_wgmma`) run
load, decode and MMA in series in every warp; with 111-255 registers a thread they keep 8-16 warps
per SM, and half the warps' cycles wait on global loads (H100 ncu, benchmarks/HISTORY.md). Here
the roles are split (``gl.warp_specialize``):

- the decoder partition (DW warps, few registers each: no accumulator) loads W's words and x's
  columns a K step ahead in registers, decodes the words with the SWAR steps of
  ``fixed_kernels._pairs`` and stores the bf16 tile and x's tile into one of STAGES shared
  buffers, then arrives on that buffer's ``ready`` barrier;
- the default partition (one warpgroup) waits on ``ready``, issues ``wgmma`` asynchronously and
  releases a buffer (``empty`` barrier) once the product that read it is done; after the loop it
  adds the escapes with CUDA-core FMAs (``fixed_mma._escapes_fma``, their first four loaded before
  the loop) and stores y (or the K slice's fp32 partial sum).

The product is computed swapped (y.T = W x.T): W's tile is wgmma's A operand ([BN, 8*BG], 64 rows
of W per instruction) and x's tile the B operand ([8*BG, BM], BM = all rows of x, 16-256), so each W
tile is decoded once per program for all rows of x. Layout of the weights: docs/CODEC_LAYOUT.md.
"""

from __future__ import annotations

import inspect

import triton
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import (fence_async_shared, mbarrier, warpgroup_mma,
                                                              warpgroup_mma_wait)

from .fixed_mma import _esc_load, _esc_rows, _escapes_fma, _store, _w_loads, _x_loads, _x_tile
from .fixed_wgmma import _decode_rows

#: Triton 3.6+ takes ``warp_specialize([(fn, args), ...], warps, regs)``; 3.5 took the default
#: partition's args and function, then the workers' (the kernel is compiled for the one installed)
_WS_LIST = "functions_and_args" in inspect.signature(gl.warp_specialize).parameters


@gluon.jit
def _decoder(lo_ptr, nib_ptr, x_ptr, w_s, x_s, ready, empty, stride_xm, M, N, K, G, base, n0, g_lo, g_hi,
             BM: gl.constexpr, BN: gl.constexpr, BG: gl.constexpr, DW: gl.constexpr):
    """Producer: for each K step of BG groups, W's decoded tile and x's tile into buffer i % STAGES
    (after its ``empty`` barrier), then ``ready``. Loads run one step ahead in registers."""
    STAGES: gl.constexpr = w_s.shape[0]
    TG: gl.constexpr = BG if BG < 32 else 32
    wL: gl.constexpr = gl.BlockedLayout([1, 1], [32 // TG, TG], [DW, 1], [1, 0])
    xL: gl.constexpr = gl.BlockedLayout([1, 8], [32 // TG, TG], [DW, 1], [1, 0])
    gi = gl.arange(0, BG, layout=gl.SliceLayout(0, wL))[None, :]
    rows = n0 + gl.arange(0, BN, layout=gl.SliceLayout(1, wL))[:, None]
    roff = rows.to(gl.int64) * G
    rmask = rows < N
    xk, xrow, xmask = _x_tile(x_ptr, stride_xm, M, xL, BM, BG)
    base4 = (base * 0x01010101).to(gl.uint32)
    nw, lo = _w_loads(nib_ptr, lo_ptr, roff, rmask, gi, g_lo, g_hi)
    xt = _x_loads(xrow, xk, xmask, g_lo, K)
    i = 0
    for g0 in range(g_lo, g_hi, BG):
        nw_next, lo_next = _w_loads(nib_ptr, lo_ptr, roff, rmask, gi, g0 + BG, g_hi)
        xt_next = _x_loads(xrow, xk, xmask, g0 + BG, K)
        w = _decode_rows(nw, lo, base4)
        s = i % STAGES
        mbarrier.wait(empty.index(s), ((i // STAGES) & 1) ^ 1)  # a fresh barrier passes phase 1
        w_s.index(s).store(w)
        x_s.index(s).store(xt)
        fence_async_shared()  # generic-proxy stores before wgmma's async-proxy reads
        mbarrier.arrive(ready.index(s), count=1)
        nw = nw_next
        lo = lo_next
        xt = xt_next
        i += 1


@gluon.jit
def _consumer(w_s, x_s, ready, empty, x_ptr, ecol_ptr, eval_ptr, eptr_ptr, b_ptr, y_ptr, ws_ptr, stride_xm, stride_ym,
              M, N, base, n0, split, SPLIT, g_lo, g_hi, BM: gl.constexpr, BN: gl.constexpr, BG: gl.constexpr,
              HAS_BIAS: gl.constexpr):
    """Default partition (one warpgroup): wgmma over the buffers as they become ready, then the
    escapes and the store."""
    NW: gl.constexpr = gl.num_warps()
    STAGES: gl.constexpr = w_s.shape[0]
    acc_l: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[NW, 1], instr_shape=[16, BM, 16])
    TM: gl.constexpr = 32 * NW // BN
    eL: gl.constexpr = gl.BlockedLayout([BM // TM, 1], [TM, 32 // TM], [1, NW], [0, 1])
    e_start, e_end = _esc_rows(eptr_ptr, n0, N, split, eL, BN)  # first escapes: loaded now, used at the end
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
    acc = _escapes_fma(gl.convert_layout(gl.permute(acc, (1, 0)), eL), x_ptr, stride_xm, M, ecol_ptr, eval_ptr, base,
                       e_start, e_end, SPLIT, c0, v0, c1, v1, c2, v2, c3, v3, eL, BM)
    _store(acc, b_ptr, y_ptr, ws_ptr, 0, n0, M, N, stride_ym, split, SPLIT, eL, BM, BN, HAS_BIAS)


@gluon.jit
def fixed_ws_kernel(x_ptr, lo_ptr, nib_ptr, eptr_ptr, ecol_ptr, eval_ptr, erow_ptr, b_ptr, y_ptr, ws_ptr,
                    M, N, K, G, stride_xm, stride_ym, base, MB, SPLIT,
                    BM: gl.constexpr, BN: gl.constexpr, BG: gl.constexpr, HAS_BIAS: gl.constexpr,
                    STAGES: gl.constexpr = 3, DW: gl.constexpr = 4, DREGS: gl.constexpr = 128,
                    WS_LIST: gl.constexpr = _WS_LIST):
    """y[M, N] = x[M, K] @ W.T (+ bias), x bf16 of M <= BM rows (BM 16-256, a power of two), on
    an sm_90 GPU. Program (n tile of BN = 64 rows of W, K slice): grid (cdiv(N, BN), SPLIT);
    SPLIT > 1 writes fp32 partial sums to ws[split, M, N] for ``splitk_reduce_kernel`` (escapes
    dealt among the slices). num_warps 4 (the consumer warpgroup) + DW decoder warps with DREGS
    registers each; STAGES shared buffers of W's decoded tile and x's tile. MB: autotuning key only."""
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
    for s in gl.static_range(STAGES):
        mbarrier.init(ready.index(s), count=1)
        mbarrier.init(empty.index(s), count=1)
    # the argument tuples are written in the calls: a tuple assigned to a name first would turn
    # its constexprs into tensors
    if WS_LIST:
        gl.warp_specialize([(_consumer, (w_s, x_s, ready, empty, x_ptr, ecol_ptr, eval_ptr, eptr_ptr, b_ptr, y_ptr,
                                         ws_ptr, stride_xm, stride_ym, M, N, base, n0, split, SPLIT, g_lo, g_hi, BM,
                                         BN, BG, HAS_BIAS)),
                            (_decoder, (lo_ptr, nib_ptr, x_ptr, w_s, x_s, ready, empty, stride_xm, M, N, K, G, base,
                                        n0, g_lo, g_hi, BM, BN, BG, DW))], [DW], [DREGS])
    else:
        gl.warp_specialize((w_s, x_s, ready, empty, x_ptr, ecol_ptr, eval_ptr, eptr_ptr, b_ptr, y_ptr, ws_ptr,
                            stride_xm, stride_ym, M, N, base, n0, split, SPLIT, g_lo, g_hi, BM, BN, BG, HAS_BIAS),
                           _consumer,
                           (lo_ptr, nib_ptr, x_ptr, w_s, x_s, ready, empty, stride_xm, M, N, K, G, base, n0, g_lo,
                            g_hi, BM, BN, BG, DW), [_decoder], [DW], [DREGS])


def configs(bm: int) -> list:
    """Autotuning configs for ``bm`` rows of x (32, 64, 128, 256): BN 64 rows of W (one wgmma
    row block) x 8*BG columns a K step, STAGES buffers, DW decoder warps."""
    C = lambda **kw: triton.Config(kw, num_warps=4, num_stages=1)  # noqa: E731
    out = [C(BM=bm, BN=64, BG=8, STAGES=3, DW=4), C(BM=bm, BN=64, BG=8, STAGES=4, DW=8, DREGS=96),
           C(BM=bm, BN=64, BG=16, STAGES=2, DW=4)]
    return out


__all__ = ["fixed_ws_kernel", "configs"]
