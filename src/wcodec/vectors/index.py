"""CompressedIndex and compress(): anchors by annealing, plus residual codes for search."""

from __future__ import annotations

import time
from dataclasses import dataclass, field, replace

import numpy as np

from . import coding, storage
from .anneal import anneal
from .backends import get_backend
from .config import AnnealingConfig, validate_points
from .residual import CODEBOOK_SIZE, ResidualCodebooks, train_residual, waterfill_rank

#: vectors decoded at a time for the ADC terms of search()
ADC_BLOCK = 1 << 16
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
        norm_codes: [N] uint8 quantized vector norms |x| (with residual codes and
            ``store_norms``) or None; |x| = norm_range[0] + norm_range[1] * code.
        norm_range: [2] float32 (offset, step) of the norm codes, or None.
        source_itemsize: bytes per element of the compressed input (2 for float16).
        info: timings and figures for reports (seconds, backend, merges, splits, history).
    """

    anchors: np.ndarray
    assignments: np.ndarray
    energy: float
    iterations: int
    books: ResidualCodebooks | None = None
    codes: np.ndarray | None = None
    norm_codes: np.ndarray | None = None
    norm_range: np.ndarray | None = None
    source_itemsize: int = 4
    info: dict = field(default_factory=dict)
    _coded: dict = field(default_factory=dict, repr=False)
    _adc: tuple = field(default=(), repr=False)

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
        """The rANS planes of assignments, codes and norms (computed once):
        {"assignments", "codes", "norms"}."""
        if not self._coded:
            self._coded["assignments"] = coding.encode_planes(coding.assignment_planes(self.assignments, self.m))
            cols = [] if self.codes is None else [self.codes[:, s] for s in range(self.codes.shape[1])]
            self._coded["codes"] = coding.encode_planes(cols)
            self._coded["norms"] = coding.encode_planes([] if self.norm_codes is None else [self.norm_codes])
        return self._coded

    def nbytes_parts(self) -> dict:
        """Stored bytes by part: anchors (float16), assignments, codes and norms (rANS coded),
        rotation and codebooks (rANS-coded int8 + float32 scales)."""
        coded = self.coded()
        return {
            "anchors": int(self.anchors.size) * 2,
            "assignments": coding.coded_nbytes(coded["assignments"]),
            "codebooks": 0 if self.books is None else self.books.nbytes,
            "codes": coding.coded_nbytes(coded["codes"]),
            "norms": coding.coded_nbytes(coded["norms"]) + (0 if self.norm_range is None else 8),
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

    @property
    def compression_percent(self) -> float:
        """Compressed size as a percentage of the original (the seeds' figure: 2.06 means the
        index takes 2.06 % of the input's bytes); 100 / compression_ratio."""
        return 100.0 * self.nbytes / max(self.original_nbytes, 1)

    def reconstruct(self) -> np.ndarray:
        """[N, d] float32 decoded vectors: anchor + decoded residual."""
        return self._reconstruct(0, self.n_vectors)

    def _reconstruct(self, i0: int, i1: int) -> np.ndarray:
        out = self.anchors[self.assignments[i0:i1]]
        if self.books is not None and self.codes is not None:
            out += self.books.decode(self.codes[i0:i1])
        return out

    def mse(self, points) -> float:
        """Mean over vectors of the squared L2 reconstruction error against points [N, d]."""
        x = validate_points(points)
        return float(((self.reconstruct() - x) ** 2).sum(axis=1).mean())

    @property
    def stored_norms(self) -> np.ndarray | None:
        """[N] float32 decoded norms |x| of the original vectors, or None if not stored."""
        if self.norm_codes is None or self.norm_range is None:
            return None
        return (self.norm_range[0] + self.norm_range[1] * self.norm_codes.astype(np.float32)).astype(np.float32)

    def search(self, queries, k: int = 10):
        """k nearest vectors of each query by asymmetric distance (queries exact, base coded).

        Without stored norms the distance is the exact ``|q - x_hat|^2`` to the decoded vector
        x_hat; with them it is ``|q|^2 + |x|^2 - 2 (|x| / |x_hat|) q.x_hat``: the decoded
        direction at the stored true norm (quantization shrinks x_hat, by more for worse-coded
        vectors, which otherwise biases the ranking). queries: [nq, d] or [d] float. Returns
        (distances [nq, k] float32 squared L2 ascending, ids [nq, k] int64). Raises
        InvalidPointsError on bad queries, ValueError on k < 1.
        """
        from .search import adc_search

        q = validate_points(np.atleast_2d(np.asarray(queries)))
        if q.shape[1] != self.dim:
            from .config import InvalidPointsError
            raise InvalidPointsError(f"queries have dimension {q.shape[1]}, the index {self.dim}")
        if k < 1:
            raise ValueError("k must be >= 1")
        if not self._adc:
            self._adc = self._adc_terms()
        norms, scale = self._adc
        return adc_search(q, k, self.anchors, self.assignments.astype(np.int64, copy=False), self.codes,
                          self.books, norms, scale)

    def _adc_terms(self):
        """(additive term [N] float32, scale [N] float32 or None) of the ADC distance. The
        decoded vectors are built ADC_BLOCK at a time (not [N, d] at once: N comes from a file)."""
        dec2 = np.empty(self.n_vectors, np.float32)
        for s in range(0, self.n_vectors, ADC_BLOCK):
            rec = self._reconstruct(s, s + ADC_BLOCK)
            dec2[s:s + ADC_BLOCK] = np.einsum("ij,ij->i", rec, rec)
        true = self.stored_norms
        if true is None:
            return dec2, None
        dec = np.sqrt(dec2)
        scale = np.where(dec > 0, true / np.where(dec > 0, dec, 1.0), 1.0).astype(np.float32)
        return (true * true).astype(np.float32), scale

    def save(self, path, metadata: dict | None = None) -> None:
        """Write the index to a .wcodec container (see wcodec.vectors.storage)."""
        storage.save_index(self, path, metadata)


def _table_bits(precision: float) -> float:
    """Estimated coded bits per int8 table entry at ``table_precision`` (Gaussian-like rows)."""
    return 8.0 if precision <= 0 else min(8.0, float(np.log2(4.133 * precision)) + 0.15)


def _residual_budget(n: int, d: int, r: int, budget: float, used: int, precision: float) -> int:
    """Number of subspaces M that fits bytes_per_vector ``budget`` (0 if none fits).

    used: bytes already spent (anchors, assignments, norms); r: rotated dims coded."""
    tables = (r * d + CODEBOOK_SIZE * r) * _table_bits(precision) / 8 + 8 * r + 2 * PLANE_OVERHEAD_EST
    left = budget * n - used - tables
    return int(max(0, min(r, left // (n * CODE_BYTES_EST + PLANE_OVERHEAD_EST))))


def quantize_norms(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Vector norms |x| of [N, d] float32 as 8-bit codes: (codes [N] uint8, [offset, step] f32).

    The step is the range / 255, but at least 2**-10 of the largest norm: finer is useless for
    ranking, and normalised embeddings (float16 norms within 1e-4 of 1) get one level, which
    codes in almost no bytes."""
    norms = np.sqrt(np.einsum("ij,ij->i", x, x, dtype=np.float64))
    lo, hi = float(norms.min()), float(norms.max())
    step = max((hi - lo) / 255.0, hi * 2.0 ** -10, 1e-30)
    codes = np.clip(np.rint((norms - lo) / step), 0, 255).astype(np.uint8)
    return codes, np.array([lo, step], dtype=np.float32)


def compress(points, config: AnnealingConfig | None = None, log=None) -> CompressedIndex:
    """Compress points [N, d] (float16/32/64) into anchors + assignments (+ residual codes).

    With ``config.bytes_per_vector`` set, residual codes are added with as many subspaces as
    fit the budget in actual coded bytes (all parts counted: anchors, assignments, norms,
    coded tables, codes), over ``config.residual_dims`` rotated dimensions (by default the
    water-filling rank for that many codes, the two fitted to each other); if even anchors and
    assignments exceed it, the index holds no codes (check ``.bytes_per_vector``). Raises
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
    index.info.update(backend=backend.name, anneal_seconds=t_anchor, seed_seconds=res.seed_seconds, merges=res.merges,
                      splits=res.splits, rejected_moves=res.rejected, history=res.history, log=res.log,
                      moves=[(mv.split, mv.merged, mv.delta) for mv in res.moves], config=config.to_dict(),
                      variances=res.variances)
    if config.bytes_per_vector is not None:
        n, d = x.shape
        norm_codes = norm_range = None
        if config.store_norms:
            norm_codes, norm_range = quantize_norms(x)
        parts = replace(index, norm_codes=norm_codes, norm_range=norm_range, _coded={}).nbytes_parts()
        used = parts["anchors"] + parts["assignments"] + parts["norms"]
        r = d if config.residual_dims <= 0 else min(config.residual_dims, d)
        n_sub = _residual_budget(n, d, r, config.bytes_per_vector, used, config.table_precision)
        if config.residual_dims < 0:  # auto: rank and number of codes, each fitted to the other
            eig = np.linalg.eigvalsh(backend.get(z.T @ z).astype(np.float64) / max(n, 1))
            for _ in range(3):
                r = waterfill_rank(eig, max(n_sub, 1))
                n_sub = _residual_budget(n, d, r, config.bytes_per_vector, used, config.table_precision)
        res_cfg = replace(config, residual_dims=r)
        while n_sub >= 1:
            books, codes = train_residual(z, n_sub, res_cfg, backend, log=log)
            trial = replace(index, books=books, codes=codes, norm_codes=norm_codes, norm_range=norm_range,
                            info=index.info, _coded={}, _adc=())
            if trial.bytes_per_vector <= config.bytes_per_vector or n_sub == 1:
                index = trial
                break
            n_sub -= 1
        if log:
            log(f"residual codes: M={0 if index.codes is None else index.codes.shape[1]}, "
                f"{index.bytes_per_vector:.2f} B/vector")
    index.info["seconds"] = time.perf_counter() - t0
    return index


def load_index(path) -> CompressedIndex:
    """Read a CompressedIndex written by ``CompressedIndex.save`` (``storage.read_index``:
    FormatError, CorruptDataError, and what ``wcodec.safe_open`` raises)."""
    return CompressedIndex(**storage.read_index(path))
