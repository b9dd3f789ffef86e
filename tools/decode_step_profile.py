"""Where a generated token's time goes: bf16 against keep_compressed (GPU machine); with
--lora, where a LoRA training step's time goes on each base.

    PYTHONPATH=src python3 tools/decode_step_profile.py --layers 4 --out $OUT [--lora]

Builds a synthetic Llama-2-7B-width folder (benchmarks/hf_lowmem.py), then for each variant runs
``generate`` with a static cache (transformers compiles the forward with CUDA graphs), profiles
one generation with torch.profiler and prints: wall ms per token, GPU kernel ms per token, the
ten largest kernels, torch.compile's graph-break / CUDA-graph-skip counters, and a Chrome trace
per variant under --out.
"""

import argparse
import sys
import time
from collections import defaultdict
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
from hf_lowmem import llama7b_config, lora_setup, write_synthetic  # noqa: E402


def _kernels(prof) -> dict:
    out = defaultdict(float)
    for e in prof.events():
        if e.device_type == torch.autograd.DeviceType.CUDA:
            out[e.name] += e.device_time_total / 1e3  # ms
    return out


def run(name, model, new_tokens: int, batch: int, out_dir: Path | None) -> dict:
    import torch._dynamo.utils as du

    du.counters.clear()
    ids = torch.randint(3, 32000, (batch, 16), generator=torch.Generator().manual_seed(1)).cuda()
    kw = dict(max_new_tokens=new_tokens, min_new_tokens=new_tokens, do_sample=False, pad_token_id=0,
              cache_implementation="static")
    with torch.inference_mode():
        for _ in range(2):
            model.generate(ids, **kw)
        torch.cuda.synchronize()
        t = time.perf_counter()
        model.generate(ids, **kw)
        torch.cuda.synchronize()
        wall = (time.perf_counter() - t) / new_tokens
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU,
                                                torch.profiler.ProfilerActivity.CUDA]) as prof:
            model.generate(ids, **kw)
            torch.cuda.synchronize()
    if out_dir is not None:
        prof.export_chrome_trace(str(out_dir / f"trace_{name}_b{batch}.json"))
    k = _kernels(prof)
    counters = {f"{a}.{b}": v for a, d in du.counters.items() for b, v in d.items()
                if a in ("graph_break", "inductor", "stats") and ("cudagraph" in b or a == "graph_break" or "unique_graphs" in b)}
    return {"name": name, "batch": batch, "wall_ms": 1e3 * wall, "gpu_ms": sum(k.values()) / new_tokens,
            "top": sorted(k.items(), key=lambda kv: -kv[1])[:10], "counters": counters}


def lora(name, model, out_dir: Path | None, checkpointing: bool = False) -> dict:
    """One LoRA step (hf_lowmem.lora_setup: batch 4 x 512, r=16 on every projection) profiled
    after a warm-up step."""
    model, step = lora_setup(model, checkpointing=checkpointing)
    step()
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    t = time.perf_counter()
    step()
    torch.cuda.synchronize()
    wall = time.perf_counter() - t
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU,
                                            torch.profiler.ProfilerActivity.CUDA]) as prof:
        step()
        torch.cuda.synchronize()
    tag = f"lora_{name}{'_ckpt' if checkpointing else ''}"
    if out_dir is not None:
        prof.export_chrome_trace(str(out_dir / f"trace_{tag}.json"))
    print(f"## {tag}: host operators by self CPU time")
    print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=25, max_name_column_width=60))
    k = _kernels(prof)
    return {"name": tag, "batch": 4, "wall_ms": 1e3 * wall, "gpu_ms": sum(k.values()),
            "peak_gb": torch.cuda.max_memory_allocated() / 1e9,
            "top": sorted(k.items(), key=lambda kv: -kv[1])[:12], "counters": {}}


def host_profile(name, model, new_tokens: int) -> None:
    """cProfile of an eager batch-1 generate (no static cache): where the host time goes."""
    import cProfile
    import io
    import pstats

    ids = torch.randint(3, 32000, (1, 16), generator=torch.Generator().manual_seed(1)).cuda()
    kw = dict(max_new_tokens=new_tokens, min_new_tokens=new_tokens, do_sample=False, pad_token_id=0)
    with torch.inference_mode():
        model.generate(ids, **kw)
        torch.cuda.synchronize()
        prof = cProfile.Profile()
        t = time.perf_counter()
        prof.enable()
        model.generate(ids, **kw)
        torch.cuda.synchronize()
        prof.disable()
        wall = time.perf_counter() - t
    s = io.StringIO()
    pstats.Stats(prof, stream=s).sort_stats("tottime").print_stats(22)
    print(f"## {name} eager b1 under cProfile: {1e3 * wall / new_tokens:.2f} ms/token")
    print(s.getvalue()[-6000:])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--new-tokens", type=int, default=16)
    ap.add_argument("--workdir", default="/tmp/decode_prof")
    ap.add_argument("--out", default=None)
    ap.add_argument("--batch", type=int, nargs="+", default=[1])
    ap.add_argument("--lora", action="store_true", help="profile a LoRA step instead of generation")
    ap.add_argument("--host", action="store_true", help="cProfile eager generation instead (bf16, fused)")
    ap.add_argument("--checkpointing", action="store_true", help="LoRA step with gradient checkpointing")
    ap.add_argument("--variants", default="bf16,fused,jit", help="which generation rows (comma-separated)")
    args = ap.parse_args()
    import transformers

    import wcodec  # noqa: F401
    from wcodec.hf import WCodecModel, convert_folder

    out_dir = Path(args.out) if args.out else None
    src, dst = Path(args.workdir) / "bf16", Path(args.workdir) / "wcodec"
    if not dst.exists():
        write_synthetic(src, llama7b_config(args.layers))
        convert_folder(src, dst)
    loads = {
        "bf16": lambda: transformers.AutoModelForCausalLM.from_pretrained(str(src), dtype=torch.bfloat16,
                                                                          device_map="cuda").eval(),
        "fused": lambda: WCodecModel.from_pretrained(dst, device="cuda", keep_compressed=True),
        "jit": lambda: WCodecModel.from_pretrained(dst, device="cuda", keep_compressed="jit"),
    }
    rows = []
    if args.host:
        for name in ("bf16", "fused"):
            host_profile(name, loads[name](), args.new_tokens)
            torch.cuda.empty_cache()
        return
    if args.lora:
        for name in ("bf16", "fused"):
            r = lora(name, loads[name](), out_dir, args.checkpointing)
            rows.append(r)
            print(f"## {r['name']}: wall {r['wall_ms']:.1f} ms/step, GPU kernels {r['gpu_ms']:.1f} ms, "
                  f"peak {r['peak_gb']:.2f} GB", flush=True)
            for kname, ms in r["top"]:
                print(f"   {ms:8.3f} ms  {kname[:110]}")
            torch.cuda.empty_cache()
        loads = {}
    for name, load in loads.items():
        if name not in args.variants.split(","):
            continue
        model = load()
        for b in args.batch:
            r = run(name, model, args.new_tokens, b, out_dir)
            rows.append(r)
            print(f"## {name} b{b}: wall {r['wall_ms']:.3f} ms/token, GPU kernels {r['gpu_ms']:.3f} ms/token", flush=True)
            print(f"   counters: {r['counters']}")
            for kname, ms in r["top"]:
                print(f"   {ms / args.new_tokens:8.4f} ms/token  {kname[:110]}")
        del model
        torch._dynamo.reset()
        torch.cuda.empty_cache()
    print("\n| variant | batch | wall ms (per token; LoRA: per step) | GPU kernel ms |\n|---|---|---|---|")
    for r in rows:
        print(f"| {r['name']} | {r['batch']} | {r['wall_ms']:.3f} | {r['gpu_ms']:.3f} |")


if __name__ == "__main__":
    main()
