"""Reversible integer 8x8 DCT-II and ADST (DST-VII): the spec of the int8 codec's transform modes.

Each orthonormal 8-point transform Q (DCT-II, or DST-VII, the ADST of AV1/VVC) is factored into
Givens rotations of adjacent coordinates, Q = R_1 R_2 ... R_28 D (D: odd coordinates negated),
found by a QR sweep (:func:`derive`), and every rotation is applied as three lifting steps with
integer constants in units of 2**-12 (Liang & Tran, "Integer DCT via lifting", IEEE TSP 2001):

    a += (T*b + 2048) >> 12;  b += (S*a + 2048) >> 12;  a += (T*b + 2048) >> 12

with T = round(4096 * (cos - 1) / sin), S = round(4096 * sin) (|angle| <= pi/2, so |T|, |S| <=
4096). ``>>`` is an arithmetic (floor) shift. The inverse runs the same steps in reverse order
with ``-=`` instead of ``+=``, so it undoes the forward transform exactly whatever the rounding:
integer in, integer out, bit-exact, no floating point anywhere (the constants below are the
format; :func:`derive` only documents where they come from and a test re-derives them).

A block transform is the 1-D transform of each of the 8 rows, then of each of the 8 columns;
the inverse undoes the columns, then the rows. Coefficients of int8 blocks lie within about
+-1100 (uint8: 0..2100), more than a byte, so the int8 codec stores each as a low byte (two's
complement, in the residual plane beside the prediction residuals, which it resembles) and a
high part ``hi = (c + 128) >> 8`` in a second rANS plane (:func:`split`, :func:`join`).

This module is pure Python (the reference, for tiny inputs and tests; numpy only for the tile
bookkeeping shared by every decoder). The numba kernels are in
``wcodec.codecs._transform``, the Triton inverse in ``wcodec.gpu.transform_kernels``; tests check
all three bit-identical.
"""

from __future__ import annotations

import math

import numpy as np

from ..errors import CorruptDataError

#: lifting constants are integers in units of 2**-SHIFT
SHIFT = 12
HALF = 1 << (SHIFT - 1)
N = 8  # block side
#: int8 codec mode ids of the transform modes (after NONE, LEFT, TOP, AVG, PLANAR = 0..4)
DCT, ADST = 5, 6
KINDS = {DCT: "DCT", ADST: "ADST"}
#: legal range of the high part; the decoder refuses others (they bound every intermediate value
#: to 18 bits, so int32 arithmetic cannot overflow on the GPU)
HI_MIN, HI_MAX = -16, 15

# Rotations (p, T, S) on coordinates (p, p + 1), in the order R_1 ... R_28 of Q = R_1 ... R_28 D.
# Both transforms use the same sequence of pairs (the QR sweep: column j = 0..6, p = 6 down to j).
ROTATIONS = {
    DCT: (
        (6, -984, 1860), (5, -1399, 2505), (4, -1688, 2886), (3, -1917, 3145), (2, -2112, 3337),
        (1, -2288, 3488), (0, -2831, 3831), (6, -602, 1178), (5, -975, 1846), (4, -1306, 2371),
        (3, -1635, 2821), (2, -1996, 3226), (1, -2752, 3792), (6, -488, 963), (5, -859, 1646),
        (4, -1249, 2285), (3, -1719, 2924), (2, -2655, 3739), (6, -470, 927), (5, -895, 1708),
        (4, -1437, 2559), (3, -2531, 3664), (6, -529, 1040), (5, -1123, 2089), (4, -2365, 3547),
        (6, -731, 1418), (5, -2120, 3344), (6, -1697, 2896),
    ),
    ADST: (
        (6, -1738, 2946), (5, -2229, 3440), (4, -2568, 3687), (3, -2858, 3844), (2, -3138, 3955),
        (1, -3429, 4032), (0, -3746, 4080), (6, -764, 1476), (5, -1203, 2215), (4, -1593, 2768),
        (3, -2001, 3230), (2, -2489, 3636), (1, -3151, 3959), (6, -554, 1089), (5, -957, 1815),
        (4, -1375, 2471), (3, -1889, 3115), (2, -2675, 3750), (6, -494, 973), (5, -919, 1750),
        (4, -1440, 2564), (3, -2272, 3475), (6, -513, 1009), (5, -1043, 1959), (4, -1900, 3127),
        (6, -630, 1230), (5, -1511, 2660), (6, -1029, 1936),
    ),
}
#: D: the sign of each input coordinate (applied first by the forward transform)
SIGNS = (1, -1, 1, -1, 1, -1, 1, -1)
PAIRS = tuple(p for j in range(N - 1) for p in range(N - 2, j - 1, -1))
assert all(tuple(r[0] for r in rot) == PAIRS for rot in ROTATIONS.values())


def matrix(kind: int) -> list:
    """The orthonormal 8x8 matrix (float rows = basis functions) of DCT-II or DST-VII."""
    if kind == DCT:
        return [[math.cos(math.pi * (2 * i + 1) * k / (2 * N)) * math.sqrt((1 if k else 0.5) * 2 / N)
                 for i in range(N)] for k in range(N)]
    if kind == ADST:
        return [[math.sqrt(4 / (2 * N + 1)) * math.sin(math.pi * (2 * i + 1) * (k + 1) / (2 * N + 1))
                 for i in range(N)] for k in range(N)]
    raise ValueError(f"unknown transform kind {kind}")


def derive(kind: int) -> tuple:
    """Re-derive (ROTATIONS[kind], SIGNS) from the float matrix: a Givens QR sweep zeroing each
    column below the diagonal from the bottom up, each rotation's sign chosen so that cos >= 0."""
    m = matrix(kind)
    rots = []
    for j in range(N - 1):
        for p in range(N - 2, j - 1, -1):
            a, b = m[p][j], m[p + 1][j]
            r = math.copysign(math.hypot(a, b), a) if a else math.hypot(a, b)
            c, s = a / r, b / r
            m[p], m[p + 1] = ([c * u + s * v for u, v in zip(m[p], m[p + 1])],
                              [-s * u + c * v for u, v in zip(m[p], m[p + 1])])
            rots.append((p, round(4096 * (c - 1) / s), round(4096 * s)))
    return tuple(rots), tuple(int(round(m[k][k])) for k in range(N))


def _lift(v: int, T: int) -> int:
    return (T * v + HALF) >> SHIFT


def forward_1d(v: list, kind: int) -> list:
    """Integer forward transform of 8 integers (a new list)."""
    v = [s * x for s, x in zip(SIGNS, v)]
    for p, T, S in reversed(ROTATIONS[kind]):
        a, b = v[p], v[p + 1]
        a += _lift(b, T)
        b += _lift(a, S)
        a += _lift(b, T)
        v[p], v[p + 1] = a, b
    return v


def inverse_1d(v: list, kind: int) -> list:
    """Exact inverse of :func:`forward_1d` (a new list)."""
    v = list(v)
    for p, T, S in ROTATIONS[kind]:
        a, b = v[p], v[p + 1]
        a -= _lift(b, T)
        b -= _lift(a, S)
        a -= _lift(b, T)
        v[p], v[p + 1] = a, b
    return [s * x for s, x in zip(SIGNS, v)]


def forward_block(x: list, kind: int) -> list:
    """8x8 integers (list of rows) -> coefficients: rows transformed, then columns."""
    rows = [forward_1d(r, kind) for r in x]
    cols = [forward_1d([rows[i][j] for i in range(N)], kind) for j in range(N)]
    return [[cols[j][i] for j in range(N)] for i in range(N)]


def inverse_block(c: list, kind: int) -> list:
    """Exact inverse of :func:`forward_block`: columns undone, then rows."""
    cols = [inverse_1d([c[i][j] for i in range(N)], kind) for j in range(N)]
    return [inverse_1d([cols[j][i] for j in range(N)], kind) for i in range(N)]


def split(c: int) -> tuple:
    """Coefficient -> (low byte 0..255, high part): c = sext8(low) + 256 * hi."""
    return c & 0xFF, (c + 128) >> 8


def join(lo: int, hi: int) -> int:
    return (lo - 256 if lo >= 128 else lo) + 256 * hi


def transform_ok(h: int, w: int) -> bool:
    """A tile may use a transform mode when it is made of whole 8x8 blocks."""
    return h % N == 0 and w % N == 0 and h > 0 and w > 0


def tile_sizes(rows: int, cols: int, th: int, tw: int) -> tuple:
    """Per tile (tile-major): heights and widths, [n_tiles] int64 each."""
    hs = np.minimum(th, rows - np.arange(0, rows, th, dtype=np.int64))
    ws = np.minimum(tw, cols - np.arange(0, cols, tw, dtype=np.int64))
    return np.repeat(hs, ws.size), np.tile(ws, hs.size)


def hi_offsets(rows: int, cols: int, th: int, tw: int, modes: np.ndarray) -> tuple:
    """Start of each tile in the hi plane ([n_tiles] int64; transform tiles in tile order, each
    row-major) and the plane's length. Raises CorruptDataError if a transform tile is not made of
    whole 8x8 blocks."""
    hs, ws = tile_sizes(rows, cols, th, tw)
    tr = modes >= DCT
    if np.any(tr & ((hs % 8 != 0) | (ws % 8 != 0))):
        raise CorruptDataError("int8 codec: a transform tile is not made of whole 8x8 blocks")
    sizes = np.where(tr, hs * ws, 0)
    return np.cumsum(sizes) - sizes, int(sizes.sum())


def reference_forward(x, th: int, tw: int, modes) -> tuple:
    """Pure-Python spec of the encoder side. x: [rows, cols] integers (nested lists or an array),
    modes: per tile. Returns ({plane index: low byte} for the transform tiles' samples, [hi
    parts]): residual-plane positions are tile-major, each tile row-major (as the prediction
    residuals); the hi plane holds the transform tiles' samples in the same order."""
    rows, cols = len(x), len(x[0]) if len(x) else 0
    ntw = -(-cols // tw)
    lo, hi = {}, []
    for t, m in enumerate(modes):
        if m not in KINDS:
            continue
        r0, c0 = (t // ntw) * th, (t % ntw) * tw
        h, w = min(th, rows - r0), min(tw, cols - c0)
        if not transform_ok(h, w):
            raise ValueError(f"tile {t} is {h}x{w}: transform modes need whole 8x8 blocks")
        coef = [[0] * w for _ in range(h)]
        for bi in range(0, h, N):
            for bj in range(0, w, N):
                blk = forward_block([[int(x[r0 + bi + i][c0 + bj + j]) for j in range(N)] for i in range(N)], m)
                for i in range(N):
                    coef[bi + i][bj:bj + N] = blk[i]
        off = r0 * cols + h * c0
        for i in range(h):
            for j in range(w):
                lo[off + i * w + j], hj = split(coef[i][j])
                hi.append(hj)
    return lo, hi


def reference_inverse(res, hi, rows: int, cols: int, th: int, tw: int, modes) -> dict:
    """Pure-Python spec of the decoder side: (residual plane bytes, hi parts) -> {(r, c): value}
    for the samples of the transform tiles (values as integers; the codec keeps their low byte)."""
    ntw = -(-cols // tw)
    out, k = {}, 0
    for t, m in enumerate(modes):
        if m not in KINDS:
            continue
        r0, c0 = (t // ntw) * th, (t % ntw) * tw
        h, w = min(th, rows - r0), min(tw, cols - c0)
        off = r0 * cols + h * c0
        coef = [[join(int(res[off + i * w + j]), int(hi[k + i * w + j])) for j in range(w)] for i in range(h)]
        k += h * w
        for bi in range(0, h, N):
            for bj in range(0, w, N):
                blk = inverse_block([coef[bi + i][bj:bj + N] for i in range(N)], m)
                for i in range(N):
                    for j in range(N):
                        out[(r0 + bi + i, c0 + bj + j)] = blk[i][j]
    return out
