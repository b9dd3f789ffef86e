"""CPU fast paths of the annealing against their references: threaded blocked assignment,
compiled greedy k-means++, compiled 2-means split, lazily evaluated split candidates."""

from __future__ import annotations

import numpy as np
import pytest

from wcodec.vectors import backends
from wcodec.vectors import seeding
from wcodec.vectors.backends import NumpyBackend
from wcodec.vectors.moves import _splits_by_gain, split_two, split_two_host


def _brute(points, anchors):
    """float64 nearest / second-nearest squared distances by full differences."""
    d = ((points[:, None, :].astype(np.float64) - anchors[None].astype(np.float64)) ** 2).sum(-1)
    order = np.argsort(d, axis=1, kind="stable")
    rows = np.arange(len(points))
    return order[:, 0], d[rows, order[:, 0]], d[rows, order[:, 1]]


@pytest.mark.parametrize("n, m, d", [(20_000, 128, 32), (700, 300, 5), (9, 4, 2)])
def test_blocked_assignment_matches_brute_force(n, m, d, monkeypatch):
    """Ranges over worker threads (the first shape is split: n*m*d >= 2^26) and small blocks
    (the second: CPU_BLOCK_FLOATS lowered to a few rows) give the brute-force answer."""
    if n < 1000:
        monkeypatch.setattr(backends, "CPU_BLOCK_FLOATS", 64 * m)
        monkeypatch.setattr(backends, "CPU_BLOCK_MIN_ROWS", 3)
    rng = np.random.default_rng(n)
    pts = rng.standard_normal((n, d)).astype(np.float32)
    anchors = rng.standard_normal((m, d)).astype(np.float32)
    b = NumpyBackend()
    labels, d2, second = b.assign2(pts, anchors, b.sqnorms(pts))
    lab1, d2_1 = b.assign(pts, anchors, b.sqnorms(pts))
    ref_lab, ref_d2, ref_second = _brute(pts, anchors)
    gap = ref_second - ref_d2
    clear = gap > 1e-4 * (1 + ref_d2)  # not a tie within float32 rounding
    assert clear.mean() > 0.99
    assert np.array_equal(labels[clear], ref_lab[clear]) and np.array_equal(labels, lab1)
    assert np.array_equal(d2, d2_1)
    tol = 1e-5 * (1 + (pts.astype(np.float64) ** 2).sum(1) + (anchors.astype(np.float64) ** 2).sum(1).max())
    assert np.all(np.abs(d2 - ref_d2) <= tol) and np.all(np.abs(second - ref_second) <= tol)
    assert np.all(second >= d2)


def test_greedy_compiled_equals_reference():
    rng = np.random.default_rng(3)
    x = rng.standard_normal((600, 24)).astype(np.float32)
    w = rng.integers(1, 30, 600).astype(np.float64)
    u = np.random.default_rng(5).random((100, 6))
    table = seeding.candidate_table(x, np.einsum("ij,ij->i", x, x))
    fast = seeding._greedy_table()(table, w, u)
    ref = seeding.greedy_from_table(table, w, u)
    assert fast.size == 100 and np.array_equal(fast, ref)
    assert np.unique(fast).size == fast.size


def test_greedy_column_path_for_many_candidates(monkeypatch):
    """Above TABLE_MAX_CANDIDATES the per-pick numpy path runs: same draws, the same picks here."""
    rng = np.random.default_rng(7)
    x = (10 * rng.standard_normal((400, 8))).astype(np.float32)
    w = rng.integers(1, 5, 400).astype(np.float64)
    table = seeding.greedy_kmeanspp(x, w, 30, np.random.default_rng(1))
    monkeypatch.setattr(seeding, "TABLE_MAX_CANDIDATES", 10)
    cols = seeding.greedy_kmeanspp(x, w, 30, np.random.default_rng(1))
    assert np.array_equal(table, cols)


@pytest.mark.parametrize("k, d", [(40, 128), (200, 3), (2, 5)])
def test_split_two_host_matches_split_two(k, d):
    rng = np.random.default_rng(k)
    side = np.where(rng.random(k) < 0.4, 2.0, -2.0)[:, None]
    pts = (rng.standard_normal((k, d)) + side).astype(np.float32)
    gain, c1, c2 = split_two(pts)
    gain_h, c1_h, c2_h = split_two_host(pts)
    assert abs(gain - gain_h) <= 1e-4 * abs(gain)
    assert np.allclose(c1, c1_h, atol=1e-4) and np.allclose(c2, c2_h, atol=1e-4)
    assert split_two_host(pts[:1])[1] is None and split_two_host(np.ones((4, 3), np.float32))[1] is None


def test_lazy_split_order_equals_full_sort():
    rng = np.random.default_rng(0)
    sse = rng.random(50) * 10
    gains = sse * rng.random(50)  # a split never gains more than its anchor's SSE
    cands = [int(k) for k in np.argsort(-sse, kind="stable")]
    calls = []

    def split(k):
        calls.append(k)
        return gains[k], np.zeros(1), np.zeros(1)

    lazy = [k for _, k, _, _ in _splits_by_gain(cands, sse, split)]
    assert lazy == sorted(cands, key=lambda k: -gains[k])
    calls.clear()
    first = next(iter(_splits_by_gain(cands, sse, split)))
    assert first[1] == int(np.argmax(gains)) and len(calls) < len(cands)  # stops once the best is certain


def test_kmeans_parallel_weights_are_exact_counts(monkeypatch):
    """The candidates' weights tracked through the k-means|| rounds equal the nearest-candidate
    counts of a full assignment (duplicate rows merged into the copy kept)."""
    rng = np.random.default_rng(11)
    pts = rng.standard_normal((3000, 6)).astype(np.float32)
    pts[2000:2100] = pts[:100]  # exact duplicates: their candidates must merge
    seen = {}

    def spy(x, w, m, rng_):
        seen["x"], seen["w"] = x.copy(), np.asarray(w).copy()
        return np.arange(m)

    monkeypatch.setattr(seeding, "greedy_kmeanspp", spy)
    b = NumpyBackend()
    seeding.kmeans_parallel(pts, b.sqnorms(pts), 40, 0, b)
    cands = seen["x"]
    assert len(np.unique(cands, axis=0)) == len(cands)
    d = ((pts[:, None, :].astype(np.float64) - cands[None].astype(np.float64)) ** 2).sum(-1)
    order = np.sort(d, axis=1)
    clear = order[:, 1] - order[:, 0] > 1e-4  # no near-tie between two candidates
    counts = np.bincount(np.argmin(d, axis=1)[clear], minlength=len(cands))
    assert seen["w"].sum() == len(pts) and clear.mean() > 0.99
    assert np.all(np.abs(seen["w"] - counts) <= (~clear).sum())


def test_distinct_keeps_first_copies():
    rows = np.array([[1, 2], [3, 4], [1, 2], [-0.0, 5], [0.0, 5], [3, 4]], np.float32)
    keep, merged = seeding._distinct(rows)
    assert keep.tolist() == [0, 1, 3] and merged.tolist() == [0, 1, 0, 2, 2, 1]
