"""``wcodec demo``: compress a real Llama, decode it, and let each copy tell the same story.

The shipped stories260K model is written to .wcodec files losslessly and as int8, read back,
and run greedily from the same prompt with the original, the lossless and the int8 weights.
The lossless story must be token-for-token identical to the original's (the demo exits with
status 1 otherwise); the int8 one shows what lossy quantization costs (SNR, token agreement).
"""

from __future__ import annotations

import argparse
import contextlib
import sys
import tempfile
import textwrap
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from .llama2c import Llama, Tokenizer, generate, load_checkpoint

MODES = ("lossless", "int8")


def add_arguments(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """Add the demo's options (shared by ``wcodec demo`` and ``python -m wcodec.demo.run``)."""
    parser.add_argument("--steps", type=int, default=200,
                        help="tokens to generate per story (default 200; stops early at the end "
                             "of a story)")
    parser.add_argument("--seed", type=int, default=0,
                        help="sampling seed, used when --temperature > 0 (default 0)")
    parser.add_argument("--prompt", default="",
                        help='text the stories start with (default "": start from BOS)')
    parser.add_argument("--temperature", type=float, default=0.0,
                        help="0 = greedy, deterministic (default); > 0 samples with --seed")
    parser.add_argument("--out-dir", dest="out_dir", default=None,
                        help="keep the .wcodec files here (default: a temporary folder)")
    return parser


@dataclass
class Variant:
    """One copy of the weights and what it produced."""

    name: str
    tensors: dict
    file_bytes: int = 0  # size of the .wcodec file (0 for the original)
    encode_s: float = float("nan")
    decode_s: float = float("nan")
    tokens: list = field(default_factory=list)
    gen_s: float = 0.0


def _roundtrip(tensors: dict, mode: str, path: Path) -> Variant:
    """Write tensors to a .wcodec file in this mode and read them back, timing both."""
    from wcodec.numpy import load_file, save_file  # imported when used: keeps imports light

    t0 = time.perf_counter()
    save_file(tensors, str(path), mode=mode)
    t1 = time.perf_counter()
    decoded = load_file(str(path))
    t2 = time.perf_counter()
    return Variant(mode, decoded, path.stat().st_size, t1 - t0, t2 - t1)


def _warm_up(folder: Path) -> float:
    """Encode and decode a small tensor in every mode, so that first calls (numba compilation or
    its cache load, without the C extension) are not counted in the timings. Returns seconds."""
    t0 = time.perf_counter()
    probe = {"w": np.random.default_rng(0).standard_normal((64, 64)).astype(np.float32)}
    for mode in MODES:
        _roundtrip(probe, mode, folder / f"warmup-{mode}.wcodec")
        (folder / f"warmup-{mode}.wcodec").unlink()
    return time.perf_counter() - t0


def bit_identical(a: dict, b: dict) -> bool:
    """Same names, shapes, dtypes and bits (NaN- and -0.0-safe)."""
    return a.keys() == b.keys() and all(
        a[k].dtype == b[k].dtype and a[k].shape == b[k].shape
        and a[k].tobytes() == np.ascontiguousarray(b[k]).tobytes() for k in a)


def snr_db(ref: dict, test: dict) -> tuple[float, float]:
    """(SNR in dB, max abs error) of test vs ref over all tensors together."""
    signal = noise = 0.0
    max_err = 0.0
    for k, r in ref.items():
        r64, d = r.astype(np.float64), test[k].astype(np.float64) - r.astype(np.float64)
        signal += float(np.sum(r64 * r64))
        noise += float(np.sum(d * d))
        max_err = max(max_err, float(np.max(np.abs(d), initial=0.0)))
    return (float("inf") if noise == 0 else 10.0 * np.log10(signal / noise)), max_err


def agreement(ref: list, other: list) -> tuple[int, int, int | None]:
    """(positions that agree, positions compared = longer length, first divergence or None)."""
    n = max(len(ref), len(other))
    same = sum(a == b for a, b in zip(ref, other))
    first = next((i for i in range(n) if i >= min(len(ref), len(other)) or ref[i] != other[i]),
                 None)
    return same, n, first


def _print_story(out, variant: Variant, text: str) -> None:
    out(f"\n--- story from the {variant.name} weights ({len(variant.tokens)} tokens) ---")
    for para in text.strip("\n").split("\n"):
        out(textwrap.fill(para, width=96) if para else "")


def _print_table(out, variants: list[Variant], n_weights: int) -> None:
    head = (f"{'weights':<15}{'bytes':>12}{'bits/weight':>13}{'ratio':>8}"
            f"{'encode s':>10}{'decode s':>10}{'tokens/s':>10}")
    out("\n" + head + "\n" + "-" * len(head))
    base = n_weights * 4
    for v in variants:
        size = v.file_bytes or base
        enc = "-" if v.name == "original fp32" else f"{v.encode_s:.3f}"
        dec = "-" if v.name == "original fp32" else f"{v.decode_s:.3f}"
        rate = len(v.tokens) / v.gen_s if v.gen_s > 0 else float("nan")
        out(f"{v.name:<15}{size:>12,}{8 * size / n_weights:>13.2f}{base / size:>7.2f}x"
            f"{enc:>10}{dec:>10}{rate:>10.0f}")


def run_demo(steps: int = 200, seed: int = 0, prompt: str = "", out_dir: str | None = None,
             temperature: float = 0.0, out=print) -> dict:
    """Run the demo, printing through ``out``. Returns a summary dict (tokens per variant,
    ``lossless_identical``, ``int8_snr_db``, ``int8_agreement``, sizes, timings)."""
    t_start = time.perf_counter()
    config, tensors = load_checkpoint()
    tok = Tokenizer.load()
    prompt_ids = tok.encode(prompt)
    if steps < 0 or len(prompt_ids) >= config.seq_len:
        raise ValueError(f"need steps >= 0 and a prompt under {config.seq_len} tokens")
    n_weights = sum(int(t.size) for t in tensors.values())
    how = "greedy" if temperature <= 0 else f"temperature {temperature}, top-p 0.9, seed {seed}"
    out(f"wcodec demo: stories260K (Llama-2 architecture, {n_weights:,} fp32 weights in "
        f"{len(tensors)} tensors; MIT, karpathy/tinyllamas)")
    out(f"generating up to {steps} tokens, {how}, prompt {prompt!r}")

    keep = contextlib.nullcontext(out_dir) if out_dir else \
        tempfile.TemporaryDirectory(prefix="wcodec-demo-")
    with keep as folder:
        folder = Path(folder)
        folder.mkdir(parents=True, exist_ok=True)
        warm_s = _warm_up(folder)
        variants = [Variant("original fp32", tensors)]
        variants += [_roundtrip(tensors, mode, folder / f"stories260K.{mode}.wcodec")
                     for mode in MODES]
        for v in variants:
            model = Llama(config, v.tensors)
            t0 = time.perf_counter()
            v.tokens = generate(model, prompt_ids, steps, temperature=temperature, seed=seed)
            v.gen_s = time.perf_counter() - t0
            _print_story(out, v, tok.decode(prompt_ids + v.tokens))

    original, lossless, int8 = variants
    _print_table(out, variants, n_weights)
    weights_same = bit_identical(original.tensors, lossless.tensors)
    identical = lossless.tokens == original.tokens
    snr, max_err = snr_db(original.tensors, int8.tensors)
    same, n, first = agreement(original.tokens, int8.tokens)
    out("")
    out(f"lossless: weights {'bit-identical' if weights_same else 'DIFFERENT'}; story "
        + (f"token-for-token IDENTICAL ({len(original.tokens)} of {len(original.tokens)} tokens)"
           if identical else "NOT identical: this is a bug"))
    out(f"int8:     SNR {snr:.1f} dB vs the original weights (max abs error {max_err:.2e});\n"
        f"          story tokens agree at {same} of {n} positions ({same / max(n, 1):.0%})"
        + ("" if first is None else f", first difference at token {first}"))
    if out_dir:
        out(f"files:    {Path(out_dir) / 'stories260K.{lossless,int8}.wcodec'}")
    total = time.perf_counter() - t_start
    from wcodec import native

    kernels = native.path()
    why = "first calls" if native.available() else "numba compile or cache load"
    out(f"total {total:.1f} s (of which {warm_s:.1f} s warm-up: {why}; kernels {kernels})")
    return {"tokens": {v.name: v.tokens for v in variants}, "lossless_identical": identical,
            "lossless_bit_identical": weights_same, "int8_snr_db": snr,
            "int8_max_abs_error": max_err, "int8_agreement": same / max(n, 1),
            "file_bytes": {v.name: v.file_bytes for v in variants[1:]},
            "seconds": total}


def main(args: argparse.Namespace | None = None) -> int:
    """Entry point of ``wcodec demo``. args: Namespace with steps, seed, prompt (temperature,
    out_dir optional). Returns 0; exits with status 1 if the lossless story differs."""
    if args is None:
        args = add_arguments(argparse.ArgumentParser(prog="wcodec demo")).parse_args()
    summary = run_demo(steps=args.steps, seed=args.seed, prompt=args.prompt or "",
                       out_dir=getattr(args, "out_dir", None),
                       temperature=getattr(args, "temperature", 0.0))
    if not (summary["lossless_identical"] and summary["lossless_bit_identical"]):
        raise SystemExit(1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
