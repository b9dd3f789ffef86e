"""Generation speed, bf16 against kept-compressed models, each measurement in a fresh process and
the variants alternating (ABBA...): per-step decode time and tokens/s, eager and compiled.

Why fresh processes: measured one after another in one process (hf_lowmem.py), a later model's
compiled figures read low: keep_compressed fused at batch 16, per decode step, read 0.83-0.91x
bf16 measured after bf16 in one process, 0.94-1.03x in fresh processes, same code
(benchmarks/RESULTS.md, 2026-11-23). Why
alternating: generation is bound by host time at batch 1, and the host's speed drifts by tens of
percent between minutes.

Per-step time = (t(long) - t(short)) / (long - short) from the best of ``--reps`` greedy generates
of ``--short`` and ``--long`` forced new tokens after a 16-token prompt: the prefill and the
fixed costs of ``generate`` cancel, what remains is one decode step. tok/s = batch * long /
t(long) (prefill included, as hf_lowmem.py counts). Compiled = ``cache_implementation="static"``
(transformers compiles the forward with CUDA graphs); the first generates of a process compile.
Same tokens: each variant's greedy ids at batch 1 (``--long`` tokens) against bf16's, eager and
compiled. SYNTHETIC weights of Llama-2-7B width (hf_lowmem.write_synthetic), ``--layers`` deep.

``--moe`` (issue 26's benchmark): a Mixtral-8x7B-shaped model (8 experts, top-2; SYNTHETIC
heavy-tailed weights, serve.write_synthetic) at ``--layers`` depth (default 4), each process
loading one variant twice: bf16 (transformers, safetensors folder), fused (``keep_compressed=True``
from a ``--codec fixed`` folder), fused_rans (the same from a lossless rANS folder), jit
(``keep_compressed="jit"`` from the rANS folder). Reported: load time (second load; the first
too), of it the kernel warm-up at load (wcodec.hf.warmup), weight memory (allocated after load)
against bf16, whether batch-1 greedy tokens (``--long`` new tokens) equal bf16's, and what stayed
compressed (``model.wcodec_weights.report``, and every matrix still held dense: MoE experts stay
dense unless wcodec.torch.experts is present).

    PYTHONPATH=src python3 benchmarks/hf_ab.py --moe --layers 4 --rounds 2 --json $OUT/hf_ab_moe.json

Variants: bf16 (transformers), fused (``WCodecModel.from_pretrained(keep_compressed=True)``),
fused_noreplay (the same with ``WCODEC_REPLAY=0``: eager launches through Triton), jit
(``keep_compressed="jit"``). Needs a CUDA GPU.

    PYTHONPATH=src python3 benchmarks/hf_ab.py --layers 32 --rounds 2 --json $OUT/hf_ab.json
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
import hf_lowmem  # noqa: E402

MODES = ("eager_b1", "eager_b16", "compiled_b1", "compiled_b16")
MOE_VARIANTS = ("bf16", "fused", "fused_rans", "jit")
VARIANTS = ("bf16", "fused", "fused_noreplay", "jit")


def load(variant: str, src: Path, dst: Path):
    import transformers

    from wcodec.hf import WCodecModel

    dev = hf_lowmem.DEV
    if variant == "bf16":
        return transformers.AutoModelForCausalLM.from_pretrained(str(src), dtype=torch.bfloat16, device_map=dev)
    return WCodecModel.from_pretrained(dst, device=dev, keep_compressed="jit" if variant == "jit" else True)


def per_step(model, batch: int, static: bool, short: int, long: int, reps: int) -> dict:
    """ms per decode step, tokens/s over ``long`` tokens, and the ids of one ``long`` generate."""
    gen = hf_lowmem.generate_once
    gen(model, batch, short, static=static), gen(model, batch, long, static=static)  # warm-up (compiles, tunes)
    t_short = min(gen(model, batch, short, static=static)[0] for _ in range(reps))
    runs = [gen(model, batch, long, static=static) for _ in range(reps)]
    t_long = min(t for t, _ in runs)
    return {"ms_step": (t_long - t_short) / (long - short) * 1e3, "tok_s": batch * long / t_long,
            "ids": runs[0][1].cpu()}


def moe_folders(args) -> tuple[Path, Path, Path]:
    """(bf16, fixed, rANS) folders of the Mixtral-shaped model, written once per workdir."""
    import serve

    dev = "cpu" if args.smoke else "cuda"
    src, fixed = serve.folders(Path(args.workdir), "mixtral", args.layers, args.smoke, dev, codec="fixed")
    _, rans = serve.folders(Path(args.workdir), "mixtral", args.layers, args.smoke, dev, codec=None)
    return src, fixed, rans


def moe_child(args) -> None:
    """One MoE variant in this process: two timed loads, weight memory, batch-1 greedy ids (saved),
    the report of what stayed compressed; prints one RESULT line."""
    import gc

    import transformers

    from wcodec.hf import WCodecModel

    dev = hf_lowmem.DEV
    src, fixed, rans = moe_folders(args)
    v = args.child
    if v == "bf16":
        def load():
            return transformers.AutoModelForCausalLM.from_pretrained(str(src), dtype=torch.bfloat16, device_map=dev)
    else:
        def load():
            return WCodecModel.from_pretrained(fixed if v == "fused" else rans, device=dev,
                                               keep_compressed="jit" if v == "jit" else True)
    times, model = [], None
    for _ in range(2):  # the first load of a process reads cold caches (files, CUDA context)
        model = None
        gc.collect()
        hf_lowmem._reset()
        t = time.perf_counter()
        model = load()
        hf_lowmem._sync()
        times.append(time.perf_counter() - t)
    warm = getattr(model, "wcodec_warmup", None) or {}
    res = {"load_s": times[1], "load_first_s": times[0], "warmup_s": warm.get("seconds", 0.0),
           "weights_gb": torch.cuda.memory_allocated() / 1e9 if dev == "cuda" else None}
    report = getattr(getattr(model, "wcodec_weights", None), "report", None) or {}
    res["report"] = {k: len(report.get(k, ())) for k in ("fused", "compressed", "decoded", "kept")}
    jit = set(report.get("compressed", ()))  # views of the shared decode scratch, not dense copies
    dense = [(n, p) for n, p in model.named_parameters() if p.dim() >= 2 and p.numel() > 0 and n not in jit]
    res["dense_matrices"] = [n for n, _ in dense]
    res["dense_matrices_gb"] = sum(p.numel() * p.element_size() for _, p in dense) / 1e9
    prompt = torch.randint(3, model.config.vocab_size, (1, 16), generator=torch.Generator().manual_seed(1)).to(dev)
    with torch.inference_mode():
        out = model.generate(prompt, max_new_tokens=args.long, min_new_tokens=args.long, do_sample=False,
                             pad_token_id=0)
    torch.save({"eager": out.cpu()}, Path(args.workdir) / f"ab_ids_{v}.pt")
    print("RESULT " + json.dumps(res), flush=True)


def moe_table(args, results: dict, device: str) -> list[str]:
    """The MoE mode's table (medians over processes) and what stayed compressed."""
    def med(v, k):
        xs = [x[k] for x in results.get(v, []) if "error" not in x and x.get(k) is not None]
        return statistics.median(xs) if xs else None

    def ratio(v, k):
        a, b = med(v, k), med("bf16", k)
        return f"{a / b:.3f}x" if a is not None and b and v != "bf16" else "-"

    layers = json.loads((moe_folders(args)[0] / "config.json").read_text())["num_hidden_layers"]
    out = [f"{device}, Mixtral-8x7B width (8 experts, top-2), {layers} layers (SYNTHETIC heavy-tailed weights); "
           f"medians over fresh processes (ABBA). Targets (issue 26): weights <= 0.78x, fixed-folder load <= 0.8x, "
           f"rANS-folder load <= 1.2x bf16",
           "| variant | load s (2nd) | vs bf16 | load s (1st) | of it kernel warm-up s | weights GB | vs bf16 | "
           "same tokens b1 | fused / jit / dense (report) | matrices held dense |",
           "|---|---:|---:|---:|---:|---:|---:|---|---|---|"]
    for v, runs in results.items():
        ok = [x for x in runs if "error" not in x]
        if not ok:
            out.append(f"| {v} | " + (runs[0]["error"][:150] if runs else "not run") + " | | | | | | | | |")
            continue
        r0 = ok[0]
        rep = r0.get("report", {})
        f = lambda k, spec=".2f": "-" if med(v, k) is None else format(med(v, k), spec)  # noqa: E731
        out.append(f"| {v} | {f('load_s')} | {ratio(v, 'load_s')} | {f('load_first_s')} | {f('warmup_s')} | "
                   f"{f('weights_gb')} | {ratio(v, 'weights_gb')} | {same_ids(Path(args.workdir), v).split(' / ')[0]} | "
                   f"{rep.get('fused', 0)} / {rep.get('compressed', 0)} / {rep.get('decoded', 0)} | "
                   f"{len(r0['dense_matrices'])} ({r0['dense_matrices_gb']:.2f} GB)"
                   f"{', e.g. ' + r0['dense_matrices'][0] if r0['dense_matrices'] else ''} |")
    return out


def abba(args, variants: list) -> dict:
    """{variant: [RESULT of each process]}: ``args.rounds`` fresh processes per variant, in ABBA
    order, none started after ``--max-minutes``."""
    results: dict = {v: [] for v in variants}
    t0 = time.perf_counter()
    for r in range(args.rounds):
        for v in variants if r % 2 == 0 else variants[::-1]:
            if args.max_minutes is not None and time.perf_counter() - t0 > 60 * args.max_minutes:
                print(f"# --max-minutes: round {r} {v} not run", flush=True)
                continue
            results[v].append(run_child(args, v))
            print(f"# round {r} {v}: {json.dumps(results[v][-1])[:400]} ({time.perf_counter() - t0:.0f} s)", flush=True)
    return results


def moe_main(args, variants: list) -> int:
    """--moe: folders, the ABBA processes, the table (last), the JSON."""
    moe_folders(args)  # written here once: the children only read them
    if torch.cuda.is_available():
        torch.cuda.empty_cache()  # the generator's blocks: the children load on the same GPU
    results = abba(args, variants)
    device = "CPU (smoke run)" if args.smoke else torch.cuda.get_device_name()
    out = args.json or (os.path.join(os.environ["OUT"], "hf_ab_moe.json") if os.environ.get("OUT") else None)
    if out:
        Path(out).write_text(json.dumps({"runs": results, "device": device, "layers": args.layers}, indent=1))
    print("\n" + "\n".join(moe_table(args, results, device)))
    return 0 if any("error" not in x for xs in results.values() for x in xs) else 1


def child(args) -> None:
    """One variant, every mode, in this process; prints one RESULT line, saves the ids."""
    hf_lowmem.DEV = hf_lowmem.DMAP = "cpu" if args.smoke else "cuda"
    if args.moe:
        moe_child(args)
        return
    work = Path(args.workdir)
    model = load(args.child, work / "bf16", work / "wcodec")
    res, ids = {}, {}
    for mode in args.modes.split(","):
        kind, batch = mode.split("_b")
        r = per_step(model, int(batch), kind == "compiled", args.short, args.long, args.reps)
        got = r.pop("ids")
        if batch == "1":
            ids[kind] = got
        res[mode] = r
    torch.save(ids, work / f"ab_ids_{args.child}.pt")
    print("RESULT " + json.dumps(res), flush=True)


def run_child(args, variant: str) -> dict:
    env = dict(os.environ)
    if variant == "fused_noreplay":
        env["WCODEC_REPLAY"] = "0"
    cmd = [sys.executable, __file__, "--child", variant, "--workdir", args.workdir, "--modes", args.modes,
           "--short", str(args.short), "--long", str(args.long), "--reps", str(args.reps),
           "--layers", str(args.layers)] + ["--smoke"] * args.smoke + ["--moe"] * args.moe
    p = subprocess.run(cmd, capture_output=True, text=True, env=env)
    lines = [ln for ln in p.stdout.splitlines() if ln.startswith("RESULT ")]
    if p.returncode or not lines:
        return {"error": (p.stderr.strip().splitlines() or ["exit %d" % p.returncode])[-1][:200]}
    return json.loads(lines[-1][len("RESULT "):])


def same_ids(work: Path, variant: str) -> str:
    """'eager / compiled': whether ``variant``'s last batch-1 ids equal bf16's."""
    if variant == "bf16":
        return "(reference)"
    try:
        a, b = torch.load(work / "ab_ids_bf16.pt"), torch.load(work / f"ab_ids_{variant}.pt")
    except FileNotFoundError:
        return "-"
    return " / ".join(str(torch.equal(a[k], b[k])) if k in a and k in b else "-" for k in ("eager", "compiled"))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--layers", type=int, default=None, help="decoder layers (default 32; 4 with --moe)")
    ap.add_argument("--moe", action="store_true", help="the Mixtral-shaped MoE benchmark (see the docstring)")
    ap.add_argument("--workdir", default="/tmp/hf_ab", help="model folders (reused when present)")
    ap.add_argument("--variants", default="bf16,fused", help=f"from {', '.join(VARIANTS)}; bf16 always runs")
    ap.add_argument("--modes", default=",".join(MODES), help=f"from {', '.join(MODES)}")
    ap.add_argument("--rounds", type=int, default=2, help="processes per variant, in ABBA order")
    ap.add_argument("--short", type=int, default=16)
    ap.add_argument("--long", type=int, default=64)
    ap.add_argument("--reps", type=int, default=2, help="generates of each length per mode (best taken)")
    ap.add_argument("--json", default=None)
    ap.add_argument("--max-minutes", type=float, default=None,
                    help="start no new process after this (the table covers the processes that ran)")
    ap.add_argument("--smoke", action="store_true",
                    help="tiny model on the CPU, eager modes only: checks the script, measures nothing")
    ap.add_argument("--child", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.layers is None:
        args.layers = 4 if args.moe else 32
    if args.moe and args.variants == "bf16,fused":
        args.variants = ",".join(MOE_VARIANTS)
    if args.child:
        child(args)
        return 0
    variants = ["bf16"] + [v for v in args.variants.split(",") if v != "bf16"]
    unknown = [v for v in variants if v not in (MOE_VARIANTS if args.moe else VARIANTS)] + \
        [m for m in args.modes.split(",") if m not in MODES]
    if unknown:
        ap.error(f"unknown variant or mode: {', '.join(unknown)}")
    hf_lowmem.DEV = hf_lowmem.DMAP = "cpu" if args.smoke else "cuda"
    if args.smoke:
        args.modes = ",".join(m for m in args.modes.split(",") if m.startswith("eager"))
    elif not torch.cuda.is_available():
        ap.error("needs a CUDA GPU (--smoke checks the script on the CPU)")
    if args.moe:
        return moe_main(args, variants)
    from wcodec.hf import convert_folder

    work = Path(args.workdir)
    src, dst = work / "bf16", work / "wcodec"
    if not (dst / "config.json").exists():
        cfg = hf_lowmem.llama7b_config(args.layers)
        if args.smoke:
            hf_lowmem.shrink(cfg)
        hf_lowmem.write_synthetic(src, cfg)
        convert_folder(src, dst)
    layers = json.loads((src / "config.json").read_text())["num_hidden_layers"]
    results = abba(args, variants)
    modes = args.modes.split(",")
    table = {}
    for v in variants:
        ok = [x for x in results[v] if "error" not in x]
        table[v] = {m: {k: statistics.median(x[m][k] for x in ok) for k in ("ms_step", "tok_s")}
                    for m in modes} if ok else {}
        table[v]["same_tokens"] = same_ids(work, v)
    device = "CPU (smoke run)" if args.smoke else torch.cuda.get_device_name()
    runs = ", ".join(f"{len(results[v])} {v}" for v in variants)
    print(f"\n{device}, {layers} layers of Llama-2-7B width (SYNTHETIC), medians over fresh processes "
          f"({runs}; ABBA), per step = (t({args.long}) - t({args.short})) / {args.long - args.short} tokens")
    print("| variant | " + " | ".join(f"{m} ms/step (vs bf16) | {m} tok/s" for m in modes)
          + " | same tokens b1 eager / compiled |")
    print("|---|" + "---:|---:|" * len(modes) + "---|")
    for v in variants:
        cells = []
        for m in modes:
            x, b = table[v].get(m), table["bf16"].get(m)
            if not x:
                cells += ["error", "error"]
                continue
            speed = f" ({b['ms_step'] / x['ms_step']:.3f}x)" if b and v != "bf16" else ""
            cells += [f"{x['ms_step']:.2f}{speed}", f"{x['tok_s']:.1f}"]
        print(f"| {v} | " + " | ".join(cells) + f" | {table[v]['same_tokens']} |")
    print("(x) = bf16's per-step time / the variant's: its decode speed relative to bf16")
    if args.json:
        Path(args.json).write_text(json.dumps({"runs": results, "medians": table, "layers": layers,
                                               "device": device}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
