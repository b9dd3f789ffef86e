"""Initial anchors by k-means|| (scalable k-means++), on any backend.

Bahmani, Moseley, Vattani, Kumar, Vassilvitskii, "Scalable K-Means++", VLDB 2012: a few rounds
each sample every point independently with probability ``l * d2(x) / sum d2`` (d2 = squared
distance to the nearest candidate so far), which needs one distance pass over the points per
round instead of one per anchor as in k-means++; the candidates, weighted by the number of
points nearest to each, are then reduced to m anchors by greedy k-means++ (Arthur &
Vassilvitskii 2007, with ``2 + ln m`` local trials per pick as in scikit-learn). Every random
draw comes from one host generator, so a seed gives the same start on every backend up to float
rounding.
"""

from __future__ import annotations

import math

import numpy as np

from .backends import one_blas_thread, small_product

#: oversampling factor l / m and number of sampling rounds
OVERSAMPLING = 1.0
ROUNDS = 3


def kmeans_parallel(points, p2, m: int, seed: int, backend, rounds: int = ROUNDS,
                    oversampling: float = OVERSAMPLING, random_only: bool = False) -> np.ndarray:
    """Indices into points of up to m distinct initial anchors (host int64 [<= m]).

    points: backend [N, d] float32; p2: backend [N] squared norms. Fewer than m come back only
    when the points hold fewer than m distinct vectors. random_only: m distinct points drawn
    uniformly instead (the plain start, kept for comparisons).
    """
    n = int(points.shape[0])
    rng = np.random.default_rng(seed)
    if random_only:
        order = rng.permutation(n)
        idx = _distinct_rows(backend.get(points[backend.put_index(order[:4 * m])]), order[:4 * m])[:m]
        if idx.size < m and n > 4 * m:
            idx = _distinct_rows(backend.get(points[backend.put_index(order)]), order)[:m]
        return idx
    first = int(rng.integers(n))
    cand = [first]
    # nearest = position in cand of each point's nearest candidate, kept up to date round by
    # round from the same assignments, so the candidates' weights cost no extra pass
    nearest, d2 = backend.assign(points, points[backend.put_index(np.array([first]))], p2)
    d2[first] = 0.0  # exactly: |x|^2 - 2 x.c + |c|^2 leaves rounding error at the candidate
    ell = oversampling * m
    for _ in range(rounds):
        psi = float(d2.sum())
        if psi <= 0 or len(cand) >= n:
            break
        u = backend.uniform(rng, n)
        new = backend.nonzero(u * psi < ell * d2)
        if new.size == 0:
            continue
        pos = backend.put_index(np.arange(len(cand), len(cand) + new.size))
        cand.extend(new.tolist())
        lab, dn = backend.assign(points, points[backend.put_index(new)], p2)
        closer = dn < d2
        nearest[closer] = pos[lab[closer]]
        d2 = backend.minimum(d2, dn)
        new_dev = backend.put_index(new)
        d2[new_dev] = 0.0
        nearest[new_dev] = pos
    cand = np.array(cand)
    keep, merged = _distinct(backend.get(points[backend.put_index(cand)]))
    cand = cand[keep]
    grown = False
    while cand.size < m:  # too few sampled (tiny or degenerate inputs): add the farthest point
        _, d2 = backend.assign(points, points[backend.put_index(cand)], p2)
        d2 = backend.get(d2).copy()
        d2[cand] = 0.0
        far = int(np.argmax(d2))
        if d2[far] <= 0:
            break
        bigger = np.append(cand, far)
        if _distinct(backend.get(points[backend.put_index(bigger)]))[0].size == cand.size:
            break  # the farthest point repeats a candidate: no more distinct ones
        cand, grown = bigger, True
    if cand.size <= m:
        return cand
    cpts = points[backend.put_index(cand)]
    if grown:  # weights = nearest-point counts (Bahmani et al.'s reduction step)
        weights = backend.bincount(backend.assign(points, cpts, p2)[0], None, cand.size)
    else:  # duplicate candidates' points counted on the copy kept
        weights = np.bincount(merged[backend.get(nearest)], minlength=cand.size).astype(np.float64)
    if getattr(backend, "device", None) is not None and backend.device.type == "cuda":
        chosen = greedy_kmeanspp_torch(cpts, backend.put(weights.astype(np.float32)), m, rng)
    else:
        chosen = greedy_kmeanspp(backend.get(cpts), weights, m, rng)
    return cand[chosen]


def _distinct_rows(rows: np.ndarray, idx: np.ndarray) -> np.ndarray:
    """idx with exact duplicate rows dropped (first kept; -0.0 equals +0.0)."""
    return idx[_distinct(rows)[0]]


def _distinct(rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(keep, merged): ascending positions of the first copy of each distinct row of rows [C, d]
    (-0.0 equals +0.0), and for every row the position in keep of its first copy."""
    _, first, inverse = np.unique(np.ascontiguousarray(rows + np.float32(0)).view(
        np.dtype((np.void, rows.dtype.itemsize * rows.shape[1]))).ravel(), return_index=True, return_inverse=True)
    order = np.argsort(first)
    rank = np.empty_like(order)
    rank[order] = np.arange(order.size)
    return first[order], rank[inverse.ravel()]


#: largest candidate count whose [C, C] float32 distance table the host greedy step precomputes
#: (4096: 64 MiB); above it the distances of each pick's trials are computed per pick
TABLE_MAX_CANDIDATES = 4096
_GREEDY_TABLE = None


def greedy_kmeanspp(x: np.ndarray, w: np.ndarray, m: int, rng: np.random.Generator) -> np.ndarray:
    """Greedy weighted k-means++ on host points x [C, d] float32 with weights w [C] >= 0.

    Returns int64 indices of up to m rows (stops early when every remaining row coincides with a
    chosen one). Each pick draws ``2 + ln m`` trials with probability proportional to
    ``w * d2`` and keeps the one that lowers the weighted potential most. The draws are made
    up front (``rng.random((min(m, C), trials))``, the first pick by row 0's first number), as
    greedy_kmeanspp_torch does. Up to TABLE_MAX_CANDIDATES rows the squared distances come from
    one [C, C] table (one sgemm) and the picks from a compiled loop (_greedy_table, equal to
    greedy_from_table, the numpy reference); above it each pick's trial columns are computed
    in numpy.
    """
    c = x.shape[0]
    x = np.ascontiguousarray(x, dtype=np.float32)
    w = np.asarray(w, dtype=np.float64)
    if w.sum() <= 0:
        w = np.ones(c)
    trials = 2 + int(math.log(max(m, 2)))
    u = rng.random((min(m, c), trials))
    x2 = np.einsum("ij,ij->i", x, x)
    if c <= TABLE_MAX_CANDIDATES:
        return _greedy_table()(candidate_table(x, x2), w, u)
    with one_blas_thread():  # products of C x d by d x trials: faster on one BLAS thread
        return _greedy_columns(x, x2, w, u)


def candidate_table(x: np.ndarray, x2: np.ndarray) -> np.ndarray:
    """[C, C] float32 squared distances between the rows of x [C, d] (clipped at 0, zero diagonal)."""
    with one_blas_thread(small_product(*x.shape[:1], *x.shape)):
        table = np.dot(x, (-2.0 * x).T)
    table += x2[:, None]
    table += x2[None, :]
    np.maximum(table, 0.0, out=table)
    np.fill_diagonal(table, 0.0)
    return table


def _first_pick(w: np.ndarray, u0: float) -> int:
    cum = np.cumsum(w)
    return int(min(np.searchsorted(cum, u0 * cum[-1]), w.size - 1))


def greedy_from_table(table: np.ndarray, w: np.ndarray, u: np.ndarray) -> np.ndarray:
    """Reference of the compiled greedy step: picks from the [C, C] table with draws u [k, t]."""
    c = table.shape[0]
    first = _first_pick(w, u[0, 0])
    chosen = [first]
    cur = table[first].astype(np.float64)
    for k in range(1, u.shape[0]):
        cum = np.cumsum(w * cur)
        if cum[-1] <= 0:
            break
        cands = np.minimum(np.searchsorted(cum, u[k] * cum[-1]), c - 1)
        best, best_pot = -1, np.inf
        for t in cands:  # first trial with the lowest potential, as argmin
            pot = float(np.dot(w, np.minimum(cur, table[t])))
            if pot < best_pot:
                best, best_pot = int(t), pot
        if cur[best] <= 0:
            break
        chosen.append(best)
        cur = np.minimum(cur, table[best])
    return np.array(chosen, dtype=np.int64)


def _greedy_table():
    """numba version of greedy_from_table (same picks), compiled once."""
    global _GREEDY_TABLE
    if _GREEDY_TABLE is None:
        import numba

        @numba.njit(cache=True)
        def greedy_table(table, w, u):  # pragma: no cover - compiled
            c = table.shape[0]
            k_max, trials = u.shape
            chosen = np.empty(k_max, np.int64)
            cum = np.cumsum(w)
            first = min(np.searchsorted(cum, u[0, 0] * cum[-1]), c - 1)
            chosen[0] = first
            cur = table[first].astype(np.float64)
            n = 1
            for k in range(1, k_max):
                total = 0.0
                for i in range(c):
                    total += w[i] * cur[i]
                    cum[i] = total
                if total <= 0:
                    break
                best, best_pot = -1, np.inf
                for t in range(trials):
                    cand = min(np.searchsorted(cum, u[k, t] * total), c - 1)
                    row = table[cand]
                    pot = 0.0
                    for i in range(c):
                        pot += w[i] * min(cur[i], row[i])
                    if pot < best_pot:
                        best, best_pot = cand, pot
                if cur[best] <= 0:
                    break
                chosen[n] = best
                n += 1
                row = table[best]
                for i in range(c):
                    if row[i] < cur[i]:
                        cur[i] = row[i]
            return chosen[:n].copy()

        _GREEDY_TABLE = greedy_table
    return _GREEDY_TABLE


def _greedy_columns(x: np.ndarray, x2: np.ndarray, w: np.ndarray, u: np.ndarray) -> np.ndarray:
    """greedy_kmeanspp for many candidates: each pick's trial distance columns in numpy."""
    c = x.shape[0]
    first = _first_pick(w, u[0, 0])
    chosen = [first]
    cur = np.maximum(x2 + x2[first] - 2.0 * np.dot(x, x[first]), 0.0).astype(np.float64)
    cur[first] = 0.0
    for k in range(1, u.shape[0]):
        pot = w * cur
        cum = np.cumsum(pot)
        if cum[-1] <= 0:
            break
        cands = np.minimum(np.searchsorted(cum, u[k] * cum[-1]), c - 1)
        dist = np.maximum(x2[:, None] + x2[cands][None, :] - 2.0 * np.dot(x, x[cands].T), 0.0)
        new = np.minimum(cur[:, None], dist)
        new[cands, np.arange(cands.size)] = 0.0
        best = int(np.argmin(w @ new))
        if cur[cands[best]] <= 0:
            break
        chosen.append(int(cands[best]))
        cur = new[:, best]
    return np.array(chosen, dtype=np.int64)


def greedy_kmeanspp_torch(x, w, m: int, rng: np.random.Generator) -> np.ndarray:
    """greedy_kmeanspp on the GPU: x [C, d] float32 and w [C] torch tensors on one device.

    The same picks as the host version but without a host round trip per pick (the draws are
    made up front; a pick whose trials all coincide with chosen rows is dropped at the end), so
    thousands of anchors take a fraction of a second. Returns host int64 indices [<= m]."""
    import torch

    c = x.shape[0]
    trials = 2 + int(math.log(max(m, 2)))
    x2 = (x * x).sum(1)
    w = w.double().clamp(min=0)
    if float(w.sum()) <= 0:
        w = torch.ones_like(w)
    u = torch.as_tensor(rng.random((min(m, c), trials)), device=x.device)
    first = int(torch.searchsorted(torch.cumsum(w, 0), u[0, :1] * w.sum()).clamp(max=c - 1))
    chosen = torch.empty(min(m, c), dtype=torch.int64, device=x.device)
    chosen[0] = first
    cur = (x2 + x2[first] - 2.0 * (x @ x[first])).clamp(min=0).double()
    cur[first] = 0.0
    gain = torch.empty(min(m, c), dtype=torch.float64, device=x.device)
    gain[0] = 1.0
    cols = torch.arange(trials, device=x.device)
    for k in range(1, min(m, c)):
        cum = torch.cumsum(w * cur, 0)
        cands = torch.searchsorted(cum, u[k] * cum[-1]).clamp(max=c - 1)
        dist = (x2[:, None] + x2[cands][None, :] - 2.0 * (x @ x[cands].T)).clamp(min=0).double()
        new = torch.minimum(cur[:, None], dist)
        new[cands, cols] = 0.0
        best = torch.argmin(w @ new)
        chosen[k] = cands[best]
        gain[k] = cur[cands[best]]
        cur = new[:, best]
    keep = (gain > 0).cpu().numpy()
    return chosen.cpu().numpy()[keep]
