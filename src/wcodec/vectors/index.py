"""CompressedIndex and compress(): anchors by annealing, plus residual codes for search."""

from __future__ import annotations

import time
from dataclasses import dataclass, field, replace

import numpy as np

from . import coding
from .anneal import anneal
from .backends import get_backend
from .config import AnnealingConfig, validate_points
from .residual import CODEBOOK_SIZE, ResidualCodebooks, train_residual

#: estimated coded bytes of one residual code column per vector, and per plane (tables, states)
CODE_BYTES_EST = 0.99
PLANE_OVERHEAD_EST = 800


@dataclass
class CompressedIndex:
    """N vectors of dimension d as m anchors, one assignment each, and optional residual codes.

    Attributes:
        anchors: [m, d] float32 (stored as float16; these are the stored values).
        assignments: [N] int64, index of each vector's anchor.
        energy: mean over vectors of the squared L2 distance to the assigned anchor (float16
            anchors), the seeds' figure.
        iterations: annealing iterations run.
        books: ResidualCodebooks (rotation + 256-entry codebooks) or None.
        codes: [N, M] uint8 residual codes or None.
        source_itemsize: bytes per element of the compressed input (2 for float16).
        info: timings and figures for reports (seconds, backend, merges, splits, history).
    """

    anchors: np.ndarray
    assignments: np.ndarray
    energy: float
    iterations: int
    books: ResidualCodebooks | None = None
    codes: np.ndarray | None = None
    source_itemsize: int = 4
    info: dict = field(default_factory=dict)
    _coded: dict = field(default_factory=dict, repr=False)

    @property
    def n_vectors(self) -> int:
        return int(self.assignments.size)

    @property
    def dim(self) -> int:
        return int(self.anchors.shape[1])

    @property
    def m(self) -> int:
        return int(self.anchors.shape[0])

    def coded(self) -> dict:
        """The rANS planes of assignments and codes (computed once): {"assignments", "codes"}."""
        if not self._coded:
            self._coded["assignments"] = coding.encode_planes(coding.assignment_planes(self.assignments, self.m))
            cols = [] if self.codes is None else [self.codes[:, s] for s in range(self.codes.shape[1])]
            self._coded["codes"] = coding.encode_planes(cols)
        return self._coded

    def nbytes_parts(self) -> dict:
        """Stored bytes by part: anchors (float16), assignments and codes (rANS coded),
        rotation and codebooks (int8 + float32 scales)."""
        coded = self.coded()
        return {
            "anchors": int(self.anchors.size) * 2,
            "assignments": coding.coded_nbytes(coded["assignments"]),
            "codebooks": 0 if self.books is None else self.books.nbytes,
            "codes": coding.coded_nbytes(coded["codes"]),
        }

    @property
    def nbytes(self) -> int:
        """Total stored bytes (everything needed to reconstruct and search; JSON header aside)."""
        return sum(self.nbytes_parts().values())

    @property
    def bytes_per_vector(self) -> float:
        return self.nbytes / max(self.n_vectors, 1)

    @property
    def original_nbytes(self) -> int:
        return self.n_vectors * self.dim * self.source_itemsize

    @property
    def compression_ratio(self) -> float:
        """Original size over compressed size (48.5 means 48.5x smaller), as for weight files."""
        return self.original_nbytes / max(self.nbytes, 1)

    def reconstruct(self) -> np.ndarray:
        """[N, d] float32 decoded vectors: anchor + decoded residual."""
        out = self.anchors[self.assignments]
        if self.books is not None and self.codes is not None:
            out += self.books.decode(self.codes)
        return out

    def mse(self, points) -> float:
        """Mean over vectors of the squared L2 reconstruction error against points [N, d]."""
        x = validate_points(points)
        return float(((self.reconstruct() - x) ** 2).sum(axis=1).mean())

    def search(self, queries, k: int = 10):
        """k nearest vectors of each query by asymmetric distance (queries exact, base coded).

        queries: [nq, d] or [d] float. Returns (distances [nq, k] float32 squared L2 ascending,
        ids [nq, k] int64). Raises InvalidPointsError on bad queries, ValueError on k < 1.
        """
        from .search import adc_search

        q = validate_points(np.atleast_2d(np.asarray(queries)))
        if q.shape[1] != self.dim:
            from .config import InvalidPointsError
            raise InvalidPointsError(f"queries have dimension {q.shape[1]}, the index {self.dim}")
        if k < 1:
            raise ValueError("k must be >= 1")
        if "norms" not in self.info:
            rec = self.reconstruct()
            self.info["norms"] = np.einsum("ij,ij->i", rec, rec).astype(np.float32)
        return adc_search(q, k, self.anchors, self.assignments.astype(np.int64), self.codes,
                          self.books, self.info["norms"])

    def save(self, path, metadata: dict | None = None) -> None:
        """Write the index to a .wcodec container (see wcodec.vectors.storage)."""
        from .storage import save_index
        save_index(self, path, metadata)


def _residual_budget(n: int, d: int, m: int, budget: float, assign_bytes: int) -> int:
    """Number of subspaces M that fits bytes_per_vector ``budget`` (0 if none fits)."""
    fixed = m * d * 2 + assign_bytes + (d * d + 4 * d) + (CODEBOOK_SIZE * d + 4 * d)
    left = budget * n - fixed
    return int(max(0, min(d, left // (n * CODE_BYTES_EST + PLANE_OVERHEAD_EST))))


def compress(points, config: AnnealingConfig | None = None, log=None) -> CompressedIndex:
    """Compress points [N, d] (float16/32/64) into anchors + assignments (+ residual codes).

    With ``config.bytes_per_vector`` set, residual codes are added with as many subspaces as
    fit the budget in actual coded bytes (all parts counted); if even anchors and assignments
    exceed it, the index holds no codes (check ``.bytes_per_vector``). Raises
    InvalidPointsError on bad points, UnsupportedError for 'cuda' without a GPU.
    """
    config = config or AnnealingConfig()
    src = np.asarray(points)
    x = validate_points(src)
    if log is None and config.verbose:
        log = print
    backend = get_backend(config.device)
    t0 = time.perf_counter()
    pts = backend.put(x)
    res = anneal(x, config, backend, points=pts, log=log)
    anchors = backend.get(res.anchors).astype(np.float16).astype(np.float32)
    labels = backend.get(res.assignments).astype(np.int64)
    anchors_dev = backend.put(anchors)
    z = pts - anchors_dev[backend.put_index(labels)]
    energy = float(backend.get((z * z).sum(1)).astype(np.float64).mean())
    t_anchor = time.perf_counter() - t0
    index = CompressedIndex(anchors, labels, energy, res.iterations,
                            source_itemsize=src.dtype.itemsize if src.dtype.kind == "f" else 4)
    index.info.update(backend=backend.name, anneal_seconds=t_anchor, merges=res.merges,
                      splits=res.splits, history=res.history, config=config.to_dict())
    if config.bytes_per_vector is not None:
        n, d = x.shape
        assign_bytes = index.nbytes_parts()["assignments"]
        n_sub = _residual_budget(n, d, index.m, config.bytes_per_vector, assign_bytes)
        while n_sub >= 1:
            books, codes = train_residual(z, n_sub, config, backend, log=log)
            trial = replace(index, books=books, codes=codes, info=index.info, _coded={})
            if trial.bytes_per_vector <= config.bytes_per_vector or n_sub == 1:
                index = trial
                break
            n_sub -= 1
        if log:
            log(f"residual codes: M={0 if index.codes is None else index.codes.shape[1]}, "
                f"{index.bytes_per_vector:.2f} B/vector")
    index.info["seconds"] = time.perf_counter() - t0
    return index
