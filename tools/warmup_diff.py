"""Which kernels a kept-compressed model's own warm-up sweep still compiles after the precompile
workers (wcodec.gpu.precompile): one fresh process on an empty Triton cache holding
tools/warmup_cold.py's four Llama-2-7B-layer linears; prints the workers' report, the caller's
sweep calls slower than 0.15 s after the workers ended (a compile: M, N, K, seconds), and the
Triton cache entries written after the workers, each beside the workers' entries of the same
kernel name (the metadata keys that differ). GPU only. 2026-12-02 (H200) it showed why the sweep
cannot be split by row groups over the workers (wcodec/gpu/precompile.py's docstring).

    PYTHONPATH=src python3 tools/warmup_diff.py
"""

from __future__ import annotations

import glob
import json
import os
import subprocess
import sys
import tempfile

CHILD = r"""
import json, time, torch
from wcodec.hf import warmup
from wcodec.gpu import precompile as pc
from wcodec.torch.linear import CompressedLinear
real = pc.precompile
def timed(*a, **k):
    r = real(*a, **k)
    r["ended"] = time.time()
    return r
pc.precompile = timed
g = torch.Generator(device="cuda").manual_seed(0)
shapes = [(4096, 4096), (11008, 4096), (4096, 11008), (32000, 4096)]
mods = [CompressedLinear.from_weight((torch.randn(n, k, device="cuda", generator=g) * 0.02).to(torch.bfloat16))
        for n, k in shapes]
from wcodec.gpu import fixed as fx
slow, real_linear = [], fx.linear
def linear(x, fw, bias=None, **kw):
    t = time.perf_counter()
    y = real_linear(x, fw, bias, **kw)
    torch.cuda.synchronize()
    dt = time.perf_counter() - t
    if dt > 0.15 and getattr(pc, "_done", False):
        slow.append((x.shape[0], fw.N, fw.K, round(dt, 2), sorted(k[0] for k in fx._BEST)[-3:]))
    return y
fx.linear = linear
def timed2(*a, **k):
    r = timed(*a, **k)
    pc._done = True
    return r
pc.precompile = timed2
rep = warmup.warmup(torch.nn.Sequential(*mods))
rep["slow"] = slow
print("RESULT " + json.dumps(rep, default=str))
"""


def main() -> int:
    cache = tempfile.mkdtemp(prefix="tc_diff_")
    p = subprocess.run([sys.executable, "-c", CHILD], capture_output=True, text=True,
                       env={**os.environ, "TRITON_CACHE_DIR": cache}, timeout=300)
    if "RESULT " not in p.stdout:
        print(p.stderr[-2000:])
        return 1
    rep = json.loads(p.stdout.split("RESULT ", 1)[1])
    pre = next(iter(rep["precompile"].values()))
    ended = pre["ended"]
    print({k: v for k, v in pre.items() if k not in ("errors", "warnings")}, "warm-up s", round(rep["seconds"], 1))
    print("worker errors:", pre.get("errors"), "\nworker warnings:", pre.get("warnings"))
    for row in rep.get("slow", []):
        print("slow call of the caller's sweep (M, N, K, s):", row[:4])
    entries = []
    for meta in glob.glob(os.path.join(cache, "*", "*.json")):
        if os.path.basename(meta).startswith("__grp__"):
            continue
        try:
            m = json.load(open(meta))
        except (OSError, ValueError):
            continue
        if not isinstance(m, dict) or "name" not in m:
            continue
        entries.append((os.path.getmtime(meta), m))
    late = [m for t, m in entries if t > ended]
    early = [m for t, m in entries if t <= ended]
    print(f"cache entries: {len(early)} by the workers, {len(late)} after them")
    for m in late:
        same = [e for e in early if e["name"] == m["name"]]
        print(f"\n{m['name']}: {len(same)} worker entries of that name")
        for e in same[:3]:
            diff = {k: (m.get(k), e.get(k)) for k in set(m) | set(e)
                    if k not in ("hash", "shared", "tmem_size", "global_scratch_size", "profile_scratch_size")
                    and m.get(k) != e.get(k)}
            print("  differs from a worker's in:", json.dumps(diff, default=str)[:600])
        if not same:
            print("  ", json.dumps({k: m[k] for k in m if k not in ("hash",)}, default=str)[:600])
    return 0


if __name__ == "__main__":
    sys.exit(main())
