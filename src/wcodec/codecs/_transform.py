"""numba kernels of the int8 codec's transform modes (8x8 integer DCT-II / ADST by lifting).

Bit-identical to the pure-Python spec in :mod:`wcodec.codecs.transform` (tests compare them).
Imported only when a tensor evaluates or decodes a transform mode, so that tensors without them
never compile these kernels. Tiles are laid out as the prediction kernels' (``_predict``):
tile-major residual plane, each tile row-major; transform tiles are whole 8x8 blocks.
"""

from __future__ import annotations

import numba as nb
import numpy as np

from ..native._numba import JIT as _jit
from ..native._numba import kernel
from . import transform as T

#: [kind - DCT, rotation, (p, T, S)]
ROT = np.array([T.ROTATIONS[k] for k in sorted(T.KINDS)], dtype=np.int64)
SIGNS = np.array(T.SIGNS, dtype=np.int64)
SHIFT, HALF, N = T.SHIFT, T.HALF, T.N
HI_MIN, HI_MAX = T.HI_MIN, T.HI_MAX
DCT = T.DCT


@nb.njit(**_jit)
def _fwd1(v, rot):
    for k in range(N):
        v[k] *= SIGNS[k]
    for i in range(rot.shape[0] - 1, -1, -1):
        p, t, s = rot[i, 0], rot[i, 1], rot[i, 2]
        a, b = v[p], v[p + 1]
        a += (t * b + HALF) >> SHIFT
        b += (s * a + HALF) >> SHIFT
        a += (t * b + HALF) >> SHIFT
        v[p], v[p + 1] = a, b


@nb.njit(**_jit)
def _inv1(v, rot):
    for i in range(rot.shape[0]):
        p, t, s = rot[i, 0], rot[i, 1], rot[i, 2]
        a, b = v[p], v[p + 1]
        a -= (t * b + HALF) >> SHIFT
        b -= (s * a + HALF) >> SHIFT
        a -= (t * b + HALF) >> SHIFT
        v[p], v[p + 1] = a, b
    for k in range(N):
        v[k] *= SIGNS[k]


@nb.njit(**_jit)
def _pass(blk, rot, v, along_rows, inv):
    """1-D transform (or its inverse) of each row (along_rows) or each column of blk[8, 8]."""
    for a in range(N):
        for b in range(N):
            v[b] = blk[a, b] if along_rows else blk[b, a]
        if inv:
            _inv1(v, rot)
        else:
            _fwd1(v, rot)
        for b in range(N):
            if along_rows:
                blk[a, b] = v[b]
            else:
                blk[b, a] = v[b]


@nb.njit(**_jit)
def _fwd_block(x, r0, c0, rot, blk, v):
    """blk[8, 8] int64 <- forward transform of x[r0:r0+8, c0:c0+8] (rows, then columns)."""
    for i in range(N):
        for j in range(N):
            blk[i, j] = x[r0 + i, c0 + j]
    _pass(blk, rot, v, True, False)
    _pass(blk, rot, v, False, False)


@nb.njit(**_jit)
def _inv_block(blk, rot, v):
    """In place: coefficients -> samples (columns undone, then rows)."""
    _pass(blk, rot, v, False, True)
    _pass(blk, rot, v, True, True)


@nb.njit(**_jit)
def _tile(rows, cols, th, tw, t):
    ntw = (cols + tw - 1) // tw
    r0, c0 = (t // ntw) * th, (t % ntw) * tw
    h, w = min(th, rows - r0), min(tw, cols - c0)
    return r0, c0, h, w, r0 * cols + h * c0


@kernel
def tile_costs(x, th, tw, cost_lo, cost_hi):
    """Coded cost (bits) of each tile under DCT and ADST. x: [rows, cols] int16; cost_lo:
    [256] bits per low byte, cost_hi: [256] bits per high-part byte. Returns [n_tiles, 2]
    float64, inf where the tile is not whole 8x8 blocks."""
    rows, cols = x.shape
    n_tiles = ((rows + th - 1) // th) * ((cols + tw - 1) // tw)
    out = np.full((n_tiles, 2), np.inf)
    for t in nb.prange(n_tiles):
        r0, c0, h, w, _ = _tile(rows, cols, th, tw, t)
        if h % N or w % N:
            continue
        blk = np.empty((N, N), dtype=np.int64)
        v = np.empty(N, dtype=np.int64)
        for k in range(ROT.shape[0]):
            acc = 0.0
            for bi in range(0, h, N):
                for bj in range(0, w, N):
                    _fwd_block(x, r0 + bi, c0 + bj, ROT[k], blk, v)
                    for i in range(N):
                        for j in range(N):
                            c = blk[i, j]
                            acc += cost_lo[c & 0xFF] + cost_hi[((c + 128) >> 8) & 0xFF]
            out[t, k] = acc
    return out


@kernel
def coefficients(x, th, tw, modes, hi_off, res, hi):
    """Write the transform tiles' coefficients: low bytes into ``res`` (the residual plane,
    in place) and high parts (bytes, two's complement) into ``hi`` at ``hi_off[t]``. Returns
    the number of coefficients whose high part is outside [HI_MIN, HI_MAX] (0 for int8 input)."""
    rows, cols = x.shape
    bad = 0
    for t in nb.prange(modes.size):
        m = modes[t]
        if m < DCT:
            continue
        r0, c0, h, w, off = _tile(rows, cols, th, tw, t)
        blk = np.empty((N, N), dtype=np.int64)
        v = np.empty(N, dtype=np.int64)
        for bi in range(0, h, N):
            for bj in range(0, w, N):
                _fwd_block(x, r0 + bi, c0 + bj, ROT[m - DCT], blk, v)
                for i in range(N):
                    for j in range(N):
                        c = blk[i, j]
                        q = (c + 128) >> 8
                        if q < HI_MIN or q > HI_MAX:
                            bad += 1
                        k = (bi + i) * w + bj + j
                        res[off + k] = c & 0xFF
                        hi[hi_off[t] + k] = q & 0xFF
    return bad


@kernel
def inverse(res, hi, hi_off, rows, cols, th, tw, modes, out):
    """Overwrite the transform tiles of ``out`` ([rows, cols] uint8, the bytes of the tensor)
    with the inverse transform of (res, hi). Returns the number of high parts outside
    [HI_MIN, HI_MAX] (corrupt data: the caller raises)."""
    bad = 0
    for t in nb.prange(modes.size):
        m = modes[t]
        if m < DCT:
            continue
        r0, c0, h, w, off = _tile(rows, cols, th, tw, t)
        blk = np.empty((N, N), dtype=np.int64)
        v = np.empty(N, dtype=np.int64)
        for bi in range(0, h, N):
            for bj in range(0, w, N):
                for i in range(N):
                    for j in range(N):
                        k = (bi + i) * w + bj + j
                        q = np.int64(hi[hi_off[t] + k])
                        q = q - 256 if q >= 128 else q
                        if q < HI_MIN or q > HI_MAX:
                            bad += 1
                            q = 0
                        lo = np.int64(res[off + k])
                        blk[i, j] = (lo - 256 if lo >= 128 else lo) + 256 * q
                _inv_block(blk, ROT[m - DCT], v)
                for i in range(N):
                    for j in range(N):
                        out[r0 + bi + i, c0 + bj + j] = blk[i, j] & 0xFF
    return bad
