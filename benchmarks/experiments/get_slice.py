"""Partial reads: ``safe_open(...).get_slice(name)[rows]`` against decoding the whole tensor.

    python benchmarks/experiments/get_slice.py              # 4096 x 11008 bf16 (a 7B MLP layer), CPU
    python benchmarks/experiments/get_slice.py --rows 4096 --cols 4096 --dtype fp8

The tensor is Gaussian (std 0.02) rounded to bf16 (or cast to float8_e4m3fn with a per-tensor
scale), written with the default policy (float codec: 256-step chunks of 8192 symbols for a
layer this size). Times are the best of ``--repeat`` runs after a warm-up. verify=True: a fresh
handle per run, so each slice reads the section checksums of the whole tensor (a handle checks
them once per tensor); verify=False: no checksums.
"""

from __future__ import annotations

import argparse
import platform
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "src"))
import wcodec  # noqa: E402


def best(fn, repeat: int) -> float:
    fn()
    t = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        t.append(time.perf_counter() - t0)
    return min(t)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=4096)
    ap.add_argument("--cols", type=int, default=11008)
    ap.add_argument("--dtype", choices=("bf16", "fp8"), default="bf16")
    ap.add_argument("--repeat", type=int, default=5)
    a = ap.parse_args()
    import torch
    w = torch.randn(a.rows, a.cols, generator=torch.Generator().manual_seed(0)) * 0.02
    w = w.to(torch.bfloat16) if a.dtype == "bf16" else (w / (w.abs().max() / 448)).to(torch.float8_e4m3fn)
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "layer.wcodec"
        t0 = time.perf_counter()
        wcodec.torch.save_file({"w": w}, path)
        enc = time.perf_counter() - t0
        rows = []
        for verify in (False, True):
            with wcodec.safe_open(path, framework="pt", verify=verify) as f:
                rec = f.record("w")
                full = best(lambda: f.get_tensor("w"), a.repeat)
                s = f.get_slice("w")
                mid = a.rows // 2
                for label, idx in (("1 row", slice(mid, mid + 1)), ("64 rows", slice(mid, mid + 64)),
                                   (f"{a.rows // 8} rows (1/8)", slice(0, a.rows // 8)),
                                   ("all rows, 128 cols", (slice(None), slice(0, 128)))):
                    assert torch.equal(s[idx].view(torch.uint8) if a.dtype == "fp8" else s[idx],
                                       w[idx].view(torch.uint8) if a.dtype == "fp8" else w[idx])
                    if verify:
                        t = best(lambda: wcodec.safe_open(path, framework="pt").get_slice("w")[idx], a.repeat)
                    else:
                        t = best(lambda: s[idx], a.repeat)
                    rows.append((verify, label, t, full))
        head = rec.params.get("head", rec.params.get("data"))
    print(f"# {platform.machine()}, torch {torch.__version__}, {a.rows}x{a.cols} {a.dtype}: "
          f"{rec.codec} codec, {rec.bits_per_weight:.3f} bits/w, chunk {32 * head['chunk_steps']} symbols, "
          f"{head['chunks_per_table']} chunks/table; encode {enc:.2f} s")
    print("| verify | slice | get_slice ms | get_tensor (full) ms | speed-up |")
    print("|---|---|---:|---:|---:|")
    for verify, label, t, full in rows:
        print(f"| {verify} | {label} | {1e3 * t:.2f} | {1e3 * full:.1f} | {full / t:.1f}x |")


if __name__ == "__main__":
    main()
