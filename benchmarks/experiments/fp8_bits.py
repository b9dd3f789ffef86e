"""FP8 lossless size: bits per weight of the fp8 codec beside the raw 8 bits, ZipNN and the
order-0 bounds of the symbol choices (joint byte vs split sign / exponent / mantissa).

    python benchmarks/experiments/fp8_bits.py        # all-MiniLM-L6-v2 + every model in ../shared/models

Tensors: every floating tensor with >= 4096 elements (as benchmarks/codec_cpu.py), cast to FP8
with a per-tensor scale (amax / the format's max finite value, as FP8 checkpoints do); the
float32 scales are kept beside and counted in the wcodec figure (32 bits per tensor).
Columns (bits/weight over all FP8 weights of the model):
  H(byte)     order-0 entropy of the whole byte (the joint symbol the codec codes)
  H(s)+H(e)+H(m)  order-0 entropies of sign, exponent and mantissa coded as separate symbols
  H(e)+1+M    exponent coded, sign and mantissa raw (the float codec's head-only layout)
  1+H(|x|)    sign raw, the 7 other bits one symbol (half the table of the joint byte)
  wcodec      the fp8 codec's actual size (tables, states, offsets, scales included)
  zipnn       ZipNN 0.5 torch FP8 mode (if installed)
"""

from __future__ import annotations

import argparse
import platform
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))
from codec_cpu import load_models  # noqa: E402
from wcodec.codecs import decode_tensor, encode_tensor  # noqa: E402

# torch dtype name, safetensors name, exponent bits, mantissa bits
FORMATS = (("float8_e4m3fn", "F8_E4M3", 4, 3), ("float8_e5m2", "F8_E5M2", 5, 2))


def entropy(counts: np.ndarray) -> float:
    """Total order-0 entropy in bits of a histogram."""
    c = counts[counts > 0].astype(np.float64)
    return float(-(c * np.log2(c / c.sum())).sum())


def cast_fp8(w: np.ndarray, tname: str):
    import torch
    dt = getattr(torch, tname)
    t = torch.from_numpy(w.astype(np.float32))
    amax = float(t.abs().max()) or 1.0
    scale = amax / torch.finfo(dt).max
    return (t / scale).to(dt), np.float32(scale)


def main() -> None:
    try:
        from zipnn import ZipNN
    except ImportError:
        ZipNN = None
    shared = ROOT.parent / "shared"
    models = load_models(shared if shared.exists() else Path("/work/shared"))
    rows = []
    for tname, st, E, M in FORMATS:
        zn = ZipNN(input_format="torch", bytearray_dtype=tname) if ZipNN else None
        for model, tensors in models.items():
            n = joint = split = head = signraw = coded = zbytes = 0
            for name, w in tensors.items():
                q, _scale = cast_fp8(w, tname)
                b = q.view(__import__("torch").uint8).numpy().reshape(-1)
                n += b.size
                joint += entropy(np.bincount(b, minlength=256))
                s, e, m = b >> 7, (b >> M) & ((1 << E) - 1), b & ((1 << M) - 1)
                split += entropy(np.bincount(s)) + entropy(np.bincount(e)) + entropy(np.bincount(m))
                head += entropy(np.bincount(e)) + b.size * (1 + M)
                signraw += b.size + entropy(np.bincount(b & 0x7F))
                rec = encode_tensor(b.reshape(w.shape), st, name=name)
                assert np.array_equal(decode_tensor(rec, name).reshape(-1), b), name
                coded += rec.nbytes + 4  # + the float32 scale kept beside
                if zn is not None:
                    zc = zn.compress(q.contiguous())
                    zbytes += len(zc)
            rows.append((st, model, len(tensors), n, joint / n, split / n, head / n, signraw / n, 8 * coded / n,
                         8 * zbytes / n if zn else float("nan")))
    print(f"# machine: {platform.machine()} {platform.processor() or ''}, python {platform.python_version()}")
    print("| format | model | tensors | weights | raw | H(byte) | H(s)+H(e)+H(m) | H(e)+1+M | 1+H(|x|) | wcodec fp8 | ZipNN |")
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for st, model, k, n, j, sp, h, sr, c, z in rows:
        print(f"| {st} | {model} | {k} | {n} | 8.000 | {j:.3f} | {sp:.3f} | {h:.3f} | {sr:.3f} | {c:.3f} | {z:.3f} |")


if __name__ == "__main__":
    # no options: --help says what it measures, without starting the measurement
    argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter).parse_args()
    main()
