"""MODE_TILED's walk (wcodec.gpu.plan.tiled_place for a chunk's start, then kernels._tstep's
counters, mirrored here in Python step by step) visits every tile row of the int8 codec's
tile-major order (codecs._predict_reference.tiles) in that order, for any shape, tile height and
chunk length: the kernel writes each symbol exactly where the residual plane's order puts it."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from wcodec.codecs._predict_reference import tiles
from wcodec.gpu.plan import tiled_place


def _reference(rows, cols, th):
    """(row, col) of the first symbol of each tile row, tile-major."""
    return [(r0 + r, c0) for r0, c0, h, w in tiles(rows, cols, th, 32) for r in range(h)]


def _walk(rows, cols, th, steps):
    """The kernel's places: each chunk of ``steps`` tile rows starts from tiled_place and steps
    on as _tstep does (next row; next tile at a tile's end; next band at a band's end)."""
    total = rows * (cols // 32)  # tile rows in the tensor
    out = []
    for g0 in range(0, total, steps):
        r, tc, br, h = (int(v[0]) for v in tiled_place(np.array([g0]), rows, cols, th))
        for _ in range(min(steps, total - g0)):
            out.append((br + r, tc))
            r += 1
            if r == h:
                r, tc = 0, tc + 32
                if tc == cols:
                    tc, br = 0, br + th
                    h = min(th, rows - br)
    return out


@settings(max_examples=200, deadline=None)
@given(rows=st.integers(1, 150), tcols=st.integers(1, 6), th=st.integers(1, 70), steps=st.integers(1, 50))
def test_walk_is_tile_major_order(rows, tcols, th, steps):
    cols = 32 * tcols
    assert _walk(rows, cols, th, steps) == _reference(rows, cols, th)
