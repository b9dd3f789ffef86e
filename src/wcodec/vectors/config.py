"""Configuration of the annealing vector codec and validation of its input points."""

from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np

from ..errors import WcodecError


class InvalidPointsError(WcodecError):
    """The points to compress are unusable: not a 2-D float array, empty, or not finite."""


@dataclass(frozen=True)
class AnnealingConfig:
    """Parameters of :func:`wcodec.vectors.compress`.

    Attributes:
        m: number of anchors (used: ``min(m, number of distinct points)``).
        initial_temperature: T0 >= 0 (alias ``initial_temp``, the seeds' name). Each iteration
            moves an anchor from its position toward the robust mean of its points by a step of
            ``lr * (1 + T)`` (over-relaxation: T > 0 overshoots the mean, which speeds early
            convergence); the same T, in units of the mean squared error per anchor, is the
            Metropolis temperature of the split/merge moves (moves.py). T cools to 0, leaving
            Lloyd's step and only energy-lowering moves.
        lr: step of the anchor update toward the mean (1 = Lloyd's step), > 0.
        momentum: heavy-ball momentum of the anchor update in [0, 1) (0 = none): the step is
            ``v = momentum * v + lr * (1 + T) * (mean - anchor)``; reset after moves.
        cooling_rate: T is multiplied by this every iteration, in [0, 1).
        max_iterations: upper bound on annealing iterations (>= 1).
        tolerance: Lloyd has converged when the relative energy change falls below it (or no
            point changes anchor); the run stops when, in addition, no move is worth making or
            the last accepted batch of moves lowered the energy by less than this (relative).
        maintenance_interval: propose split/merge moves every this many iterations, or as soon as
            Lloyd has converged (0 = never).
        merge_threshold, split_threshold: kept for compatibility (moves are decided by energy,
            not by thresholds); validated but unused.
        init: ``"kmeans||"`` (scalable k-means++, seeding.py) or ``"random"`` (m distinct
            random points, plain Lloyd's start).
        progress: tqdm progress bar with ETA: True, False, or None = when one iteration is
            above ~2e11 multiply-adds.
        robust_clip: Huber clip of the robust mean, in units of the anchor's RMS radius: a point
            farther than ``robust_clip * rms`` pulls with weight ``robust_clip * rms / dist``.
            0 disables clipping (plain mean, which minimises the energy). The same weights give
            each anchor's robust variance (``CompressedIndex.info["variances"]``, [m]).
        seed: seed of the initial anchor choice (same seed => same start on every backend).
        device: ``"cpu"`` (numpy), ``"cuda"`` / ``"cuda:N"`` (torch on the GPU) or
            ``"torch-cpu"`` (the torch backend on the CPU, to test its code path).
        bytes_per_vector: total budget in bytes per vector (anchors, assignments, rotation,
            codebooks and residual codes, all coded) for a searchable index; None = anchors and
            assignments only.
        subsample: the hot phase (annealing schedule, maintenance) runs on a seeded subsample of
            this many points per anchor when N is larger; 0 = all points throughout.
        refine_iterations: Lloyd iterations (T = 0) on all points after a subsampled hot phase.
        pq_iterations: annealing iterations used to train each residual codebook.
        opq_iterations: Procrustes refinements of the residual rotation after its PCA start.
        table_precision: int8 step of the rotation and codebook tables as RMS / table_precision
            per row (0 = max / 127, the finest); the int8 tables are rANS coded, so a coarser
            step makes them smaller (16: about 6 bits per entry, error below 1e-3 of the MSE).
        residual_dims: rotated dimensions r coded (top principal directions of the residuals);
            0 = all d; -1 = auto, by reverse water-filling of the residual spectrum for the
            number of codes that fits the budget (residual.waterfill_rank). Fewer dimensions
            save table bytes and drop directions too weak to be worth code bits.
        store_norms: with residual codes, store each vector's norm (8-bit, rANS coded: nearly
            free for normalised embeddings) and search by ``|x|^2 - 2 |x| q.x_hat / |x_hat|``
            (the decoded direction at the true norm) instead of the distance to x_hat.
        verbose: print one line per iteration.
    """

    m: int = 1024
    initial_temperature: float = 0.6
    cooling_rate: float = 0.85
    max_iterations: int = 30
    tolerance: float = 1e-3
    maintenance_interval: int = 4
    merge_threshold: float = 0.02
    split_threshold: float = 4.0
    robust_clip: float = 0.0
    seed: int = 0
    device: str = "cpu"
    bytes_per_vector: float | None = None
    subsample: int = 0
    refine_iterations: int = 6
    pq_iterations: int = 12
    opq_iterations: int = 2
    table_precision: float = 16.0
    residual_dims: int = -1
    store_norms: bool = True
    verbose: bool = False
    lr: float = 1.0
    momentum: float = 0.0
    init: str = "kmeans||"
    progress: bool | None = None
    initial_temp: float | None = None

    def __post_init__(self) -> None:
        if self.initial_temp is not None:  # the seeds' name; both given must agree
            default = type(self).__dataclass_fields__["initial_temperature"].default
            if self.initial_temperature not in (default, self.initial_temp):
                raise ValueError("AnnealingConfig: initial_temp and initial_temperature disagree")
            object.__setattr__(self, "initial_temperature", float(self.initial_temp))
        object.__setattr__(self, "initial_temp", float(self.initial_temperature))
        checks = [
            (self.m >= 1, "m must be >= 1"),
            (self.initial_temperature >= 0, "initial_temperature must be >= 0"),
            (0 <= self.cooling_rate < 1, "cooling_rate must be in [0, 1)"),
            (self.max_iterations >= 1, "max_iterations must be >= 1"),
            (self.tolerance >= 0, "tolerance must be >= 0"),
            (self.maintenance_interval >= 0, "maintenance_interval must be >= 0"),
            (self.merge_threshold >= 0 and self.split_threshold > 0, "bad merge/split threshold"),
            (self.robust_clip >= 0, "robust_clip must be >= 0"),
            (self.bytes_per_vector is None or self.bytes_per_vector > 0, "bytes_per_vector must be > 0"),
            (self.subsample >= 0 and self.refine_iterations >= 0, "bad subsample/refine_iterations"),
            (self.pq_iterations >= 1 and self.opq_iterations >= 0, "bad pq/opq iterations"),
            (self.lr > 0 and 0 <= self.momentum < 1, "lr must be > 0 and momentum in [0, 1)"),
            (self.init in ("kmeans||", "random"), f"init must be 'kmeans||' or 'random', got {self.init!r}"),
            (self.table_precision >= 0 and self.residual_dims >= -1, "bad table_precision/residual_dims"),
            (self.device == "cpu" or self.device == "torch-cpu" or self.device.startswith("cuda"),
             f"device must be 'cpu', 'torch-cpu' or 'cuda[:N]', got {self.device!r}"),
        ]
        for ok, msg in checks:
            if not ok:
                raise ValueError(f"AnnealingConfig: {msg}")

    def to_dict(self) -> dict:
        return asdict(self)


def validate_points(points) -> np.ndarray:
    """Check and convert points to a C-contiguous float32 [N, d] array.

    points: array-like [N, d] of float16/float32/float64 (N >= 1, d >= 1). Returns float32.
    Raises InvalidPointsError on a wrong shape or dtype, an empty array, NaN or inf.
    """
    arr = np.asarray(points)
    if arr.ndim != 2 or arr.shape[0] < 1 or arr.shape[1] < 1:
        raise InvalidPointsError(f"points must be a non-empty 2-D array [N, d], got shape {arr.shape}")
    if arr.dtype.kind != "f":
        raise InvalidPointsError(f"points must be float16/32/64, got {arr.dtype}")
    arr = np.ascontiguousarray(arr, dtype=np.float32)
    finite = np.isfinite(arr)
    if not finite.all():
        bad = int(np.argmin(finite.all(axis=1)))
        raise InvalidPointsError(f"points must be finite: row {bad} holds NaN or inf "
                                 f"({int((~finite).sum())} non-finite values in all)")
    if np.abs(arr).max() > 1e18:
        raise InvalidPointsError("points are too large for float32 distances (|x| > 1e18)")
    return arr
