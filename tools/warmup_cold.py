"""A kept-compressed model's load-time warm-up (wcodec.hf.warmup) on a cold and on a warm Triton
cache, with and without the precompile workers and the shipped kernel pack (issue 28: first process
within 1.1x of a warm one).

Each measurement is a fresh process holding one Llama-2-7B layer's distinct linears (4096x4096,
11008x4096, 4096x11008) and a 32000x4096 lm_head as CompressedLinear modules on the GPU
(random N(0, 0.02) weights; ``SHAPES="5120x5120,13824x5120,..."`` for others); it runs ``warmup()``
and prints its report. Order: cold cache with workers off (WCODEC_WARMUP_WORKERS=0: the serial
sweep), cold cache with workers (a second empty cache directory), then that cache again (warm), then
a third empty cache with the kernel pack of src/wcodec/gpu/packs installed (wcodec.gpu.kernel_pack;
the other rows run with WCODEC_KERNEL_PACK=0). ``ROWS`` picks rows by name (separated by ";").
``MODEL=mixtral``: one Mixtral-8x7B-wide layer instead (benchmarks/moe_model.py: experts and
linears compressed). After the warm-up each process times the calls a server makes (linears at
10 row counts; the Mixtral layer's forward at 5 prompt lengths and 5 decode batches): the worst
call, and how many took over 0.15 s (a compile during serving). GPU only.

    PYTHONPATH=src python3 tools/warmup_cold.py            # table last; JSON to $OUT when set
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time

CHILD = r"""
import json, sys, time, torch
from wcodec.hf import warmup
from wcodec.torch.linear import CompressedLinear
g = torch.Generator(device="cuda").manual_seed(0)
if MODEL == "mixtral":  # one Mixtral-8x7B-wide layer, experts and linears compressed
    sys.path.insert(0, "benchmarks")
    import moe_model
    model = moe_model.build(1)
    moe_model.compress(model)
    calls = [((1, t), None) for t in (1, 5, 64, 300, 800)] + [((b, 1), None) for b in (2, 8, 37, 64, 256)]
else:
    mods = [CompressedLinear.from_weight((torch.randn(n, k, device="cuda", generator=g) * 0.02).to(torch.bfloat16))
            for n, k in SHAPES]
    model = torch.nn.Sequential(*mods)
    calls = [(m, lin) for lin in mods for m in (1, 3, 16, 37, 64, 100, 128, 200, 256, 300)]
torch.cuda.synchronize()
t = time.perf_counter()
rep = warmup.warmup(model)
rep["wall_s"] = time.perf_counter() - t
slow, worst = [], 0.0  # the calls a server makes after the warm-up: over 0.15 s means a compile
with torch.no_grad():
    for shape, lin in calls:
        t = time.perf_counter()
        if lin is None:
            model(input_ids=torch.zeros(shape, dtype=torch.long, device="cuda"), use_cache=False)
        else:
            lin(torch.zeros(shape, lin.in_features, dtype=torch.bfloat16, device="cuda"))
        torch.cuda.synchronize()
        dt = time.perf_counter() - t
        worst = max(worst, dt)
        if dt > 0.15:
            slow.append([shape, round(dt, 2)])
rep["after"] = {"calls": len(calls), "worst_s": worst, "slow": slow}
print("RESULT " + json.dumps(rep, default=str))
"""


def run(cache: str, workers: str | None, pack: bool, shapes: list, timeout: float) -> dict:
    env = {**os.environ, "TRITON_CACHE_DIR": cache, "WCODEC_KERNEL_PACK": "1" if pack else "0"}
    if workers is not None:
        env["WCODEC_WARMUP_WORKERS"] = workers
    t = time.perf_counter()
    try:
        p = subprocess.run([sys.executable, "-c", f"SHAPES = {shapes!r}\nMODEL = {os.environ.get('MODEL', '')!r}\n"
                            + CHILD], capture_output=True, text=True, env=env, timeout=timeout)
    except subprocess.TimeoutExpired:
        return {"error": f"killed after {timeout:.0f} s"}
    if p.returncode or "RESULT " not in p.stdout:
        return {"error": p.stderr.strip().splitlines()[-1][:300] if p.stderr.strip() else f"exit {p.returncode}"}
    out = json.loads(p.stdout.split("RESULT ", 1)[1])
    out["process_s"] = time.perf_counter() - t
    return out


def main() -> int:
    import torch

    print(f"device {torch.cuda.get_device_name()}, cpus {os.cpu_count()}", flush=True)
    timeout = float(os.environ.get("WARMUP_TIMEOUT", "240"))
    shapes = [tuple(int(v) for v in s.split("x")) for s in
              os.environ.get("SHAPES", "4096x4096,11008x4096,4096x11008,32000x4096").split(",")]
    print("shapes", shapes, flush=True)
    rows = []
    serial, par, packed = (tempfile.mkdtemp(prefix=f"tc_{n}_") for n in ("serial", "par", "pack"))
    plan = (("cold, serial", serial, "0", False), ("cold, workers", par, None, False), ("warm", par, None, False),
            ("warm, serial", serial, "0", False), ("cold, pack", packed, None, True))
    picked = os.environ.get("ROWS")
    for name, cache, workers, pack in plan:
        if picked and name not in picked.split(";"):
            continue
        r = run(cache, workers, pack, shapes, timeout)
        rows.append((name, r))
        print(name, json.dumps(r, default=str)[:800], flush=True)
    if os.environ.get("OUT"):
        with open(os.path.join(os.environ["OUT"], "warmup_cold.json"), "w") as f:
            json.dump(rows, f, indent=1, default=str)
    print("\n| cache, sweep | warm-up s | pack installed | workers | probe s | precompile s | calls | process s "
          "| after: worst call s, compiles |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---|")
    for name, r in rows:
        if "error" in r:
            print(f"| {name} | failed: {r['error'][:100]} | | | | | | | |")
            continue
        pre = next(iter((r.get("precompile") or {}).values()), None) or {}
        kp = next(iter((r.get("kernel_pack") or {}).values()), None) or {}
        print(f"| {name} | {r['seconds']:.1f} | {kp.get('installed', '-')} of {kp.get('kernels', '-')} | "
              f"{pre.get('workers', '-')} | {pre.get('probe_s', 0):.2f} | "
              f"{pre.get('seconds', 0):.1f} | {r['calls']} | {r['process_s']:.1f} | "
              f"{r['after']['worst_s']:.3f}, {len(r['after']['slow'])} of {r['after']['calls']} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
