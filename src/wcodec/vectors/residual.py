"""Residual codes: a rotation and product codebooks trained on the residuals x - anchor.

The residuals are rotated by an orthogonal matrix (PCA of the residuals, principal directions
dealt to the M subspaces in snake order so every subspace gets a similar share of the variance,
optionally refined by Procrustes steps as in OPQ), then each of the M contiguous subspaces of the
rotated residual is quantized with its own 256-entry codebook trained by the annealing loop, so
codes are bytes. Rotation and codebooks are stored as int8 with one float32 scale per row of the
rotation / per column of the codebooks, the int8 values rANS coded (order 0): with the step set to
a fraction of each row's RMS (``table_precision``) rather than to its max, the tables cost about
5 bits per entry instead of 8 for a negligible error. The codes are trained against the
dequantized values. The rotation may keep only the top ``r <= d`` principal directions
(``residual_dims``): the rest of the residual is dropped, which saves table bytes.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import numpy as np

from . import coding
from .anneal import anneal
from .config import AnnealingConfig

CODEBOOK_SIZE = 256


@dataclass
class ResidualCodebooks:
    """rotation_q [r, d] int8 + rotation_scale [r] float32 (rows); codebooks_q [256, r] int8 +
    codebook_scale [r] float32 (columns); sub_sizes [M] int: dims of each rotated subspace
    (summing to r <= d)."""

    rotation_q: np.ndarray
    rotation_scale: np.ndarray
    codebooks_q: np.ndarray
    codebook_scale: np.ndarray
    sub_sizes: np.ndarray
    _planes: dict = field(default_factory=dict, repr=False, compare=False)

    @property
    def rotation(self) -> np.ndarray:
        """[r, d] float32: rotated residual y = R z; row i is the i-th basis vector."""
        return self.rotation_q.astype(np.float32) * self.rotation_scale[:, None]

    @property
    def codebooks(self) -> np.ndarray:
        """[256, r] float32: columns of subspace s hold codebook s (rows = code values)."""
        return self.codebooks_q.astype(np.float32) * self.codebook_scale[None, :]

    @property
    def n_subspaces(self) -> int:
        return int(self.sub_sizes.size)

    @property
    def rank(self) -> int:
        """r: number of rotated dimensions coded."""
        return int(self.rotation_q.shape[0])

    @property
    def bounds(self) -> np.ndarray:
        return np.concatenate([[0], np.cumsum(self.sub_sizes)]).astype(np.int64)

    def planes(self) -> dict:
        """rANS planes of the int8 tables (computed once): {"rotation": [..], "codebooks": [..]}."""
        if not self._planes:
            self._planes["rotation"] = coding.encode_planes([self.rotation_q.view(np.uint8).reshape(-1)])
            self._planes["codebooks"] = coding.encode_planes([self.codebooks_q.view(np.uint8).reshape(-1)])
        return self._planes

    @property
    def nbytes(self) -> int:
        """Stored bytes: the rANS-coded int8 tables and their float32 scales."""
        planes = self.planes()
        return (coding.coded_nbytes(planes["rotation"]) + coding.coded_nbytes(planes["codebooks"])
                + int(self.rotation_scale.nbytes) + int(self.codebook_scale.nbytes))

    def decode_rotated(self, codes: np.ndarray) -> np.ndarray:
        """codes [N, M] uint8 -> rotated residuals [N, r] float32."""
        cb, b = self.codebooks, self.bounds
        return np.concatenate([cb[codes[:, s], b[s]:b[s + 1]] for s in range(self.n_subspaces)], axis=1)

    def decode(self, codes: np.ndarray) -> np.ndarray:
        """codes [N, M] uint8 -> residuals [N, d] float32 (z = y R)."""
        return self.decode_rotated(codes) @ self.rotation


def quantize_rows(mat: np.ndarray, precision: float = 0.0) -> tuple[np.ndarray, np.ndarray]:
    """Symmetric int8 per row: mat [r, c] -> (int8 [r, c], float32 scale [r]).

    precision 0: scale = max|row| / 127 (finest step). precision P > 0: step = RMS(row) / P,
    or the max-based step where that is coarser (nothing clips): fewer distinct values, so the
    rANS-coded table is smaller (about log2(4.13 P) bits per entry for Gaussian-like rows).
    """
    mat64 = np.asarray(mat, dtype=np.float64)
    scale = np.abs(mat64).max(axis=1) / 127.0
    if precision > 0:
        scale = np.maximum(scale, np.sqrt((mat64 ** 2).mean(axis=1)) / precision)
    scale = np.where(scale >= np.finfo(np.float32).tiny, scale, 1.0).astype(np.float32)
    return np.clip(np.rint(mat / scale[:, None]), -127, 127).astype(np.int8), scale


def snake_order(d: int, n_sub: int) -> tuple[np.ndarray, np.ndarray]:
    """Deal principal directions 0..d-1 (by decreasing variance) to n_sub subspaces in snake
    order. Returns (order [d] int64 = directions grouped by subspace, sizes [n_sub] int64)."""
    groups = [[] for _ in range(n_sub)]
    for i in range(d):
        r, j = divmod(i, n_sub)
        groups[j if r % 2 == 0 else n_sub - 1 - j].append(i)
    return np.concatenate(groups).astype(np.int64), np.array([len(g) for g in groups], np.int64)


#: bits per 8-bit PQ code that the reverse water-filling rank rule assumes (PQ's efficiency)
PQ_BIT_EFFICIENCY = 0.7


def waterfill_rank(eigvals: np.ndarray, n_sub: int, efficiency: float = PQ_BIT_EFFICIENCY) -> int:
    """Rotated dimensions worth coding with n_sub 8-bit codes: reverse water-filling.

    For Gaussian components of variances eigvals [d], spending R = 8 * n_sub * efficiency bits
    at the least distortion codes the components above a level theta (each to distortion
    theta) and drops the rest; returns their number (>= n_sub, <= d). With efficiency 0.7 this
    picks r = 192 for 17 codes and 252 for 32 codes on the MiniLM residuals, where a sweep of r
    measured the best MSE."""
    lam = np.sort(np.maximum(np.asarray(eigvals, dtype=np.float64), 0.0))[::-1]
    d = lam.size
    if n_sub >= d or lam[0] <= 0:
        return d
    bits = 8.0 * n_sub * efficiency
    lo, hi = lam[0] * 1e-12, lam[0]
    for _ in range(100):  # bisection on log theta: rate(theta) decreases with theta
        theta = np.sqrt(lo * hi)
        rate = 0.5 * np.log2(np.maximum(lam / theta, 1.0)).sum()
        lo, hi = (lo, theta) if rate < bits else (theta, hi)
    return int(min(d, max(n_sub, int((lam > theta).sum()))))


def pca_rotation(cov: np.ndarray, n_sub: int, rank: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """cov [d, d] float64 -> (rotation [r, d] float32 whose rows are the top r = rank (0: d)
    principal directions dealt to the subspaces in snake order, sub_sizes [n_sub])."""
    d = cov.shape[0]
    r = d if rank <= 0 else min(rank, d)
    _, vecs = np.linalg.eigh(cov)
    vecs = vecs[:, ::-1][:, :r]
    order, sizes = snake_order(r, n_sub)
    return np.ascontiguousarray(vecs[:, order].T, dtype=np.float32), sizes


def train_residual(z_dev, n_sub: int, config: AnnealingConfig, backend, log=None):
    """Train rotation and codebooks on device residuals z [N, d]; return (books, codes [N, M]).

    n_sub: number of subspaces M (1 <= M <= r, r = ``config.residual_dims`` or d). Codebooks are
    trained by the annealing loop with ``config.pq_iterations`` iterations;
    ``config.opq_iterations`` Procrustes refinements of the rotation.
    """
    n, d = z_dev.shape
    z_host = backend.get(z_dev)
    cov = backend.get(z_dev.T @ z_dev).astype(np.float64) / max(n, 1)
    rotation, sizes = pca_rotation(cov, n_sub, config.residual_dims)
    books = codes = None
    for step in range(config.opq_iterations + 1):
        rot_q, rot_s = quantize_rows(rotation, config.table_precision)
        rot = backend.put(rot_q.astype(np.float32) * rot_s[:, None])
        y = z_dev @ rot.T
        books, codes = _train_codebooks(y, backend.get(y), sizes, rot_q, rot_s, config, backend)
        if log:
            err = float(((backend.get(y) - books.decode_rotated(codes)) ** 2).sum(1).mean())
            log(f"residual step {step}: M={n_sub} rotated-space MSE {err:.5f}")
        if step < config.opq_iterations:
            # orthogonal Procrustes: rows-orthonormal R [r, d] minimising |z R^T - y_hat|
            u, _, vt = np.linalg.svd(books.decode_rotated(codes).T.astype(np.float64) @ z_host,
                                     full_matrices=False)
            rotation = np.ascontiguousarray(u @ vt, dtype=np.float32)
    return books, codes


def _train_codebooks(y_dev, y_host, sizes, rot_q, rot_s, config, backend):
    bounds = np.concatenate([[0], np.cumsum(sizes)])
    r = y_host.shape[1]
    cb = np.zeros((CODEBOOK_SIZE, r), dtype=np.float32)
    sub_cfg = replace(config, m=CODEBOOK_SIZE, max_iterations=config.pq_iterations,
                      subsample=0, verbose=False)
    for s in range(sizes.size):
        lo, hi = bounds[s], bounds[s + 1]
        sub = np.ascontiguousarray(y_host[:, lo:hi])
        res = anneal(sub, replace(sub_cfg, seed=config.seed + 7 * s + 1), backend,
                     points=backend.put(sub))
        k = res.anchors.shape[0]
        cb[:k, lo:hi] = backend.get(res.anchors)
    cb_q_t, cb_s = quantize_rows(cb.T, config.table_precision)  # one scale per column (rotated dim)
    books = ResidualCodebooks(rot_q, rot_s, np.ascontiguousarray(cb_q_t.T), cb_s, sizes.astype(np.int64))
    codes = encode_rotated(y_dev, books, backend)
    return books, codes


def encode_rotated(y_dev, books: ResidualCodebooks, backend) -> np.ndarray:
    """Nearest code of each subspace against the dequantized codebooks: [N, M] uint8."""
    cb, b = books.codebooks, books.bounds
    out = np.empty((y_dev.shape[0], books.n_subspaces), dtype=np.uint8)
    for s in range(books.n_subspaces):
        sub = y_dev[:, b[s]:b[s + 1]].contiguous() if hasattr(y_dev, "contiguous") else np.ascontiguousarray(y_dev[:, b[s]:b[s + 1]])
        labels, _ = backend.assign(sub, backend.put(cb[:, b[s]:b[s + 1]]), backend.sqnorms(sub))
        out[:, s] = backend.get(labels)
    return out
