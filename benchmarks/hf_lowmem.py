"""Llama-2-7B-shaped model, SYNTHETIC weights: load time, peak GPU memory and generation speed for
uncompressed bf16 (transformers), wcodec ``from_pretrained`` and wcodec ``keep_compressed=True``.

Weights are synthetic (normal, std 0.02 for matrices, 1.0 for norms, rounded to bf16; not a
trained model), written as one safetensors folder, converted with ``wcodec.hf.convert_folder``
and loaded from the page cache. ``--layers N`` builds a reduced-depth model of 7B width (the
output says so). Prints a table and writes JSON to ``--json``.

    python benchmarks/hf_lowmem.py --layers 8 --workdir /tmp/hf_lowmem --json $OUT/hf_lowmem.json

Peak memory = torch.cuda.max_memory_allocated over load + batch-1 generation (and separately
batch 16), after empty_cache and a reset. Tokens/s = batch * new tokens / wall time of a greedy
``generate`` (prompt 16 tokens, ``--new-tokens`` forced with min_new_tokens), best of two after a warm-up.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import time
from pathlib import Path

import torch


def llama7b_config(layers: int):
    from transformers import LlamaConfig

    return LlamaConfig(hidden_size=4096, intermediate_size=11008, num_hidden_layers=layers,
                       num_attention_heads=32, num_key_value_heads=32, vocab_size=32000,
                       max_position_embeddings=4096, rms_norm_eps=1e-5, tie_word_embeddings=False,
                       architectures=["LlamaForCausalLM"], dtype="bfloat16")


def write_synthetic(folder: Path, config, seed: int = 0) -> float:
    """Synthetic bf16 weights (generated on the GPU for speed) -> folder/model.safetensors.
    Returns bytes written."""
    from safetensors.torch import save_file
    from transformers import LlamaForCausalLM

    folder.mkdir(parents=True, exist_ok=True)
    with torch.device("meta"):
        skeleton = LlamaForCausalLM(config)
    g = torch.Generator(device="cuda").manual_seed(seed)
    sd = {}
    for name, p in skeleton.state_dict().items():
        if p.ndim == 1:  # RMSNorm gains
            sd[name] = torch.ones(p.shape, dtype=torch.bfloat16)
        else:
            sd[name] = (torch.randn(p.shape, generator=g, device="cuda") * 0.02).to(torch.bfloat16).cpu()
    save_file(sd, str(folder / "model.safetensors"), metadata={"format": "pt"})
    config.save_pretrained(folder)
    return sum(t.numel() * 2 for t in sd.values())


def _reset():
    gc.collect()
    torch.cuda.empty_cache()
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()


def _generate_rate(model, batch: int, new_tokens: int) -> tuple[float, torch.Tensor]:
    ids = torch.randint(3, 32000, (batch, 16), generator=torch.Generator().manual_seed(1)).cuda()
    kw = dict(max_new_tokens=new_tokens, min_new_tokens=new_tokens, do_sample=False, pad_token_id=0)
    with torch.inference_mode():
        model.generate(ids, max_new_tokens=2, min_new_tokens=2, do_sample=False, pad_token_id=0)  # warm-up
        best = float("inf")
        for _ in range(2):  # best of two: the first timed run of a process paid one-time costs (measured 9x)
            torch.cuda.synchronize()
            t = time.perf_counter()
            out = model.generate(ids, **kw)
            torch.cuda.synchronize()
            best = min(best, time.perf_counter() - t)
    return batch * new_tokens / best, out


def measure(name: str, load, new_tokens: int) -> dict:
    _reset()
    # First load in this process pays one-time costs (CUDA/cuBLAS handles, Triton kernel
    # compilation or cache load); the second is the steady state from page cache. Both reported.
    times = []
    for _ in range(2):
        model = None
        _reset()
        t = time.perf_counter()
        model = load()
        torch.cuda.synchronize()
        times.append(time.perf_counter() - t)
    row = {"variant": name, "load_first_s": times[0], "load_s": times[1],
           "mem_after_load_gb": torch.cuda.memory_allocated() / 1e9}
    row["tok_s_b1"], out = _generate_rate(model, 1, new_tokens)
    row["peak_b1_gb"] = torch.cuda.max_memory_allocated() / 1e9
    torch.cuda.reset_peak_memory_stats()
    row["tok_s_b16"], _ = _generate_rate(model, 16, new_tokens)
    row["peak_b16_gb"] = torch.cuda.max_memory_allocated() / 1e9
    with torch.inference_mode():
        ids = torch.arange(3, 35, device="cuda")[None]
        row["_logits"] = model(ids).logits[0, -1].float().cpu()
    row["_tokens"] = out.cpu()
    del model
    return row


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--layers", type=int, default=32, help="decoder layers (32 = Llama-2-7B; fewer: reduced depth)")
    ap.add_argument("--workdir", default="/tmp/hf_lowmem")
    ap.add_argument("--new-tokens", type=int, default=32)
    ap.add_argument("--json", default=None)
    args = ap.parse_args(argv)

    import transformers

    from wcodec.hf import WCodecModel, convert_folder

    work = Path(args.workdir)
    src, dst = work / "bf16", work / "wcodec"
    cfg = llama7b_config(args.layers)
    t = time.perf_counter()
    nbytes = write_synthetic(src, cfg)
    t_write = time.perf_counter() - t
    t = time.perf_counter()
    convert_folder(src, dst)
    t_enc = time.perf_counter() - t
    wc_bytes = sum(p.stat().st_size for p in dst.glob("*.wcodec"))
    depth = "full depth (Llama-2-7B)" if args.layers == 32 else f"REDUCED DEPTH: {args.layers} of 32 layers"
    print(f"# SYNTHETIC weights, Llama-2-7B width, {depth}; {torch.cuda.get_device_name()}; "
          f"torch {torch.__version__}, transformers {transformers.__version__}")
    print(f"# bf16 safetensors {nbytes / 1e9:.2f} GB written in {t_write:.1f} s; wcodec {wc_bytes / 1e9:.2f} GB "
          f"({8 * wc_bytes / (nbytes / 2):.2f} bits/weight) encoded in {t_enc:.1f} s")

    def load_bf16():
        kw = {"device_map": "cuda"}
        try:
            import accelerate  # noqa: F401
        except ImportError:
            kw = {}
        m = transformers.AutoModelForCausalLM.from_pretrained(str(src), dtype=torch.bfloat16, **kw)
        return m.cuda().eval()

    rows = [measure("bf16 (transformers from_pretrained)", load_bf16, args.new_tokens),
            measure("wcodec from_pretrained", lambda: WCodecModel.from_pretrained(dst, device="cuda"),
                    args.new_tokens),
            measure("wcodec keep_compressed=True",
                    lambda: WCodecModel.from_pretrained(dst, device="cuda", keep_compressed=True),
                    args.new_tokens)]
    base = rows[0]
    print(f"\n| variant | load s (2nd) | load s (1st in process) | GPU mem after load GB | peak b1 GB | peak/bf16 | tok/s b1 | vs bf16 | "
          f"tok/s b16 | peak b16 GB | same logits | same tokens |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|---|")
    for r in rows:
        r["same_logits"] = bool(torch.equal(r.pop("_logits"), base["_logits"])) if r is not base else True
        r["same_tokens"] = bool(torch.equal(r.pop("_tokens"), base["_tokens"])) if r is not base else True
        print(f"| {r['variant']} | {r['load_s']:.2f} | {r['load_first_s']:.2f} | {r['mem_after_load_gb']:.2f} | {r['peak_b1_gb']:.2f} | "
              f"{r['peak_b1_gb'] / base['peak_b1_gb']:.3f} | {r['tok_s_b1']:.1f} | "
              f"{r['tok_s_b1'] / base['tok_s_b1']:.3f} | {r['tok_s_b16']:.1f} | {r['peak_b16_gb']:.2f} | "
              f"{r['same_logits']} | {r['same_tokens']} |")
    base.pop("_logits", None), base.pop("_tokens", None)
    if args.json:
        Path(args.json).write_text(json.dumps({"layers": args.layers, "synthetic": True,
                                               "device": torch.cuda.get_device_name(),
                                               "encode_s": t_enc, "bf16_bytes": nbytes,
                                               "wcodec_bytes": wc_bytes, "rows": rows}, indent=2))
    return 0


if __name__ == "__main__":
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    raise SystemExit(main())
