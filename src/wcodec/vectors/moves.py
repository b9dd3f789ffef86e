"""Annealing moves that leave a Lloyd basin: split a costly anchor, merge away a cheap one.

Lloyd iterations only slide anchors inside their basin: an anchor sitting between two clusters,
or two anchors sharing one, stay there. A move pairs the split of a high squared-error anchor
(its points cut in two by 2-means started along their principal direction) with the removal of
the anchor whose points cost least to hand to their second-nearest anchors (a merge into its
neighbours); the freed anchor becomes the second half of the split. The estimated energy change
``delta = removal cost - split gain`` (total squared error, other anchors fixed) decides by the
Metropolis rule at temperature T: always when delta < 0, else with probability
``exp(-delta / (T * mean SSE per anchor))``. The loop (anneal.py) then judges each batch of moves
by the energy after Lloyd settles it and reverts a batch by the same rule. Sources: the
split/merge maintenance of the seeds' VLC; ISODATA (Ball & Hall 1965) and split-merge k-means
(e.g. Muhr & Granitzer 2009) for the split/remove pairing.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

#: 2-means iterations of a split and power iterations for its start
SPLIT_ITERATIONS = 4
POWER_ITERATIONS = 4
#: most split candidates examined per batch (each is a few small device operations)
MAX_CANDIDATES = 512


@dataclass
class Move:
    """One accepted split/merge pair: anchor ``split`` was cut in two, anchor ``merged`` was
    removed (its points handed to their second-nearest anchors) and reused as the second half;
    ``delta`` is the estimated change of total squared error."""

    split: int
    merged: int
    delta: float


def split_two(pts):
    """2-means of one anchor's points pts [k, d] (numpy or torch, float32).

    Returns (gain, c1, c2): the squared error removed by replacing their mean with the two
    centroids c1, c2 [d], or (0.0, None, None) when they cannot be split.
    """
    k = pts.shape[0]
    if k < 2:
        return 0.0, None, None
    mu = pts.mean(0)
    z = pts - mu
    rows = (z * z).sum(1)
    sse = float(rows.sum())
    if sse <= 0:
        return 0.0, None, None
    v = z[int(rows.argmax())]  # start of the power iteration: the farthest point's direction
    for _ in range(POWER_ITERATIONS):
        v = z.T @ (z @ v)
        norm = float((v * v).sum()) ** 0.5
        if norm <= 0:
            return 0.0, None, None
        v = v / norm
    left = (z @ v) < 0
    c1 = c2 = None
    for _ in range(SPLIT_ITERATIONS):
        if bool(left.all()) or not bool(left.any()):
            return 0.0, None, None
        c1, c2 = pts[left].mean(0), pts[~left].mean(0)
        left = ((pts - c1) ** 2).sum(1) <= ((pts - c2) ** 2).sum(1)
    if bool(left.all()) or not bool(left.any()):
        return 0.0, None, None
    c1, c2 = pts[left].mean(0), pts[~left].mean(0)
    after = float(((pts[left] - c1) ** 2).sum()) + float(((pts[~left] - c2) ** 2).sum())
    return sse - after, c1, c2


def metropolis(delta: float, temperature: float, rng: np.random.Generator) -> bool:
    """Accept an energy change delta at temperature (same units): always if delta <= 0."""
    if delta <= 0:
        return True
    if temperature <= 0:
        return False
    return bool(rng.random() < math.exp(-delta / temperature))


def propose(backend, points, anchors, labels, d2, second, temperature: float, max_moves: int,
            rng: np.random.Generator) -> list[Move]:
    """Apply up to max_moves split/merge pairs to anchors [m, d] in place; return them.

    labels, d2, second: each point's nearest anchor, squared distance to it and to the
    second-nearest anchor (backend.assign2 of these anchors). temperature: in units of the mean
    squared error per anchor. No anchor takes part in two moves of a batch, nor is an anchor
    removed together with its nearest neighbour (their removal costs would not add up).
    """
    m = int(anchors.shape[0])
    counts = backend.bincount(labels, None, m)
    sse = backend.bincount(labels, d2, m)
    cost = backend.bincount(labels, second - d2, m)
    scale = temperature * float(sse.sum()) / m
    n_cand = min(m, max(2 * max_moves, 8), MAX_CANDIDATES)
    cands = [int(k) for k in np.argsort(-sse, kind="stable")[:n_cand] if counts[k] >= 2]
    if not cands:
        return []
    order = backend.group_order(labels)
    starts = np.concatenate([[0], np.cumsum(counts).astype(np.int64)])
    splits = []
    for k in cands:
        gain, c1, c2 = split_two(points[order[int(starts[k]):int(starts[k + 1])]])
        if c1 is not None:
            splits.append((gain, k, c1, c2))
    splits.sort(key=lambda s: -s[0])
    nearest = np.argmin(backend.get(backend.anchor_sqdist(anchors)), axis=1)
    removal = iter(np.argsort(cost, kind="stable").tolist())
    used: set[int] = set()
    moves: list[Move] = []
    j = next(removal, None)
    for gain, i, c1, c2 in splits:
        if len(moves) >= max_moves:
            break
        if i in used:
            continue
        while j is not None and (j in used or j == i):
            j = next(removal, None)
        if j is None:
            break
        delta = float(cost[j]) - gain
        if not metropolis(delta, scale, rng):
            break  # gains fall and costs rise from here on
        anchors[i] = c1
        anchors[j] = c2
        used.update((i, j, int(nearest[j])))
        moves.append(Move(i, j, delta))
    return moves
