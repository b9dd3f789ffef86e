"""Array backends of the annealing loop: numpy on the CPU, torch on CUDA (or on the CPU for tests).

Each backend keeps the points on its device for the whole run; only per-anchor figures of size
m (counts, squared-error sums) and scalars travel to the host. Distances are computed in blocks
of points through one matrix product per block (``|x|^2 - 2 x.a + |a|^2``), so memory stays
bounded by ``block * m`` floats whatever N is.
"""

from __future__ import annotations

import numpy as np

#: floats of one distance block (points x anchors). CPU: 256K floats = 1 MiB per worker thread,
#: reused from block to block and still in cache when the argmin reads it back (a fresh 64 MiB
#: block per call cost page faults and memory-bound passes: ~50 ms of a ~280 ms MiniLM 50K x 384,
#: m = 1024 pass on 2 cores; 4 MiB blocks took 8.3 ms for 10K x 128, m = 256, 1 MiB 4.0 ms, faiss's
#: search 4.1 ms)
CPU_BLOCK_FLOATS = 1 << 18
GPU_BLOCK_FLOATS = 1 << 28
#: fewest rows of a CPU block (keeps the sgemm efficient when m is large)
CPU_BLOCK_MIN_ROWS = 256


_SEGMENT_SUMS = None
_BLAS = []


def one_blas_thread(active: bool = True):
    """Context: single-threaded BLAS when active. Products with a short inner dimension or few
    flops (residual subspaces of 1-8 dims, the k-means++ trials) run up to 100x slower on
    OpenBLAS threads than on one (measured on 2 loaded cores: [3000, 3] x [3, 256] 20 ms vs
    0.15 ms). Needs threadpoolctl (scikit-learn's dependency); a no-op without it."""
    import contextlib

    if not active:
        return contextlib.nullcontext()
    if not _BLAS:
        try:
            from threadpoolctl import ThreadpoolController
            _BLAS.append(ThreadpoolController())
        except ImportError:
            _BLAS.append(None)
    if _BLAS[0] is None:
        return contextlib.nullcontext()
    return _BLAS[0].limit(limits=1, user_api="blas")


def small_product(n: int, m: int, d: int) -> bool:
    """Whether an [n, d] x [d, m] product is better run on one BLAS thread."""
    return d < 32 or n * m * d < 1 << 26


def _segment_sums():
    """numba kernel sums[labels[i]] += w[i] * points[i] (float64 accumulation), compiled once."""
    global _SEGMENT_SUMS
    if _SEGMENT_SUMS is None:
        import numba

        @numba.njit(cache=True)
        def segment_sums(points, labels, weights, m, weighted):  # pragma: no cover - compiled
            n, d = points.shape
            out = np.zeros((m, d), np.float64)
            for i in range(n):
                k = labels[i]
                w = weights[i] if weighted else 1.0
                for j in range(d):
                    out[k, j] += w * points[i, j]
            return out

        _SEGMENT_SUMS = segment_sums
    return _SEGMENT_SUMS


_POOL = []


def _pool():
    """(executor or None, workers): the CPU assignment's worker threads, one per BLAS thread
    (no executor when that is 1)."""
    if not _POOL:
        import os
        threads = os.cpu_count() or 1
        try:
            from threadpoolctl import threadpool_info
            threads = max([i["num_threads"] for i in threadpool_info() if i["user_api"] == "blas"] or [threads])
        except ImportError:
            pass
        from concurrent.futures import ThreadPoolExecutor
        _POOL.extend([ThreadPoolExecutor(threads, thread_name_prefix="wcodec-assign") if threads > 1 else None,
                      threads])
    return _POOL[0], _POOL[1]


def cpu_block_rows(m: int) -> int:
    """Rows of one CPU distance block for m anchors."""
    return max(CPU_BLOCK_MIN_ROWS, CPU_BLOCK_FLOATS // max(m, 1))


class NumpyBackend:
    """numpy (BLAS sgemm) backend. Arrays are float32 numpy arrays; labels int64."""

    name = "cpu"

    def put(self, arr: np.ndarray) -> np.ndarray:
        return np.ascontiguousarray(arr, dtype=np.float32)

    def put_index(self, idx: np.ndarray) -> np.ndarray:
        return np.asarray(idx, dtype=np.int64)

    def get(self, arr) -> np.ndarray:
        return np.asarray(arr)

    def sqnorms(self, x: np.ndarray) -> np.ndarray:
        """[n, d] -> [n] float32 squared L2 norms."""
        return np.einsum("ij,ij->i", x, x)

    def assign(self, points: np.ndarray, anchors: np.ndarray, p2: np.ndarray):
        """Nearest anchor of each point. points [N, d], anchors [m, d], p2 [N] = |points|^2.

        Returns (labels [N] int64, d2 [N] float32 squared distances, clipped at 0).
        """
        return self._nearest(points, anchors, p2, False)

    def assign2(self, points: np.ndarray, anchors: np.ndarray, p2: np.ndarray):
        """Nearest and second-nearest anchor distances (m >= 2): (labels [N] int64, d2 [N],
        second [N] float32 squared distance to the second-nearest anchor)."""
        return self._nearest(points, anchors, p2, True)

    def _nearest(self, points, anchors, p2, with_second: bool):
        """Rows split in contiguous ranges, one per worker thread (_pool), each on one BLAS
        thread: blocks of ``x @ (-2 a)^T`` (one sgemm each into the range's reused cache-sized
        buffer, the -2 folded into the anchors: exact, a power of 2), then ``+ |a|^2``, argmin
        (and the second minimum) by numpy's SIMD reductions while the block is in cache. No
        barrier between threads per block: on a loaded machine OpenBLAS's own threads, synchronised
        on every product, were up to 2x slower. The split only decides which thread computes a row."""
        n, m = points.shape[0], anchors.shape[0]
        neg2 = np.ascontiguousarray((-2.0 * anchors).T, dtype=np.float32)
        a2 = self.sqnorms(anchors)
        labels = np.empty(n, dtype=np.int64)
        d2 = np.empty(n, dtype=np.float32)
        second = np.empty(n, dtype=np.float32) if with_second else None
        block = min(cpu_block_rows(m), n)
        pool, workers = _pool()
        parts = 1 if small_product(n, m, points.shape[1]) or pool is None else min(workers, -(-n // block))

        def run(r: int) -> None:
            lo, hi = n * r // parts, n * (r + 1) // parts
            buf = np.empty((min(block, hi - lo), m), np.float32)
            all_rows = np.arange(buf.shape[0])
            for s in range(lo, hi, block):
                e = min(s + block, hi)
                dots, rows = buf[:e - s], all_rows[:e - s]
                np.dot(points[s:e], neg2, out=dots)
                dots += a2
                lab = dots.argmin(axis=1)
                labels[s:e] = lab
                d2[s:e] = dots[rows, lab] + p2[s:e]
                if with_second:
                    dots[rows, lab] = np.inf
                    second[s:e] = dots.min(axis=1) + p2[s:e]

        with one_blas_thread():
            if parts == 1:
                run(0)
            else:
                list(pool.map(run, range(parts)))
        np.maximum(d2, 0.0, out=d2)
        if not with_second:
            return labels, d2
        np.maximum(second, d2, out=second)
        return labels, d2, second

    def stats(self, points: np.ndarray, labels: np.ndarray, d2: np.ndarray, m: int, weights=None):
        """Per-anchor counts [m] float64, (weighted) sums [m, d] float64 and SSE [m] float64.

        The sums come from one pass of a compiled loop over the points (numba, loaded on first
        use), 20x faster than sorting the points and ``np.add.reduceat``."""
        counts = np.bincount(labels, minlength=m).astype(np.float64)
        sse = np.bincount(labels, weights=d2, minlength=m)
        wsum = counts if weights is None else np.bincount(labels, weights=weights, minlength=m)
        w = np.ones(1, np.float32) if weights is None else np.ascontiguousarray(weights, np.float32)
        sums = _segment_sums()(np.ascontiguousarray(points, np.float32), np.ascontiguousarray(labels, np.int64),
                               w, m, weights is not None)
        return counts, wsum, sums, sse

    def robust_weights(self, labels, d2, m: int, clip: float) -> np.ndarray:
        """[N] float32 Huber weights min(1, clip * rms_k / dist), rms_k = RMS radius of anchor k."""
        rms2 = np.bincount(labels, weights=d2, minlength=m) / np.maximum(np.bincount(labels, minlength=m), 1)
        return np.minimum(np.sqrt(clip * clip * rms2[labels] / np.maximum(d2, 1e-30)), 1.0).astype(np.float32)

    def move(self, anchors: np.ndarray, wsum, sums, step: float) -> None:
        """In place: anchors[k] += step * (mean_k - anchors[k]) for every anchor with points."""
        present = wsum > 0
        cur = anchors[present].astype(np.float64)
        anchors[present] = cur + step * (sums[present] / wsum[present][:, None] - cur)

    def anchor_sqdist(self, anchors: np.ndarray) -> np.ndarray:
        """[m, m] float32 squared distances between anchors (diagonal +inf)."""
        a2 = self.sqnorms(anchors)
        with one_blas_thread(small_product(anchors.shape[0], *anchors.shape)):
            dist = a2[:, None] + a2[None, :] - 2.0 * np.dot(anchors, anchors.T)
        np.fill_diagonal(dist, np.inf)
        return dist

    def astype_anchor(self, arr: np.ndarray) -> np.ndarray:
        return np.ascontiguousarray(arr, dtype=np.float32)

    def bincount(self, labels, weights, m: int) -> np.ndarray:
        """[m] float64 per-anchor sums of weights [N] (counts if weights is None)."""
        return np.bincount(labels, weights=weights, minlength=m).astype(np.float64)

    def uniform(self, rng: np.random.Generator, n: int) -> np.ndarray:
        """[n] float32 uniform draws in [0, 1) from the host generator rng (same on every backend)."""
        return rng.random(n, dtype=np.float32)

    def nonzero(self, mask) -> np.ndarray:
        """Host int64 indices where mask [N] bool is true."""
        return np.flatnonzero(mask)

    def minimum(self, a, b):
        return np.minimum(a, b)

    def copy(self, arr):
        return arr.copy()

    def group_order(self, labels) -> np.ndarray:
        """Stable argsort of labels [N]: the points of each anchor, contiguous."""
        return np.argsort(labels, kind="stable")


class TorchBackend:
    """torch backend on ``device`` (``"cuda"``, ``"cuda:N"`` or ``"cpu"``); float32, no TF32."""

    def __init__(self, device: str = "cuda"):
        import torch

        self.torch = torch
        self.device = torch.device(device)
        self.name = f"torch:{self.device}"
        if self.device.type == "cuda":
            if not torch.cuda.is_available():
                from ..errors import UnsupportedError
                raise UnsupportedError("device 'cuda' asked for but torch sees no CUDA GPU")
            torch.backends.cuda.matmul.allow_tf32 = False

    def put(self, arr: np.ndarray):
        return self.torch.as_tensor(np.ascontiguousarray(arr, dtype=np.float32), device=self.device)

    def put_index(self, idx: np.ndarray):
        return self.torch.as_tensor(np.asarray(idx, dtype=np.int64), device=self.device)

    def get(self, arr) -> np.ndarray:
        return arr.detach().cpu().numpy() if hasattr(arr, "detach") else np.asarray(arr)

    def sqnorms(self, x):
        return (x * x).sum(dim=1)

    def assign(self, points, anchors, p2):
        return self._nearest(points, anchors, p2, False)

    def assign2(self, points, anchors, p2):
        return self._nearest(points, anchors, p2, True)

    def _nearest(self, points, anchors, p2, with_second: bool):
        torch = self.torch
        n, m = points.shape[0], anchors.shape[0]
        a2 = self.sqnorms(anchors)
        block = max(1, (GPU_BLOCK_FLOATS if self.device.type == "cuda" else CPU_BLOCK_FLOATS) // max(m, 1))
        labels = torch.empty(n, dtype=torch.int64, device=self.device)
        d2 = torch.empty(n, dtype=torch.float32, device=self.device)
        second = torch.empty(n, dtype=torch.float32, device=self.device) if with_second else None
        for s in range(0, n, block):
            dots = torch.addmm(a2.unsqueeze(0), points[s:s + block], anchors.T, beta=1.0, alpha=-2.0)
            if with_second:
                val, lab = dots.topk(2, dim=1, largest=False)
                second[s:s + block] = val[:, 1] + p2[s:s + block]
                val, lab = val[:, 0], lab[:, 0]
            else:
                val, lab = dots.min(dim=1)
            labels[s:s + block] = lab
            d2[s:s + block] = val + p2[s:s + block]
        d2.clamp_(min=0.0)
        return (labels, d2, torch.maximum(second, d2)) if with_second else (labels, d2)

    def stats(self, points, labels, d2, m: int, weights=None):
        torch = self.torch
        f64 = torch.float64
        counts = torch.bincount(labels, minlength=m).to(f64)
        sse = torch.zeros(m, dtype=f64, device=self.device).index_add_(0, labels, d2.to(f64))
        if weights is None:
            wsum, src = counts, points
        else:
            wsum = torch.zeros(m, dtype=f64, device=self.device).index_add_(0, labels, weights.to(f64))
            src = points * weights[:, None]
        sums = torch.zeros((m, points.shape[1]), dtype=torch.float32, device=self.device)
        sums.index_add_(0, labels, src)
        return counts, wsum, sums.to(f64), sse

    def robust_weights(self, labels, d2, m: int, clip: float):
        torch = self.torch
        tot = torch.zeros(m, dtype=torch.float64, device=self.device).index_add_(0, labels, d2.to(torch.float64))
        rms2 = (tot / torch.bincount(labels, minlength=m).clamp(min=1)).to(torch.float32)
        return torch.sqrt(clip * clip * rms2[labels] / d2.clamp(min=1e-30)).clamp(max=1.0)

    def move(self, anchors, wsum, sums, step: float) -> None:
        present = wsum > 0
        cur = anchors[present].to(self.torch.float64)
        anchors[present] = (cur + step * (sums[present] / wsum[present][:, None] - cur)).to(anchors.dtype)

    def anchor_sqdist(self, anchors):
        a2 = self.sqnorms(anchors)
        dist = a2[:, None] + a2[None, :] - 2.0 * (anchors @ anchors.T)
        dist.fill_diagonal_(float("inf"))
        return dist

    def astype_anchor(self, arr):
        return arr.to(self.torch.float32).contiguous()

    def bincount(self, labels, weights, m: int) -> np.ndarray:
        torch = self.torch
        if weights is None:
            return torch.bincount(labels, minlength=m).to(torch.float64).cpu().numpy()
        out = torch.zeros(m, dtype=torch.float64, device=self.device)
        return out.index_add_(0, labels, weights.to(torch.float64)).cpu().numpy()

    def uniform(self, rng: np.random.Generator, n: int):
        return self.put(rng.random(n, dtype=np.float32))

    def nonzero(self, mask) -> np.ndarray:
        return self.torch.nonzero(mask).flatten().cpu().numpy()

    def minimum(self, a, b):
        return self.torch.minimum(a, b)

    def copy(self, arr):
        return arr.clone()

    def group_order(self, labels):
        return self.torch.argsort(labels, stable=True)


def get_backend(device: str):
    """The backend for an AnnealingConfig.device string."""
    if device == "cpu":
        return NumpyBackend()
    if device == "torch-cpu":
        return TorchBackend("cpu")
    return TorchBackend(device)
