"""Figures behind docs/FORMAT.md "Resource bounds": decoder peak memory per declared output byte,
the largest legitimate ratios, and the cost of reading sections with pread instead of mmap views.

    PYTHONPATH=src python benchmarks/experiments/hostile_bounds.py [--mib 64]

Each decode runs in a fresh process (Linux); peak = VmHWM after the decode (reset through
/proc/self/clear_refs just before) minus VmRSS after reading the record (so the compressed bytes are not counted; numba kernels load from its disk
cache, a few MB). Prints one table.
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


if __name__ == "__main__":
    main()
