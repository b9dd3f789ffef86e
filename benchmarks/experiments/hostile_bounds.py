"""Figures behind docs/FORMAT.md "Resource bounds": decoder peak memory per declared output byte,
the largest legitimate ratios, the cost of reading sections with pread instead of mmap views,
and the amplification a hostile file can reach (peak memory / file bytes, the densest file each
reader accepts).

    PYTHONPATH=src python benchmarks/experiments/hostile_bounds.py [--mib 64]

Each decode runs in a fresh process (Linux); peak = VmHWM after the decode (reset through
/proc/self/clear_refs just before) minus VmRSS after reading the record (so the compressed bytes are not counted; numba kernels load from its disk
cache, a few MB). Prints two tables. Amplification cases: constant tensors coded with the most
symbols per stored byte the reader takes (rANS chunks of 1024 steps: 248 of the 256 allowed;
fixed: 1.5 bytes per weight whatever the values), whole file size as the denominator; a vectors
index with all N vectors on one anchor written by save_index (248 vectors per plane byte, the
256 allowed), peak of load and of one search.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

import numpy as np

CHILD = r"""
import json, sys, numpy as np
def status(key):
    for line in open("/proc/self/status"):
        if line.startswith(key):
            return int(line.split()[1])
from wcodec.format import Reader
r = Reader(sys.argv[1]); name = sys.argv[2]
from wcodec.codecs import _load_all, decode_tensor
_load_all()
rec = r.record(name)
open("/proc/self/clear_refs", "w").write("5")  # reset the peak RSS (VmHWM), Linux
base = status("VmRSS:")
out = decode_tensor(rec, name)
peak = status("VmHWM:")
print(json.dumps({"out": out.nbytes, "base_kb": base, "peak_kb": peak}))
"""


AMP_CHILD = r"""
import json, sys, numpy as np
def status(key):
    for line in open("/proc/self/status"):
        if line.startswith(key):
            return int(line.split()[1])
path, what = sys.argv[1], sys.argv[2]
if what == "vectors":
    from wcodec.vectors import load
    load(path).search(np.ones((1, 64), np.float32), k=1)  # numba compiled outside the measurement
    base = status("VmRSS:")
    open("/proc/self/clear_refs", "w").write("5")
    idx = load(path)
    load_peak = status("VmHWM:") - base
    open("/proc/self/clear_refs", "w").write("5")
    idx.search(np.ones((1, idx.dim), np.float32), k=1)
    print(json.dumps({"load_kb": load_peak, "search_kb": status("VmHWM:") - base}))
else:
    from wcodec.format import Reader
    from wcodec.codecs import _load_all, decode_tensor
    _load_all()
    r = Reader(path); rec = r.record(what)
    decode_tensor(rec, what)  # compiles the numba kernels (LLVM's memory is not the decoder's)
    base = status("VmRSS:")
    open("/proc/self/clear_refs", "w").write("5")
    decode_tensor(rec, what)
    print(json.dumps({"load_kb": status("VmHWM:") - base}))
"""


def amplification(n: int) -> list:
    """(case, file bytes, decoded bytes, peak bytes) of the densest files each reader accepts."""
    from wcodec.codecs import decode_tensor, encode_tensor
    from wcodec.format import Writer, spec
    from wcodec.vectors import CompressedIndex
    cases = {
        "int8 constant": (np.zeros(n, np.int8).reshape(-1, 4096), "I8", {"chunk_steps": 1024}),
        "int8-quant BF16 constant": (np.full((n // 4096, 4096), 0x3F80, np.uint16), "BF16",
                                     {"mode": "int8", "chunk_steps": 1024}),
        "fp8 constant": (np.zeros((n // 4096, 4096), np.uint8), "F8_E4M3", {"chunk_steps": 1024}),
        "float BF16 constant": (np.zeros((n // 8192, 4096), np.uint16), "BF16", {}),
        "fixed BF16": (np.full((n // 8192, 4096), 0x3F80, np.uint16), "BF16", {"codec": "fixed"}),
    }
    rows = []
    with tempfile.TemporaryDirectory() as d:
        for name, (arr, dt, opts) in cases.items():
            path = os.path.join(d, "a.wcodec")
            rec = encode_tensor(arr, dt, name=name, **opts)
            with Writer(path) as w:
                w.add_record(name, rec, spec.crc32(decode_tensor(rec, name)))
            res = json.loads(subprocess.run([sys.executable, "-c", AMP_CHILD, path, name], capture_output=True,
                                            text=True, check=True).stdout)
            rows.append((name, os.path.getsize(path), rec.raw_nbytes, res["load_kb"] * 1024))
        path = os.path.join(d, "v.wcodec")
        nv = n // 8
        CompressedIndex(np.ones((1, 64), np.float32), np.zeros(nv, np.int64), 0.0, 0).save(path)
        res = json.loads(subprocess.run([sys.executable, "-c", AMP_CHILD, path, "vectors"], capture_output=True,
                                        text=True, check=True).stdout)
        size = os.path.getsize(path)
        rows.append((f"vectors {nv} x 64, load", size, 0, res["load_kb"] * 1024))
        rows.append((f"vectors {nv} x 64, search", size, 0, res["search_kb"] * 1024))
    return rows


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--mib", type=int, default=64, help="decoded size of each test tensor")
    args = ap.parse_args()
    import wcodec
    from wcodec.codecs import encode_tensor
    from wcodec.format import Reader, Writer, spec

    n = args.mib << 20
    rng = np.random.default_rng(0)
    side = int(np.sqrt(n))
    smooth = np.cumsum(rng.integers(-1, 2, (side, side)), axis=1).astype(np.int8)
    w = (rng.standard_normal(n // 4) * 0.02).astype(np.float32)
    cases = {
        "int8 (predicted)": (smooth, "I8", "lossless"),
        "int8 (constant)": (np.zeros(n, np.int8), "I8", "lossless"),
        "int8-quant F32": (w.reshape(-1, 1024), "F32", "int8"),
        "float F32": (w, "F32", "lossless"),
        "float BF16 (constant)": (np.zeros(n // 2, np.uint16), "BF16", "lossless"),
    }
    rows = []
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "b.wcodec")
        from wcodec.codecs import decode_tensor
        with Writer(path) as wr:
            for name, (arr, dt, mode) in cases.items():
                rec = encode_tensor(arr, dt, mode, name)
                crc = spec.crc32(decode_tensor(rec, name) if mode == "int8" else arr)
                wr.add_record(name, rec, crc)
        with Reader(path) as r:
            for name in cases:
                res = json.loads(subprocess.run([sys.executable, "-c", CHILD, path, name], capture_output=True,
                                                text=True, check=True).stdout)
                comp = sum(s for _, s in r.section_spans(name).values())
                rows.append((name, res["out"], comp, (res["peak_kb"] - res["base_kb"]) * 1024 / res["out"]))
            # pread (Reader.record) vs views of the memory map, both with the section crc32s
            big = max(cases, key=lambda k: sum(s for _, s in r.section_spans(k).values()))
            t = time.perf_counter()
            for _ in range(5):
                r.record(big, verify=True)
            t_pread = (time.perf_counter() - t) / 5
            buf = r.buffer()
            t = time.perf_counter()
            for _ in range(5):
                for off, size in r.section_spans(big).values():
                    spec.crc32(np.frombuffer(buf, np.uint8, size, off))
            t_mmap = (time.perf_counter() - t) / 5
            span = r.span(big)
    print(f"wcodec {wcodec.__version__}, {os.cpu_count()} CPUs, decoded tensors of {args.mib} MiB")
    print(f"{'tensor':24s} {'decoded MiB':>11s} {'compressed KiB':>14s} {'ratio':>8s} {'peak/decoded':>12s}")
    for name, out, comp, peak in rows:
        print(f"{name:24s} {out / 2**20:11.1f} {comp / 1024:14.1f} {out / max(comp, 1):8.1f} {peak:12.2f}")
    mib = (span[1] - span[0]) / 2**20
    print(f"record() of '{big}' ({mib:.1f} MiB of sections) with crc32: pread {1e3 * t_pread:.1f} ms, "
          f"mmap views {1e3 * t_mmap:.1f} ms")
    print(f"\nhostile amplification ({args.mib} Mi elements claimed, densest accepted file)")
    print(f"{'case':30s} {'file KiB':>9s} {'decoded MiB':>11s} {'peak MiB':>9s} {'peak/file':>10s}")
    for name, size, out, peak in amplification(n):
        print(f"{name:30s} {size / 1024:9.1f} {out / 2**20:11.1f} {peak / 2**20:9.1f} {peak / size:10.0f}")


if __name__ == "__main__":
    main()
