"""``wcodec vectors`` commands: compress, search, bench (registered by wcodec.cli)."""

from __future__ import annotations

import argparse
import sys
import time

import numpy as np


def register(subparsers) -> None:
    """Add the ``vectors`` command group to the main CLI's subparsers."""
    p = subparsers.add_parser("vectors", help="compress and search embedding collections (annealing VLC)",
                              description="compress and search embedding collections (annealing VLC)")
    sub = p.add_subparsers(dest="vectors_command", metavar="{compress,search,bench}")

    def usage(args) -> int:  # `wcodec vectors` alone: the commands, not argparse's dest name
        p.print_usage(sys.stderr)
        print("wcodec vectors: error: choose a command: compress, search or bench (wcodec vectors --help)",
              file=sys.stderr)
        return 2

    p.set_defaults(func=usage)

    c = sub.add_parser("compress", help="compress an [N, d] .npy of embeddings into a .wcodec index")
    c.add_argument("input", help=".npy file, float16/32 [N, d]")
    c.add_argument("output", help="destination .wcodec file")
    c.add_argument("--anchors", type=int, default=None,
                   help="number of anchors m (default 1024; with --bytes-per-vector, the largest power of two "
                        "whose float16 anchors take at most a quarter of the budget, 16 to 1024)")
    c.add_argument("--bytes-per-vector", type=float, default=None,
                   help="total budget in bytes per vector for a searchable index (residual codes)")
    c.add_argument("--device", default="cpu", help="cpu (numpy), cuda[:N], or torch-cpu")
    c.add_argument("--iterations", type=int, default=None, help="max annealing iterations")
    c.add_argument("--seed", type=int, default=0)
    c.add_argument("-v", "--verbose", action="store_true", help="print one line per iteration")
    c.add_argument("-f", "--force", action="store_true", help="overwrite an existing output")
    c.add_argument("-q", "--quiet", action="store_true", help="no progress bar")
    c.add_argument("--stream", action="store_true",
                   help="points larger than memory: anneal a sample, then Lloyd passes over the memory-mapped "
                        ".npy in blocks (pinned batches on the GPU); anchors and assignments only")
    c.set_defaults(func=cmd_compress)

    s = sub.add_parser("search", help="k nearest neighbours of queries in a .wcodec index")
    s.add_argument("index", help=".wcodec file written by 'vectors compress'")
    s.add_argument("queries", help=".npy file, float [nq, d]")
    s.add_argument("-k", type=int, default=10, help="neighbours per query (default 10)")
    s.add_argument("--out", default=None, help="write ids [nq, k] int64 to this .npy")
    s.add_argument("--truth", default=None, help="base vectors .npy: report recall@k against exact search")
    s.set_defaults(func=cmd_search)

    b = sub.add_parser("bench", aliases=["test-cuda"],
                       help="the seeds' harness: CPU (numpy) vs GPU (torch CUDA) annealing on clustered data",
                       description="the seeds' harness (also named test-cuda): CPU (numpy) vs GPU (torch CUDA) "
                                   "annealing on clustered data")
    b.add_argument("--large", action="store_true",
                   help="add 100,000 x 128 with 1024 anchors and, with CUDA, 1,000,000 x 128 with 2048")
    b.add_argument("--points", default=None, help="run on this .npy instead of synthetic data")
    b.add_argument("--anchors", type=int, default=None, help="anchors for --points (default 1024)")
    b.add_argument("-v", "--verbose", action="store_true", help="print the per-iteration log (T, E, delta_E, changes)")
    b.set_defaults(func=cmd_test_cuda)


#: the seeds' test-cuda shapes (points, dimension, anchors = clusters), and those --large adds
HARNESS_SHAPES = [(1_000, 64, 32), (10_000, 128, 256)]
LARGE_SHAPES = [(100_000, 128, 1024), (1_000_000, 128, 2048)]


def _fail(msg: str) -> int:
    print(f"wcodec vectors: {msg}", file=sys.stderr)
    return 1


def _load_npy(path) -> np.ndarray:
    """A .npy array (memory-mapped); ValueError with a plain message for anything else."""
    with open(path, "rb") as f:
        if f.read(6) != b"\x93NUMPY":
            raise ValueError(f"'{path}' is not a .npy file (save the embeddings with numpy.save)")
    try:
        return np.load(path, mmap_mode="r")
    except ValueError:
        raise ValueError(f"'{path}' holds Python objects, not a numeric [N, d] array") from None


#: share of a --bytes-per-vector budget the float16 anchors may take when --anchors is not given
ANCHOR_SHARE = 0.25


def anchors_for_budget(n: int, d: int, bytes_per_vector: float | None) -> int:
    """Default anchor count: 1024, or with a budget the largest power of two in [16, 1024]
    whose float16 anchors (m * d * 2 bytes) take at most ANCHOR_SHARE of it. With a fixed
    count the anchors eat small budgets: 70K MiniLM vectors at ~20.4 B/vector gave MSE 0.448,
    recall@10 0.348 with m=1024 and 0.368 / 0.489 with m=256 (issue 29)."""
    if bytes_per_vector is None:
        return 1024
    m = 1024
    while m > 16 and m * d * 2 > ANCHOR_SHARE * bytes_per_vector * n:
        m //= 2
    return m


def cmd_compress(args: argparse.Namespace) -> int:
    import os

    from ..errors import WcodecError
    from . import AnnealingConfig, compress

    if args.stream and args.bytes_per_vector is not None:
        return _fail("--stream builds anchors and assignments only: drop --bytes-per-vector")
    try:
        points = _load_npy(args.input)
        if points.ndim != 2:
            return _fail(f"'{args.input}' holds an array of shape {points.shape}, not [N, d] vectors")
        # checked before any work: an index took minutes to build
        if os.path.exists(args.output) and os.path.samefile(args.input, args.output):
            return _fail(f"output '{args.output}' is the input; choose another name")
        if os.path.exists(args.output) and not args.force:
            return _fail(f"output '{args.output}' exists; use --force to overwrite it")
        m = args.anchors if args.anchors is not None else anchors_for_budget(*points.shape, args.bytes_per_vector)
        if args.bytes_per_vector is None:
            print("wcodec vectors: warning: no --bytes-per-vector: the index holds anchors and assignments only, "
                  "so search cannot rank vectors of one anchor (ties, low recall); pass --bytes-per-vector "
                  "(e.g. 32) for a searchable index", file=sys.stderr)
        kw = {} if args.iterations is None else {"max_iterations": args.iterations}
        cfg = AnnealingConfig(m=m, bytes_per_vector=args.bytes_per_vector, device=args.device,
                              seed=args.seed, verbose=args.verbose, progress=not (args.quiet or args.verbose), **kw)
        if args.stream:
            from .stream import compress_stream
            index = compress_stream(args.input, cfg)
        else:
            index = compress(np.asarray(points), cfg)
        index.save(args.output)
    except (WcodecError, ValueError, OSError) as e:
        return _fail(str(e))
    parts = index.nbytes_parts()
    print(f"{index.n_vectors} x {index.dim} -> {index.m} anchors in {index.iterations} iterations, "
          f"{index.info['seconds']:.2f} s on {index.info['backend']}")
    print(f"energy {index.energy:.6f}; {index.nbytes} bytes ({index.bytes_per_vector:.2f} B/vector: "
          + ", ".join(f"{k} {v}" for k, v in parts.items())
          + f"); compression ratio {index.compression_ratio:.1f}x ({index.compression_percent:.2f}% of the original)")
    if index.codes is not None:
        print(f"residual codes: {index.codes.shape[1]} subspaces; MSE {index.mse(np.asarray(points)):.6f}")
    if index.info.get("splits") is not None:
        print(f"{index.info['splits']} split/merge moves accepted, {index.info.get('rejected_moves', 0)} rejected")
    return 0


def cmd_search(args: argparse.Namespace) -> int:
    from ..errors import WcodecError
    from . import load
    from .search import exact_search, recall_at_k

    try:
        index = load(args.index)
        queries = np.load(args.queries).astype(np.float32)
        t0 = time.perf_counter()
        dist, ids = index.search(queries, args.k)
        dt = time.perf_counter() - t0
    except (WcodecError, ValueError, OSError) as e:
        return _fail(str(e))
    print(f"{len(queries)} queries, k={args.k}: {dt:.3f} s ({1e3 * dt / max(len(queries), 1):.3f} ms/query)")
    if args.truth:
        base = np.load(args.truth).astype(np.float32)
        print(f"recall@{args.k}: {recall_at_k(ids, exact_search(base, queries, args.k), args.k):.4f}")
    if args.out:
        np.save(args.out, ids)
    else:
        for i in range(min(len(ids), 5)):
            print(f"query {i}: " + " ".join(f"{j}:{d:.4f}" for j, d in zip(ids[i], dist[i])))
    return 0


def synthetic(n: int, d: int, clusters: int, seed: int = 0) -> np.ndarray:
    """[n, d] float16 points around ``clusters`` Gaussian centres (the seeds' test data)."""
    rng = np.random.default_rng(seed)
    centres = rng.standard_normal((clusters, d)).astype(np.float32)
    pts = centres[rng.integers(0, clusters, n)] + 0.3 * rng.standard_normal((n, d)).astype(np.float32)
    return pts.astype(np.float16)


def _run(points, m: int, device: str, verbose: bool):
    """compress() timed after a small untimed warm-up (numba kernels, CUDA context)."""
    from . import AnnealingConfig, compress

    compress(points[: min(len(points), 256)], AnnealingConfig(m=min(m, 8), device=device, max_iterations=2))
    if device.startswith("cuda"):
        import torch
        torch.cuda.synchronize()
    t0 = time.perf_counter()
    idx = compress(points, AnnealingConfig(m=m, device=device, verbose=verbose))
    return time.perf_counter() - t0, idx


def _report(label: str, seconds: float, idx) -> None:
    print(f"{label}: {seconds:.3f} s, {idx.iterations} iterations, energy {idx.energy:.6f}, "
          f"(k-means|| start {idx.info['seed_seconds']:.3f} s), "
          f"{idx.info['splits']} split/merge moves ({idx.info['rejected_moves']} rejected), "
          f"compression ratio {idx.compression_percent:.2f}% ({idx.compression_ratio:.1f}x)", flush=True)


def cmd_test_cuda(args: argparse.Namespace) -> int:
    """CPU (numpy) vs GPU (torch CUDA) on the seeds' harness shapes: energy difference, speedup.

    Without CUDA, says so and compares with the torch backend on the CPU instead."""
    try:
        import torch
        gpu = "cuda" if torch.cuda.is_available() else "torch-cpu"
    except ImportError:
        torch, gpu = None, None
    if gpu is None:
        print("torch not installed: numpy CPU backend only")
    elif gpu == "torch-cpu":
        print("no CUDA GPU visible to torch: comparing with the torch backend on the CPU instead")
    else:
        print(f"GPU: {torch.cuda.get_device_name(0)}")
    if args.points:
        jobs = [(np.load(args.points), args.anchors or 1024)]
    else:
        shapes = HARNESS_SHAPES + (LARGE_SHAPES if args.large else [])
        jobs = [(shape, shape[2]) for shape in shapes]
    rows = []
    for job, m in jobs:
        if isinstance(job, tuple):
            n, d, _ = job
            if n * m * d > 5e10 and gpu != "cuda":
                print(f"\n{n} x {d} with {m} anchors: skipped (needs CUDA; ~{n * m * d * 30 / 2e10:.0f} s on this CPU)")
                continue
            points = synthetic(n, d, m)
        else:
            points = job
        print(f"\nGenerating {points.shape[0]} points in {points.shape[1]}D with {m} anchors" if isinstance(job, tuple)
              else f"\n{points.shape[0]} points in {points.shape[1]}D with {m} anchors")
        noise = 0.09 * points.shape[1] if isinstance(job, tuple) else float("nan")
        res = {}
        cpu_too = points.shape[0] * m * points.shape[1] <= 5e10 or gpu != "cuda"
        for dev in ([gpu] if gpu else []) + (["cpu"] if cpu_too else []):
            res[dev] = _run(points, m, dev, args.verbose)
            _report(f"{'GPU' if dev == 'cuda' else 'CPU' if dev == 'cpu' else 'torch CPU'} ({dev})", *res[dev])
        if not cpu_too:
            print("CPU run skipped at this size (minutes on the CPU)")
        nan = float("nan")
        t_cpu, cpu = res.get("cpu", (nan, None))
        row = dict(shape=f"{points.shape[0]}x{points.shape[1]}x{m}", cpu_s=t_cpu, cpu_e=cpu.energy if cpu else nan,
                   noise=noise, gpu_s=nan, gpu_e=nan, diff=nan, speedup=nan)
        if gpu:
            t_gpu, g = res[gpu]
            row.update(gpu_s=t_gpu, gpu_e=g.energy)
            if cpu:
                diff = abs(g.energy - cpu.energy)
                row.update(diff=100 * diff / max(cpu.energy, 1e-30), speedup=t_cpu / t_gpu)
                print(f"Comparison: speedup {t_cpu / t_gpu:.2f}x; energy difference {diff:.6f} ({row['diff']:.2f} %)")
        rows.append(row)
    if gpu:
        print(f"\n| shape | CPU s | {gpu} s | speedup | CPU energy | {gpu} energy | difference % | "
              f"{gpu} energy / noise floor |")
        print("|---|---|---|---|---|---|---|---|")
        for r in rows:
            print(f"| {r['shape']} | {r['cpu_s']:.3f} | {r['gpu_s']:.3f} | {r['speedup']:.2f}x | {r['cpu_e']:.4f} | "
                  f"{r['gpu_e']:.4f} | {r['diff']:.2f} | {r['gpu_e'] / r['noise']:.3f} |")
    return 0
