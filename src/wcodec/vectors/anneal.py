"""The annealing loop (the seeds' VLC): assign, reduce robust statistics, move, maintain, cool.

Backend-agnostic: the points stay on the backend's device; the host sees only per-anchor counts,
squared-error sums and the energy (one scalar) each iteration.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import numpy as np

from .config import AnnealingConfig


@dataclass
class AnnealResult:
    """anchors [m, d] and assignments [N] as backend arrays; energy = mean squared distance."""

    anchors: object
    assignments: object
    d2: object
    energy: float
    iterations: int
    history: list = field(default_factory=list)
    merges: int = 0
    splits: int = 0
    seconds: float = 0.0


def initial_indices(points: np.ndarray, m: int, seed: int) -> np.ndarray:
    """Indices of up to m distinct points, in a seeded random order (host side, all backends).

    points: [N, d] float32. Returns int64 [min(m, distinct points)].
    """
    n = points.shape[0]
    order = np.random.default_rng(seed).permutation(n)
    chosen, seen = [], set()
    for start in range(0, n, max(2 * m, 64)):
        for i in order[start:start + max(2 * m, 64)]:
            key = (points[i] + np.float32(0)).tobytes()  # -0.0 == +0.0
            if key not in seen:
                seen.add(key)
                chosen.append(int(i))
                if len(chosen) == m:
                    return np.array(chosen, dtype=np.int64)
    return np.array(chosen, dtype=np.int64)


def anneal(points_host: np.ndarray, config: AnnealingConfig, backend, points=None,
           log=None) -> AnnealResult:
    """Run the annealing on validated float32 points [N, d] (host copy, used for the seeding).

    Hot phase: the annealing schedule (temperature, maintenance) on a seeded subsample of
    ``config.subsample * m`` points when N is larger; cold phase: up to ``refine_iterations``
    Lloyd iterations (T = 0) on all points, until the energy tolerance. Without subsampling the
    whole schedule runs on all points. points: the same points already on the backend's device
    (put there if None). Returns an AnnealResult whose anchors/assignments live on the device.
    """
    t0 = time.perf_counter()
    if points is None:
        points = backend.put(points_host)
    n = points_host.shape[0]
    init = initial_indices(points_host, config.m, config.seed)
    anchors = backend.astype_anchor(points[backend.put_index(init)])
    sample_n = config.subsample * anchors.shape[0]
    if config.subsample and n > sample_n and config.refine_iterations:
        rng = np.random.default_rng(config.seed + 1)
        sample = np.union1d(rng.choice(n, sample_n - init.size, replace=False), init)
        hot = _loop(points[backend.put_index(sample)], anchors, config, backend, log,
                    config.initial_temperature, config.max_iterations, config.maintenance_interval)
        cold = _loop(points, hot.anchors, config, backend, log, 0.0, config.refine_iterations, 0)
        cold.history = hot.history + cold.history
        cold.iterations += hot.iterations
        cold.merges, cold.splits = hot.merges, hot.splits
        result = cold
    else:
        result = _loop(points, anchors, config, backend, log, config.initial_temperature,
                       config.max_iterations, config.maintenance_interval)
    result.seconds = time.perf_counter() - t0
    return result


def _loop(points, anchors, config, backend, log, temperature, max_iterations, interval) -> AnnealResult:
    """The annealing iterations on device points [n, d] from device anchors [m, d] (modified)."""
    p2 = backend.sqnorms(points)
    m = anchors.shape[0]
    history, merges, splits = [], 0, 0
    prev = None
    labels, d2 = backend.assign(points, anchors, p2)
    it = 0
    for it in range(1, max_iterations + 1):
        energy = float(d2.mean())
        history.append(energy)
        if log:
            log(f"iter {it}: T={temperature:.4f} energy={energy:.6f}")
        weights = backend.robust_weights(labels, d2, m, config.robust_clip) if config.robust_clip else None
        counts, wsum, sums, sse = backend.stats(points, labels, d2, m, weights)
        backend.move(anchors, wsum, sums, 1.0 + temperature)
        if interval and it % interval == 0 and it < max_iterations:
            anchors, nm, ns = _maintain(backend, anchors, labels, d2, points, counts, sse, energy, config)
            merges, splits = merges + nm, splits + ns
        temperature *= config.cooling_rate
        labels, d2 = backend.assign(points, anchors, p2)
        new = float(d2.mean())
        if prev is not None and abs(prev - new) <= config.tolerance * max(prev, 1e-30):
            break
        prev = new
    # finish with a plain Lloyd move for the final assignment: the energy can only decrease
    counts, wsum, sums, _ = backend.stats(points, labels, d2, m)
    backend.move(anchors, wsum, sums, 1.0)
    d2 = backend.sqnorms(points - anchors[labels])
    energy = float(d2.mean())
    history.append(energy)
    return AnnealResult(anchors, labels, d2, energy, it, history, merges, splits)


def _maintain(backend, anchors, labels, d2, points, counts, sse, energy, config):
    """Merge anchors closer than merge_threshold * energy; re-seed freed and empty anchors by
    splitting overloaded (then highest squared-error) anchors at their farthest point.

    Returns (anchors, merges, splits). Decisions use only [m] figures on the host.
    """
    m = anchors.shape[0]
    counts_h = backend.get(counts).astype(np.float64)
    sse_h = backend.get(sse).astype(np.float64)
    free = set(np.flatnonzero(counts_h == 0).tolist())
    merges = 0
    if config.merge_threshold > 0 and m > 1:
        dist = backend.get(backend.anchor_sqdist(anchors))
        ii, jj = np.nonzero(np.triu(dist < config.merge_threshold * energy, 1))
        for i, j in zip(ii.tolist(), jj.tolist()):
            if i in free or j in free:
                continue
            wi, wj = counts_h[i], counts_h[j]
            if wi + wj > 0:
                anchors[i] = (anchors[i] * wi + anchors[j] * wj) / (wi + wj)
            counts_h[i] += counts_h[j]
            sse_h[i] += sse_h[j]
            counts_h[j] = sse_h[j] = 0
            free.add(j)
            merges += 1
    splits = 0
    if free:
        mean_count = counts_h.sum() / max(m - len(free), 1)
        overloaded = counts_h > config.split_threshold * mean_count
        priority = np.lexsort((-sse_h, ~overloaded))  # overloaded first, then by SSE
        for k in priority.tolist():
            if not free or counts_h[k] < 2 or sse_h[k] <= 0:
                break
            far = backend.farthest_of(labels, d2, k)
            if far < 0:
                continue
            slot = free.pop()
            anchors[slot] = points[far]
            splits += 1
    return anchors, merges, splits
