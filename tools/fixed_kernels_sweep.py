#!/usr/bin/env python
"""Mutated codec "fixed" records through the fused kernels, compiled on a GPU (or the Triton
interpreter on the CPU): every record the decoder accepts must give the decoder's weights in the
decode, rows, GEMV, tiled (split-K), mma (bf16, 3-16 rows, GPU) and input-gradient kernels
(``tests/fuzz/hostile.check_fixed_kernels``). Needs numpy, torch and triton only.

    PYTHONPATH=src python tools/fixed_kernels_sweep.py --device cuda --cases 2000

Prints the outcome counts and every mismatch; exit status 1 when there is one.
"""

from __future__ import annotations

import argparse
import collections
import os
import random
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "fuzz"))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--cases", type=int, default=500)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    if args.device == "cpu":
        os.environ.setdefault("TRITON_INTERPRET", "1")
    import numpy as np

    import hostile
    from wcodec.errors import CorruptDataError
    counts, bad = collections.Counter(), []
    for i in range(args.seed, args.seed + args.cases):
        rec, desc = hostile.hostile_fixed(random.Random(i))
        try:
            hostile.check_fixed_kernels(rec, np.random.default_rng(i), args.device)
            counts["accepted: kernels agree"] += 1
        except CorruptDataError:
            counts["refused"] += 1
        except hostile.KernelMismatch as e:
            counts["MISMATCH"] += 1
            bad.append(f"case {i}: {desc}: {e}")
    print(dict(counts))
    print("\n".join(bad[:50]))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
