"""Asymmetric distance computation (ADC): exact query against coded vectors, via lookup tables.

For a query q and a coded vector x_hat = a[l] + y_hat R (anchor, rotated residual y_hat):
``|q - x_hat|^2 = |q|^2 - 2 q.a[l] - 2 sum_s LUT_s[code_s] + |x_hat|^2`` with
``LUT_s[c] = <(R q)_s, codebook_s[c]>``; |x_hat|^2 is computed once per index. With stored
norms the index passes |x|^2 for the additive term and a per-vector scale |x| / |x_hat| of the
inner product ``q.x_hat = q.a[l] + sum_s LUT_s[code_s]``.
"""

from __future__ import annotations

import numpy as np

QUERY_BLOCK = 64
#: most distances held at once ([queries, N] float32: 256 MiB), fewer queries per block for large N
MAX_BLOCK_DISTANCES = 1 << 26


def _kernel():
    import numba

    @numba.njit(parallel=True, cache=True, fastmath=False)
    def adc_block(qa, lut, labels, codes, norms, scale, out):  # pragma: no cover - compiled
        nq, n = out.shape
        n_sub = codes.shape[1]
        for qi in numba.prange(nq):
            for i in range(n):
                acc = 0.0
                for s in range(n_sub):
                    acc += lut[qi, s, codes[i, s]]
                out[qi, i] = norms[i] - 2.0 * scale[i] * (qa[qi, labels[i]] + acc)
    return adc_block


_ADC = None


def adc_search(queries: np.ndarray, k: int, anchors: np.ndarray, labels: np.ndarray,
               codes: np.ndarray | None, books, norms: np.ndarray, scale: np.ndarray | None = None):
    """Top-k nearest coded vectors by ADC.

    queries [nq, d] float32; anchors [m, d] float32; labels [N] int64; codes [N, M] uint8 or None
    (anchors only); books: ResidualCodebooks or None; norms [N] float32 = |x_hat|^2 (or the
    stored |x|^2); scale [N] float32 factor of the inner product q.x_hat (None = 1).
    Returns (distances [nq, k] float32 squared L2, ascending; ids [nq, k] int64).
    """
    global _ADC
    if _ADC is None:
        _ADC = _kernel()
    n = labels.size
    k = min(k, n)
    if codes is None:
        codes = np.zeros((n, 0), dtype=np.uint8)
    scale = np.ones(n, dtype=np.float32) if scale is None else np.ascontiguousarray(scale, np.float32)
    nq = queries.shape[0]
    dist_out = np.empty((nq, k), dtype=np.float32)
    ids_out = np.empty((nq, k), dtype=np.int64)
    q2 = np.einsum("ij,ij->i", queries, queries)
    block = max(1, min(QUERY_BLOCK, MAX_BLOCK_DISTANCES // max(n, 1)))
    for s in range(0, nq, block):
        q = queries[s:s + block]
        qa = np.ascontiguousarray(q @ anchors.T, dtype=np.float32)
        lut = _tables(q, books)
        dist = np.empty((q.shape[0], n), dtype=np.float32)
        _ADC(qa, lut, labels, codes, norms, scale, dist)
        part = np.argpartition(dist, k - 1, axis=1)[:, :k] if k < n else np.tile(np.arange(n), (q.shape[0], 1))
        pd = np.take_along_axis(dist, part, axis=1)
        order = np.argsort(pd, axis=1, kind="stable")
        ids_out[s:s + block] = np.take_along_axis(part, order, axis=1)
        dist_out[s:s + block] = np.maximum(np.take_along_axis(pd, order, axis=1) + q2[s:s + block, None], 0)
    return dist_out, ids_out


def _tables(q: np.ndarray, books) -> np.ndarray:
    """[nq, M, 256] float32 lookup tables <(R q)_s, codebook_s[c]>."""
    if books is None:
        return np.zeros((q.shape[0], 0, 256), dtype=np.float32)
    qr = q @ books.rotation.T
    cb, b = books.codebooks, books.bounds
    lut = np.empty((q.shape[0], books.n_subspaces, cb.shape[0]), dtype=np.float32)
    for s in range(books.n_subspaces):
        lut[:, s, :] = qr[:, b[s]:b[s + 1]] @ cb[:, b[s]:b[s + 1]].T
    return lut


def exact_search(base: np.ndarray, queries: np.ndarray, k: int):
    """Exact L2 top-k (ids [nq, k] int64) by blocked matrix products; the recall reference."""
    b2 = np.einsum("ij,ij->i", base, base)
    out = np.empty((queries.shape[0], k), dtype=np.int64)
    for s in range(0, queries.shape[0], 256):
        dist = b2[None, :] - 2.0 * (queries[s:s + 256] @ base.T)
        part = np.argpartition(dist, k - 1, axis=1)[:, :k]
        order = np.argsort(np.take_along_axis(dist, part, axis=1), axis=1, kind="stable")
        out[s:s + 256] = np.take_along_axis(part, order, axis=1)
    return out


def recall_at_k(found: np.ndarray, truth: np.ndarray, k: int) -> float:
    """Mean over queries of |found[:k] & truth[:k]| / k (recall@k)."""
    hits = [len(set(f[:k].tolist()) & set(t[:k].tolist())) for f, t in zip(found, truth)]
    return float(np.mean(hits)) / k
