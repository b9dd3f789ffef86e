"""First runs on a fresh install (issue 15): wall seconds of `wcodec demo`, `encode` and `verify`
with empty numba and bytecode caches, then warm; and the int8 intra prediction kernels (C vs
numba, after compilation) on one 4096x4096 int8 matrix.

    PYTHONPATH=src python benchmarks/experiments/first_run.py [--repeat 3]

Each command runs in a fresh interpreter; "fresh" points NUMBA_CACHE_DIR and PYTHONPYCACHEPREFIX
at empty folders (what a new install has), "warm" reuses them. Prints the load average, since
this machine is shared.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

SRC = Path(__file__).resolve().parents[2] / "src"


def _timed(args: list[str], env: dict) -> float:
    t0 = time.perf_counter()
    r = subprocess.run([sys.executable, "-m", "wcodec.cli", *args], env=env, capture_output=True, text=True)
    if r.returncode:
        raise SystemExit(f"wcodec {' '.join(args)} failed:\n{r.stderr[-2000:]}")
    return time.perf_counter() - t0


def commands(tmp: Path, repeat: int, native: bool) -> list[tuple[str, float, float]]:
    from safetensors.numpy import save_file

    rng = np.random.default_rng(0)
    src = tmp / "m.safetensors"
    save_file({"w": rng.standard_normal((1024, 1024)).astype(np.float32),
               "q": np.add.outer(np.arange(512), np.arange(256)).astype(np.int8)}, str(src))
    cmds = {"demo": ["demo"], "encode": ["encode", str(src), str(tmp / "m.wcodec"), "--force", "-q"],
            "encode int8": ["encode", str(src), str(tmp / "q.wcodec"), "--mode", "int8", "--force", "-q"],
            "verify int8": ["verify", str(tmp / "q.wcodec")]}
    rows = []
    for name, args in cmds.items():
        fresh, warm = [], []
        for _ in range(repeat):
            caches = Path(tempfile.mkdtemp(dir=tmp))
            env = {**os.environ, "PYTHONPATH": str(SRC), "NUMBA_CACHE_DIR": str(caches / "numba"),
                   "PYTHONPYCACHEPREFIX": str(caches / "pyc"), "WCODEC_NATIVE": "1" if native else "0"}
            fresh.append(_timed(args, env))
            warm.append(_timed(args, env))
        rows.append((name, min(fresh), min(warm)))
    return rows


def kernels(repeat: int) -> list[tuple[str, float, float]]:
    from wcodec import native
    from wcodec.codecs import _predict as P

    rng = np.random.default_rng(1)
    x = (np.add.outer(np.arange(4096), np.arange(4096)) // 9 + rng.integers(-4, 5, (4096, 4096))).astype(np.int8)
    x16 = x.astype(np.int16)
    modes = rng.integers(0, P.N_MODES, P._n_tiles(4096, 4096, 32, 32)).astype(np.uint8)
    cost = np.linspace(2, 12, 256)
    n = x.size
    res = P.residuals(x16, 32, 32, modes, size=n, backend="numba")
    calls = {"mode_costs": lambda b: P.mode_costs(x16, 32, 32, cost, size=5 * n, backend=b),
             "residuals": lambda b: P.residuals(x16, 32, 32, modes, size=n, backend=b),
             "reconstruct": lambda b: P.reconstruct(res, 4096, 4096, 32, 32, modes, True, size=n, backend=b)}
    rows = []
    for name, fn in calls.items():
        best = {}
        for b in (["native"] if native.available() else []) + ["numba"]:
            fn(b)  # compile / first call
            ts = []
            for _ in range(repeat):
                t0 = time.perf_counter()
                fn(b)
                ts.append(time.perf_counter() - t0)
            best[b] = min(ts)
        rows.append((name, best.get("native", float("nan")), best["numba"]))
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    load = os.getloadavg()[0]
    from wcodec import native

    with tempfile.TemporaryDirectory(prefix="wcodec-first-run-") as tmp:
        rows = [("C extension", *r) for r in commands(Path(tmp), args.repeat, True)] if native.available() else []
        rows += [("numba only", *r) for r in commands(Path(tmp), 1, False)]
    krows = kernels(args.repeat)
    print(f"\nload average {load:.2f} at start, {os.getloadavg()[0]:.2f} at end; {os.cpu_count()} CPUs; "
          f"kernels {native.path()}, {native.threads()} threads")
    print("| path | command | fresh s | warm s |\n|---|---|---:|---:|")
    for path, name, fresh, warm in rows:
        print(f"| {path} | {name} | {fresh:.2f} | {warm:.2f} |")
    print("\nint8 intra prediction, 4096x4096, 32x32 tiles, ms (best of repeats, after compile)")
    print("| kernel | C | numba |\n|---|---:|---:|")
    for name, c, nb in krows:
        print(f"| {name} | {c * 1e3:.1f} | {nb * 1e3:.1f} |")


if __name__ == "__main__":
    main()
