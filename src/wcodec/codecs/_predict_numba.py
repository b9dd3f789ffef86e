"""numba kernels of the int8 codec: per-tile intra prediction, its inverse, and mode costs.

The fallback of ``codecs._predict`` where the C extension is not built (or WCODEC_NATIVE=0);
same bits as csrc/predict.c and ``codecs._predict_reference``. Prediction stays inside a tile
(zero padding outside it), so tiles are independent.
"""

from __future__ import annotations

import numba as nb
import numpy as np

from ..native._numba import JIT as _jit
from ..native._numba import kernel
from ._predict_reference import AVG, LEFT, N_MODES, PLANAR, TOP


@nb.njit(**_jit)
def _pred(x, r0, c0, r, c, mode):
    # x: [rows, cols] int16 values; (r, c) relative to the tile origin (r0, c0)
    left = x[r0 + r, c0 + c - 1] if c > 0 else 0
    top = x[r0 + r - 1, c0 + c] if r > 0 else 0
    if mode == LEFT:
        return left
    if mode == TOP:
        return top
    if mode == AVG:
        return (left + top) >> 1
    if mode == PLANAR:
        tl = x[r0 + r - 1, c0 + c - 1] if (r > 0 and c > 0) else 0
        return left + top - tl
    return 0


@nb.njit(**_jit)
def _tile_start(rows, cols, th, tw, t):
    """Tile t's origin, extents and the offset of its first symbol in the tile-major plane."""
    ntw = (cols + tw - 1) // tw
    ti, tj = t // ntw, t % ntw
    r0, c0 = ti * th, tj * tw
    h, w = min(th, rows - r0), min(tw, cols - c0)
    # full tile rows above, then full-height tiles to the left in this tile row
    off = r0 * cols + h * c0
    return r0, c0, h, w, off


@kernel
def mode_costs(x, th, tw, cost):
    """Coded cost of each tile under each mode. x: [rows, cols] int16; cost: [256] float64 bits
    per residual symbol. Returns [n_tiles, 5] float64."""
    rows, cols = x.shape
    n_tiles = ((rows + th - 1) // th) * ((cols + tw - 1) // tw)
    out = np.zeros((n_tiles, N_MODES), dtype=np.float64)
    for t in nb.prange(n_tiles):
        r0, c0, h, w, _ = _tile_start(rows, cols, th, tw, t)
        for mode in range(N_MODES):
            acc = 0.0
            for r in range(h):
                for c in range(w):
                    acc += cost[(x[r0 + r, c0 + c] - _pred(x, r0, c0, r, c, mode)) & 0xFF]
            out[t, mode] = acc
    return out


@kernel
def residuals(x, th, tw, modes):
    """Residual plane ([rows*cols] uint8, tile-major, each tile row-major) for per-tile modes."""
    rows, cols = x.shape
    n_tiles = modes.size
    out = np.empty(rows * cols, dtype=np.uint8)
    for t in nb.prange(n_tiles):
        r0, c0, h, w, off = _tile_start(rows, cols, th, tw, t)
        m = modes[t]
        for r in range(h):
            for c in range(w):
                out[off + r * w + c] = (x[r0 + r, c0 + c] - _pred(x, r0, c0, r, c, m)) & 0xFF
    return out


@kernel
def reconstruct(res, rows, cols, th, tw, modes, signed):
    """Inverse prediction: residual plane -> [rows, cols] uint8 bytes of the tensor."""
    n_tiles = modes.size
    x = np.empty((rows, cols), dtype=np.int16)
    for t in nb.prange(n_tiles):
        r0, c0, h, w, off = _tile_start(rows, cols, th, tw, t)
        m = modes[t]
        for r in range(h):
            for c in range(w):
                v = (np.int16(res[off + r * w + c]) + _pred(x, r0, c0, r, c, m)) & 0xFF
                if signed and v >= 128:
                    v -= 256
                x[r0 + r, c0 + c] = v
    return x.astype(np.uint8)  # two's complement bytes of int8, or the uint8 values
