"""Eager generation, bf16 against keep_compressed fused, alternating in one process: tokens/s at
batch 1 and 16, then the fused model without replayed launches (wcodec.gpu.replay).

Eager generation is bound by host time, and the host's speed drifts between runs by +-20 %
(benchmarks/RESULTS.md), so a sequential table (hf_lowmem.py) cannot resolve a few percent; here
the two models are loaded side by side and timed in alternating rounds. SYNTHETIC weights of
Llama-2-7B width (hf_lowmem.write_synthetic), ``--layers`` deep, greedy ``generate`` of
``--new-tokens`` after a 16-token prompt. Needs a CUDA GPU with room for both models.

    PYTHONPATH=src python3 benchmarks/hf_eager_ab.py --layers 32 --workdir /tmp/hf32
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from hf_lowmem import generate_once, llama7b_config, write_synthetic  # noqa: E402


def generate(model, batch: int, new_tokens: int) -> tuple[float, torch.Tensor]:
    """(tokens/s, the generated ids) of one greedy generate."""
    t, out = generate_once(model, batch, new_tokens)
    return batch * new_tokens / t, out


def rate(model, batch: int, new_tokens: int) -> float:
    return generate(model, batch, new_tokens)[0]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--layers", type=int, default=32)
    ap.add_argument("--workdir", default="/tmp/hf_lowmem", help="reuses the folders hf_lowmem.py left there")
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--new-tokens", type=int, default=32)
    args = ap.parse_args()
    import transformers

    from wcodec.gpu import replay
    from wcodec.hf import WCodecModel, convert_folder

    src, dst = Path(args.workdir) / "bf16", Path(args.workdir) / "wcodec"
    if not (dst / "config.json").exists():
        write_synthetic(src, llama7b_config(args.layers))
        convert_folder(src, dst)
    bf16 = transformers.AutoModelForCausalLM.from_pretrained(str(src), dtype=torch.bfloat16, device_map="cuda").eval()
    fused = WCodecModel.from_pretrained(dst, device="cuda", keep_compressed=True)
    layers = bf16.config.num_hidden_layers
    rows, tokens = [], {}
    for label, batch in (("replayed", 1), ("replayed", 16), ("not replayed", 1)):
        if label == "not replayed":
            replay.ENABLED = False
            for m in fused.modules():
                if "_replays" in m.__dict__:
                    m._replays.entries.clear()
        if batch == 1:
            for _ in range(3):  # the third replays: the first tunes, the second records
                tokens[label] = generate(fused, 1, args.new_tokens)[1]
        rate(bf16, batch, args.new_tokens), rate(fused, batch, args.new_tokens)  # warm-up (tuning, recording)
        pairs = [(rate(bf16, batch, args.new_tokens), rate(fused, batch, args.new_tokens)) for _ in range(args.rounds)]
        for i, (a, b) in enumerate(pairs):
            print(f"# {label} b{batch} round {i}: bf16 {a:.1f} tok/s, fused {b:.1f} tok/s, {b / a:.3f}x", flush=True)
        rows.append((label, batch, statistics.median(a for a, _ in pairs), statistics.median(b for _, b in pairs),
                     statistics.median(b / a for a, b in pairs), min(b / a for a, b in pairs), max(b / a for a, b in pairs)))
    # the replay changes the host's work only: the fused model's tokens must not move
    print(f"\n{torch.cuda.get_device_name()}, {layers} layers of Llama-2-7B width (SYNTHETIC), eager, "
          f"{args.new_tokens} new tokens, median of {args.rounds} alternating rounds; fused greedy tokens "
          f"identical replayed and not: {torch.equal(tokens['replayed'], tokens['not replayed'])}")
    print("| fused launches | batch | bf16 tok/s | fused tok/s | fused/bf16 (median) | min..max |\n|---|---:|---:|---:|---:|---|")
    for label, batch, a, b, r, lo, hi in rows:
        print(f"| {label} | {batch} | {a:.1f} | {b:.1f} | {r:.3f} | {lo:.3f}..{hi:.3f} |")


if __name__ == "__main__":
    main()
