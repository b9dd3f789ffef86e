"""Tensor parallel (issue 28, must-have 4): transformers' ``tp_plan="auto"`` under torchrun, the bf16
model against the same model kept compressed, each rank holding its shards.

Variants, each loaded in turn by every rank (``AutoModelForCausalLM.from_pretrained(folder,
tp_plan="auto")``): bf16 (the safetensors folder), plain_rans (the lossless rANS folder decoded:
each rank decodes the chunks of its shards), fused (``WcodecConfig(keep_compressed=True)`` from a
``--codec fixed`` folder: each rank cuts its shards from the stored records, no decode),
fused_rans (the same from the rANS folder: each shard decoded and encoded on its rank).

Per variant and rank: load time; bytes held for the weights (``wcodec.hf.tp.held_bytes``: the
rank's shards, compressed / dense / just-in-time scratch) and, on CUDA, ``memory_allocated``
after the load and the peak over the timed generation; per decode step time at batch 1 and
``--batch`` = (t(long) - t(short)) / (long - short), best of ``--reps`` greedy generates of
``--short`` and ``--long`` forced tokens after a 16-token prompt (prefill and fixed costs cancel);
bytes decoded for the rank (``wcodec.hf.checkpoint.decoded_bytes``) against the bytes of its
shards; whether its greedy tokens (batch 1, ``--long`` tokens) equal bf16's. SYNTHETIC weights of
Llama-2-7B width (``hf_lowmem.write_synthetic``), ``--layers`` deep, written by rank 0 into
``--work`` (kept: a second run reuses them).

    torchrun --nproc_per_node=2 benchmarks/tp.py --layers 32 --json $OUT/tp.json   # 2 GPUs (NCCL)
    torchrun --nproc_per_node=2 benchmarks/tp.py --quick                          # CPU smoke (gloo)

``--quick``: a 2-layer, 64-wide model on the CPU (gloo), a check of the script, not a measurement.
``--width W --inter I --vocab V``: other shapes on the CPU (decode figures at real tensor sizes).
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
import hf_lowmem  # noqa: E402

VARIANTS = {"bf16": ("st", None), "plain_rans": ("wc", None), "fused": ("fx", True), "fused_rans": ("wc", True)}


def folders(work: Path, config, rank: int) -> dict:
    """{"st", "wc", "fx"}: the synthetic safetensors folder and its lossless / fixed conversions,
    written by rank 0 when missing (the others wait at a barrier)."""
    import torch.distributed as dist

    from wcodec.hf import convert_folder

    out = {k: work / k for k in ("st", "wc", "fx")}
    if rank == 0 and not (out["fx"] / "config.json").exists():
        hf_lowmem.write_synthetic(out["st"], config)
        convert_folder(out["st"], out["wc"], workers=os.cpu_count())
        convert_folder(out["st"], out["fx"], codec="fixed", workers=os.cpu_count())
    dist.barrier()
    return out


def load(folder: Path, keep):
    import transformers

    from wcodec.hf import WcodecConfig

    kw = {} if keep is None else {"quantization_config": WcodecConfig(keep_compressed=keep)}
    return transformers.AutoModelForCausalLM.from_pretrained(str(folder), tp_plan="auto", dtype=torch.bfloat16,
                                                             **kw).eval()


def _sync(dev: torch.device) -> None:
    import torch.distributed as dist

    if dev.type == "cuda":
        torch.cuda.synchronize(dev)
    dist.barrier()


def generate(model, dev, vocab: int, batch: int, new: int) -> tuple[float, torch.Tensor]:
    """(seconds, ids) of one greedy generate of ``new`` forced tokens after a 16-token prompt
    (the same on every rank: a tensor-parallel forward is collective)."""
    ids = torch.randint(3, vocab, (batch, 16), generator=torch.Generator().manual_seed(1)).to(dev)
    with torch.inference_mode():
        _sync(dev)
        t = time.perf_counter()
        out = model.generate(ids, max_new_tokens=new, min_new_tokens=new, do_sample=False, pad_token_id=0)
        _sync(dev)
    return time.perf_counter() - t, out


def step_ms(model, dev, vocab: int, batch: int, short: int, long: int, reps: int) -> tuple[float, torch.Tensor]:
    generate(model, dev, vocab, batch, short)  # warm-up (kernel tuning on a GPU)
    t_short = min(generate(model, dev, vocab, batch, short)[0] for _ in range(reps))
    runs = [generate(model, dev, vocab, batch, long) for _ in range(reps)]
    return (min(t for t, _ in runs) - t_short) / (long - short) * 1e3, runs[0][1].cpu()


def measure(variant: str, paths: dict, dev, args, vocab: int, ref_ids=None) -> dict:
    """One variant on this rank (see the module docstring); ``ref_ids``: bf16's batch-1 tokens."""
    from wcodec.hf.checkpoint import decoded_bytes
    from wcodec.hf.tp import held_bytes

    kind, keep = VARIANTS[variant]
    gc.collect()
    if dev.type == "cuda":
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats(dev)
    base = torch.cuda.memory_allocated(dev) if dev.type == "cuda" else 0
    decoded_bytes(paths[kind], reset=True)
    _sync(dev)
    t = time.perf_counter()
    model = load(paths[kind], keep)
    _sync(dev)
    row = {"variant": variant, "load_s": time.perf_counter() - t, "held": held_bytes(model),
           "decoded": sum(decoded_bytes(paths[kind]).values())}
    if dev.type == "cuda":
        row["allocated"] = torch.cuda.memory_allocated(dev) - base
    for batch in dict.fromkeys((1, args.batch)):
        ms, ids = step_ms(model, dev, vocab, batch, args.short, args.long, args.reps)
        row[f"ms_b{batch}"] = ms
        if batch == 1:
            row["ids"] = ids
            row["same_tokens"] = ref_ids is None or torch.equal(ids, ref_ids)
    if dev.type == "cuda":
        row["peak"] = torch.cuda.max_memory_allocated(dev) - base
    del model
    return row


def config_of(args):
    config = hf_lowmem.llama7b_config(args.layers)
    if args.quick:
        hf_lowmem.shrink(config)
        config.vocab_size = 512
    for attr, value in (("hidden_size", args.width), ("intermediate_size", args.inter), ("vocab_size", args.vocab)):
        if value:
            setattr(config, attr, value)
    config.head_dim = config.hidden_size // config.num_attention_heads  # set at init from the 7B width
    return config


def print_table(rows: list, batch: int) -> None:
    """rows: per variant, the list of every rank's row; bf16's first. Times: the slowest rank's."""
    bf = rows[0]
    mb = lambda x: f"{x / 2**20:.1f}"  # noqa: E731
    slowest = lambda per_rank, k: max(r[k] for r in per_rank)  # noqa: E731
    shards = sum(r["held"]["dense"] for r in bf)  # the ranks' bf16 shards (and replicated tensors)
    batches = dict.fromkeys((1, batch))
    print(f"{'variant':<11} {'load s':>7} {'held MB/rank':>18} {'x bf16':>7} "
          + "".join(f"{f'ms/step b{b}':>11} {'x bf16':>7} " for b in batches)
          + f"{'decoded MB/rank':>16} {'x shards':>9} {'same tokens':>11}")
    for per_rank in rows:
        held = [sum(r["held"].values()) for r in per_rank]
        dec = [r["decoded"] for r in per_rank]
        steps = "".join(f"{slowest(per_rank, f'ms_b{b}'):11.2f} "
                        f"{slowest(per_rank, f'ms_b{b}') / slowest(bf, f'ms_b{b}'):7.3f} " for b in batches)
        print(f"{per_rank[0]['variant']:<11} {slowest(per_rank, 'load_s'):7.2f} {'/'.join(mb(h) for h in held):>18} "
              f"{sum(held) / shards:7.3f} {steps}{'/'.join(mb(d) for d in dec):>16} {sum(dec) / shards:9.3f} "
              f"{str(all(r['same_tokens'] for r in per_rank)):>11}")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--layers", type=int, default=32)
    ap.add_argument("--width", type=int, default=0)
    ap.add_argument("--inter", type=int, default=0)
    ap.add_argument("--vocab", type=int, default=0)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--short", type=int, default=8)
    ap.add_argument("--long", type=int, default=40)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--variants", default=",".join(VARIANTS))
    ap.add_argument("--work", default="/tmp/wcodec-tp-bench")
    ap.add_argument("--json", default=None)
    ap.add_argument("--quick", action="store_true", help="tiny model on the CPU (gloo): a smoke run")
    args = ap.parse_args(argv)
    if args.quick:
        args.short, args.long, args.reps, args.batch = 2, 4, 1, 2
    import torch.distributed as dist

    import wcodec  # noqa: F401  (registers the quantizer)

    cuda = torch.cuda.is_available() and not args.quick
    hf_lowmem.DEV = "cuda" if cuda else "cpu"
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    dev = torch.device("cuda", int(os.environ.get("LOCAL_RANK", 0))) if cuda else torch.device("cpu")
    if cuda:
        torch.cuda.set_device(dev)
    dist.init_process_group("nccl" if cuda else "gloo")
    config = config_of(args)
    work = Path(args.work) / (f"l{config.num_hidden_layers}-h{config.hidden_size}-i{config.intermediate_size}"
                              f"-v{config.vocab_size}")
    paths = folders(work, config, rank)
    rows, ref_ids = [], None
    for variant in ["bf16", *[v for v in args.variants.split(",") if v != "bf16"]]:
        row = measure(variant, paths, dev, args, config.vocab_size, ref_ids)
        ref_ids = row.pop("ids") if variant == "bf16" else ref_ids
        row.pop("ids", None)
        gathered = [None] * world
        dist.all_gather_object(gathered, row)
        rows.append(gathered)
    if rank == 0:
        name = torch.cuda.get_device_name(dev) if cuda else "CPU (gloo)"
        print(f"{world} ranks, {name}, {config.num_hidden_layers} layers x {config.hidden_size} "
              f"(intermediate {config.intermediate_size}, vocab {config.vocab_size}); batch 1 and {args.batch}")
        print_table(rows, args.batch)
        if args.json:
            Path(args.json).write_text(json.dumps({"device": name, "world": world, "batch": args.batch,
                                                   "config": config.to_diff_dict(), "rows": rows}, indent=1))
    dist.barrier()
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
