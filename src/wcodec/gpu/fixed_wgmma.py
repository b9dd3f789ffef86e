"""The fixed-rate tile decoded into shared memory and multiplied by Hopper's asynchronous
``wgmma`` (33-256 rows of bf16 x; Gluon, sm_90). Routed for 65-128 rows (``fixed.WGMMA_MIN_M``,
``WGMMA_MAX_M``): on the H100 it beat decode + cuBLAS there on three of four Llama shapes once
the decode took one byte permute per pair (1.91-2.32x cuBLAS against 2.28-2.57x); at 33-64 rows
it ties the wide Triton tiled kernel, above 128 rows decode + cuBLAS wins.

Each program owns BN rows of W (and one K slice of them, for SPLIT > 1) and a block of BM rows of
x. Per K step of 8*BG columns it decodes the W tile in registers (the SWAR steps
of ``fixed_kernels._pairs``: a thread holds whole groups of 8 columns, so it writes 16 bytes to
shared memory per group), stores it and x's tile into one of two shared buffers and issues the
``wgmma`` asynchronously; it waits only for the previous step's, so the next tile's loads and
decode run on the CUDA cores while the tensor cores multiply this one. The next step's words and
x's columns are loaded a step ahead (a register prefetch: Gluon does not pipeline by itself).
Escapes are added after the main loop by CUDA-core FMAs, as in :mod:`wcodec.gpu.fixed_mma`
(``ESC_FMA``). Layout of the weights: docs/CODEC_LAYOUT.md.
"""

from __future__ import annotations

import triton
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import fence_async_shared, warpgroup_mma, warpgroup_mma_wait

from .fixed_kernels import PER_WEIGHT, _pairs
from .fixed_mma import (_esc_load, _esc_rows, _escapes_fma, _program, _store, _w_loads, _w_stream, _w_stream_end,
                        _w_stream_next, _x_loads, _x_tile)


@gluon.jit
def _decode_rows(nw, lo, base4):
    """Words of groups [BN, BG] -> W tile [BN, 8*BG] bf16, columns in natural order, each thread
    holding whole groups (8 consecutive columns)."""
    lo = lo.to(gl.uint64, bitcast=True)
    w0, w1, w2, w3 = _pairs(nw.to(gl.uint32, bitcast=True), (lo & 0xFFFFFFFF).to(gl.uint32), (lo >> 32).to(gl.uint32),
                            base4)
    t = gl.join(gl.join(w0, w1), gl.join(w2, w3))  # [BN, BG, i, j]: pair word 2j + i
    t = gl.permute(t, (0, 1, 3, 2))
    h = gl.join((t & 0xFFFF).to(gl.uint16), (t >> 16).to(gl.uint16))  # column 4j + 2i + half
    BN: gl.constexpr = nw.shape[0]
    BG: gl.constexpr = nw.shape[1]
    return gl.reshape(h, [BN, 8 * BG]).to(gl.bfloat16, bitcast=True)


@gluon.jit
def _tile_rows(x_ptr, stride_xm, m_left, n0, N, G, base, wL: gl.constexpr, xL: gl.constexpr, BM: gl.constexpr,
               BN: gl.constexpr, BG: gl.constexpr):
    """Group offsets [1, BG] and row offsets [BN, 1] of W's words (layout wL, rows n0..), their row
    mask; x's column offsets, row pointers and row mask (layout xL, ``_x_tile``); base4, the
    exponent base in each byte for ``_pairs``."""
    gi = gl.arange(0, BG, layout=gl.SliceLayout(0, wL))[None, :]
    rows = n0 + gl.arange(0, BN, layout=gl.SliceLayout(1, wL))[:, None]
    xk, xrow, xmask = _x_tile(x_ptr, stride_xm, m_left, xL, BM, BG)
    return gi, rows.to(gl.int64) * G, rows < N, xk, xrow, xmask, (base * 0x01010101).to(gl.uint32)


@gluon.jit(**PER_WEIGHT)
def fixed_wgmma_kernel(x_ptr, lo_ptr, nib_ptr, eptr_ptr, ecol_ptr, eval_ptr, erow_ptr, b_ptr, y_ptr, ws_ptr,
                       M, N, K, G, stride_xm, stride_ym, base, MB, SPLIT,
                       BM: gl.constexpr, BN: gl.constexpr, BG: gl.constexpr, HAS_BIAS: gl.constexpr,
                       XPF: gl.constexpr = True, STAGES: gl.constexpr = 0):
    """y[M, N] = x[M, K] @ W.T (+ bias), x bf16, on an sm_90 GPU; program (m block + n tile, K
    slice) as in ``fixed_mma.fixed_mma_kernel`` (SPLIT > 1: fp32 partial sums to ws[split, M, N]
    for ``splitk_reduce_kernel``, escapes shared among the slices). num_warps 4 (one warpgroup:
    BM >= 64) or 8 (BM >= 128); BN <= 32 * num_warps. XPF: load x's next tile a step ahead
    (False: at the start of its own step, its latency behind the decode; two x tiles fewer in
    registers). STAGES > 0: W's words come through that many shared buffers filled by cp.async, as
    in ``fixed_mma`` (x as with XPF). MB: autotuning key only."""
    NW: gl.constexpr = gl.num_warps()
    acc_l: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[NW, 1], instr_shape=[16, BN, 16])
    # words [BN, BG]: a thread holds one group of one row; lanes walk the groups of a row first
    TG: gl.constexpr = BG if BG < 32 else 32
    wL: gl.constexpr = gl.BlockedLayout([1, 1], [32 // TG, TG], [NW, 1], [1, 0])
    # x's tile [BM, 8*BG]: 8 columns (16 bytes) a thread
    TX: gl.constexpr = BG if BG < 32 else 32
    xL: gl.constexpr = gl.BlockedLayout([1, 8], [32 // TX, TX], [NW, 1], [1, 0])
    sL: gl.constexpr = gl.NVMMASharedLayout(swizzle_byte_width=128, element_bitwidth=16, rank=2)
    split, m0, n0, x_ptr, m_left = _program(x_ptr, stride_xm, M, BM, BN)
    gi, roff, rmask, xk, xrow, xmask, base4 = _tile_rows(x_ptr, stride_xm, m_left, n0, N, G, base, wL, xL, BM, BN, BG)
    g_len = gl.cdiv(gl.cdiv(G, SPLIT), BG) * BG
    g_lo = split * g_len
    g_hi = gl.minimum(G, g_lo + g_len)
    TM: gl.constexpr = 32 * NW // BN
    eL: gl.constexpr = gl.BlockedLayout([BM // TM, 1], [TM, 32 // TM], [1, NW], [0, 1])
    e_start, e_end = _esc_rows(eptr_ptr, n0, N, split, eL, BN)  # first escapes: loaded now, used at the end
    c0, v0 = _esc_load(ecol_ptr, eval_ptr, e_start, e_end)
    c1, v1 = _esc_load(ecol_ptr, eval_ptr, e_start + SPLIT, e_end)
    c2, v2 = _esc_load(ecol_ptr, eval_ptr, e_start + 2 * SPLIT, e_end)
    c3, v3 = _esc_load(ecol_ptr, eval_ptr, e_start + 3 * SPLIT, e_end)
    w_s = gl.allocate_shared_memory(gl.bfloat16, [2, BN, 8 * BG], sL)
    x_s = gl.allocate_shared_memory(gl.bfloat16, [2, BM, 8 * BG], sL)
    acc = gl.zeros([BM, BN], gl.float32, acc_l)
    if STAGES > 0:  # W's words through STAGES shared buffers by cp.async (see fixed_mma)
        nib_s, lo_s = _w_stream(nib_ptr, lo_ptr, roff, rmask, gi, g_lo, g_hi, gl.SwizzledSharedLayout(1, 1, 1, [1, 0]),
                                STAGES, BG)
    else:
        nw, lo = _w_loads(nib_ptr, lo_ptr, roff, rmask, gi, g_lo, g_hi)
    if XPF:
        xt = _x_loads(xrow, xk, xmask, g_lo, K)
    i = 0
    for g0 in range(g_lo, g_hi, BG):
        if STAGES > 0:
            nw, lo = _w_stream_next(nib_s, lo_s, nib_ptr, lo_ptr, roff, rmask, gi, i, g0, g_hi, wL, STAGES, BG)
        else:
            nw_next, lo_next = _w_loads(nib_ptr, lo_ptr, roff, rmask, gi, g0 + BG, g_hi)
        if XPF:
            xt_next = _x_loads(xrow, xk, xmask, g0 + BG, K)
        else:
            xt = _x_loads(xrow, xk, xmask, g0, K)
        buf = i % 2
        w_s.index(buf).store(_decode_rows(nw, lo, base4))
        x_s.index(buf).store(xt)
        fence_async_shared()
        acc = warpgroup_mma(x_s.index(buf), w_s.index(buf).permute((1, 0)), acc, is_async=True)
        # the previous step's product is done: its buffers take the next step's tiles
        acc = warpgroup_mma_wait(num_outstanding=1, deps=[acc])
        if STAGES == 0:
            nw = nw_next
            lo = lo_next
        if XPF:
            xt = xt_next
        i += 1
    if STAGES > 0:
        _w_stream_end()
    acc = warpgroup_mma_wait(num_outstanding=0, deps=[acc])
    acc = _escapes_fma(gl.convert_layout(acc, eL), x_ptr, stride_xm, m_left, ecol_ptr, eval_ptr, base,
                       e_start, e_end, SPLIT, c0, v0, c1, v1, c2, v2, c3, v3, eL, BM)
    _store(acc, b_ptr, y_ptr, ws_ptr, m0, n0, M, N, stride_ym, split, SPLIT, eL, BM, BN, HAS_BIAS)


def configs(bm: int) -> list:
    """Autotuning configs for ``bm`` rows of x (64, 128, 256): blocks of BM rows x BN rows of W x
    8*BG columns per K step (a block of BM < bm rows decodes each W tile once per block; the
    programs of one tile run together, its words' second read comes from L2); 8 warps (two
    warpgroups) need 128 rows. ptxas for sm_90 (Triton 3.9): 64-row blocks of 4 warps do not
    spill; 128 rows spill 112-448 bytes with 8 warps, more with 4."""
    C = lambda nw=4, **kw: triton.Config(kw, num_warps=nw, num_stages=1)  # noqa: E731
    out = [C(BM=64, BN=64, BG=8), C(BM=64, BN=128, BG=8), C(BM=64, BN=64, BG=16), C(BM=64, BN=128, BG=8, XPF=False),
           C(BM=64, BN=64, BG=16, STAGES=3), C(BM=64, BN=128, BG=8, STAGES=3)]
    if bm >= 128:  # taller blocks: 8 warps, x loaded in its own step (ptxas: fewer spills)
        out += [C(8, BM=128, BN=64, BG=8, XPF=False), C(8, BM=128, BN=128, BG=8, XPF=False)]
    return out


__all__ = ["fixed_wgmma_kernel", "configs"]
