"""Benchmark wcodec.vectors against faiss on real MiniLM sentence embeddings.

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
import json
import math
import time
from pathlib import Path

import numpy as np

from wcodec.vectors import AnnealingConfig, compress
from wcodec.vectors.search import exact_search, recall_at_k

DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data"


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
    ap.add_argument("--repeat", type=int, default=1, help="anchor timing runs (interleaved with faiss)")
    ap.add_argument("--json", default=None, help="write the rows here")
    args = ap.parse_args()
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
