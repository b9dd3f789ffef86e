"""The specification of the int8 codec's intra prediction, in numpy (slow; tests compare the C
and numba kernels of ``codecs._predict`` against it, bit for bit).

Written from docs/CODEC_LAYOUT.md ("codec int8") tile by tile, with the neighbours as shifted
copies of the zero-padded tile rather than the kernels' per-element loops: left = x[r, c-1],
top = x[r-1, c], tl = x[r-1, c-1], 0 outside the tile; pred NONE 0, LEFT left, TOP top, AVG
(left+top)>>1 (floor), PLANAR left+top-tl; residual = (x - pred) mod 256. The inverses: LEFT a
row prefix sum mod 256, TOP a column prefix sum, PLANAR a 2-D prefix sum, AVG its recurrence.
The residual plane is tile-major (tile (ti, tj) is number ti*n_tiles_w + tj), each tile row-major.
"""

from __future__ import annotations

import numpy as np

NONE, LEFT, TOP, AVG, PLANAR = range(5)
N_MODES = 5


def tiles(rows: int, cols: int, th: int, tw: int):
    """Yield (r0, c0, h, w) of each tile in tile-major order."""
    for r0 in range(0, rows, th):
        for c0 in range(0, cols, tw):
            yield r0, c0, min(th, rows - r0), min(tw, cols - c0)


def predict_tile(t: np.ndarray, mode: int) -> np.ndarray:
    """Prediction of a tile t [h, w] (int64 values) under ``mode``."""
    p = np.pad(t, ((1, 0), (1, 0)))
    left, top, tl = p[1:, :-1], p[:-1, 1:], p[:-1, :-1]
    return {NONE: np.zeros_like(t), LEFT: left, TOP: top, AVG: (left + top) >> 1,
            PLANAR: left + top - tl}[int(mode)]


def residuals(x: np.ndarray, th: int, tw: int, modes: np.ndarray, size: int = 0) -> np.ndarray:
    """x: [rows, cols] int values; modes: [n_tiles] -> [rows*cols] uint8 residual plane.
    (``size``, the kernels' thread choice, is ignored here and below.)"""
    x = np.asarray(x, dtype=np.int64)
    parts = [(x[r0:r0 + h, c0:c0 + w] - predict_tile(x[r0:r0 + h, c0:c0 + w], m)).ravel() & 0xFF
             for (r0, c0, h, w), m in zip(tiles(*x.shape, th, tw), modes)]
    return np.concatenate(parts).astype(np.uint8) if parts else np.zeros(0, np.uint8)


def mode_costs(x: np.ndarray, th: int, tw: int, cost: np.ndarray, size: int = 0) -> np.ndarray:
    """[n_tiles, 5] float64: each tile's sum of cost[residual] (bits) under each mode, added in
    row-major order (a sequential float sum, as the kernels add)."""
    x = np.asarray(x, dtype=np.int64)
    out = []
    for r0, c0, h, w in tiles(*x.shape, th, tw):
        t = x[r0:r0 + h, c0:c0 + w]
        out.append([float(np.cumsum(cost[(t - predict_tile(t, m)).ravel() & 0xFF])[-1])
                    for m in range(N_MODES)])
    return np.array(out, dtype=np.float64).reshape(-1, N_MODES)


def _inverse_tile(res: np.ndarray, mode: int, signed: bool) -> np.ndarray:
    """Residuals of one tile [h, w] (int64) -> its values (signed or unsigned ints)."""
    if mode == NONE:
        v = res
    elif mode == LEFT:
        v = np.cumsum(res, axis=1)
    elif mode == TOP:
        v = np.cumsum(res, axis=0)
    elif mode == PLANAR:
        v = np.cumsum(np.cumsum(res, axis=0), axis=1)
    else:  # AVG: each value needs its reconstructed left and top neighbours
        v = np.zeros_like(res)
        for r in range(res.shape[0]):
            for c in range(res.shape[1]):
                left = _value(v[r, c - 1], signed) if c else 0
                top = _value(v[r - 1, c], signed) if r else 0
                v[r, c] = res[r, c] + ((left + top) >> 1)
    return v & 0xFF


def _value(byte: int, signed: bool) -> int:
    byte = int(byte) & 0xFF
    return byte - 256 if signed and byte >= 128 else byte


def reconstruct(res: np.ndarray, rows: int, cols: int, th: int, tw: int, modes: np.ndarray,
                signed: bool, size: int = 0) -> np.ndarray:
    """Inverse prediction: [rows*cols] uint8 residual plane -> [rows, cols] uint8 (the tensor's
    bytes: two's complement for signed int8)."""
    out = np.zeros((rows, cols), dtype=np.uint8)
    off = 0
    for (r0, c0, h, w), m in zip(tiles(rows, cols, th, tw), modes):
        r = np.asarray(res[off:off + h * w], dtype=np.int64).reshape(h, w)
        out[r0:r0 + h, c0:c0 + w] = _inverse_tile(r, m, signed)
        off += h * w
    return out
