"""The annealing loop (the seeds' VLC): seed, assign, reduce robust statistics, move, maintain, cool.

Start: k-means|| (seeding.py). Each iteration assigns every point to its nearest anchor, reduces
per-anchor (robust) means and variances, and moves each anchor toward its mean by a step of
``lr * (1 + T)`` with momentum; every ``maintenance_interval`` iterations (or as soon as Lloyd
has converged) a batch of split/merge moves (moves.py) is proposed at temperature T, and judged
at the next maintenance by the energy Lloyd settled to (Metropolis rule, reverted if rejected).
The run stops once Lloyd has converged and either no move is proposed or the last accepted
batch lowered the energy by less than the tolerance. The best anchors seen are returned. Backend-agnostic: the points stay on the backend's device;
the host sees only per-anchor figures and scalars each iteration.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field

import numpy as np

from .config import AnnealingConfig
from .moves import metropolis, propose
from .seeding import kmeans_parallel


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
    seed_seconds: float = 0.0
    log: list = field(default_factory=list)
    moves: list = field(default_factory=list)
    rejected: int = 0
    variances: np.ndarray | None = None


def anneal(points_host: np.ndarray, config: AnnealingConfig, backend, points=None,
           log=None) -> AnnealResult:
    """Run the annealing on validated float32 points [N, d] (host copy).

    Hot phase: the annealing schedule (temperature, moves) on a seeded subsample of
    ``config.subsample * m`` points when N is larger; cold phase: up to ``refine_iterations``
    Lloyd iterations (T = 0, no moves) on all points, until the energy tolerance. Without
    subsampling the whole schedule runs on all points. points: the same points already on the
    backend's device (put there if None). Returns an AnnealResult whose anchors/assignments
    live on the device.
    """
    t0 = time.perf_counter()
    if points is None:
        points = backend.put(points_host)
    n = points_host.shape[0]
    sample_n = config.subsample * config.m
    if config.subsample and n > sample_n and config.refine_iterations:
        rng = np.random.default_rng(config.seed + 1)
        hot_points = points[backend.put_index(np.sort(rng.choice(n, sample_n, replace=False)))]
        start = _seed(hot_points, config, backend)
        t_seed = time.perf_counter() - t0
        hot = _loop(hot_points, start, config, backend, log,
                    config.initial_temperature, config.max_iterations, config.maintenance_interval)
        result = _loop(points, hot.anchors, config, backend, log, 0.0, config.refine_iterations, 0)
        result.history = hot.history + result.history
        result.log = hot.log + result.log
        result.iterations += hot.iterations
        result.merges, result.splits, result.moves = hot.merges, hot.splits, hot.moves
        result.rejected = hot.rejected
    else:
        start = _seed(points, config, backend)
        t_seed = time.perf_counter() - t0
        result = _loop(points, start, config, backend, log,
                       config.initial_temperature, config.max_iterations, config.maintenance_interval)
    result.seconds = time.perf_counter() - t0
    result.seed_seconds = t_seed  # k-means|| (includes the device's first kernels)
    return result


def _seed(points, config: AnnealingConfig, backend):
    """Initial device anchors [<= m, d] by k-means|| (or m distinct random points)."""
    p2 = backend.sqnorms(points)
    idx = kmeans_parallel(points, p2, config.m, config.seed, backend, random_only=config.init == "random")
    return backend.astype_anchor(points[backend.put_index(idx)])


def _progress(config: AnnealingConfig, n: int, m: int, d: int, total: int):
    """A tqdm bar with ETA over the iterations (config.progress: True, False or None = auto:
    shown when one iteration is above ~2e11 multiply-adds)."""
    show = config.progress if config.progress is not None else n * m * d > 2e11
    from tqdm.auto import tqdm
    return tqdm(total=total, disable=not show, desc="annealing", unit="it", leave=False)


def _loop(points, anchors, config, backend, log, temperature, max_iterations, interval) -> AnnealResult:
    """The annealing iterations on device points [n, d] from device anchors [m, d] (modified)."""
    p2 = backend.sqnorms(points)
    n, m = int(points.shape[0]), int(anchors.shape[0])
    rng = np.random.default_rng(config.seed + 2)
    res = AnnealResult(anchors, None, None, math.inf, 0)
    best = (math.inf, None, None, None)
    velocity = None
    prev_labels, prev_e = None, None
    pending = None  # state before the last batch of moves: (energy, anchors, labels, d2, second, moves)
    batch = max(1, m // 16)
    since, converged = 0, False
    bar = _progress(config, n, m, int(points.shape[1]), max_iterations)
    it = 0
    for it in range(1, max_iterations + 1):
        maint = bool(interval) and m >= 2 and (since + 1 >= interval or converged) and it < max_iterations
        second = None
        if maint:
            labels, d2, second = backend.assign2(points, anchors, p2)
        else:
            labels, d2 = backend.assign(points, anchors, p2)
        energy = float(d2.mean())
        changes = n if prev_labels is None else int((labels != prev_labels).sum())
        delta = math.nan if prev_e is None else energy - prev_e
        converged = changes == 0 or (prev_e is not None and abs(delta) <= config.tolerance * max(prev_e, 1e-30))
        if energy < best[0]:  # labels and d2 are fresh arrays each iteration: kept, not copied
            best = (energy, backend.copy(anchors), labels, d2)
        entry = dict(iter=len(res.log) + 1, T=temperature, E=energy, delta_E=delta, changes=changes,
                     clock=time.perf_counter())  # when this energy was known (time.perf_counter)
        settled = False  # the last batch of moves gained less than the tolerance: propose no more
        if maint:
            since = 0
            if pending is not None:  # judge the last batch by the energy Lloyd settled it to
                e0, a0, l0, d0, s0, moves = pending
                pending = None
                if metropolis((energy - e0) * n, temperature * e0 * n / m, rng):
                    res.moves += moves
                    res.splits += len(moves)
                    res.merges += len(moves)
                    entry["accepted"] = len(moves)
                    batch = min(m, batch + max(1, batch // 2))
                    settled = converged and e0 - energy <= config.tolerance * e0
                else:
                    anchors, labels, d2, second, energy = a0, l0, d0, s0, e0
                    res.rejected += len(moves)
                    entry["rejected"] = len(moves)
                    batch = max(1, batch // 2)
        else:
            since += 1
        res.log.append(entry)
        res.history.append(energy)
        bar.update(1)
        bar.set_postfix(T=f"{temperature:.3g}", E=f"{energy:.5g}", refresh=False)
        if log:
            log(f"Iter {entry['iter']}: T={temperature:.4f}, E={energy:.6f}, delta_E={delta:.6f}, "
                f"Changes={changes}" + "".join(f", {k}={entry[k]}" for k in ("accepted", "rejected") if k in entry))
        snapshot = (energy, backend.copy(anchors), labels, d2, second) if maint else None
        weights = backend.robust_weights(labels, d2, m, config.robust_clip) if config.robust_clip else None
        counts, wsum, sums, _ = backend.stats(points, labels, d2, m, weights)
        before = backend.copy(anchors) if config.momentum else None
        backend.move(anchors, wsum, sums, config.lr * (1.0 + temperature))
        if before is not None:  # heavy-ball momentum on the anchor steps
            step = anchors - before
            velocity = step if velocity is None else config.momentum * velocity + step
            anchors[...] = before + velocity
        if maint:
            moves = [] if settled else propose(backend, points, anchors, labels, d2, second, temperature, batch, rng)
            if moves:
                pending = snapshot + (moves,)
                velocity = None
                if log:
                    log(f"  moves: {len(moves)} split/merge pairs (split " +
                        ", ".join(f"{mv.split}<-{mv.merged}" for mv in moves[:8]) +
                        ("..." if len(moves) > 8 else "") + f"), estimated delta {sum(mv.delta for mv in moves):.4g}")
            elif converged:
                break
        elif converged and not (interval and m >= 2):
            break
        temperature *= config.cooling_rate
        prev_labels, prev_e = labels, energy
    bar.close()
    if pending is not None and best[0] < pending[0]:  # the last batch was never judged: keep if better
        res.moves += pending[5]
        res.splits += len(pending[5])
        res.merges += len(pending[5])
    anchors, labels, d2 = best[1:] if best[1] is not None else (anchors, *backend.assign(points, anchors, p2))
    # finish with a plain Lloyd move for the final assignment: the energy can only decrease
    counts, wsum, sums, _ = backend.stats(points, labels, d2, m)
    backend.move(anchors, wsum, sums, 1.0)
    d2 = backend.sqnorms(points - anchors[labels])
    res.anchors, res.assignments, res.d2 = anchors, labels, d2
    # the reduce step's robust variance of each anchor: Huber-weighted mean squared distance
    # (plain with robust_clip = 0), as the seeds' reduce kernel reports beside the robust mean
    w = backend.robust_weights(labels, d2, m, config.robust_clip) if config.robust_clip else None
    wd2 = d2 if w is None else d2 * w
    res.variances = backend.bincount(labels, wd2, m) / np.maximum(backend.bincount(labels, w, m), 1e-30)
    res.energy = float(d2.mean())
    res.iterations = it
    res.history.append(res.energy)
    return res
