"""GPU decode of int8 transform tiles (DCT / ADST, issue 13): the Triton inverse alone and the
whole int8 decode, against the same tensor coded with prediction modes.

Data: SYNTHETIC, a smooth 4096x4096 int8 tensor (sines + noise, as benchmarks/gpu_decode.py's
int8 case). Variants: every tile forced to DCT, every tile forced to ADST, half and half, and
the encoder's own choice with transforms on (``transforms=True``) and off. Each decode is
checked bit-exact against the CPU decoder (output poisoned first) before it is timed; times are
medians of CUDA-event timed back-to-back calls (``gpu_decode.bench``). GB/s = int8 bytes written
/ time. ``--blk`` sweeps the 8x8 blocks per program of the transform kernel.

    PYTHONPATH=src python3 benchmarks/experiments/transform_gpu.py [--size 4096] [--blk 32,64,128]

Prints a table last.
"""

from __future__ import annotations

import argparse
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # the suites: benchmarks/


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--size", type=int, default=4096)
    ap.add_argument("--blk", default="32,64,128")
    a = ap.parse_args()
    import torch
    from gpu_decode import Decoder, bench

    from wcodec.codecs import decode_tensor, encode_tensor
    from wcodec.codecs import transform as T
    from wcodec.codecs.int8 import Int8Codec
    from wcodec.gpu import decode as D

    n = a.size
    yy, xx = np.mgrid[0:n, 0:n]
    x = (np.sin(yy / 37.0) * 60 + np.cos(xx / 23.0) * 50
         + np.random.default_rng(0).integers(-3, 4, (n, n))).astype(np.int8)
    n_tiles = (n // 32) ** 2
    forced = {"all DCT": np.full(n_tiles, T.DCT, np.uint8), "all ADST": np.full(n_tiles, T.ADST, np.uint8),
              "DCT/ADST alternating": (T.DCT + np.arange(n_tiles) % 2).astype(np.uint8)}
    cases = {k: Int8Codec()._pack("I8", x.shape, x.astype(np.int16), 32, 32, m, 12, None, "auto", True)
             for k, m in forced.items()}
    cases["encoder, transforms on"] = encode_tensor(x, "I8", transforms=True)
    cases["encoder, transforms off"] = encode_tensor(x, "I8", transforms=False)
    rows = []
    for name, rec in cases.items():
        modes = rec.sections.get("modes")
        used = np.bincount(modes, minlength=7).tolist() if modes is not None else "all NONE"
        print(f"{name}: {rec.bits_per_weight:.3f} bits/weight, modes {used}", flush=True)
        dec = Decoder([("w", rec)])
        ok = np.array_equal(dec.check()["w"].cpu().numpy(), decode_tensor(rec))
        assert ok, name
        t = bench(dec.run, torch)
        rows.append((name, "whole decode", f"{rec.bits_per_weight:.3f}", f"{t * 1e6:.1f}", f"{n * n / t / 1e9:.0f}"))
        if dec.prep.transform is None:
            continue
        desc, i8 = dec.prep.desc, dec.prep.int8
        dec.prep.desc, dec.prep.int8 = {}, {}
        for blk in [int(b) for b in a.blk.split(",")]:
            D.TRANSFORM_BLK = blk
            t = bench(dec.run, torch)  # the transform launch alone (in place: timing only)
            rows.append((name, f"transform kernel alone, BLK {blk}", "", f"{t * 1e6:.1f}", f"{n * n / t / 1e9:.0f}"))
        D.TRANSFORM_BLK = 64
        dec.prep.desc, dec.prep.int8 = desc, i8
        assert np.array_equal(dec.check()["w"].cpu().numpy(), decode_tensor(rec)), name
    print(f"\n{torch.cuda.get_device_name()}, int8 {n}x{n}, bit-exact everywhere")
    print(f"| case | what | bits/weight | us | GB/s int8 written |\n|---|---|---|---|---|")
    for r in rows:
        print("| " + " | ".join(r) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
