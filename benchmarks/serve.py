"""Serving with transformers' continuous-batching engine: bf16 against kept-compressed (fixed folder).

Each (engine setting, variant) runs in a fresh process, the variants alternating (ABBA...), as
benchmarks/hf_ab.py does (the host's speed drifts between minutes; a process inherits nothing).
A process loads the model (bf16: transformers from the safetensors folder; fused:
``WCodecModel.from_pretrained(fixed folder, keep_compressed=True)``, whose load tunes the fused
kernels for every row count, wcodec.hf.warmup), opens one ``ContinuousBatchingManager``
(``model.continuous_batching_context_manager``: paged KV cache, the engine's own warm-up, which
captures its CUDA graphs), serves a short untimed batch, then for each concurrency C submits C
requests at once (prompt 128-512 random tokens, output 64-256 tokens forced: eos disabled;
lengths and tokens seeded, the same for every variant) and waits for all of them.

Per concurrency: output tokens/s = generated tokens / (last finish - first submission); time to
first token (TTFT) = first token's timestamp - submission, median and p90 over requests;
per-token latency (TPOT) = (last - first token's timestamp) / (tokens - 1), median. Per engine step
(``ModelRunner.compute_batch``, CUDA events on the engine's compute stream: graph replays included):
the GPU time by the rows the step's matmuls see (padded query tokens), decode steps (every request
one token) apart from those holding a prefill, and the GPU's busy share of the level's wall time.

Memory-budget run (``--budget-gb``, CUDA): ``torch.cuda.set_per_process_memory_fraction`` holds
the process to the budget before loading; the KV cache gets what the weights leave (the
engine sizes its cache from ``max_memory_percent`` of the device's free memory, so that percent
is set to ``--kv-share`` of budget - reserved). Then ``--sat-requests`` requests at once:
throughput at saturation, the most sequences the engine ran at once (polled) and the cache's
capacity in tokens. ``--budget-model 13b`` (Llama-2-13B shape, 26 GB in bf16) runs compressed
only when bf16 cannot fit the budget.

Engine settings (``--engines``): auto (the engine's defaults: CUDA graphs where it decides),
graphs (CUDA graphs forced on), eager (off), compile (``default_compile_level=1``: torch.compile
of the forward, dynamic shapes, plus CUDA graphs where the engine decides); graph breaks counted
by torch._dynamo are reported per process.

Models, SYNTHETIC weights (Student t with 3 degrees of freedom scaled to std 0.02, heavy tails
as trained weights have; norms 1.0; rounded to bf16), ``--layers`` deep: 7b (Llama-2-7B width),
mixtral (Mixtral-8x7B width: 8 experts, top-2; the experts stay compressed only with
wcodec.torch.experts, see the printed report), 13b (Llama-2-13B width, budget run).

    PYTHONPATH=src python3 benchmarks/serve.py --model 7b --layers 32 --rounds 2 --max-minutes 9
    PYTHONPATH=src python3 benchmarks/serve.py --model 7b --budget-gb 24 --concurrency '' --max-minutes 9
    PYTHONPATH=src python3 benchmarks/serve.py --smoke     # tiny model on the CPU: checks the script
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import torch

VARIANTS = ("bf16", "fused")
ENGINES = ("auto", "graphs", "eager", "compile")
MODELS = ("7b", "13b", "mixtral")


# -- models -------------------------------------------------------------------------------------
def model_config(name: str, layers: int | None, smoke: bool = False):
    """transformers config of ``name`` (MODELS) at ``layers`` depth (None: full); with
    ``smoke`` a tiny model of the same family (2 layers, 64 wide)."""
    import transformers

    common = dict(vocab_size=32000, max_position_embeddings=4096, rms_norm_eps=1e-5, tie_word_embeddings=False,
                  dtype="bfloat16")
    if name == "7b":
        cfg = transformers.LlamaConfig(hidden_size=4096, intermediate_size=11008, num_hidden_layers=32,
                                       num_attention_heads=32, num_key_value_heads=32,
                                       architectures=["LlamaForCausalLM"], **common)
    elif name == "13b":
        cfg = transformers.LlamaConfig(hidden_size=5120, intermediate_size=13824, num_hidden_layers=40,
                                       num_attention_heads=40, num_key_value_heads=40,
                                       architectures=["LlamaForCausalLM"], **common)
    elif name == "mixtral":
        cfg = transformers.MixtralConfig(hidden_size=4096, intermediate_size=14336, num_hidden_layers=32,
                                         num_attention_heads=32, num_key_value_heads=8, num_local_experts=8,
                                         num_experts_per_tok=2, architectures=["MixtralForCausalLM"], **common)
    else:
        raise ValueError(f"unknown model {name!r}: choose from {MODELS}")
    if layers:
        cfg.num_hidden_layers = layers
    if smoke:
        cfg.num_hidden_layers = min(cfg.num_hidden_layers, 2)
        cfg.hidden_size, cfg.intermediate_size, cfg.vocab_size = 64, 128, 512
        cfg.num_attention_heads, cfg.num_key_value_heads = 4, min(4, cfg.num_key_value_heads)
    return cfg


def heavy_tailed(shape, g: torch.Generator, device: str, std: float = 0.02) -> torch.Tensor:
    """Student t (3 degrees of freedom) samples scaled to ``std``, as bf16 on the CPU: z / sqrt(chi2_3 / 3),
    whose variance is 3, hence the scale std / sqrt(3)."""
    z = torch.randn(shape, generator=g, device=device)
    chi2 = sum(torch.randn(shape, generator=g, device=device) ** 2 for _ in range(3))
    return (z / (chi2 / 3).sqrt() * (std / 3 ** 0.5)).to(torch.bfloat16).cpu()


def write_synthetic(folder: Path, config, device: str, seed: int = 0) -> int:
    """Synthetic bf16 weights of ``config``'s model -> folder/model.safetensors (+ config.json):
    :func:`heavy_tailed` matrices (generated on ``device``), 1.0 for 1-D norm gains. Returns bytes."""
    import transformers
    from safetensors.torch import save_file

    folder.mkdir(parents=True, exist_ok=True)
    cls = getattr(transformers, config.architectures[0])
    with torch.device("meta"):
        skeleton = cls(config)
    g = torch.Generator(device=device).manual_seed(seed)
    sd = {name: torch.ones(p.shape, dtype=torch.bfloat16) if p.ndim == 1 else heavy_tailed(p.shape, g, device)
          for name, p in skeleton.state_dict().items()}
    save_file(sd, str(folder / "model.safetensors"), metadata={"format": "pt"})
    config.save_pretrained(folder)
    return sum(t.numel() * 2 for t in sd.values())


def folders(work: Path, name: str, layers: int | None, smoke: bool, device: str, codec: str = "fixed",
            keep_bf16: bool = True) -> tuple[Path, Path]:
    """(bf16 folder, wcodec folder of ``codec``) of the model, written once per workdir and reused
    (keyed by model, depth and width). ``keep_bf16=False`` deletes the bf16 folder after
    conversion (the 13b budget run needs only the compressed one: disk)."""
    from wcodec.hf import convert_folder

    cfg = model_config(name, layers, smoke)
    tag = f"{name}_l{cfg.num_hidden_layers}_h{cfg.hidden_size}"
    src, dst = work / f"{tag}_bf16", work / f"{tag}_{codec or 'lossless'}"
    if not (dst / "config.json").exists():
        if not (src / "config.json").exists():
            t = time.perf_counter()
            write_synthetic(src, cfg, device)
            print(f"# wrote {src} in {time.perf_counter() - t:.0f} s", flush=True)
        t = time.perf_counter()
        convert_folder(src, dst, codec=codec)
        print(f"# converted to {dst} ({codec or 'lossless'}) in {time.perf_counter() - t:.0f} s", flush=True)
    if not keep_bf16 and src.exists():
        shutil.rmtree(src)
    return src, dst


# -- requests -----------------------------------------------------------------------------------
def requests(n: int, seed: int, vocab: int, prompt=(128, 512), output=(64, 256)) -> list[tuple[list[int], int]]:
    """``n`` (prompt ids, new tokens) pairs, lengths uniform in the given inclusive ranges, seeded."""
    rng = random.Random(seed)
    return [([rng.randrange(3, vocab) for _ in range(rng.randint(*prompt))], rng.randint(*output))
            for _ in range(n)]


def serve(manager, reqs: list, poll_active: bool = False) -> dict:
    """Submit ``reqs`` at once to a started manager, wait for every result; the figures of the module
    docstring. With ``poll_active``: the most requests the scheduler held active at once."""
    t0 = time.perf_counter()
    ids = {manager.add_request(p, max_new_tokens=n, record_timestamps=True, eos_token_id=-1): n for p, n in reqs}
    done, most, errors = {}, 0, []
    while len(done) < len(ids):
        r = manager.get_result(timeout=0.01 if poll_active else 1.0)
        if poll_active:  # the batch processor may be created by the engine's thread after we start
            sched = getattr(getattr(manager, "batch_processor", None), "scheduler", None)
            most = max(most, len(getattr(sched, "active_requests", ())))
        if r is None:
            if not manager.is_running():
                raise RuntimeError(f"the engine stopped with {len(ids) - len(done)} of {len(ids)} requests unfinished")
            continue
        if r.is_finished():
            done[r.request_id] = r
            if r.error:
                errors.append(r.error)
    if errors:
        raise RuntimeError(f"{len(errors)} requests failed, e.g. {errors[0][:200]}")
    short = [k for k, r in done.items() if len(r.generated_tokens) != ids[k]]
    if short:
        raise RuntimeError(f"{len(short)} requests generated fewer tokens than forced, e.g. {short[0]}")
    end = max(r.lifespan[1] for r in done.values())
    ttft = sorted(r.timestamps[0] - r.created_time for r in done.values())
    tpot = [(r.timestamps[-1] - r.timestamps[0]) / (len(r.timestamps) - 1) for r in done.values()
            if len(r.timestamps) > 1]
    tokens = sum(len(r.generated_tokens) for r in done.values())
    out = {"requests": len(reqs), "tokens": tokens, "seconds": end - t0, "tok_s": tokens / (end - t0),
           "ttft_ms_median": 1e3 * statistics.median(ttft), "ttft_ms_p90": 1e3 * ttft[int(0.9 * (len(ttft) - 1))],
           "tpot_ms_median": 1e3 * statistics.median(tpot) if tpot else None}
    if poll_active:
        out["max_active"] = most
    return out


STEP_BUCKETS = (16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 1 << 30)


class StepTimer:
    """GPU time of each engine step: ``ModelRunner.compute_batch`` wrapped with CUDA events recorded
    on the engine's compute stream (so a CUDA-graph replay is timed like an eager forward), with the
    step's padded query tokens (the rows its matmuls see) and its requests."""

    def __init__(self):
        self.steps: list = []

    def install(self) -> bool:
        try:
            from transformers.generation.continuous_batching import model_runner
        except ImportError:  # an engine without the module: no step figures
            return False
        orig = model_runner.ModelRunner.compute_batch
        steps = self

        def compute_batch(runner, model, batch_data):
            io = runner.inputs_and_outputs
            stream = getattr(io, "compute_stream", None) or torch.cuda.current_stream()
            host = io.io_pairs[io.current_pair].host_io if hasattr(io, "io_pairs") else io
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            a.record(stream)
            orig(runner, model, batch_data)
            b.record(stream)
            steps.steps.append((int(batch_data["input_ids"].shape[-1]), getattr(host, "num_request_in_batch", None), a, b))

        model_runner.ModelRunner.compute_batch = compute_batch
        return True

    def take(self, wall_s: float) -> dict:
        """The steps since the last call, summarised (synchronises the device)."""
        steps, self.steps = self.steps, []
        torch.cuda.synchronize()
        rows = [(q, n, a.elapsed_time(b)) for q, n, a, b in steps]
        buckets = {}
        for q, _, ms in rows:
            hi = next(h for h in STEP_BUCKETS if q <= h)
            buckets.setdefault(hi, []).append(ms)
        decode = [ms for q, n, ms in rows if n and q < 2 * n]  # padded to a power of two: below 2 x requests
        gpu = sum(ms for *_, ms in rows)
        seen, slow = set(), []
        for i, (q, n, ms) in enumerate(rows):  # whether a step is the level's first at its rows: a new shape
            slow.append((ms, i, q, n, q not in seen))
            seen.add(q)
        slow = [{"ms": ms, "step": i, "rows": q, "requests": n, "first_at_rows": f}
                for ms, i, q, n, f in sorted(slow, reverse=True)[:6]]
        return {"steps": len(rows), "slowest": slow, "gpu_ms": gpu, "busy": gpu / (1e3 * wall_s) if wall_s else None,
                "decode_steps": len(decode), "decode_ms": sum(decode),
                "by_rows": {str(hi): {"steps": len(v), "ms": sum(v), "median_ms": statistics.median(v)}
                            for hi, v in sorted(buckets.items())}}


# -- one process --------------------------------------------------------------------------------
def engine_config(engine: str, kv_percent: float | None = None, max_requests: int | None = None,
                  small: bool = False):
    """The engine's ContinuousBatchingConfig for ``engine`` (ENGINES); ``small``: a cache of 16
    pages of 16 tokens and 64-token batches (the CPU smoke run: the engine would size its cache
    from the host's RAM)."""
    from transformers import ContinuousBatchingConfig

    kw = {"auto": {}, "graphs": {"use_cuda_graph": True}, "eager": {"use_cuda_graph": False},
          "compile": {"default_compile_level": 1}}[engine]
    if kv_percent is not None:
        kw["max_memory_percent"] = kv_percent
    if max_requests is not None:
        kw["max_requests_per_batch"] = max_requests
    if small:
        kw.update(num_blocks=16, page_size=16, max_batch_tokens=64)
    return ContinuousBatchingConfig(**kw)


def load(variant: str, src: Path, dst: Path, device: str):
    import transformers

    from wcodec.hf import WCodecModel

    if variant == "bf16":
        return transformers.AutoModelForCausalLM.from_pretrained(str(src), dtype=torch.bfloat16, device_map=device)
    return WCodecModel.from_pretrained(dst, device=device, keep_compressed=True, warmup=True)


def kv_share(budget: int, share: float) -> float:
    """``max_memory_percent`` under which the engine's cache sizing (a percent of total minus what
    is in use on the device) yields ``share`` of what the budget leaves this process."""
    free, total = torch.cuda.mem_get_info()
    base = total - max(total - free, torch.cuda.memory_reserved())
    left = budget - torch.cuda.memory_reserved()
    if left <= 0:
        raise MemoryError(f"the weights take {torch.cuda.memory_reserved() / 1e9:.1f} GB: nothing left of the "
                          f"{budget / 1e9:.1f} GB budget for a KV cache")
    return min(0.95, share * left / base)


def compiled_since(cache: Path, since: float) -> dict:
    """Triton kernels compiled into ``cache`` after ``since`` (epoch s): count per kernel name."""
    names: dict = {}
    for meta in cache.glob("*/*.json"):
        if not meta.name.startswith("__grp__") and meta.stat().st_mtime > since:
            names[meta.stem] = names.get(meta.stem, 0) + 1
    return dict(sorted(names.items(), key=lambda kv: -kv[1]))


def child(args) -> None:
    """One (variant, engine) in this process; prints one RESULT line (JSON)."""
    import transformers

    device = "cpu" if args.smoke else "cuda"
    work = Path(args.workdir)
    src, dst = folders(work, args.model, args.layers, args.smoke, device)
    res: dict = {"variant": args.child, "engine": args.engine}
    if args.budget_gb:
        total = torch.cuda.get_device_properties(0).total_memory
        torch.cuda.set_per_process_memory_fraction(min(1.0, args.budget_gb * 1e9 / total))
    log = None
    if args.cold:  # what compiles, and why, from the load on (Triton's JIT hooks)
        from compile_log import CompileLog

        log = CompileLog()
        log = log if log.install() else None
    t = time.perf_counter()
    model = load(args.child, src, dst, device).eval()
    if device == "cuda":
        torch.cuda.synchronize()
    res["load_s"] = time.perf_counter() - t
    loaded = time.time()
    if log:
        log.phase("serve")
    res["warmup"] = getattr(model, "wcodec_warmup", None)
    report = getattr(getattr(model, "wcodec_weights", None), "report", None)
    if report:
        res["kept_dense"] = sorted(n for n in report.get("kept", {}) if n in report.get("decoded", []))
        res["fused_count"] = len(report.get("fused", []))
    # what the report may not name: every matrix still held dense (MoE experts without wcodec.torch.experts)
    dense = [(n, p) for n, p in model.named_parameters() if p.dim() >= 2 and p.numel() > 0]
    res["dense_matrices"] = [n for n, _ in dense]
    res["dense_matrices_gb"] = sum(p.numel() * p.element_size() for _, p in dense) / 1e9
    res["weights_gb"] = torch.cuda.memory_allocated() / 1e9 if device == "cuda" else None
    vocab = model.config.vocab_size
    plen, olen = (8, 16), (4, 8)
    if not args.smoke:
        plen, olen = (args.prompt_min, args.prompt_max), (args.output_min, args.output_max)
    levels = [int(c) for c in args.concurrency.split(",") if c]
    most = max(levels + [args.sat_requests if args.budget_gb else 0])
    kv = kv_share(int(args.budget_gb * 1e9), args.kv_share) if args.budget_gb else None
    cbc = engine_config(args.engine, kv, max_requests=max(most, 1) if args.budget_gb else None, small=args.smoke)
    gc = transformers.GenerationConfig(do_sample=False, eos_token_id=-1, pad_token_id=0, max_new_tokens=olen[1])
    from transformers.generation.continuous_batching.utils import WorkloadHints

    hints = WorkloadHints(max_prompt_length=plen[1], max_generated_length=olen[1], num_requests=most)
    timer = StepTimer()
    if device != "cuda" or not timer.install():
        timer = None
    t = time.perf_counter()
    # no inference_mode here: the engine's thread updates the paged cache in place outside it
    # (transformers 5.17: 'Inplace update to inference tensor outside InferenceMode')
    with torch.no_grad(), model.continuous_batching_context_manager(
            generation_config=gc, continuous_batching_config=cbc, workload_hints=hints) as manager:
        res["engine_warmup_s"] = time.perf_counter() - t
        cache = getattr(getattr(manager, "batch_processor", None), "cache", None)
        if cache is not None:
            res["cache_tokens"] = int(cache.num_blocks * getattr(cbc, "page_size", 256))
            res["max_batch_tokens"] = int(cache.max_batch_tokens)
        # untimed in the figures (the engine's first shapes), but kept: a first process shows here
        res["first_batch"] = serve(manager, requests(min(8, max(levels + [8])), 99, vocab, plen, olen))
        if timer:
            timer.take(0)
        for c in levels:
            res[f"c{c}"] = serve(manager, requests(c, args.seed + c, vocab, plen, olen))
            if timer:
                res[f"c{c}"]["step_gpu"] = timer.take(res[f"c{c}"]["seconds"])
            print(f"# {args.child} {args.engine} c{c}: {json.dumps(res[f'c{c}'])}", file=sys.stderr, flush=True)
        if args.budget_gb:
            res["saturation"] = serve(manager, requests(args.sat_requests, args.seed, vocab, plen, olen),
                                      poll_active=True)
            if timer:
                res["saturation"]["step_gpu"] = timer.take(res["saturation"]["seconds"])
    if args.cold and os.environ.get("TRITON_CACHE_DIR"):
        res["compiled_while_serving"] = compiled_since(Path(os.environ["TRITON_CACHE_DIR"]), loaded)
        shutil.rmtree(os.environ["TRITON_CACHE_DIR"], ignore_errors=True)
    if log:
        res["compile_log"] = log.report("serve", slower_than=0.05)
    res["peak_gb"] = torch.cuda.max_memory_allocated() / 1e9 if device == "cuda" else None
    breaks = torch._dynamo.utils.counters.get("graph_break", {})
    res["graph_breaks"] = {"count": int(sum(breaks.values())), "reasons": sorted(breaks, key=breaks.get)[-3:]}
    print("RESULT " + json.dumps(res), flush=True)


# -- parent: fresh processes, ABBA ---------------------------------------------------------------
def run_child(args, variant: str, engine: str, timeout: float) -> dict:
    cmd = [sys.executable, __file__, "--child", variant, "--engine", engine]
    for k in ("workdir", "model", "layers", "concurrency", "seed", "budget_gb", "kv_share", "sat_requests",
              "prompt_min", "prompt_max", "output_min", "output_max"):
        v = getattr(args, k)
        if v is not None:
            cmd += [f"--{k.replace('_', '-')}", str(v)]
    cmd += ["--smoke"] * args.smoke
    env = dict(os.environ)
    if args.cold:
        env["TRITON_CACHE_DIR"] = tempfile.mkdtemp(prefix="serve_triton_")
    cmd += ["--cold"] * args.cold
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=max(timeout, 1), env=env)
    except subprocess.TimeoutExpired:
        return {"error": f"killed after {timeout:.0f} s (--max-minutes)"}
    lines = [ln for ln in p.stdout.splitlines() if ln.startswith("RESULT ")]
    if p.returncode or not lines:
        tail = [ln for ln in p.stderr.strip().splitlines() if ln.strip()][-3:] or [f"exit {p.returncode}"]
        return {"error": " | ".join(tail)[-400:]}
    return json.loads(lines[-1][len("RESULT "):])


def _median(runs: list, *path):
    vals = []
    for r in runs:
        for k in path:
            r = r.get(k) if isinstance(r, dict) else None
        if isinstance(r, (int, float)):
            vals.append(r)
    return statistics.median(vals) if vals else None


def _f(v, spec=".1f"):
    return "-" if v is None else format(v, spec)


def table(args, results: dict, device: str) -> list[str]:
    levels = [int(c) for c in args.concurrency.split(",") if c]
    lines = []
    cfg = model_config(args.model, args.layers, args.smoke)
    what = f"{args.model} ({cfg.num_hidden_layers} layers, SYNTHETIC heavy-tailed weights)"
    budget = f", memory budget {args.budget_gb} GB" if args.budget_gb else ""
    lines.append(f"{device}, {what}{budget}; medians over fresh processes (ABBA); "
                 f"prompts {args.prompt_min}-{args.prompt_max}, outputs {args.output_min}-{args.output_max} tokens")
    head = "| engine | variant | weights GB | load s (warm-up s) |"
    rule = "|---|---|---:|---:|"
    for c in levels:
        head += f" c{c} tok/s (vs bf16) | c{c} TTFT ms | c{c} TPOT ms |"
        rule += "---:|---:|---:|"
    if args.budget_gb:
        head += " cache tokens | max running | saturation tok/s (vs bf16) |"
        rule += "---:|---:|---:|"
    lines += [head + " processes |", rule + "---|"]
    for (engine, variant), runs in results.items():
        ok = [r for r in runs if "error" not in r]
        base = [r for r in results.get((engine, "bf16"), []) if "error" not in r]
        warm = _median(ok, "warmup", "seconds")
        row = (f"| {engine} | {variant} | {_f(_median(ok, 'weights_gb'), '.2f')} | "
               f"{_f(_median(ok, 'load_s'))}{f' ({warm:.1f})' if warm is not None else ''} |")
        for c in levels:
            t, b = _median(ok, f"c{c}", "tok_s"), _median(base, f"c{c}", "tok_s")
            vs = f" ({t / b:.3f}x)" if t and b and variant != "bf16" else ""
            row += (f" {_f(t)}{vs} | {_f(_median(ok, f'c{c}', 'ttft_ms_median'), '.0f')} | "
                    f"{_f(_median(ok, f'c{c}', 'tpot_ms_median'), '.1f')} |")
        if args.budget_gb:
            t, b = _median(ok, "saturation", "tok_s"), _median(base, "saturation", "tok_s")
            vs = f" ({t / b:.3f}x)" if t and b and variant != "bf16" else ""
            row += (f" {_f(_median(ok, 'cache_tokens'), '.0f')} | {_f(_median(ok, 'saturation', 'max_active'), '.0f')}"
                    f" | {_f(t)}{vs} |")
        errs = [r["error"] for r in runs if "error" in r]
        top = f"c{levels[-1]}" if levels else "saturation"  # each process in order: a first one tuning shows here
        each = ", ".join(_f(r.get(top, {}).get("tok_s"), ".0f") for r in ok)
        row += f" {len(ok)} ok ({top} tok/s: {each})" + (f", {len(errs)} failed: {errs[0][:120]}" if errs else "") + " |"
        lines.append(row)
    lines += step_table(levels + (["saturation"] if args.budget_gb else []), results)
    for (engine, variant), runs in results.items():
        ok = [r for r in runs if "fused_count" in r]
        if ok:
            dense = ok[0].get("dense_matrices", [])
            lines.append(f"{engine} {variant}: {ok[0]['fused_count']} weights kept compressed (fused); {len(dense)} "
                         f"matrices held dense ({ok[0]['dense_matrices_gb']:.2f} GB)"
                         f"{': e.g. ' + dense[0] if dense else ''}")
        for r in runs[:1]:
            if r.get("compiled_while_serving") is not None:
                lines.append(f"{engine} {variant}: kernels compiled after the load (--cold): "
                             f"{r['compiled_while_serving'] or 'none'}")
            for e in (r.get("compile_log") or {}).get("entries", [])[:12]:
                lines.append(f"  {e['name']} {e['s']:.2f} s, call {e['call']}, differs from the load's nearest "
                             f"{e['differs']} (its call {e['nearest_call']})")
    return lines


def step_table(levels: list, results: dict) -> list[str]:
    """Per level and rows bucket: engine steps and GPU ms per step, each variant beside bf16 (the
    first process of each; StepTimer)."""
    lines = []
    for (engine, variant), runs in results.items():
        base = next((r for r in results.get((engine, "bf16"), []) if "error" not in r), None)
        mine = next((r for r in runs if "error" not in r), None)
        if variant == "bf16" or not base or not mine:
            continue
        rows = []
        for c in levels:
            key = c if c == "saturation" else f"c{c}"
            b, m = base.get(key, {}).get("step_gpu"), mine.get(key, {}).get("step_gpu")
            if not b or not m:
                continue
            for hi in sorted({*b["by_rows"], *m["by_rows"]}, key=int):
                x, y = b["by_rows"].get(hi), m["by_rows"].get(hi)
                ratio = f"{y['median_ms'] / x['median_ms']:.2f}x" if x and y else "-"
                rows.append(f"| {key} | <= {hi} | {x['steps'] if x else 0} | {_f(x and x['median_ms'], '.2f')} | "
                             f"{y['steps'] if y else 0} | {_f(y and y['median_ms'], '.2f')} | {ratio} |")
            rows.append(f"| {key} | all | {b['steps']} ({b['decode_steps']} decode) | {b['gpu_ms']:.0f} total, "
                         f"busy {b['busy']:.2f} | {m['steps']} ({m['decode_steps']} decode) | {m['gpu_ms']:.0f} total, "
                         f"busy {m['busy']:.2f} | {m['gpu_ms'] / b['gpu_ms']:.2f}x |")
        if rows:
            lines += ["", f"{engine}: engine steps, GPU ms per step (median) by the rows the matmuls see, "
                          f"{variant} against bf16; busy = GPU time / wall time",
                      f"| level | rows | bf16 steps | bf16 ms | {variant} steps | {variant} ms | ratio |",
                      "|---|---:|---:|---:|---:|---:|---:|"] + rows
    return lines


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="7b", choices=MODELS)
    ap.add_argument("--layers", type=int, default=None, help="decoder layers (default: full depth; 8 for mixtral)")
    ap.add_argument("--variants", default="bf16,fused", help=f"from {', '.join(VARIANTS)}")
    ap.add_argument("--engines", default="auto", help=f"engine settings, from {', '.join(ENGINES)}")
    ap.add_argument("--concurrency", default="1,8,32,64,128,256", help="requests submitted at once, per level")
    ap.add_argument("--rounds", type=int, default=2, help="processes per variant and engine, ABBA order")
    ap.add_argument("--prompt-min", type=int, default=128)
    ap.add_argument("--prompt-max", type=int, default=512)
    ap.add_argument("--output-min", type=int, default=64)
    ap.add_argument("--output-max", type=int, default=256)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--budget-gb", type=float, default=None,
                    help="memory-budget run: per-process GPU memory limit (GB), KV cache from what is left")
    ap.add_argument("--kv-share", type=float, default=0.85, help="share of what the budget leaves given to the KV cache")
    ap.add_argument("--sat-requests", type=int, default=512, help="requests at once in the budget run's saturation")
    ap.add_argument("--workdir", default="/tmp/serve", help="model folders (reused when present)")
    ap.add_argument("--json", default=None, help="default: $OUT/serve_<model>.json when OUT is set")
    ap.add_argument("--max-minutes", type=float, default=None,
                    help="start no process after this, and kill one running past it (the table covers the rest)")
    ap.add_argument("--cold", action="store_true",
                    help="each process on an empty Triton cache (a fresh machine's first process); reports the "
                         "kernels compiled after the load, while serving")
    ap.add_argument("--smoke", action="store_true", help="tiny model on the CPU: checks the script, measures nothing")
    ap.add_argument("--child", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--engine", default="auto", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.layers is None and args.model == "mixtral":
        args.layers = 8  # 8 of 32 layers: 23 GB in bf16
    if args.child == "prepare":
        folders(Path(args.workdir), args.model, args.layers, args.smoke, "cpu" if args.smoke else "cuda",
                keep_bf16="bf16" in args.variants.split(","))
        return 0
    if args.child:
        child(args)
        return 0
    variants = [v for v in args.variants.split(",") if v]
    engines = [e for e in args.engines.split(",") if e]
    bad = [v for v in variants if v not in VARIANTS] + [e for e in engines if e not in ENGINES]
    if bad:
        ap.error(f"unknown variant or engine: {', '.join(bad)}")
    if args.smoke:
        args.concurrency, args.rounds, args.budget_gb = "1,4", 1, None
        args.prompt_min, args.prompt_max, args.output_min, args.output_max = 8, 16, 4, 8
        engines = ["eager"]
    elif not torch.cuda.is_available():
        ap.error("needs a CUDA GPU (--smoke checks the script on the CPU)")
    device = "CPU (smoke run)" if args.smoke else torch.cuda.get_device_name()
    if args.budget_gb and "bf16" in variants:
        cfg = model_config(args.model, args.layers)
        from transformers import AutoModelForCausalLM

        with torch.device("meta"):
            n = sum(p.numel() for p in AutoModelForCausalLM.from_config(cfg).parameters())
        if 2 * n > args.budget_gb * 1e9:
            print(f"# bf16 weights ({2 * n / 1e9:.1f} GB) exceed the {args.budget_gb} GB budget: fused only", flush=True)
            variants = [v for v in variants if v != "bf16"]
    work = Path(args.workdir)
    t0 = time.perf_counter()
    # folders first, in a process of their own (writing them on the GPU would leave this process a
    # CUDA context and cached memory for the whole run); the bf16 folder kept only where bf16 runs
    cmd = [sys.executable, __file__, "--child", "prepare", "--workdir", str(work), "--model", args.model]
    cmd += (["--layers", str(args.layers)] if args.layers else []) + ["--smoke"] * args.smoke
    cmd += [] if "bf16" in variants else ["--variants", "fused"]
    if subprocess.run(cmd).returncode:
        print("# writing the model folders failed (see above)", flush=True)
        return 1
    results: dict = {(e, v): [] for e in engines for v in variants}
    deadline = None if args.max_minutes is None else t0 + 60 * args.max_minutes
    for engine in engines:
        for r in range(args.rounds):
            for v in variants if r % 2 == 0 else variants[::-1]:
                left = None if deadline is None else deadline - time.perf_counter()
                if left is not None and left <= 0:
                    print(f"# --max-minutes: {engine} round {r} {v} not run", flush=True)
                    continue
                res = run_child(args, v, engine, left if left is not None else 24 * 3600)
                results[(engine, v)].append(res)
                print(f"# {engine} round {r} {v} ({time.perf_counter() - t0:.0f} s): {json.dumps(res)[:600]}",
                      flush=True)
    out = args.json or (os.path.join(os.environ["OUT"], f"serve_{args.model}.json") if os.environ.get("OUT") else None)
    if out:
        Path(out).write_text(json.dumps({"device": device, "args": vars(args),
                                         "runs": {f"{e}/{v}": rs for (e, v), rs in results.items()}}, indent=1))
    print()
    print("\n".join(table(args, results, device)))
    return 0 if any("error" not in r for rs in results.values() for r in rs) else 1


if __name__ == "__main__":
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    sys.exit(main())
