"""Where F32 lossless bits go: the float codec's sections (format versions 1 and 2) beside the
order-0 floors of what they code, tensor group by tensor group.

    python benchmarks/experiments/fp32_bits.py            # all-MiniLM-L6-v2
    python benchmarks/experiments/fp32_bits.py --shared   # + every model in ../shared/models

Tensors: every F32 tensor with >= 4096 elements (as benchmarks/codec_cpu.py), grouped by shape
and by whether version 1 codes a low byte plane.
All figures are bits per weight over the group. Columns:
  head / tail / low     v1 sections: the head plane (words, states, tables, offsets), the raw
                        tail (sign + mantissa bits below the head), the two low byte planes
  low v2                the low 16 bits in a version-2 record (the joint plane where it pays)
  top floor             min over head_bits j of H(exponent, j mantissa bits) + 32 bits per
                        head value + the raw bits: what an order-0 head + raw tail can reach
  H1+H0 / H16 / H16 MM  order-0 entropies of the low 16 bits per tensor: the two bytes apart,
                        the 16-bit symbol (plug-in), the same with the Miller-Madow correction
  H16 noise             plug-in H16 of as many uniform random 16-bit values: the plug-in's bias
  e|prev / s|prev       what the previous weight's exponent / sign as context would save
  row classes           what a head with K contexts would save, the rows split into K quantile
                        classes of their RMS (best K of 2, 4, 8; tables per class and log2 K
                        bits per row counted; 0 where no K pays)
  col classes           the same with the columns' RMS
  row x col             K of 4-32 quantile classes of the predicted scale log2(row RMS) + log2(column
                        RMS), 8 bits per row and column counted; best of the three: per tensor
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))
from codec_cpu import load_models  # noqa: E402
from wcodec.codecs import encode_tensor  # noqa: E402


def entropy(counts: np.ndarray) -> float:
    """Total order-0 entropy in bits of a histogram."""
    c = counts[counts > 0].astype(np.float64)
    return float(-(c * np.log2(c / c.sum())).sum())


def conditional(ctx: np.ndarray, sym: np.ndarray, k: int) -> float:
    """Total bits of H(sym | ctx), both in [0, k)."""
    return entropy(np.bincount(ctx * k + sym, minlength=k * k)) - entropy(np.bincount(ctx, minlength=k))


def _classes_cost(em: np.ndarray, ctx: np.ndarray, K: int) -> float:
    """Total bits of the head + tail with one order-0 table per context class (32 bits per table
    entry, head_bits chosen per tensor as the codec does)."""
    return min(sum(entropy(c := np.bincount(em[ctx == i] >> (7 - j))) + 32 * np.count_nonzero(c) for i in range(K))
               + em.size * (8 - j) for j in range(5))


def quantile_classes(x: np.ndarray, K: int) -> np.ndarray:
    return np.searchsorted(np.quantile(x, np.linspace(0, 1, K + 1)[1:-1]), x)


def row_classes(a: np.ndarray, em: np.ndarray, K: int) -> float:
    """Total bits of the head + tail with the rows of 2-D ``a`` in K RMS-quantile classes, one
    order-0 table per class (log2 K bits per row counted)."""
    cls = quantile_classes(np.sqrt((a.astype(np.float64) ** 2).mean(axis=1)), K)
    return _classes_cost(em, np.repeat(cls, a.shape[1]), K) + a.shape[0] * np.log2(K)


def col_classes(a: np.ndarray, em: np.ndarray, K: int) -> float:
    """row_classes with the columns' RMS instead (log2 K bits per column counted)."""
    cls = quantile_classes(np.sqrt((a.astype(np.float64) ** 2).mean(axis=0)), K)
    return _classes_cost(em, np.tile(cls, a.shape[0]), K) + a.shape[1] * np.log2(K)


def scale_classes(a: np.ndarray, em: np.ndarray, K: int) -> float:
    """The weights in K quantile classes of the predicted scale log2(row RMS) + log2(column RMS),
    a table per class; 8 bits per row and per column counted (the scales a decoder would need)."""
    a64 = a.astype(np.float64) ** 2
    p = (np.log2(np.sqrt(a64.mean(axis=1)))[:, None] + np.log2(np.sqrt(a64.mean(axis=0)))[None, :]).ravel()
    return _classes_cost(em, quantile_classes(p, K), K) + 8 * sum(a.shape)


def tensor_terms(a: np.ndarray, rng: np.random.Generator) -> dict:
    """Total bits of each column for one F32 tensor."""
    b = a.reshape(-1).view(np.uint32)
    n = b.size
    r1, r2 = encode_tensor(a, "F32"), encode_tensor(a, "F32", low_joint=True)
    s1 = {k: 8 * v.nbytes for k, v in r1.sections.items()}
    t = {"n": n, "tail": s1["tail"], "low": sum(v for k, v in s1.items() if k.startswith("low")),
         "low v2": sum(8 * v.nbytes for k, v in r2.sections.items() if k.startswith("low")), "joint": "low_joint" in r2.params}
    for part in ("words", "states", "offsets"):
        t[f"head {part}"] = s1.get(f"head.{part}", 0)
    t["head tables"] = sum(v for k, v in s1.items() if k.startswith("head.")) - sum(t[f"head {p}"] for p in ("words", "states", "offsets"))
    em = ((b >> 16) & 0x7FFF).astype(np.int64)  # exponent + the top 7 mantissa bits
    t["top floor"] = min(entropy(h := np.bincount(em >> (7 - j))) + 32 * np.count_nonzero(h) + n * (8 - j) for j in range(5))
    t["row classes"] = min([0.0] + [row_classes(a, em, K) - t["top floor"] for K in (2, 4, 8)]) if a.ndim == 2 else 0.0
    t["col classes"] = min([0.0] + [col_classes(a, em, K) - t["top floor"] for K in (2, 4, 8)]) if a.ndim == 2 else 0.0
    t["row x col"] = min([0.0] + [scale_classes(a, em, K) - t["top floor"] for K in (4, 8, 16, 32)]) if a.ndim == 2 else 0.0
    t["best of the three"] = min(t["row classes"], t["col classes"], t["row x col"])
    lo = (b & 0xFFFF).astype(np.int64)
    c16 = np.bincount(lo, minlength=1 << 16)
    t["H1+H0"] = entropy(np.bincount(lo >> 8, minlength=256)) + entropy(np.bincount(lo & 255, minlength=256))
    t["H16"] = entropy(c16)
    t["H16 MM"] = t["H16"] + (np.count_nonzero(c16) - 1) / (2 * np.log(2))
    t["H16 noise"] = entropy(np.bincount(rng.integers(0, 1 << 16, n), minlength=1 << 16))
    e, s = ((b >> 23) & 255).astype(np.int64), (b >> 31).astype(np.int64)
    t["e|prev"] = entropy(np.bincount(e, minlength=256)) - conditional(e[:-1], e[1:], 256)
    t["s|prev"] = entropy(np.bincount(s, minlength=2)) - conditional(s[:-1], s[1:], 2)
    return t


COLUMNS = ("head words", "head states", "head tables", "head offsets", "tail", "low", "low v2", "top floor",
           "H1+H0", "H16", "H16 MM", "H16 noise", "e|prev", "s|prev", "row classes", "col classes", "row x col",
           "best of the three")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--shared", type=Path, default=None, help="also the models under SHARED/models (../shared)")
    args = ap.parse_args()
    models = load_models(args.shared or ROOT.parent / "shared", minilm_only=args.shared is None)
    rng = np.random.default_rng(0)
    for model, tensors in models.items():
        groups: dict = {}
        for name, a in tensors.items():
            t = tensor_terms(a, rng)
            groups.setdefault((a.shape, t["low"] < 16 * t["n"]), []).append(t)
        print(f"\n{model}: bits/weight per group of tensors of one shape (and v1 low planes raw or coded)\n")
        print("| shape | tensors | joint taken | " + " | ".join(COLUMNS) + " | v1 | v2 |")
        print("|---|---:|---:|" + "---:|" * (len(COLUMNS) + 2))
        total = {c: 0.0 for c in COLUMNS + ("n", "v1", "v2")}
        for (shape, coded), ts in sorted(groups.items(), key=lambda kv: -sum(t["n"] for t in kv[1])):
            n = sum(t["n"] for t in ts)
            row = {c: sum(t[c] for t in ts) for c in COLUMNS}
            row["v1"] = sum(row[c] for c in COLUMNS[:6])
            row["v2"] = row["v1"] - row["low"] + row["low v2"]
            for c in row:
                total[c] += row[c]
            total["n"] += n
            print(f"| {list(shape)}{', low coded' if coded else ''} | {len(ts)} | {sum(t['joint'] for t in ts)} | "
                  + " | ".join(f"{row[c] / n:.4f}" for c in COLUMNS + ("v1", "v2")) + " |")
        print(f"| all | {len(tensors)} | | " + " | ".join(f"{total[c] / total['n']:.4f}" for c in COLUMNS + ("v1", "v2"))
              + " |")


if __name__ == "__main__":
    main()
