"""Anchors for collections larger than memory or than one GPU: blocks, pinned batches, ranks.

The annealing (k-means|| start, split/merge moves, temperature) runs in memory on a seeded
sample of the points (``subsample * m`` rows, default 64 per anchor); the Lloyd refinement then
passes over all points block by block: from an ``np.memmap`` / ``.npy`` on the CPU, through
pinned host buffers copied asynchronously to the GPU (two buffers in turn, so reading the next
block overlaps the copy and the compute of the current one), or from points resident on the
device when they fit. Only the per-anchor sums (counts, coordinate sums, squared errors) leave
a pass, so with ``torch.distributed`` (launched by ``torchrun``) each rank streams its own
contiguous shard of rows and the sums are all-reduced (NCCL on GPUs, gloo on CPUs); every rank
ends with the same anchors. Sources: Lloyd (1982); the sharded k-means of faiss / Spark MLlib.
"""

from __future__ import annotations

import math
import time
from dataclasses import replace

import numpy as np

from .anneal import anneal
from .backends import get_backend
from .config import AnnealingConfig, InvalidPointsError

#: rows per streamed block (CPU, GPU); rows sampled per anchor for the in-memory hot phase
CPU_BLOCK_ROWS = 1 << 16
GPU_BLOCK_ROWS = 1 << 19
SAMPLE_PER_ANCHOR = 64


def open_points(source):
    """[N, d] float array or a path to a .npy (memory-mapped, read lazily). Raises
    InvalidPointsError for anything else."""
    arr = np.load(source, mmap_mode="r") if isinstance(source, (str, bytes)) or hasattr(source, "__fspath__") \
        else source
    if not hasattr(arr, "shape") or len(arr.shape) != 2 or arr.shape[0] < 1 or arr.shape[1] < 1 \
            or np.dtype(arr.dtype).kind != "f":
        raise InvalidPointsError(f"points must be a non-empty float [N, d] array or .npy, got "
                                 f"{getattr(arr, 'shape', type(arr))} {getattr(arr, 'dtype', '')}")
    return arr


def shard(n: int, rank: int, world: int) -> tuple[int, int]:
    """Rows [start, stop) of rank among world (contiguous, sizes differ by at most one)."""
    return n * rank // world, n * (rank + 1) // world


class _Dist:
    """torch.distributed helpers (all-reduce of host or device arrays); a no-op when world = 1."""

    def __init__(self):
        try:
            import torch.distributed as dist
            self.dist = dist if dist.is_available() and dist.is_initialized() else None
        except ImportError:
            self.dist = None
        self.rank = self.dist.get_rank() if self.dist else 0
        self.world = self.dist.get_world_size() if self.dist else 1

    def _device(self):
        import torch
        return torch.device("cuda", torch.cuda.current_device()) \
            if self.dist.get_backend() == "nccl" else torch.device("cpu")

    def sum(self, arr):
        """Element-wise sum over ranks of a numpy array or torch tensor (returned alike)."""
        if not self.dist:
            return arr
        import torch
        is_np = isinstance(arr, np.ndarray)
        t = torch.from_numpy(np.ascontiguousarray(arr)) if is_np else arr
        dev = t.to(self._device())
        self.dist.all_reduce(dev)
        return dev.cpu().numpy() if is_np else dev.to(arr.device)

    def broadcast(self, arr: np.ndarray) -> np.ndarray:
        """rank 0's host array on every rank (same shape and dtype everywhere)."""
        if not self.dist:
            return arr
        import torch
        t = torch.from_numpy(np.ascontiguousarray(arr)).to(self._device())
        self.dist.broadcast(t, 0)
        return t.cpu().numpy()

    def gather_rows(self, arr: np.ndarray) -> np.ndarray:
        """Concatenation over ranks (in rank order) of host arrays [k_r, d] float32."""
        if not self.dist:
            return arr
        import torch
        sizes = self.sum(np.eye(self.world, dtype=np.int64)[self.rank] * arr.shape[0])
        big = int(sizes.max())
        pad = np.zeros((big,) + arr.shape[1:], arr.dtype)
        pad[: arr.shape[0]] = arr
        t = torch.from_numpy(pad).to(self._device())
        out = [torch.empty_like(t) for _ in range(self.world)]
        self.dist.all_gather(out, t)
        return np.concatenate([o.cpu().numpy()[: int(k)] for o, k in zip(out, sizes)])


class _Blocks:
    """Float32 blocks of rows [start, stop) of a host array on the backend's device.

    resident: put the whole shard on the device once (it fits) and hand out views; otherwise
    each pass reads the host array again block by block (pinned, asynchronous on CUDA)."""

    def __init__(self, source, start: int, stop: int, backend, block_rows: int, resident: bool):
        self.source, self.start, self.stop, self.backend = source, start, stop, backend
        self.rows = block_rows
        self.cuda = getattr(backend, "device", None) is not None and backend.device.type == "cuda"
        self.resident = self._put_all() if resident else None
        self.pinned = None

    def _put_all(self):
        """The whole shard on the device as float32. On CUDA it travels block by block in the
        source's dtype and is converted there (float16: half the bytes over PCIe, and no host
        conversion pass, which took seconds per 10M x 128 shard on one core)."""
        if not self.cuda:
            return self.backend.put(np.asarray(self.source[self.start:self.stop], dtype=np.float32))
        torch = self.backend.torch
        out = torch.empty((self.stop - self.start, self.source.shape[1]), dtype=torch.float32,
                          device=self.backend.device)
        for s in range(self.start, self.stop, self.rows):
            e = min(s + self.rows, self.stop)
            block = torch.from_numpy(np.ascontiguousarray(self.source[s:e]))
            out[s - self.start:e - self.start] = block.to(self.backend.device).to(torch.float32)
        return out

    def __iter__(self):
        if self.resident is not None:
            for s in range(0, self.stop - self.start, self.rows):
                yield s, self.resident[s:s + self.rows]
            return
        if not self.cuda:
            for s in range(self.start, self.stop, self.rows):
                e = min(s + self.rows, self.stop)  # never past the shard
                yield s - self.start, self.backend.put(np.asarray(self.source[s:e], dtype=np.float32))
            return
        torch = self.backend.torch
        if self.pinned is None:
            d = self.source.shape[1]
            self.pinned = [torch.empty((self.rows, d), dtype=torch.float32).pin_memory() for _ in range(2)]
            self.events = [None, None]
        for k, s in enumerate(range(self.start, self.stop, self.rows)):
            e = min(s + self.rows, self.stop)
            buf = self.pinned[k % 2]
            if self.events[k % 2] is not None:  # the copy out of this buffer must have finished
                self.events[k % 2].synchronize()
            buf[: e - s].copy_(torch.from_numpy(np.asarray(self.source[s:e], dtype=np.float32)))
            dev = buf[: e - s].to(self.backend.device, non_blocking=True)
            ev = torch.cuda.Event()
            ev.record()
            self.events[k % 2] = ev
            yield s - self.start, dev


def _pass(blocks: _Blocks, anchors, m: int, backend, dist: _Dist, labels_out=None):
    """One assignment pass: all-reduced (counts [m], sums [m, d] float64, sse [m]) over ranks;
    labels_out [shard rows] int32 host array filled if given."""
    counts = sums = sse = None
    for off, x in blocks:
        p2 = backend.sqnorms(x)
        lab, d2 = backend.assign(x, anchors, p2)
        c, _, s, e = backend.stats(x, lab, d2, m)
        counts, sums, sse = (c, s, e) if counts is None else (counts + c, sums + s, sse + e)
        if labels_out is not None:
            labels_out[off:off + len(lab)] = backend.get(lab)
    return dist.sum(counts), dist.sum(sums), dist.sum(sse)


def _sample(source, start: int, stop: int, k: int, seed: int, rank: int) -> np.ndarray:
    """k seeded random rows of [start, stop), read in ascending order (cheap on a memmap)."""
    rng = np.random.default_rng([seed, rank])
    idx = np.sort(rng.choice(stop - start, size=min(k, stop - start), replace=False)) + start
    return np.asarray(source[idx], dtype=np.float32)


def fit_anchors(source, config: AnnealingConfig, block_rows: int | None = None, resident: bool | None = None,
                log=None, fixed_passes: bool = False):
    """Anchors of points too many for one in-memory run; with torch.distributed, over all ranks.

    source: [N, d] float array, np.memmap or .npy path (every rank passes the same). Each rank
    takes rows ``shard(N, rank, world)``. The annealing runs on rank 0 over a sample of
    ``config.subsample`` (default 64) rows per anchor drawn from all shards; then
    ``config.refine_iterations`` Lloyd passes (until ``config.tolerance``) over all rows, the
    per-anchor sums all-reduced. block_rows: rows per block (default 65536 on the CPU, 524288
    on the GPU); resident: keep the shard on the device (default: when it takes under half the
    free GPU memory; never on the CPU backend, where blocks are read from the source).
    fixed_passes: run all ``refine_iterations`` passes, ignoring the tolerance (timing runs).

    Returns (anchors [m, d] float32 host, same on every rank, stored as float16 values;
    assignments [shard rows] int32 of this rank's rows; energy (mean squared distance over all
    N); info dict with the per-pass log). Raises InvalidPointsError for bad points.
    """
    source = open_points(source)
    n, d = int(source.shape[0]), int(source.shape[1])
    dist = _Dist()
    backend = get_backend(config.device if not config.device.startswith("cuda") or not dist.dist
                          else f"cuda:{__import__('torch').cuda.current_device()}")
    cuda = getattr(backend, "device", None) is not None and backend.device.type == "cuda"
    start, stop = shard(n, dist.rank, dist.world)
    rows = block_rows or (GPU_BLOCK_ROWS if cuda else CPU_BLOCK_ROWS)
    if resident is None:
        resident = cuda and (stop - start) * d * 4 < 0.5 * backend.torch.cuda.mem_get_info(backend.device)[0]
    t0 = time.perf_counter()
    per_anchor = config.subsample or SAMPLE_PER_ANCHOR
    sample = dist.gather_rows(_sample(source, start, stop, -(-per_anchor * config.m // dist.world),
                                      config.seed, dist.rank))
    if not np.isfinite(sample).all():
        raise InvalidPointsError("points must be finite: the sample holds NaN or inf")
    if dist.rank == 0:
        hot = anneal(sample, replace(config, subsample=0), backend, log=log)
        anchors_h = backend.get(hot.anchors).astype(np.float32)
        info = dict(hot_iterations=hot.iterations, hot_log=hot.log, splits=hot.splits, merges=hot.merges,
                    rejected_moves=hot.rejected)
    else:
        anchors_h, info = np.zeros((config.m, d), np.float32), {}
    m = int(dist.broadcast(np.array([anchors_h.shape[0]]))[0])
    anchors_h = dist.broadcast(np.ascontiguousarray(anchors_h[:m]))
    info["hot_seconds"] = time.perf_counter() - t0
    t_load = time.perf_counter()
    blocks = _Blocks(source, start, stop, backend, rows, resident)
    anchors = backend.put(anchors_h)
    info["load_seconds"] = time.perf_counter() - t_load  # the shard put on the device (resident)
    prev = math.inf
    passes = []
    from tqdm.auto import tqdm
    show = config.progress if config.progress is not None else n * m * d > 2e11
    bar = tqdm(total=config.refine_iterations + 1, disable=not (show and dist.rank == 0), desc="Lloyd passes",
               unit="pass", leave=False)
    for it in range(config.refine_iterations):
        t_pass = time.perf_counter()
        counts, sums, sse = _pass(blocks, anchors, m, backend, dist)
        energy = float(backend.get(sse).sum()) / n  # waits for the device
        if not math.isfinite(energy):
            raise InvalidPointsError("points must be finite: a block holds NaN or inf")
        passes.append(dict(iter=it + 1, E=energy, delta_E=energy - prev if prev < math.inf else math.nan,
                           seconds=time.perf_counter() - t_pass))
        bar.update(1)
        if log and dist.rank == 0:
            log(f"Pass {it + 1}: E={energy:.6f}, delta_E={passes[-1]['delta_E']:.6f}")
        backend.move(anchors, counts, sums, 1.0)
        if not fixed_passes and prev < math.inf and prev - energy <= config.tolerance * prev:
            break
        prev = energy
    anchors_h = backend.get(anchors).astype(np.float16).astype(np.float32)  # the stored values
    labels = np.empty(stop - start, np.int32)
    _, _, sse = _pass(blocks, backend.put(anchors_h), m, backend, dist, labels_out=labels)
    bar.close()
    energy = float(backend.get(sse).sum()) / n
    info.update(passes=passes, seconds=time.perf_counter() - t0, backend=backend.name, world=dist.world)
    return anchors_h, labels, energy, info


def compress_stream(source, config: AnnealingConfig | None = None, block_rows: int | None = None,
                    resident: bool | None = None, log=None):
    """A CompressedIndex (anchors and assignments, no residual codes) of points streamed from
    an [N, d] array, np.memmap or .npy path, in one process (see fit_anchors). Raises
    InvalidPointsError for bad points, UnsupportedError for 'cuda' without a GPU."""
    from .index import CompressedIndex

    config = config or AnnealingConfig()
    if log is None and config.verbose:
        log = print
    source = open_points(source)
    anchors, labels, energy, info = fit_anchors(source, config, block_rows, resident, log)
    index = CompressedIndex(anchors, labels.astype(np.int64), energy,
                            info["hot_iterations"] + len(info["passes"]), source_itemsize=source.dtype.itemsize)
    index.info.update(info, history=[p["E"] for p in info["passes"]], config=config.to_dict())
    return index
