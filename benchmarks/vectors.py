"""Benchmark wcodec.vectors against faiss (and scikit-learn k-means++) on real and synthetic data.

Suites (``--suite``):

    minilm   (default) real MiniLM embeddings: anchors, residual codes, faiss PQ/OPQ/IVF, recall
    quality  anchor energy and time at equal m: wcodec (CPU; + CUDA if present), faiss k-means
             (20 iterations, all points; GPU too when the faiss wheel has it), scikit-learn
             k-means++ (n_init=1): Gaussian mixtures (make_blobs 10K x 128 / 256 clusters,
             50K x 64 / 1000), the seeds' test-cuda data (1K x 64 / 32, 10K x 128 / 256, noise
             floor 0.09 d) and MiniLM 50K x 384 / m=1024
    scale    1M x 128 / 2048 clusters (synthetic, labelled; the seeds' generator): wcodec on the
             GPU, faiss on the GPU if it can, faiss CPU and scikit-learn on a 50K subsample (wcodec too, same points)
    dist     run under torchrun: 10M x 128 / 4096 (labelled, written once as a float16 .npy and
             memory-mapped), points sharded across the ranks' GPUs, per-anchor sums all-reduced
             over NCCL; prints the time of the hot phase (rank 0, sample), the load, the Lloyd
             passes and the whole fit, per world size (``--dist-summary DIR`` compares the JSON
             files of the 1- and 2-GPU runs); ``--quick``: 40K x 16 / 64 on CPUs over gloo

With $OUT set, everything printed is also written to $OUT/vectors_<suite>.log (and JSON rows).

One-command GPU runs (see benchmarks/RESULTS.md):

    python benchmarks/vectors.py --suite quality && python benchmarks/vectors.py --suite scale
    torchrun --nproc_per_node=1 benchmarks/vectors.py --suite dist && \
      torchrun --nproc_per_node=2 benchmarks/vectors.py --suite dist && \
      python benchmarks/vectors.py --dist-summary "${OUT:-/tmp}"
    (the same with ``--quick`` added to both torchrun lines runs the whole flow on a CPU, gloo)

Suite minilm:

Figures per row: energy / MSE (mean squared L2 error per vector), total bytes per vector (codes,
assignments, anchors, rotation and codebooks all counted; faiss tables as float16, faiss IVF list
membership as ceil(log2 nlist) bits), recall@10 against exact search, wall time of training +
encoding. wcodec on the CPU and, when CUDA is present, on the GPU; faiss-cpu in the same run.

    python benchmarks/vectors.py                      # 50K base, 1K queries from ../shared/data
    python benchmarks/vectors.py --stack100k          # base + noisy copy (labelled), 100K
    python benchmarks/vectors.py --no-faiss --device cuda
    python benchmarks/vectors.py --no-opq --repeat 2   # anchors timed twice each, interleaved
    python benchmarks/vectors.py --only-opq            # faiss OPQ rows only (slow to train)

The anchor timing rows (wcodec annealing vs faiss k-means, same m, same process) run first,
interleaved ``--repeat`` times; the machine is shared, so take the ratio per pair.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import math
import os
import sys
import time
from pathlib import Path

import numpy as np

from wcodec.vectors import AnnealingConfig, compress
from wcodec.vectors.search import exact_search, recall_at_k

DATA = next((p for p in (Path(__file__).resolve().parents[1].parent / "shared" / "data",
                         Path(__file__).resolve().parents[1] / "shared" / "data", Path("/work/shared/data"))
             if p.exists()), Path(__file__).resolve().parents[1].parent / "shared" / "data")


def load(args):
    base = np.load(Path(args.data) / "minilm_nltk_50k_f16.npy")
    queries = np.load(Path(args.data) / "minilm_nltk_queries_1k_f16.npy").astype(np.float32)
    if args.n:
        base = base[: args.n]
    label = f"MiniLM {len(base) // 1000}K"
    if args.stack100k:  # not real 100K: the 50K plus a copy with noise, renormalised
        rng = np.random.default_rng(0)
        noisy = base.astype(np.float32) + 0.02 * rng.standard_normal(base.shape).astype(np.float32)
        noisy /= np.linalg.norm(noisy, axis=1, keepdims=True)
        base = np.concatenate([base, noisy.astype(np.float16)])
        label = "MiniLM 50K + noisy copy = 100K"
    return base, queries, label


def row(rows, method, device, err, bpv, recall, seconds, note=""):
    rows.append(dict(method=method, device=device, mse=err, bytes_per_vector=bpv, recall10=recall,
                     seconds=seconds, note=note))
    print(f"  {method:<28} {device:<10} mse {err:.4f}  {bpv:7.2f} B/v  recall@10 {recall:.3f}  {seconds:7.2f} s {note}",
          flush=True)


def faiss_kmeans(rows, x, m_anchor, note=""):
    import faiss

    n, d = x.shape
    t0 = time.perf_counter()
    km = faiss.Kmeans(d, m_anchor, niter=20, seed=1, max_points_per_centroid=10 ** 7)
    km.train(x)
    dt = time.perf_counter() - t0
    dist, _ = km.index.search(x, 1)
    row(rows, f"faiss k-means m={m_anchor}", "cpu", float(dist.mean()),
        (m_anchor * d * 2) / n + math.log2(m_anchor) / 8, float("nan"), dt, ("20 it " + note).strip())
    return dt


def anchors_timing(rows, base, x, queries, truth, devices, m_anchor, repeat, faiss_too):
    """wcodec anchors and faiss k-means, interleaved ``repeat`` times (same process)."""
    for dev in devices:  # warm-up: numba kernels (cached on disk) and CUDA context, not timed
        compress(base[:2048], AnnealingConfig(m=16, device=dev, max_iterations=2))
    for rep in range(repeat):
        for dev in devices:
            t0 = time.perf_counter()
            idx = compress(base, AnnealingConfig(m=m_anchor, device=dev))
            dt = time.perf_counter() - t0
            _, ids = idx.search(queries, 10)
            row(rows, f"wcodec anchors m={m_anchor}", dev, idx.energy, idx.bytes_per_vector,
                recall_at_k(ids, truth, 10), dt, f"{idx.iterations} it, run {rep + 1}")
            if dev == "cpu":
                wc = dt
        if faiss_too:
            fa = faiss_kmeans(rows, x, m_anchor, f"run {rep + 1}")
            if "cpu" in devices:
                print(f"  run {rep + 1}: wcodec / faiss CPU time = {wc / fa:.2f}", flush=True)


def run_wcodec(rows, base, x, queries, truth, devices, budgets, m_res):
    for dev in devices:
        for b in budgets:
            t0 = time.perf_counter()
            idx = compress(base, AnnealingConfig(m=m_res, device=dev, bytes_per_vector=b))
            dt = time.perf_counter() - t0
            _, ids = idx.search(queries, 10)
            row(rows, f"wcodec m={m_res} + {idx.codes.shape[1]} codes", dev, idx.mse(x), idx.bytes_per_vector,
                recall_at_k(ids, truth, 10), dt, f"budget {b} B, r={idx.books.rank} dims")


def norm_scaled_recall(rec, x, queries, truth):
    """recall@10 of faiss codes ranked as wcodec ranks with stored norms: |x|^2 - 2 |x| q.x_hat /
    |x_hat| (norms taken exact here, i.e. free, as they nearly are for normalised data)."""
    dec = np.maximum(np.linalg.norm(rec, axis=1), 1e-30)
    true = np.linalg.norm(x, axis=1)
    dist = true[None, :] ** 2 - 2 * (true / dec)[None, :] * (queries @ rec.T)
    return recall_at_k(np.argsort(dist, axis=1)[:, :10], truth, 10)


def faiss_rows(rows, x, queries, truth, budgets, opq: bool, only_opq: bool = False, opq_list=None):
    import faiss

    n, d = x.shape
    divisors = [k for k in range(1, d + 1) if d % k == 0]
    tables = 256 * d * 2 / n
    rot = d * d * 2 / n
    keys = set()
    for b in budgets:
        pq = max(k for k in divisors if k + tables <= b)
        keys.add((f"PQ{pq}", pq + tables))
        ivf = max(k for k in divisors if k + tables + (64 * d * 2) / n + 6 / 8 <= b)
        keys.add((f"IVF64,PQ{ivf}", ivf + tables + (64 * d * 2) / n + 6 / 8))
        if opq:
            o = max(k for k in divisors if k + tables + rot <= b + 1)  # may exceed by < 1 B
            keys.add((f"OPQ{o},PQ{o}", o + tables + rot))
    if opq:
        keys |= {("OPQ16,PQ16", 16 + tables + rot), ("OPQ32,PQ32", 32 + tables + rot)}
    if opq_list:
        keys = {k for k in keys if not k[0].startswith("OPQ")}
        keys |= {(f"OPQ{o},PQ{o}", o + tables + rot) for o in opq_list}
    for key, bpv in sorted(keys, key=lambda kv: kv[1]):
        if only_opq and not key.startswith("OPQ"):
            continue
        t0 = time.perf_counter()
        index = faiss.index_factory(d, key)
        index.train(x)
        index.add(x)
        dt = time.perf_counter() - t0
        if key.startswith("IVF"):
            ivf = faiss.extract_index_ivf(index)
            ivf.nprobe = 64  # exhaustive over lists: recall limited by the codes only
            ivf.make_direct_map()
            rec = ivf.reconstruct_n(0, n)
        else:
            rec = index.reconstruct_n(0, n)
        _, ids = index.search(queries, 10)
        row(rows, f"faiss {key}", "cpu", float(((rec - x) ** 2).sum(1).mean()), bpv,
            recall_at_k(ids, truth, 10), dt,
            f"norm-scaled ranking: recall {norm_scaled_recall(rec, x, queries, truth):.3f}")


class _Tee:
    """stdout also written to a log file ($OUT)."""

    def __init__(self, stream, path):
        self.stream, self.file = stream, open(path, "a", buffering=1)

    def write(self, text):
        self.stream.write(text)
        self.file.write(text)

    def flush(self):
        self.stream.flush()
        self.file.flush()


def _out_dir():
    out = os.environ.get("OUT")
    if out:
        Path(out).mkdir(parents=True, exist_ok=True)
    return Path(out) if out else None


def _cuda() -> bool:
    try:
        import torch
        return torch.cuda.is_available()
    except ImportError:
        return False


def _sync():
    if _cuda():
        import torch
        torch.cuda.synchronize()


def labelled(n: int, d: int, clusters: int, seed: int = 0, sigma: float = 0.3) -> np.ndarray:
    """[n, d] float16 points around ``clusters`` standard-normal centres with N(0, sigma^2)
    noise (the seeds' test-cuda data; noise floor sigma^2 d), generated in chunks."""
    rng = np.random.default_rng(seed)
    centres = rng.standard_normal((clusters, d)).astype(np.float32)
    out = np.empty((n, d), np.float16)
    for s in range(0, n, 1 << 20):
        k = min(1 << 20, n - s)
        out[s:s + k] = centres[rng.integers(0, clusters, k)] + sigma * rng.standard_normal((k, d), np.float32)
    return out


def _quality_sets(args):
    from sklearn.datasets import make_blobs

    from wcodec.vectors.cli import synthetic

    sets = []
    for n, d, k in [(10_000, 128, 256), (50_000, 64, 1000)]:
        x, _ = make_blobs(n, d, centers=k, random_state=0)
        sets.append((f"mixture {n // 1000}K x {d}, {k} clusters (make_blobs)", x.astype(np.float32), k, float(d)))
    for n, d, k in [(1_000, 64, 32), (10_000, 128, 256)]:
        sets.append((f"seeds' test-cuda {n // 1000}K x {d}, {k}", synthetic(n, d, k).astype(np.float32), k, 0.09 * d))
    base = Path(args.data) / "minilm_nltk_50k_f16.npy"
    if base.exists():
        sets.append(("MiniLM 50K x 384, m=1024", np.load(base).astype(np.float32), 1024, float("nan")))
    else:
        print(f"(MiniLM data not found at {base}: real-embedding row skipped)")
    return sets


def _have(module: str) -> bool:
    import importlib.util
    if importlib.util.find_spec(module) is None:
        print(f"  ({module} not installed: its rows are skipped; pip install faiss-cpu scikit-learn)")
        return False
    return True


_FAISS_ITERATIONS = {}


def _faiss_energy(x, m, gpu=False):
    """faiss k-means (niter=20; faiss stops earlier once the objective stops changing), after a
    small untimed warm-up run (OpenMP threads start on the first call: ~0.3 s here)."""
    import faiss

    if gpu not in _FAISS_ITERATIONS:
        faiss.Kmeans(x.shape[1], 8, niter=2, seed=1, gpu=gpu).train(x[:2048])
    km = faiss.Kmeans(x.shape[1], m, niter=20, seed=1, max_points_per_centroid=10 ** 7, gpu=gpu)
    t0 = time.perf_counter()
    km.train(x)
    dt = time.perf_counter() - t0
    _FAISS_ITERATIONS[gpu] = len(km.iteration_stats)
    return float(km.index.search(x, 1)[0].mean()), dt


def _sklearn_energy(x, m):
    from sklearn.cluster import KMeans

    t0 = time.perf_counter()
    km = KMeans(m, init="k-means++", n_init=1, random_state=0).fit(x)
    return float(km.inertia_) / len(x), time.perf_counter() - t0


def _wcodec_energy(x, m, device):
    from wcodec.vectors import AnnealingConfig, compress

    compress(x[:2048], AnnealingConfig(m=min(m, 16), device=device, max_iterations=6, maintenance_interval=2))  # warm-up (kernels)
    _sync()
    t0 = time.perf_counter()
    idx = compress(x, AnnealingConfig(m=m, device=device))
    _sync()
    dt = time.perf_counter() - t0
    idx.info["t0"] = t0
    return idx.energy, dt, idx


def _time_to(idx, energy: float) -> float:
    """Seconds from the start of a compress() until its log first showed an energy <= energy
    (nan if never): wcodec's time to match a reference's final energy."""
    hit = [e["clock"] for e in idx.info["log"] if e["E"] <= energy]
    return hit[0] - idx.info["t0"] if hit else math.nan


def _faiss_gpu_missing() -> str:
    """Why the faiss GPU column is skipped ("" when faiss can run on a GPU here). No faiss GPU
    wheel can be carried to the GPU machines (2026-11-22): faiss-gpu-cu12 1.14.1.post1 (cp312)
    is 48.4 MB, links libcudart/libcublas/libcublasLt .so.12 (nvidia-cublas-cu12 is a 393 MB
    wheel; the H100's torch was +cu130), and its kernels are sm_70/sm_80 code without PTX
    (compute capability 7.0-8.9 per its README): none would load on an H100/H200 (sm_90)."""
    if not _cuda():
        return "no CUDA GPU"
    try:
        import faiss
    except ImportError:
        return "faiss not installed"
    if not hasattr(faiss, "StandardGpuResources"):
        return "this faiss wheel has no GPU support (faiss-cpu)"
    try:
        return "" if faiss.get_num_gpus() > 0 else "faiss sees no GPU"
    except (AttributeError, RuntimeError) as exc:
        return f"faiss GPU unusable: {exc}"


def _faiss_has_gpu() -> bool:
    return not _faiss_gpu_missing()


def suite_quality(args) -> list:
    rows = []
    devices = ["cpu"] + (["cuda"] if _cuda() else [])
    if not _have("sklearn"):
        return []
    has_faiss = _have("faiss")
    if has_faiss:
        from wcodec.vectors.backends import _pool
        print(f"threads: faiss {__import__('faiss').omp_get_max_threads()}, wcodec assignment workers "
              f"{_pool()[1]}, cores {os.cpu_count()}", flush=True)
    if "cuda" in devices and not _faiss_has_gpu():
        print(f"  faiss k-means (gpu): skipped, {_faiss_gpu_missing()}", flush=True)
    for label, x, m, floor in _quality_sets(args):
        if args.only and not any(o in label for o in args.only):
            continue
        print(f"\n{label}: {x.shape[0]} x {x.shape[1]}, m={m}" +
              ("" if math.isnan(floor) else f", noise floor {floor:.3f}"), flush=True)
        ref = {}
        if _faiss_has_gpu():
            ref["faiss k-means (gpu)"] = _faiss_energy(x, m, gpu=True)
        if not args.no_sklearn:
            ref["sklearn k-means++"] = _sklearn_energy(x, m)
        # faiss CPU and wcodec CPU alternate ``--repeat`` times (the machine is shared): each
        # keeps its fastest run, and the median of the per-pair time ratios is reported too
        pairs = []
        for rep in range(max(args.repeat, 1)):
            if has_faiss:
                e_f, t_f = _faiss_energy(x, m)
                best_f = ref.get("faiss k-means (cpu)", (e_f, math.inf))
                ref["faiss k-means (cpu)"] = (e_f, min(t_f, best_f[1]))
            else:
                t_f = math.nan
            e, t_w, idx = _wcodec_energy(x, m, "cpu")
            pairs.append((t_w, t_f, e, idx, _time_to(idx, e_f) if has_faiss else math.nan))
            if args.repeat > 1:
                print(f"  run {rep + 1}: wcodec {t_w:.3f} s, faiss {t_f:.3f} s, ratio {t_w / t_f:.2f}; wcodec at "
                      f"faiss's energy after {pairs[-1][4]:.3f} s", flush=True)
        for name, (e, dt) in ref.items():
            print(f"  {name:<22} energy {e:10.4f}  {dt:8.2f} s", flush=True)
        best = min([e for e, _ in ref.values()] or [math.nan])
        for dev in devices:
            if dev == "cpu":
                dt = min(p[0] for p in pairs)
                e, idx = pairs[0][2], pairs[0][3]
                ratio_med = float(np.median([p[0] / p[1] for p in pairs]))
                to_faiss = min(p[4] for p in pairs)
            else:
                e, dt, idx = _wcodec_energy(x, m, dev)
                ratio_med = to_faiss = math.nan
            t_faiss = ref.get("faiss k-means (cpu)" if dev == "cpu" else "faiss k-means (gpu)", (0, math.nan))[1]
            r = dict(set=label, device=dev, energy=e, seconds=dt, best_ref=best, vs_best=e / best,
                     vs_floor=e / floor, faiss_seconds=t_faiss, time_vs_faiss=dt / t_faiss,
                     median_pair_ratio=ratio_med, runs=len(pairs) if dev == "cpu" else 1,
                     seconds_to_faiss_energy=to_faiss, faiss_iterations=_FAISS_ITERATIONS.get(False),
                     iterations=idx.iterations,
                     moves=idx.info["splits"], rejected=idx.info["rejected_moves"],
                     refs={k: v[0] for k, v in ref.items()}, ref_seconds={k: v[1] for k, v in ref.items()})
            rows.append(r)
            print(f"  wcodec ({dev:<4})          energy {e:10.4f}  {dt:8.2f} s  {idx.iterations} it, "
                  f"{r['moves']} moves ({r['rejected']} rejected); energy / best reference {e / best:.3f}"
                  + ("" if math.isnan(floor) else f", / noise floor {e / floor:.3f}")
                  + f"; time / faiss {dt / t_faiss:.2f}"
                  + ("" if math.isnan(ratio_med) else f" (median of {len(pairs)} pairs {ratio_med:.2f})")
                  + ("" if math.isnan(to_faiss) else f"; at faiss's energy after {to_faiss:.2f} s"), flush=True)
    print("\n| data | device | wcodec energy | faiss | sklearn k-means++ | wcodec / best | wcodec / floor | "
          "wcodec it | wcodec s | faiss it | faiss s | time / faiss | median pair ratio | wcodec s to faiss energy | "
          "that / faiss s |\n|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        fa = r["refs"].get("faiss k-means (gpu)" if r["device"] == "cuda" else "faiss k-means (cpu)",
                           r["refs"].get("faiss k-means (cpu)", math.nan))
        print(f"| {r['set']} | {r['device']} | {r['energy']:.4f} | {fa:.4f} | "
              f"{r['refs'].get('sklearn k-means++', math.nan):.4f} | {r['vs_best']:.3f} | {r['vs_floor']:.3f} | "
              f"{r['iterations']} | {r['seconds']:.3f} | {r['faiss_iterations']} | {r['faiss_seconds']:.3f} | "
              f"{r['time_vs_faiss']:.2f} | {r['median_pair_ratio']:.2f} | {r['seconds_to_faiss_energy']:.3f} | "
              f"{r['seconds_to_faiss_energy'] / r['faiss_seconds']:.2f} |")
    return rows


def suite_scale(args) -> list:
    n, d, m = args.scale_shape
    print(f"labelled synthetic {n} x {d}, {m} clusters (noise floor {0.09 * d:.3f})", flush=True)
    t0 = time.perf_counter()
    x16 = labelled(n, d, m)
    x = x16.astype(np.float32)
    print(f"  generated in {time.perf_counter() - t0:.1f} s", flush=True)
    rows = []
    devices = (["cuda"] if _cuda() else []) + (["cpu"] if args.scale_cpu or not _cuda() else [])
    for dev in devices:
        e, dt, idx = _wcodec_energy(x16, m, dev)
        rows.append(dict(method=f"wcodec ({dev})", energy=e, seconds=dt, n=n, iterations=idx.iterations,
                         moves=idx.info["splits"]))
        print(f"  wcodec ({dev}): energy {e:.4f} ({e / (0.09 * d):.3f} x floor), {dt:.2f} s (k-means|| "
              f"{idx.info['seed_seconds']:.2f} s, annealing {idx.info['anneal_seconds']:.2f} s), {idx.iterations} it, "
              f"{idx.info['splits']} moves, compression {idx.compression_percent:.2f}% "
              f"({idx.compression_ratio:.1f}x)", flush=True)
    if _faiss_has_gpu():
        e, dt = _faiss_energy(x, m, gpu=True)
        rows.append(dict(method="faiss k-means (gpu)", energy=e, seconds=dt, n=n))
        print(f"  faiss k-means (gpu, 20 it): energy {e:.4f}, {dt:.2f} s", flush=True)
    else:
        print(f"  faiss k-means (gpu): skipped, {_faiss_gpu_missing()}", flush=True)
    sub = x[np.random.default_rng(0).choice(n, min(n, args.scale_ref_n), replace=False)]
    for name, fn in ([("faiss k-means (cpu, 20 it)", _faiss_energy)] if _have("faiss") else []) + \
            ([] if args.no_sklearn or not _have("sklearn") else [("sklearn k-means++", _sklearn_energy)]):
        e_sub, dt = fn(sub, m)
        # energy of the reference's anchors judged on all n points would need its centroids; the
        # subsample energy is reported as is, beside wcodec's on the same subsample
        rows.append(dict(method=f"{name} on {len(sub)} of {n}", energy=e_sub, seconds=dt, n=len(sub)))
        print(f"  {name} on a {len(sub)}-point subsample: energy {e_sub:.4f}, {dt:.2f} s", flush=True)
    e_sub, dt, _ = _wcodec_energy(sub, m, devices[0])
    rows.append(dict(method=f"wcodec ({devices[0]}) on {len(sub)} of {n}", energy=e_sub, seconds=dt, n=len(sub)))
    print(f"  wcodec ({devices[0]}) on the same subsample: energy {e_sub:.4f}, {dt:.2f} s", flush=True)
    print("\n| method | points | energy | energy / noise floor | seconds |\n|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['method']} | {r['n']} | {r['energy']:.4f} | {r['energy'] / (0.09 * d):.3f} | {r['seconds']:.2f} |")
    return rows


def suite_dist(args) -> list:
    """Under torchrun: 10M x 128 / 4096 (labelled synthetic) sharded over the ranks' GPUs
    (NCCL), or CPUs (gloo) with ``--quick``. Timed parts: the hot phase (annealing of a
    64-per-anchor sample on rank 0: the same work at every world size), the load (each rank puts
    its shard on its GPU), the Lloyd passes over all points (the sharded part: per-anchor sums
    all-reduced), the final assignment. Rank 0 writes vectors_dist_world<W>.json to $OUT."""
    import torch
    import torch.distributed as dist

    from wcodec.vectors import AnnealingConfig
    from wcodec.vectors.stream import fit_anchors

    cuda = torch.cuda.is_available()
    if cuda:
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", 0)))
    dist.init_process_group("nccl" if cuda else "gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    n, d, m = args.dist_shape
    folder = Path(os.environ.get("TMPDIR", "/tmp"))
    path = Path(args.dist_file or folder / f"wcodec_labelled_{n}x{d}x{m}.npy")
    if rank == 0 and not path.exists():
        t0 = time.perf_counter()
        tmp = path.with_suffix(".part.npy")
        arr = np.lib.format.open_memmap(tmp, mode="w+", dtype=np.float16, shape=(n, d))
        rng = np.random.default_rng(0)
        centres = rng.standard_normal((m, d)).astype(np.float32)
        for s in range(0, n, 1 << 20):
            k = min(1 << 20, n - s)
            arr[s:s + k] = centres[rng.integers(0, m, k)] + 0.3 * rng.standard_normal((k, d), np.float32)
        arr.flush()
        del arr
        os.replace(tmp, path)
        print(f"wrote {path} ({n} x {d} float16, labelled synthetic) in {time.perf_counter() - t0:.1f} s", flush=True)
    dist.barrier()
    cfg = AnnealingConfig(m=m, device="cuda" if cuda else "cpu", refine_iterations=args.dist_passes, progress=False)
    # a tiny fit on every rank before the clock: CUDA context, cuBLAS, NCCL communicators, numba kernels
    fit_anchors(np.random.default_rng(rank).standard_normal((4096, d)).astype(np.float32),
                AnnealingConfig(m=16, device=cfg.device, refine_iterations=2, progress=False))
    dist.barrier()
    _sync()
    t0 = time.perf_counter()
    anchors, labels, energy, info = fit_anchors(str(path), cfg, fixed_passes=True)
    _sync()
    dist.barrier()
    total = time.perf_counter() - t0
    times = [p["seconds"] for p in info["passes"]]
    passes_s = float(sum(times))
    final_s = total - info["hot_seconds"] - info["load_seconds"] - passes_s
    row = dict(world=world, n=n, d=d, m=m, energy=energy, floor=0.09 * d, total_s=total, hot_s=info["hot_seconds"],
               load_s=info["load_seconds"], passes=len(times), passes_s=passes_s,
               per_pass_s=float(np.median(times)) if times else math.nan, final_s=final_s,
               device=(f"{world} x " + torch.cuda.get_device_name(0)) if cuda else f"{world} CPU process(es), gloo",
               data="labelled synthetic (standard-normal centres, sigma 0.3)")
    if rank == 0:
        print(f"world {world}: {n} x {d}, m={m}: energy {energy:.4f} ({energy / (0.09 * d):.3f} x floor); "
              f"total {total:.2f} s = hot phase {info['hot_seconds']:.2f} s (rank 0, sample) + load "
              f"{info['load_seconds']:.2f} s + {len(times)} Lloyd passes {passes_s:.2f} s "
              f"(median {row['per_pass_s']:.3f} s) + final assignment {final_s:.2f} s", flush=True)
        out = _out_dir() or folder
        (out / f"vectors_dist_world{world}.json").write_text(json.dumps(row, indent=1))
    dist.destroy_process_group()
    return [row] if rank == 0 else []


def dist_summary(folder) -> int:
    """The table of the vectors_dist_world*.json files in folder; speedups against world 1."""
    rows = {}
    for p in Path(folder).glob("vectors_dist_world*.json"):
        r = json.loads(p.read_text())
        rows[r["world"]] = r
    if 1 not in rows or len(rows) < 2:
        print(f"need vectors_dist_world1.json and another world size in {folder}; found {sorted(rows)}")
        return 1
    one = rows[1]
    print(f"{one['n']} x {one['d']}, m={one['m']}, {one['data']}; {one['passes']} Lloyd passes over all points")
    print("| ranks | device | energy | total s | hot phase s (rank 0) | load s | Lloyd passes s | per pass s | "
          "speedup per pass | speedup passes | speedup total |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for w, r in sorted(rows.items()):
        print(f"| {w} | {r['device']} | {r['energy']:.4f} | {r['total_s']:.2f} | {r['hot_s']:.2f} | {r['load_s']:.2f} | "
              f"{r['passes_s']:.2f} | {r['per_pass_s']:.4f} | {one['per_pass_s'] / r['per_pass_s']:.2f}x | "
              f"{one['passes_s'] / r['passes_s']:.2f}x | {one['total_s'] / r['total_s']:.2f}x |")
    return 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", default=str(DATA))
    ap.add_argument("--n", type=int, default=0, help="use the first N base vectors")
    ap.add_argument("--stack100k", action="store_true")
    ap.add_argument("--device", default="auto", help="auto (cpu, + cuda if present), cpu, cuda")
    ap.add_argument("--anchors", type=int, default=1024)
    ap.add_argument("--residual-anchors", type=int, default=64)
    ap.add_argument("--budgets", type=float, nargs="*", default=[21.0, 37.0])
    ap.add_argument("--no-faiss", action="store_true")
    ap.add_argument("--no-opq", action="store_true", help="skip faiss OPQ (slow to train)")
    ap.add_argument("--only-opq", action="store_true", help="faiss OPQ rows only (no wcodec, no k-means)")
    ap.add_argument("--opq-list", type=int, nargs="*", default=None,
                    help="faiss OPQ sizes to run instead of the budget-derived ones and 16, 32")
    ap.add_argument("--repeat", type=int, default=1,
                    help="minilm/quality: timing runs of wcodec and faiss CPU, interleaved (fastest kept)")
    ap.add_argument("--json", default=None, help="write the rows here")
    ap.add_argument("--suite", default="minilm", choices=["minilm", "quality", "scale", "dist"])
    ap.add_argument("--no-sklearn", action="store_true", help="quality/scale: skip scikit-learn k-means++")
    ap.add_argument("--only", nargs="*", default=None, help="quality: only the sets whose label contains one of these")
    ap.add_argument("--threads", type=int, default=0,
                    help="quality: threads for both faiss (OpenMP) and wcodec (BLAS and its assignment workers); "
                         "0 = their defaults (all cores)")
    ap.add_argument("--scale-shape", type=int, nargs=3, default=[1_000_000, 128, 2048], metavar=("N", "D", "M"))
    ap.add_argument("--scale-ref-n", type=int, default=50_000, help="scale: subsample for the CPU references")
    ap.add_argument("--scale-cpu", action="store_true", help="scale: also run wcodec on the CPU (slow)")
    ap.add_argument("--dist-shape", type=int, nargs=3, default=[10_000_000, 128, 4096], metavar=("N", "D", "M"))
    ap.add_argument("--dist-passes", type=int, default=20, help="dist: Lloyd passes over all points (all run)")
    ap.add_argument("--quick", action="store_true",
                    help="dist: 40000 x 16, m=64, 4 passes (tests the whole flow on CPUs with gloo)")
    ap.add_argument("--dist-file", default=None, help="dist: the .npy of points (written if missing)")
    ap.add_argument("--dist-summary", default=None, metavar="DIR", help="compare vectors_dist_world*.json in DIR")
    args = ap.parse_args()
    if args.dist_summary:
        return dist_summary(args.dist_summary)
    if args.quick:
        args.dist_shape, args.dist_passes = [40_000, 16, 64], 4
    out = _out_dir()
    if out is not None and os.environ.get("RANK", "0") == "0":
        sys.stdout = _Tee(sys.stdout, out / f"vectors_{args.suite}.log")
    if args.threads:  # before the first wcodec call: its assignment pool takes the BLAS thread count
        from threadpoolctl import threadpool_limits
        args.limits = threadpool_limits(args.threads)  # kept: stays in force
        if importlib.util.find_spec("faiss") is not None:
            import faiss
            faiss.omp_set_num_threads(args.threads)
    if args.suite != "minilm":
        rows = {"quality": suite_quality, "scale": suite_scale, "dist": suite_dist}[args.suite](args)
        if rows and (args.json or out is not None):
            Path(args.json or out / f"vectors_{args.suite}.json").write_text(json.dumps(rows, indent=1, default=str))
        return 0
    base, queries, label = load(args)
    x = base.astype(np.float32)
    truth = exact_search(x, queries, 10)
    devices = ["cpu"] if args.device == "auto" else [args.device]
    if args.device == "auto":
        try:
            import torch
            if torch.cuda.is_available():
                devices.append("cuda")
        except ImportError:
            pass
    rows = []
    print(f"{label}: {x.shape[0]} x {x.shape[1]}, {len(queries)} queries", flush=True)
    if not args.only_opq:
        anchors_timing(rows, base, x, queries, truth, devices, args.anchors, args.repeat, not args.no_faiss)
        run_wcodec(rows, base, x, queries, truth, devices, args.budgets, args.residual_anchors)
    if not args.no_faiss:
        faiss_rows(rows, x, queries, truth, args.budgets, not args.no_opq, args.only_opq, args.opq_list)
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))
    print(f"\n{label} ({x.shape[0]} x {x.shape[1]}, {len(queries)} queries)")
    print(f"| method | device | MSE / energy | B/vector | recall@10 | wall s | note |\n|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['method']} | {r['device']} | {r['mse']:.4f} | {r['bytes_per_vector']:.2f} | "
              f"{r['recall10']:.3f} | {r['seconds']:.2f} | {r['note']} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
