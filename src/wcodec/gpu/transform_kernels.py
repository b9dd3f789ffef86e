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

import numpy as np
import triton
import triton.language as tl

from ..codecs import transform as T

SHIFT: tl.constexpr = tl.constexpr(T.SHIFT)
HALF: tl.constexpr = tl.constexpr(T.HALF)
HI_MIN: tl.constexpr = tl.constexpr(T.HI_MIN)
HI_MAX: tl.constexpr = tl.constexpr(T.HI_MAX)
#: [kind, rotation, (T, S)] int32: the rotation constants in ROTATIONS order
ROT = np.array([[(t, s) for _, t, s in T.ROTATIONS[k]] for k in sorted(T.KINDS)], dtype=np.int32)
assert T.PAIRS == (6, 5, 4, 3, 2, 1, 0, 6, 5, 4, 3, 2, 1, 6, 5, 4, 3, 2, 6, 5, 4, 3, 6, 5, 4, 6, 5, 6)


@triton.jit
def _r(a, b, rp, i: tl.constexpr):
    """Undo rotation i (three lifting steps in reverse, subtracting)."""
    t = tl.load(rp + 2 * i)
    s = tl.load(rp + 2 * i + 1)
    a -= (t * b + HALF) >> SHIFT
    b -= (s * a + HALF) >> SHIFT
    a -= (t * b + HALF) >> SHIFT
    return a, b


@triton.jit
def _inv8(v0, v1, v2, v3, v4, v5, v6, v7, rp):
    """Inverse 1-D transform of 8 same-shape int32 tensors; rp: pointers to the kind's constants.
    The pairs follow transform.PAIRS (asserted at import)."""
    v6, v7 = _r(v6, v7, rp, 0)
    v5, v6 = _r(v5, v6, rp, 1)
    v4, v5 = _r(v4, v5, rp, 2)
    v3, v4 = _r(v3, v4, rp, 3)
    v2, v3 = _r(v2, v3, rp, 4)
    v1, v2 = _r(v1, v2, rp, 5)
    v0, v1 = _r(v0, v1, rp, 6)
    v6, v7 = _r(v6, v7, rp, 7)
    v5, v6 = _r(v5, v6, rp, 8)
    v4, v5 = _r(v4, v5, rp, 9)
    v3, v4 = _r(v3, v4, rp, 10)
    v2, v3 = _r(v2, v3, rp, 11)
    v1, v2 = _r(v1, v2, rp, 12)
    v6, v7 = _r(v6, v7, rp, 13)
    v5, v6 = _r(v5, v6, rp, 14)
    v4, v5 = _r(v4, v5, rp, 15)
    v3, v4 = _r(v3, v4, rp, 16)
    v2, v3 = _r(v2, v3, rp, 17)
    v6, v7 = _r(v6, v7, rp, 18)
    v5, v6 = _r(v5, v6, rp, 19)
    v4, v5 = _r(v4, v5, rp, 20)
    v3, v4 = _r(v3, v4, rp, 21)
    v6, v7 = _r(v6, v7, rp, 22)
    v5, v6 = _r(v5, v6, rp, 23)
    v4, v5 = _r(v4, v5, rp, 24)
    v6, v7 = _r(v6, v7, rp, 25)
    v5, v6 = _r(v5, v6, rp, 26)
    v6, v7 = _r(v6, v7, rp, 27)
    return v0, -v1, v2, -v3, v4, -v5, v6, -v7  # SIGNS


@triton.jit
def _col(r, jj, j: tl.constexpr):
    return tl.sum(tl.where(jj == j, r, 0), axis=1)


@triton.jit
def _row_inv(r, jj, rp):
    """Inverse 1-D transform along axis 1 of r [BLK, 8]."""
    c0, c1, c2, c3, c4, c5, c6, c7 = _inv8(_col(r, jj, 0), _col(r, jj, 1), _col(r, jj, 2), _col(r, jj, 3),
                                           _col(r, jj, 4), _col(r, jj, 5), _col(r, jj, 6), _col(r, jj, 7), rp)
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
def int8_transform_kernel(bt_ptr, n_blocks, buf8_ptr, rot_ptr, BLK: tl.constexpr):
    """Invert BLK blocks per program, in place. bt_ptr: int64[n_blocks, 4] block table (module
    docstring); buf8_ptr: the uint8 device buffer; rot_ptr: int32 ROT ([2, 28, 2])."""
    b = tl.program_id(0) * BLK + tl.arange(0, BLK)
    bm = b < n_blocks
    res = tl.load(bt_ptr + b * 4, mask=bm, other=0)[:, None]
    hi = tl.load(bt_ptr + b * 4 + 1, mask=bm, other=0)[:, None]
    stride = tl.load(bt_ptr + b * 4 + 2, mask=bm, other=0)[:, None]
    kind = tl.load(bt_ptr + b * 4 + 3, mask=bm, other=0).to(tl.int32)
    kind = tl.minimum(tl.maximum(kind, 0), 1)
    rp = rot_ptr + kind * 56
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
    r0, r1, r2, r3, r4, r5, r6, r7 = _inv8(r0, r1, r2, r3, r4, r5, r6, r7, rp[:, None])
    _store_row(buf8_ptr, res, stride, 0, jj, m, _row_inv(r0, jj, rp))
    _store_row(buf8_ptr, res, stride, 1, jj, m, _row_inv(r1, jj, rp))
    _store_row(buf8_ptr, res, stride, 2, jj, m, _row_inv(r2, jj, rp))
    _store_row(buf8_ptr, res, stride, 3, jj, m, _row_inv(r3, jj, rp))
    _store_row(buf8_ptr, res, stride, 4, jj, m, _row_inv(r4, jj, rp))
    _store_row(buf8_ptr, res, stride, 5, jj, m, _row_inv(r5, jj, rp))
    _store_row(buf8_ptr, res, stride, 6, jj, m, _row_inv(r6, jj, rp))
    _store_row(buf8_ptr, res, stride, 7, jj, m, _row_inv(r7, jj, rp))

