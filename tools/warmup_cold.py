"""A kept-compressed model's load-time warm-up (wcodec.hf.warmup) on a cold and on a warm Triton
cache, with and without the precompile workers and the shipped kernel pack (issue 28: first process
within 1.1x of a warm one).

Each measurement is a fresh process holding one Llama-2-7B layer's distinct linears (4096x4096,
11008x4096, 4096x11008) and a 32000x4096 lm_head as CompressedLinear modules on the GPU
(random N(0, 0.02) weights; ``SHAPES="5120x5120,13824x5120,..."`` for others); it runs ``warmup()``
and prints its report. Order: cold cache with workers off (WCODEC_WARMUP_WORKERS=0: the serial
sweep), cold cache with workers (a second empty cache directory), then that cache again (warm), then
a third empty cache with the kernel pack of src/wcodec/gpu/packs installed (wcodec.gpu.kernel_pack;
the other rows run with WCODEC_KERNEL_PACK=0). ``ROWS`` picks rows by name (separated by ";"). GPU only.

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
import json, time, torch
from wcodec.hf import warmup
from wcodec.torch.linear import CompressedLinear
g = torch.Generator(device="cuda").manual_seed(0)
shapes = SHAPES
mods = [CompressedLinear.from_weight((torch.randn(n, k, device="cuda", generator=g) * 0.02).to(torch.bfloat16))
        for n, k in shapes]
model = torch.nn.Sequential(*mods)
torch.cuda.synchronize()
t = time.perf_counter()
rep = warmup.warmup(model)
rep["wall_s"] = time.perf_counter() - t
print("RESULT " + json.dumps(rep, default=str))
"""


def run(cache: str, workers: str | None, pack: bool, shapes: list, timeout: float) -> dict:
    env = {**os.environ, "TRITON_CACHE_DIR": cache, "WCODEC_KERNEL_PACK": "1" if pack else "0"}
    if workers is not None:
        env["WCODEC_WARMUP_WORKERS"] = workers
    t = time.perf_counter()
    try:
        p = subprocess.run([sys.executable, "-c", f"SHAPES = {shapes!r}\n" + CHILD], capture_output=True, text=True,
                           env=env, timeout=timeout)
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
    print("\n| cache, sweep | warm-up s | pack installed | workers | probe s | precompile s | calls | process s |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    for name, r in rows:
        if "error" in r:
            print(f"| {name} | failed: {r['error'][:100]} | | | | | | |")
            continue
        pre = next(iter((r.get("precompile") or {}).values()), None) or {}
        kp = next(iter((r.get("kernel_pack") or {}).values()), None) or {}
        print(f"| {name} | {r['seconds']:.1f} | {kp.get('installed', '-')} of {kp.get('kernels', '-')} | "
              f"{pre.get('workers', '-')} | {pre.get('probe_s', 0):.2f} | "
              f"{pre.get('seconds', 0):.1f} | {r['calls']} | {r['process_s']:.1f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
