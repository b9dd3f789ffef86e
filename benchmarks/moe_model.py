"""A Mixtral-shaped model kept compressed against bf16, through the model's forward (issue 28,
must-have 2): per decode step (B sequences x 1 new token) and per prefill (1 x T tokens).

    PYTHONPATH=src python3 benchmarks/moe_model.py [--layers 2] [--decode 1,16] [--prefill 512,2048]

Model: transformers' MixtralForCausalLM at Mixtral-8x7B width (hidden 4096, 8 experts, top-2,
intermediate 14336, 32 heads, 8 KV heads, vocab 32000), ``--layers`` deep, SYNTHETIC weights
(normal, std 0.02, generated on the GPU). bf16 runs each of transformers' experts
implementations that fit (grouped_mm; batched_mm for decode steps: it gathers each slot's
weights) and the fastest counts. Then the same model is made kept-compressed in place: every
Linear a CompressedLinear (``compress_model``, lm_head included), the experts compressed
(``compress_expert_param``: packed per expert), and runs on the grouped kernels (``grouped``,
this issue) and on the per-expert loop (``per-expert``, before it: ``experts.GROUPED = False``;
host synchronisations per expert, so eager only). Forwards run with ``use_cache=False`` (a
decode step's attention over a cached context is the same work in every variant, and small at
this depth). Times: median per forward of a CUDA graph replaying 3 forwards (``graph``), and of
single eager calls timed alone with CUDA events (``eager``, host time included). Logits are
checked against the per-expert path and against bf16 first. Prints one table last; rows to
OUT/moe_model.json.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from fused_matmul import graph_time  # noqa: E402
from gpu_decode import bench_call  # noqa: E402


def build(layers: int, device: str = "cuda", small: bool = False):
    from transformers import MixtralConfig, MixtralForCausalLM

    width = dict(hidden_size=64, intermediate_size=128, vocab_size=512) if small else \
        dict(hidden_size=4096, intermediate_size=14336, vocab_size=32000)
    cfg = MixtralConfig(num_hidden_layers=layers, num_attention_heads=32, num_key_value_heads=8, num_local_experts=8,
                        num_experts_per_tok=2, max_position_embeddings=4096, tie_word_embeddings=False, **width)
    torch.set_default_dtype(torch.bfloat16)
    try:
        with torch.device(device):
            model = MixtralForCausalLM(cfg)
    finally:
        torch.set_default_dtype(torch.float32)
    g = torch.Generator(device=device).manual_seed(0)
    with torch.no_grad():
        for p in model.parameters():
            if p.dim() == 1:
                p.fill_(1.0)
            else:
                p.copy_(torch.randn(p.shape, device=device, generator=g, dtype=torch.float32).mul_(0.02))
    return model.eval()


def compress(model) -> dict:
    from wcodec.torch.experts import compress_expert_param, is_expert_param
    from wcodec.torch.linear import compress_model

    rep = compress_model(model)
    n = 0
    for mod in model.modules():
        for attr in list(mod._parameters):
            if is_expert_param(mod, attr):
                value = mod._parameters[attr].detach()
                compress_expert_param(mod, attr, value)
                del value
                n += 1
    torch.cuda.empty_cache()
    return {"linears": len(rep["replaced"]), "expert_params": n}


def shapes(decode: list, prefill: list) -> list:
    return [(f"decode b{b}", b, 1) for b in decode] + [(f"prefill {t}", 1, t) for t in prefill]


def time_forward(model, ids, graph: bool) -> float:
    def f():
        with torch.no_grad():
            return model(input_ids=ids, use_cache=False).logits
    if graph:
        return graph_time(torch, [f] * 3, reps=8)
    return bench_call(f, torch, reps=8, warm=2)


def parts(model, variant: str, cases: list, record) -> None:
    """Layer 0's experts module and lm_head alone (CUDA graphs) at each decode case's tokens:
    where a model's step time goes. Routing: top-2 of random logits (fixed seed)."""
    experts = model.model.layers[0].mlp.experts
    g = torch.Generator(device="cuda").manual_seed(2)
    for name, b, t in cases:
        if t != 1:
            continue
        x = torch.randn(b, 4096, device="cuda", generator=g).to(torch.bfloat16)
        wts, idx = torch.topk(torch.randn(b, 8, device="cuda", generator=g).softmax(-1), 2, dim=-1)
        wts = (wts / wts.sum(-1, keepdim=True)).to(torch.bfloat16)

        def block(x=x, idx=idx, wts=wts):
            with torch.no_grad():
                return experts(x, idx, wts)

        def head(x=x):
            with torch.no_grad():
                return model.lm_head(x)

        record(f"{variant} experts", "graph", name, lambda: graph_time(torch, [block] * 3, reps=8))
        record(f"{variant} lm_head", "graph", name, lambda: graph_time(torch, [head] * 3, reps=8))


def logits(model, ids):
    with torch.no_grad():
        return model(input_ids=ids, use_cache=False).logits.float()


def rel(a, b) -> float:
    return float((a - b).norm() / b.norm())


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--decode", default="1,16")
    ap.add_argument("--prefill", default="512,2048")
    ap.add_argument("--out", default=os.environ.get("OUT", "."))
    a = ap.parse_args()
    from wcodec.torch import experts as ex

    t0 = time.time()
    print(f"device {torch.cuda.get_device_name()}, torch {torch.__version__}", flush=True)
    model = build(a.layers)
    print(f"# built {a.layers} layers in {time.time() - t0:.0f} s, {torch.cuda.memory_allocated() / 1e9:.2f} GB",
          flush=True)
    g = torch.Generator(device="cuda").manual_seed(1)
    cases = shapes([int(b) for b in a.decode.split(",") if b], [int(t) for t in a.prefill.split(",") if t])
    inputs = {name: torch.randint(0, 32000, (b, t), device="cuda", generator=g) for name, b, t in cases}
    rows, refs = [], {}

    def record(variant, mode, name, fn):
        try:
            s = fn()
        except Exception as e:  # a variant that cannot run (capture, memory): say so, go on
            print(f"# {variant} {mode} {name}: {type(e).__name__}: {str(e)[:200]}", flush=True)
            torch.cuda.synchronize()
            return
        rows.append({"variant": variant, "mode": mode, "case": name, "us": s * 1e6})
        print(f"{variant:>22} {mode:>5} {name:>13}: {s * 1e6:9.1f} us", flush=True)

    for impl in ("grouped_mm", "batched_mm"):
        model.set_experts_implementation(impl)
        for name, b, t in cases:
            if impl == "batched_mm" and t > 1:
                continue
            if impl == "grouped_mm":
                refs[name] = logits(model, inputs[name])
            for mode in ("graph", "eager"):
                record(f"bf16 {impl}", mode, name, lambda: time_forward(model, inputs[name], mode == "graph"))
    model.set_experts_implementation("grouped_mm")
    parts(model, "bf16", cases, record)
    model.set_experts_implementation("eager")
    bf16_bytes = torch.cuda.memory_allocated()
    t = time.time()
    info = compress(model)
    print(f"# compressed {info} in {time.time() - t:.0f} s: {bf16_bytes / 1e9:.2f} -> "
          f"{torch.cuda.memory_allocated() / 1e9:.2f} GB allocated", flush=True)
    checks = {}
    for name, b, t in cases:
        ex.GROUPED = False
        per = logits(model, inputs[name])
        ex.GROUPED = True
        grp = logits(model, inputs[name])
        checks[name] = {"grouped_vs_per_expert": rel(grp, per), "grouped_vs_bf16": rel(grp, refs[name]),
                        "per_expert_vs_bf16": rel(per, refs[name])}
        print(f"# {name}: rel err grouped/per-expert {checks[name]['grouped_vs_per_expert']:.2e}, grouped/bf16 "
              f"{checks[name]['grouped_vs_bf16']:.2e}, per-expert/bf16 {checks[name]['per_expert_vs_bf16']:.2e}",
              flush=True)
        for mode in ("graph", "eager"):
            record("fixed grouped", mode, name, lambda: time_forward(model, inputs[name], mode == "graph"))
        ex.GROUPED = False
        record("fixed per-expert", "eager", name, lambda: time_forward(model, inputs[name], False))
        ex.GROUPED = True
    parts(model, "fixed", cases, record)
    Path(a.out).mkdir(parents=True, exist_ok=True)
    (Path(a.out) / "moe_model.json").write_text(json.dumps({"rows": rows, "checks": checks, "layers": a.layers,
                                                            "device": torch.cuda.get_device_name()}, indent=1))

    def best(prefix, mode, name):
        got = [r["us"] for r in rows if r["variant"].startswith(prefix) and r["mode"] == mode and r["case"] == name
               and not r["variant"].endswith(("experts", "lm_head"))]
        return min(got) if got else float("nan")

    print(f"\n{a.layers}-layer Mixtral-shaped model forward, us (bf16 = fastest transformers experts implementation; "
          "x = bf16 time / fixed time, > 1 is faster)")
    print("| case | bf16 graph | fixed grouped graph | x | bf16 eager | fixed grouped eager | x | fixed per-expert "
          "eager | x |")
    print("|---|---|---|---|---|---|---|---|---|")
    for name, _, _ in cases:
        bg, fg_, be, fe, pe = (best("bf16", "graph", name), best("fixed grouped", "graph", name),
                               best("bf16", "eager", name), best("fixed grouped", "eager", name),
                               best("fixed per-expert", "eager", name))
        print(f"| {name} | {bg:.0f} | {fg_:.0f} | {bg / fg_:.2f} | {be:.0f} | {fe:.0f} | {be / fe:.2f} | {pe:.0f} | "
              f"{be / pe:.2f} |")
    print(f"# total {time.time() - t0:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
