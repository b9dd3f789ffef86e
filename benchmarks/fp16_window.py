"""fp16 exponent-window coverage: how much of a real model, cast to float16, the fixed-rate
layout (codec "fixed") would hold without escapes.

    python benchmarks/fp16_window.py     # all-MiniLM-L6-v2 + every model in ../shared/models

Tensors: every float32 tensor with >= 4096 elements (as benchmarks/codec_cpu.py), cast to
float16 (round to nearest even, as ``tensor.half()``). Columns (% of all weights of the model):
  bf16 hi7      the bf16 layout on the same weights cast to bf16 (the 7-value window of the
                high byte's low 7 bits: 14 exponents), for reference
  fp16 hi7      the same layout, same kernels, on fp16 bits: the high byte's low 7 bits are
                5 exponent bits + the top 2 mantissa bits, so 7 values span under 2 exponents
  fp16 e3       a window of 7 fp16 exponents (a 3-bit offset; the 2 mantissa bits that leave
                the high byte must then be stored apart: 14 bits/weight, another kernel)
  fp16 e4       a window of 15 fp16 exponents (4-bit offset, code 15 = escape)
  sub/inf       fp16 subnormals or zeros from nonzero fp32 weights / overflows to inf
and sizes in bits/weight (32 per escape; the row pointers and padding left out): the fixed layout
for bf16 and fp16 hi7 (12 + escapes), and two fp16 layouts the kernels would need: a 3-bit
exponent offset + sign + a 2-bit mantissa plane + the low byte (14 + escapes of e3) or a 4-bit
offset (15 + escapes of e4). Windows are chosen per tensor (the most values, as
``codecs.fixed.choose_base``).
The last two columns are the real fp16 layout, codec "fixed16" (``wcodec.codecs.fixed16``: the
14-bit layout above, its records' sizes counted whole: padding to 16 columns, row pointers,
escapes): "fixed16 b/w" over all the model's weights, a tensor the codec refuses (it would take
>= 15.5 bits/weight) counted at 16 (kept as fp16); "in fixed16" the share of weights it takes.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))
from codec_cpu import load_models  # noqa: E402


def best_window(counts: np.ndarray, width: int) -> int:
    """The most values any `width` consecutive bins of `counts` hold."""
    c = np.concatenate([[0], np.cumsum(counts, dtype=np.int64)])
    return int((c[width:] - c[:-width]).max())


def tensor_counts(w32: np.ndarray) -> dict:
    h = w32.astype(np.float16).view(np.uint16)
    b = (w32.view(np.uint32) + 0x7FFF + ((w32.view(np.uint32) >> 16) & 1)) >> 16  # RNE to bf16 bits
    exp16 = (h >> 10) & 0x1F
    return {"n": w32.size,
            "bf16 hi7": best_window(np.bincount((b >> 8) & 0x7F, minlength=128), 7),
            "fp16 hi7": best_window(np.bincount((h >> 8) & 0x7F, minlength=128), 7),
            "fp16 e3": best_window(np.bincount(exp16, minlength=32), 7),
            "fp16 e4": best_window(np.bincount(exp16, minlength=32), 15),
            "sub": int(((exp16 == 0) & (w32 != 0)).sum()),
            "inf": int((exp16 == 31).sum() - np.isnan(w32).sum())}


def fixed16_bits(w32: np.ndarray) -> int | None:
    """Stored bits of the tensor cast to fp16 in codec "fixed16", or None where it refuses."""
    from wcodec.codecs import encode_tensor
    from wcodec.errors import UnsupportedError

    try:
        return 8 * encode_tensor(w32.astype(np.float16), "F16", codec="fixed16").nbytes
    except UnsupportedError:
        return None


def main() -> None:
    models = load_models(ROOT.parent / "shared")
    cols = ("bf16 hi7", "fp16 hi7", "fp16 e3", "fp16 e4")
    print(f"{'model':<22}{'weights':>10}" + "".join(f"{c:>11}" for c in cols)
          + f"{'sub/inf':>14}{'bf16 b/w':>10}{'fp16 b/w':>10}{'fp16 14b':>10}{'fp16 15b':>10}"
          + f"{'fixed16 b/w':>13}{'in fixed16':>12}")
    for name, tensors in models.items():
        tot = {"f16 bits": 0, "f16 taken": 0}
        for w in tensors.values():
            for k, v in tensor_counts(w.reshape(-1)).items():
                tot[k] = tot.get(k, 0) + v
            bits = fixed16_bits(w)
            tot["f16 bits"] += 16 * w.size if bits is None else bits
            tot["f16 taken"] += 0 if bits is None else w.size
        n = tot["n"]
        pct = "".join(f"{100 * tot[c] / n:>10.2f}%" for c in cols)
        bpw = lambda c, fixed=12: fixed + 32 * (n - tot[c]) / n  # noqa: E731
        print(f"{name:<22}{n:>10}{pct}{tot['sub']:>8}/{tot['inf']:<5}{bpw('bf16 hi7'):>10.2f}{bpw('fp16 hi7'):>10.2f}"
              f"{bpw('fp16 e3', 14):>10.2f}{bpw('fp16 e4', 15):>10.2f}"
              f"{tot['f16 bits'] / n:>13.2f}{100 * tot['f16 taken'] / n:>11.2f}%")


if __name__ == "__main__":
    main()
