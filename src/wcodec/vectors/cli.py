"""``wcodec vectors`` commands: compress, search, bench (registered by wcodec.cli)."""

from __future__ import annotations

import argparse
import sys
import time

import numpy as np


def register(subparsers) -> None:
    """Add the ``vectors`` command group to the main CLI's subparsers."""
    p = subparsers.add_parser("vectors", help="compress and search embedding collections (annealing VLC)")
    sub = p.add_subparsers(dest="vectors_command", required=True)

    c = sub.add_parser("compress", help="compress an [N, d] .npy of embeddings into a .wcodec index")
    c.add_argument("input", help=".npy file, float16/32 [N, d]")
    c.add_argument("output", help="destination .wcodec file")
    c.add_argument("--anchors", type=int, default=1024, help="number of anchors m (default 1024)")
    c.add_argument("--bytes-per-vector", type=float, default=None,
                   help="total budget in bytes per vector for a searchable index (residual codes)")
    c.add_argument("--device", default="cpu", help="cpu (numpy), cuda[:N], or torch-cpu")
    c.add_argument("--iterations", type=int, default=None, help="max annealing iterations")
    c.add_argument("--seed", type=int, default=0)
    c.add_argument("-v", "--verbose", action="store_true", help="print one line per iteration")
    c.set_defaults(func=cmd_compress)

    s = sub.add_parser("search", help="k nearest neighbours of queries in a .wcodec index")
    s.add_argument("index", help=".wcodec file written by 'vectors compress'")
    s.add_argument("queries", help=".npy file, float [nq, d]")
    s.add_argument("-k", type=int, default=10, help="neighbours per query (default 10)")
    s.add_argument("--out", default=None, help="write ids [nq, k] int64 to this .npy")
    s.add_argument("--truth", default=None, help="base vectors .npy: report recall@k against exact search")
    s.set_defaults(func=cmd_search)

    b = sub.add_parser("bench", help="CPU vs GPU annealing on synthetic data (the seeds' test-cuda)")
    b.add_argument("--large", action="store_true", help="10,000 x 128 with 256 anchors (default 1,000 x 64, 32)")
    b.add_argument("--points", default=None, help="bench this .npy instead of synthetic data")
    b.add_argument("--anchors", type=int, default=None, help="anchors for --points (default 1024)")
    b.set_defaults(func=cmd_bench)


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


def cmd_compress(args: argparse.Namespace) -> int:
    from ..errors import WcodecError
    from . import AnnealingConfig, compress

    try:
        points = _load_npy(args.input)
        if args.bytes_per_vector is None:
            print("wcodec vectors: warning: no --bytes-per-vector: the index holds anchors and assignments only, "
                  "so search cannot rank vectors of one anchor (ties, low recall); pass --bytes-per-vector "
                  "(e.g. 32) for a searchable index", file=sys.stderr)
        kw = {} if args.iterations is None else {"max_iterations": args.iterations}
        cfg = AnnealingConfig(m=args.anchors, bytes_per_vector=args.bytes_per_vector, device=args.device,
                              seed=args.seed, verbose=args.verbose, **kw)
        index = compress(np.asarray(points), cfg)
        index.save(args.output)
    except (WcodecError, ValueError, OSError) as e:
        return _fail(str(e))
    parts = index.nbytes_parts()
    print(f"{index.n_vectors} x {index.dim} -> {index.m} anchors in {index.iterations} iterations, "
          f"{index.info['seconds']:.2f} s on {index.info['backend']}")
    print(f"energy {index.energy:.6f}; {index.nbytes} bytes ({index.bytes_per_vector:.2f} B/vector: "
          + ", ".join(f"{k} {v}" for k, v in parts.items())
          + f"); compression ratio {index.compression_ratio:.1f}x")
    if index.codes is not None:
        print(f"residual codes: {index.codes.shape[1]} subspaces; MSE {index.mse(np.asarray(points)):.6f}")
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


def cmd_bench(args: argparse.Namespace) -> int:
    from . import AnnealingConfig, compress

    if args.points:
        points, m = np.load(args.points), args.anchors or 1024
    else:
        n, d, m = (10_000, 128, 256) if args.large else (1_000, 64, 32)
        points = synthetic(n, d, m)
    print(f"{points.shape[0]} points in {points.shape[1]}D with {m} anchors")
    devices = ["cpu"]
    try:
        import torch
        devices.append("cuda" if torch.cuda.is_available() else "torch-cpu")
    except ImportError:
        print("torch not installed: CPU backend only")
    results = {}
    for dev in devices:
        compress(points[: min(len(points), 256)], AnnealingConfig(m=min(m, 8), device=dev, max_iterations=2))  # warm-up
        t0 = time.perf_counter()
        idx = compress(points, AnnealingConfig(m=m, device=dev))
        results[dev] = (time.perf_counter() - t0, idx)
        print(f"{dev:>9}: {results[dev][0]:.3f} s, {idx.iterations} iterations, energy {idx.energy:.6f}, "
              f"compression ratio {idx.compression_ratio:.1f}x")
    if len(results) == 2:
        (t_a, a), (t_b, b) = results.values()
        diff = abs(a.energy - b.energy)
        print(f"speedup {devices[1]} vs cpu: {t_a / t_b:.2f}x; energy difference {diff:.6f} "
              f"({100 * diff / max(a.energy, 1e-30):.2f} %)")
    return 0
