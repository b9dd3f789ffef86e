"""Triton inverse of the int8 codec's transform modes (integer 8x8 DCT-II / ADST by lifting).

Bit-identical to the spec (:mod:`wcodec.codecs.transform`) and the numba kernels: the same 28
rotations per 1-D transform, each undone by three integer lifting steps, columns then rows. One
program inverts BLK 8x8 blocks, each described by a row of the block table (host-built from
validated metadata, ``wcodec.gpu.plan.transform_blocks``): buf8 index of the block's first low byte in the decoded
residual plane, buf8 index of its first high part in the decoded hi plane, the row stride (its
tile's width) and the kind (0 DCT, 1 ADST). The reconstructed bytes overwrite the low bytes in
place, so that the int8 tile kernel then treats the tile as NONE (copy, dequantise).

Layout in registers: row u of each block is a [BLK, 8] tensor, so the column pass is elementwise
over the eight row tensors; the row pass extracts the eight columns of each row (masked sums)
and puts them back. High parts are clamped to the legal range, which keeps every intermediate in
int32 (the CPU decoder refuses a record with illegal ones).
"""

from __future__ import annotations

import triton
import triton.language as tl

from ..codecs import transform as T

SHIFT: tl.constexpr = tl.constexpr(T.SHIFT)
HALF: tl.constexpr = tl.constexpr(T.HALF)
HI_MIN: tl.constexpr = tl.constexpr(T.HI_MIN)
HI_MAX: tl.constexpr = tl.constexpr(T.HI_MAX)


@triton.jit
def _r(a, b, adst, TD: tl.constexpr, SD: tl.constexpr, TA: tl.constexpr, SA: tl.constexpr):
    """Undo one rotation (three lifting steps in reverse, subtracting); its constants are
    compile-time (DCT's or ADST's, chosen per block by ``adst``), so no per-element loads."""
    t = tl.where(adst, TA, TD)
    s = tl.where(adst, SA, SD)
    a -= (t * b + HALF) >> SHIFT
    b -= (s * a + HALF) >> SHIFT
    a -= (t * b + HALF) >> SHIFT
    return a, b


@triton.jit
def _inv8(v0, v1, v2, v3, v4, v5, v6, v7, adst):
    """Inverse 1-D transform of 8 same-shape int32 tensors; adst: per-element kind (True: ADST).
    The pairs and constants are transform.ROTATIONS' (DCT's, then ADST's), written out."""
    v6, v7 = _r(v6, v7, adst, -984, 1860, -1738, 2946)
    v5, v6 = _r(v5, v6, adst, -1399, 2505, -2229, 3440)
    v4, v5 = _r(v4, v5, adst, -1688, 2886, -2568, 3687)
    v3, v4 = _r(v3, v4, adst, -1917, 3145, -2858, 3844)
    v2, v3 = _r(v2, v3, adst, -2112, 3337, -3138, 3955)
    v1, v2 = _r(v1, v2, adst, -2288, 3488, -3429, 4032)
    v0, v1 = _r(v0, v1, adst, -2831, 3831, -3746, 4080)
    v6, v7 = _r(v6, v7, adst, -602, 1178, -764, 1476)
    v5, v6 = _r(v5, v6, adst, -975, 1846, -1203, 2215)
    v4, v5 = _r(v4, v5, adst, -1306, 2371, -1593, 2768)
    v3, v4 = _r(v3, v4, adst, -1635, 2821, -2001, 3230)
    v2, v3 = _r(v2, v3, adst, -1996, 3226, -2489, 3636)
    v1, v2 = _r(v1, v2, adst, -2752, 3792, -3151, 3959)
    v6, v7 = _r(v6, v7, adst, -488, 963, -554, 1089)
    v5, v6 = _r(v5, v6, adst, -859, 1646, -957, 1815)
    v4, v5 = _r(v4, v5, adst, -1249, 2285, -1375, 2471)
    v3, v4 = _r(v3, v4, adst, -1719, 2924, -1889, 3115)
    v2, v3 = _r(v2, v3, adst, -2655, 3739, -2675, 3750)
    v6, v7 = _r(v6, v7, adst, -470, 927, -494, 973)
    v5, v6 = _r(v5, v6, adst, -895, 1708, -919, 1750)
    v4, v5 = _r(v4, v5, adst, -1437, 2559, -1440, 2564)
    v3, v4 = _r(v3, v4, adst, -2531, 3664, -2272, 3475)
    v6, v7 = _r(v6, v7, adst, -529, 1040, -513, 1009)
    v5, v6 = _r(v5, v6, adst, -1123, 2089, -1043, 1959)
    v4, v5 = _r(v4, v5, adst, -2365, 3547, -1900, 3127)
    v6, v7 = _r(v6, v7, adst, -731, 1418, -630, 1230)
    v5, v6 = _r(v5, v6, adst, -2120, 3344, -1511, 2660)
    v6, v7 = _r(v6, v7, adst, -1697, 2896, -1029, 1936)
    return v0, -v1, v2, -v3, v4, -v5, v6, -v7  # SIGNS


@triton.jit
def _col(r, jj, j: tl.constexpr):
    return tl.sum(tl.where(jj == j, r, 0), axis=1)


@triton.jit
def _row_inv(r, jj, adst):
    """Inverse 1-D transform along axis 1 of r [BLK, 8]."""
    c0, c1, c2, c3, c4, c5, c6, c7 = _inv8(_col(r, jj, 0), _col(r, jj, 1), _col(r, jj, 2), _col(r, jj, 3),
                                           _col(r, jj, 4), _col(r, jj, 5), _col(r, jj, 6), _col(r, jj, 7), adst)
    out = tl.where(jj == 0, c0[:, None], c1[:, None])
    out = tl.where(jj == 2, c2[:, None], out)
    out = tl.where(jj == 3, c3[:, None], out)
    out = tl.where(jj == 4, c4[:, None], out)
    out = tl.where(jj == 5, c5[:, None], out)
    out = tl.where(jj == 6, c6[:, None], out)
    return tl.where(jj == 7, c7[:, None], out)


@triton.jit
def _load_row(buf8_ptr, res, hi, stride, u: tl.constexpr, jj, m):
    lo = tl.load(buf8_ptr + res + u * stride + jj, mask=m, other=0).to(tl.int32)
    h = tl.load(buf8_ptr + hi + u * stride + jj, mask=m, other=0).to(tl.int32)
    lo = tl.where(lo >= 128, lo - 256, lo)
    h = tl.where(h >= 128, h - 256, h)
    return lo + 256 * tl.minimum(tl.maximum(h, HI_MIN), HI_MAX)


@triton.jit
def _store_row(buf8_ptr, res, stride, u: tl.constexpr, jj, m, r):
    tl.store(buf8_ptr + res + u * stride + jj, (r & 0xFF).to(tl.uint8), mask=m)


@triton.jit
def int8_transform_kernel(bt_ptr, n_blocks, buf8_ptr, BLK: tl.constexpr):
    """Invert BLK blocks per program, in place. bt_ptr: int64[n_blocks, 4] block table (module
    docstring); buf8_ptr: the uint8 device buffer."""
    b = tl.program_id(0) * BLK + tl.arange(0, BLK)
    bm = b < n_blocks
    res = tl.load(bt_ptr + b * 4, mask=bm, other=0)[:, None]
    hi = tl.load(bt_ptr + b * 4 + 1, mask=bm, other=0)[:, None]
    stride = tl.load(bt_ptr + b * 4 + 2, mask=bm, other=0)[:, None]
    kind = tl.load(bt_ptr + b * 4 + 3, mask=bm, other=0).to(tl.int32)
    adst = kind == 1
    jj = tl.arange(0, 8)[None, :]
    m = bm[:, None] & (jj < 8)
    r0 = _load_row(buf8_ptr, res, hi, stride, 0, jj, m)
    r1 = _load_row(buf8_ptr, res, hi, stride, 1, jj, m)
    r2 = _load_row(buf8_ptr, res, hi, stride, 2, jj, m)
    r3 = _load_row(buf8_ptr, res, hi, stride, 3, jj, m)
    r4 = _load_row(buf8_ptr, res, hi, stride, 4, jj, m)
    r5 = _load_row(buf8_ptr, res, hi, stride, 5, jj, m)
    r6 = _load_row(buf8_ptr, res, hi, stride, 6, jj, m)
    r7 = _load_row(buf8_ptr, res, hi, stride, 7, jj, m)
    # columns: the 1-D inverse along u, elementwise over the row tensors
    r0, r1, r2, r3, r4, r5, r6, r7 = _inv8(r0, r1, r2, r3, r4, r5, r6, r7, adst[:, None])
    _store_row(buf8_ptr, res, stride, 0, jj, m, _row_inv(r0, jj, adst))
    _store_row(buf8_ptr, res, stride, 1, jj, m, _row_inv(r1, jj, adst))
    _store_row(buf8_ptr, res, stride, 2, jj, m, _row_inv(r2, jj, adst))
    _store_row(buf8_ptr, res, stride, 3, jj, m, _row_inv(r3, jj, adst))
    _store_row(buf8_ptr, res, stride, 4, jj, m, _row_inv(r4, jj, adst))
    _store_row(buf8_ptr, res, stride, 5, jj, m, _row_inv(r5, jj, adst))
    _store_row(buf8_ptr, res, stride, 6, jj, m, _row_inv(r6, jj, adst))
    _store_row(buf8_ptr, res, stride, 7, jj, m, _row_inv(r7, jj, adst))
