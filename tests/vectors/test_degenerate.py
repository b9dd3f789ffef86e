"""Hypothesis tests: degenerate inputs (N < m, duplicates, d = 1, all-equal points)."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings, strategies as st
from hypothesis.extra.numpy import arrays

from wcodec.vectors import AnnealingConfig, compress

FAST = settings(max_examples=25, deadline=None)
values = st.floats(-100, 100, allow_nan=False, allow_infinity=False, width=32)


def _check(idx, pts):
    n = pts.shape[0]
    assert idx.assignments.shape == (n,)
    assert 1 <= idx.m and idx.assignments.min() >= 0 and idx.assignments.max() < idx.m
    assert np.isfinite(idx.energy) and idx.energy >= 0
    err = ((pts.astype(np.float32) - idx.anchors[idx.assignments]) ** 2).sum(1).mean()
    assert np.isclose(err, idx.energy, rtol=1e-3, atol=1e-3 * (1 + float((pts.astype(np.float64) ** 2).sum(1).mean())))


@FAST
@given(arrays(np.float32, st.tuples(st.integers(1, 12), st.integers(1, 5)), elements=values),
       st.integers(1, 20))
def test_small_n_any_m(pts, m):
    idx = compress(pts, AnnealingConfig(m=m, max_iterations=5))
    assert idx.m <= min(m, pts.shape[0])
    _check(idx, pts)


@FAST
@given(arrays(np.float32, st.tuples(st.integers(1, 6), st.integers(1, 4)), elements=values),
       st.integers(1, 8), st.integers(2, 5))
def test_duplicates(base, m, reps):
    pts = np.repeat(base, reps, axis=0)
    idx = compress(pts, AnnealingConfig(m=m, max_iterations=6, maintenance_interval=2))
    distinct = np.unique(pts, axis=0).shape[0]
    assert idx.m <= distinct
    _check(idx, pts)
    if m >= distinct:  # enough anchors for every distinct point: exact
        assert idx.energy <= 1e-6 * (1 + float((pts ** 2).sum(1).max()))


@FAST
@given(arrays(np.float32, st.tuples(st.integers(2, 60), st.just(1)), elements=values), st.integers(1, 6))
def test_one_dimension(pts, m):
    idx = compress(pts, AnnealingConfig(m=m, max_iterations=8, maintenance_interval=3))
    _check(idx, pts)


@FAST
@given(st.integers(1, 50), st.integers(1, 6), values, st.integers(1, 10))
def test_all_equal(n, d, v, m):
    pts = np.full((n, d), v, dtype=np.float32)
    idx = compress(pts, AnnealingConfig(m=m, bytes_per_vector=1e6))
    assert idx.m == 1  # anchors are stored as float16: the energy is their rounding error only
    assert idx.energy <= d * (abs(v) * 2.0 ** -11 + 2.0 ** -24) ** 2 * 1.01  # fp16 rounding or underflow
    np.testing.assert_allclose(idx.reconstruct(), pts, atol=1e-2 * (1 + abs(v)))
