"""Residual codes: a rotation and product codebooks trained on the residuals x - anchor.

The residuals are rotated by an orthogonal matrix (PCA of the residuals, principal directions
dealt to the M subspaces in snake order so every subspace gets a similar share of the variance,
optionally refined by Procrustes steps as in OPQ), then each of the M contiguous subspaces of the
rotated residual is quantized with its own 256-entry codebook trained by the annealing loop, so
codes are bytes. Rotation and codebooks are stored as int8 with one float32 scale per row of the
rotation / per column of the codebooks; the codes are trained against the dequantized values.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from .anneal import anneal
from .config import AnnealingConfig

CODEBOOK_SIZE = 256


@dataclass
class ResidualCodebooks:
    """rotation_q [d, d] int8 + rotation_scale [d] float32 (rows); codebooks_q [256, d] int8 +
    codebook_scale [d] float32 (columns); sub_sizes [M] int: dims of each rotated subspace."""

    rotation_q: np.ndarray
    rotation_scale: np.ndarray
    codebooks_q: np.ndarray
    codebook_scale: np.ndarray
    sub_sizes: np.ndarray

    @property
    def rotation(self) -> np.ndarray:
        """[d, d] float32: rotated residual y = R z; row i is the i-th basis vector."""
        return self.rotation_q.astype(np.float32) * self.rotation_scale[:, None]

    @property
    def codebooks(self) -> np.ndarray:
        """[256, d] float32: columns of subspace s hold codebook s (rows = code values)."""
        return self.codebooks_q.astype(np.float32) * self.codebook_scale[None, :]

    @property
    def n_subspaces(self) -> int:
        return int(self.sub_sizes.size)

    @property
    def bounds(self) -> np.ndarray:
        return np.concatenate([[0], np.cumsum(self.sub_sizes)]).astype(np.int64)

    @property
    def nbytes(self) -> int:
        return sum(int(a.nbytes) for a in (self.rotation_q, self.rotation_scale,
                                           self.codebooks_q, self.codebook_scale))

    def decode_rotated(self, codes: np.ndarray) -> np.ndarray:
        """codes [N, M] uint8 -> rotated residuals [N, d] float32."""
        cb, b = self.codebooks, self.bounds
        return np.concatenate([cb[codes[:, s], b[s]:b[s + 1]] for s in range(self.n_subspaces)], axis=1)

    def decode(self, codes: np.ndarray) -> np.ndarray:
        """codes [N, M] uint8 -> residuals [N, d] float32 (z = y R)."""
        return self.decode_rotated(codes) @ self.rotation


def quantize_rows(mat: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Symmetric int8 per row: mat [r, c] -> (int8 [r, c], float32 scale [r])."""
    scale = np.abs(mat).max(axis=1) / 127.0
    scale = np.where(scale > 0, scale, 1.0).astype(np.float32)
    return np.clip(np.rint(mat / scale[:, None]), -127, 127).astype(np.int8), scale


def snake_order(d: int, n_sub: int) -> tuple[np.ndarray, np.ndarray]:
    """Deal principal directions 0..d-1 (by decreasing variance) to n_sub subspaces in snake
    order. Returns (order [d] int64 = directions grouped by subspace, sizes [n_sub] int64)."""
    groups = [[] for _ in range(n_sub)]
    for i in range(d):
        r, j = divmod(i, n_sub)
        groups[j if r % 2 == 0 else n_sub - 1 - j].append(i)
    return np.concatenate(groups).astype(np.int64), np.array([len(g) for g in groups], np.int64)


def pca_rotation(cov: np.ndarray, n_sub: int) -> tuple[np.ndarray, np.ndarray]:
    """cov [d, d] float64 -> (rotation [d, d] float32 whose rows are principal directions in
    snake order, sub_sizes [n_sub])."""
    _, vecs = np.linalg.eigh(cov)
    vecs = vecs[:, ::-1]
    order, sizes = snake_order(cov.shape[0], n_sub)
    return np.ascontiguousarray(vecs[:, order].T, dtype=np.float32), sizes


def train_residual(z_dev, n_sub: int, config: AnnealingConfig, backend, log=None):
    """Train rotation and codebooks on device residuals z [N, d]; return (books, codes [N, M]).

    n_sub: number of subspaces M (1 <= M <= d). Codebooks are trained by the annealing loop with
    ``config.pq_iterations`` iterations; ``config.opq_iterations`` Procrustes refinements.
    """
    n, d = z_dev.shape
    z_host = backend.get(z_dev)
    cov = backend.get(z_dev.T @ z_dev).astype(np.float64) / max(n, 1)
    rotation, sizes = pca_rotation(cov, n_sub)
    books = codes = None
    for step in range(config.opq_iterations + 1):
        rot_q, rot_s = quantize_rows(rotation)
        rot = backend.put(rot_q.astype(np.float32) * rot_s[:, None])
        y = z_dev @ rot.T
        books, codes = _train_codebooks(y, backend.get(y), sizes, rot_q, rot_s, config, backend)
        if log:
            err = float(((backend.get(y) - books.decode_rotated(codes)) ** 2).sum(1).mean())
            log(f"residual step {step}: M={n_sub} rotated-space MSE {err:.5f}")
        if step < config.opq_iterations:  # Procrustes: R = argmin |R z - y_hat| over rotations
            u, _, vt = np.linalg.svd(z_host.T.astype(np.float64) @ books.decode_rotated(codes))
            rotation = np.ascontiguousarray((u @ vt).T, dtype=np.float32)
    return books, codes


def _train_codebooks(y_dev, y_host, sizes, rot_q, rot_s, config, backend):
    bounds = np.concatenate([[0], np.cumsum(sizes)])
    d = y_host.shape[1]
    cb = np.zeros((CODEBOOK_SIZE, d), dtype=np.float32)
    sub_cfg = replace(config, m=CODEBOOK_SIZE, max_iterations=config.pq_iterations,
                      subsample=0, verbose=False)
    for s in range(sizes.size):
        lo, hi = bounds[s], bounds[s + 1]
        sub = np.ascontiguousarray(y_host[:, lo:hi])
        res = anneal(sub, replace(sub_cfg, seed=config.seed + 7 * s + 1), backend,
                     points=backend.put(sub))
        k = res.anchors.shape[0]
        cb[:k, lo:hi] = backend.get(res.anchors)
    cb_q_t, cb_s = quantize_rows(cb.T)  # one scale per column (rotated dim)
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
