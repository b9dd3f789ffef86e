"""Compile the fused kernels of many weights in parallel processes, into Triton's cache.

A fresh process on a fresh machine compiles every fused kernel variant the routing reaches
(:func:`wcodec.gpu.fixed.linear`: one per kernel kind, M bucket, split and Triton's
specialisation of the integer arguments) before it can serve without compiling mid-request
(:mod:`wcodec.hf.warmup`). Triton compiles in the calling process, one kernel at a time (on
the H100, a Llama-2-13B-shaped model's first process on an empty cache had not loaded, warmed up
and served 128 requests after 341 s; a warm one loads in seconds). Compiled kernels (and
autotuning results) land in Triton's on-disk cache (``TRITON_CACHE_DIR``, default
``~/.triton/cache``) keyed by source, arguments' specialisation and GPU, so other processes can
compile them: :func:`precompile` hands (weight shape, row counts) tasks to worker processes
(``python -m wcodec.gpu.precompile SPEC``, SPEC: :func:`run_spec`'s JSON), each running the same :func:`sweep` on a stand-in weight of the same layout (zeros: the same
shapes, escape count, base and alignment, hence the same kernels and specialisations; the values
never reach a compile); the caller's own sweep then loads every kernel from the cache.

One worker per distinct weight, each sweeping all its row counts in order. Split finer, the
caller's sweep still compiles kernels itself: by row groups over 8 workers when the kernels
autotuned (17 kernels), and again with the shipped configurations, cut at the autotuning
buckets (24 pieces, 8 workers, H200 2026-12-02, ``tools/warmup_diff.py``): the caller compiled
the warp-specialised kernel at M = 65 and 80 and the decode kernel at 129 for the three weights
of K = 4096 (8 kernels, 11 s), none for 4096x11008; workers 14.8 s, warm-up 27.1 s against 19.0 s
per weight. Some state of a weight's sweep below 65 rows reaches its kernels above (not found).
A Llama-2-7B layer's three linear shapes and a 32000x4096 lm_head (``tools/warmup_cold.py``),
warm-up on an empty cache: H100 29.5 s serial, 18.0 s with 4 workers, 0.3 s warm; H200
(2026-12-02) 38.6 s serial, 19.0 s with 4 workers, 0.4 s warm.

The workers are an accelerator, never a dependency: a failed or missing worker only leaves its
kernels to the caller's own sweep. ``WCODEC_WARMUP_WORKERS`` caps their number (0: none).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from dataclasses import asdict, dataclass

import torch

from . import fixed as fx

#: GPU memory each worker process needs (its CUDA context, a stand-in weight, scratch), bytes
WORKER_GPU_BYTES = 3 << 29
#: most worker processes started by :func:`precompile`
MAX_WORKERS = 8


@dataclass(frozen=True)
class Task:
    """One weight layout and the activation row counts to run on it: N, K (weight [N, K]),
    escapes (its escape count: it routes 65-128 rows), base (its exponent base; the kernels no
    longer specialise on it nor on the escapes' alignment, ``fixed_kernels.PER_WEIGHT``, so the
    stand-in's kernels serve every weight of the shape), bias (whether a bias is passed), dtype
    (the activations', a torch dtype name), ms (row counts M)."""

    N: int
    K: int
    escapes: int
    base: int
    bias: bool
    dtype: str
    ms: tuple


def sweep(fw, bias: torch.Tensor | None, dtype: torch.dtype, ms, linear=None) -> int:
    """Run ``linear`` (default ``fx.linear``; ``wcodec.gpu.fixed16.linear`` for a Fixed16Weight) on
    ``fw`` once for each row count in ``ms`` (x: zeros [M, K] of ``dtype`` on fw's device, one
    allocation sliced: contiguous and aligned as a fresh tensor); returns the number of calls.
    Nothing is modified."""
    ms, linear = list(ms), linear or fx.linear
    if not ms:
        return 0
    x = torch.zeros((max(ms), fw.K), dtype=dtype, device=fw.device)
    with torch.no_grad():
        for m in ms:
            linear(x[:m], fw, bias)
    return len(ms)


def stand_in(task: Task, device) -> tuple[fx.FixedWeight, torch.Tensor | None]:
    """A weight of ``task``'s layout with all-zero planes and escapes (and a zero bias), on ``device``.

    Its escape arrays have the weight's length (routing and launch grids follow that count), but no
    row's pointer range holds one (eptr all zero), so the kernels launch the same variants and read
    nothing from them. It is not a canonical record: the GPU kernels take it (they do not
    validate); the codec's CPU decoder rejects it unless ``task.escapes`` is 0."""
    packed = torch.zeros(fx.packed_size(task.N, task.K, task.escapes), dtype=torch.uint8, device=device)
    bias = torch.zeros(task.N, dtype=getattr(torch, task.dtype), device=device) if task.bias else None
    return fx.unpack(packed, task.base, task.N, task.K), bias


def task_of(fw: fx.FixedWeight, bias: bool, dtype: torch.dtype, ms) -> Task:
    """The task of one weight: all of ``ms`` in one process, in order, as the caller's own sweep
    runs them (a weight's row counts share autotuning keys and in-process state: split over
    processes they compiled variants the caller's sweep then missed, H100)."""
    name = str(dtype).removeprefix("torch.")
    return Task(fw.N, fw.K, int(fw.ecol.numel()), int(fw.base), bool(bias), name, tuple(ms))


def worker_count(n_tasks: int, device) -> int:
    """How many workers :func:`precompile` starts for ``n_tasks`` on ``device``: at most one per
    task, per spare CPU core (one is left to the caller), per WORKER_GPU_BYTES of free GPU memory,
    MAX_WORKERS and ``WCODEC_WARMUP_WORKERS``; 0 when fewer than 2 would run (then the caller's
    own sweep is as fast)."""
    env = os.environ.get("WCODEC_WARMUP_WORKERS")
    cap = MAX_WORKERS if env is None else max(0, int(env))
    n = min(n_tasks, max(0, (os.cpu_count() or 1) - 1), cap)
    if n >= 2 and torch.device(device).type == "cuda":
        free, _ = torch.cuda.mem_get_info(device)
        n = min(n, free // WORKER_GPU_BYTES)
    return int(n) if n >= 2 else 0


def precompile(tasks: list[Task], device, timeout: float = 900.0) -> dict:
    """Run ``tasks`` in worker processes on CUDA ``device`` (see the module docstring), the tasks
    dealt round robin, largest weights first (at most one worker per task). Blocks until every
    worker ends (or ``timeout`` seconds pass: the rest is killed). Returns ``{"workers": started, "tasks": len(tasks),
    "failed": workers that did not finish cleanly, "seconds": wall time, "errors": last lines of
    their stderr, "warnings": wcodec's warnings from the others}``; a worker's failure is
    reported, never raised."""
    t0 = time.perf_counter()
    n = worker_count(len(tasks), device)
    out = {"workers": n, "tasks": len(tasks), "failed": 0, "seconds": 0.0, "errors": [], "warnings": []}
    if not n:
        return out
    order = sorted(tasks, key=lambda t: -t.N * t.K)
    shares = [order[i::n] for i in range(n)]
    index = fx._cuda_index(torch.device(device))
    procs = []
    for share in shares:
        spec = json.dumps({"device": index, "tasks": [asdict(t) for t in share]})
        procs.append(subprocess.Popen([sys.executable, "-m", "wcodec.gpu.precompile", spec], stdin=subprocess.DEVNULL,
                                      stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=_child_env()))
    deadline = t0 + timeout
    for p in procs:
        try:
            err = p.communicate(timeout=max(0.1, deadline - time.perf_counter()))[1]
        except subprocess.TimeoutExpired:
            p.kill()
            err = p.communicate()[1] + "\nkilled: precompile timeout"
        if p.returncode:
            out["failed"] += 1
            out["errors"].append((err or f"exit {p.returncode}").strip().splitlines()[-1][:300])
        else:  # a kernel family that failed in a worker (wcodec's warning) left its kernels uncompiled
            out["warnings"] += [ln.strip()[:300] for ln in (err or "").splitlines() if "wcodec:" in ln][:4]
    out["seconds"] = time.perf_counter() - t0
    return out


def _child_env() -> dict:
    """The workers' environment: the caller's, with the folder that holds this ``wcodec`` first on
    PYTHONPATH (the caller may have found it by a path the environment does not name)."""
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([root] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p])
    return env


def run_spec(spec: dict) -> int:
    """A worker's work: every task of ``spec`` ({"device": CUDA index or "cpu", "tasks": [Task
    fields]}) swept on a stand-in weight. Returns the number of calls."""
    dev = spec.get("device", 0)
    device = torch.device("cpu") if dev == "cpu" else torch.device("cuda", int(dev))
    calls = 0
    for t in spec["tasks"]:
        task = Task(**{**t, "ms": tuple(t["ms"])})
        fw, bias = stand_in(task, device)
        calls += sweep(fw, bias, getattr(torch, task.dtype), task.ms)
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    return calls


if __name__ == "__main__":
    run_spec(json.loads(sys.argv[1]))
