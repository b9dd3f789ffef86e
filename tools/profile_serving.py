#!/usr/bin/env python
"""What bounds the fused fixed-layout matmuls at 32-128 activation rows (issue 28): Nsight
Compute over the routed kernels and the alternatives, plus their times. Needs a CUDA GPU and ncu.

    PYTHONPATH=src python3 tools/profile_serving.py [--shapes 4096x4096,11008x4096] [--out DIR]

Runs itself under ``ncu --page raw --csv`` (sections SpeedOfLight, Occupancy, WarpStateStats,
LaunchStats, ComputeWorkloadAnalysis, InstructionStats; clocks left alone) over one call of each
case (cuBLAS bf16, the routed path at M = 32 / 64 / 128, the wgmma, wide and mma kernels forced
at 64 and 128 rows), cases told apart by a ``torch.cuda._sleep`` marker launch between them. The
raw CSV goes to DIR/ncu_raw.csv; printed last: per kernel its grid, registers, occupancy, SM and
memory throughput, the busiest pipes, the top stall reasons and the thread instructions executed
per weight of W. Then the same cases are timed without ncu (CUDA graphs, weight copies past the
L2, ``fused_matmul.graph_time``). Synthetic weights (normal, std 0.02).
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SECTIONS = ("SpeedOfLight", "Occupancy", "WarpStateStats", "LaunchStats", "ComputeWorkloadAnalysis",
            "InstructionStats")


def cases(fx, F, N, K, torch):
    """(w, fw, xs, [(label, M, call)]) for an [N, K] weight: call(w) for the cuBLAS cases, call(fw)
    for the others, runs that case's kernels once."""
    g = torch.Generator(device="cuda").manual_seed(N + K)
    w = (torch.randn(N, K, device="cuda", generator=g) * 0.02).to(torch.bfloat16)
    fw = fx.encode_weight(w)
    xs = {m: torch.randn(m, K, device="cuda", generator=g).to(torch.bfloat16) for m in (32, 64, 128)}

    def forced(path, m):
        def call(fw_):
            saved = fx.MMA_MAX_M, fx.WGMMA_MIN_M, fx.WGMMA_MAX_M
            try:
                fx.MMA_MAX_M = 256 if path == "mma" else 0
                fx.WGMMA_MIN_M, fx.WGMMA_MAX_M = (32, 256) if path == "wgmma" else (32, 0)
                return fx.linear(xs[m], fw_, kind="mm")
            finally:
                fx.MMA_MAX_M, fx.WGMMA_MIN_M, fx.WGMMA_MAX_M = saved
        return call

    out = [(f"cublas M{m}", m, lambda w_, m=m: F.linear(xs[m], w_)) for m in (64, 128)]
    out += [(f"routed M{m}", m, lambda fw_, m=m: fx.linear(xs[m], fw_)) for m in (32, 64, 128)]
    out += [(f"{p} M{m}", m, forced(p, m)) for p, m in (("wgmma", 64), ("wgmma", 128), ("wide", 128), ("mma", 64))]
    return w, fw, xs, out


def child(shapes) -> None:
    """Warm every case, then run each once between cudaProfilerStart/Stop with a marker before it."""
    import torch
    import torch.nn.functional as F

    from wcodec.gpu import fixed as fx
    labels, runs = [], []
    for N, K in shapes:
        w, fw, _, cs = cases(fx, F, N, K, torch)
        for label, m, call in cs:
            arg = w if label.startswith("cublas") else fw
            call(arg)
            call(arg)
            labels.append(dict(shape=f"{N}x{K}", N=N, K=K, M=m, case=label))
            runs.append(lambda call=call, arg=arg: call(arg))
    torch.cuda.synchronize()
    torch.cuda.profiler.start()
    for call in runs:
        torch.cuda._sleep(1000)  # marker: a new case starts
        call()
    torch.cuda.synchronize()
    torch.cuda.profiler.stop()
    print("LABELS " + json.dumps(labels), flush=True)


def num(v: str) -> float | None:
    try:
        return float(v.replace(",", ""))
    except (ValueError, AttributeError):
        return None


def summarize(rows: list[dict], labels: list[dict]) -> list[dict]:
    """Per profiled kernel (markers dropped): its case and the figures printed in the table."""
    out, i = [], -1
    for r in rows:
        name = r.get("Kernel Name", "")
        if "sleep" in name or "spin" in name:
            i += 1
            continue
        if i < 0 or i >= len(labels):
            continue
        lab = labels[i]
        stalls = {m.group(1): num(v) for k, v in r.items()
                  if (m := re.match(r"smsp__average_warps_issue_stalled_(\w+)_per_issue_active\.ratio$", k))}
        pipes = {m.group(1): num(v) for k, v in r.items()
                 if (m := re.match(r"sm__inst_executed_pipe_(\w+)\.avg\.pct_of_peak_sustained_active$", k))}
        top = lambda d, n: sorted(((k, v) for k, v in d.items() if v), key=lambda kv: -kv[1])[:n]  # noqa: E731
        inst = num(r.get("smsp__inst_executed.sum", ""))
        out.append(dict(
            case=f"{lab['shape']} {lab['case']}", kernel=name.split("(")[0][:40],
            grid=r.get("launch__grid_size"), block=r.get("launch__block_size"),
            regs=r.get("launch__registers_per_thread"), us=(num(r.get("gpu__time_duration.sum", "")) or 0) / 1e3,
            occ=num(r.get("sm__warps_active.avg.pct_of_peak_sustained_active", "")),
            occ_theory=num(r.get("sm__maximum_warps_per_active_cycle_pct", "")),
            sm_pct=num(r.get("sm__throughput.avg.pct_of_peak_sustained_elapsed", "")),
            mem_pct=num(r.get("gpu__compute_memory_throughput.avg.pct_of_peak_sustained_elapsed", "")),
            dram_pct=num(r.get("gpu__dram_throughput.avg.pct_of_peak_sustained_elapsed", "")),
            issue_pct=num(r.get("sm__inst_issued.avg.pct_of_peak_sustained_active", "")),
            pipes=top(pipes, 4), stalls=top(stalls, 4),
            thread_inst_per_w=inst * 32 / (lab["N"] * lab["K"]) if inst else None))
    return out


def profile(a) -> list[dict]:
    cmd = ["ncu", "--profile-from-start", "off", "--clock-control", "none", "--page", "raw", "--csv"]
    for s in SECTIONS:
        cmd += ["--section", s]
    cmd += [sys.executable, __file__, "--child", "--shapes", a.shapes]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
    with open(os.path.join(a.out, "ncu_stdout.txt"), "w") as f:
        f.write(r.stdout)
    with open(os.path.join(a.out, "ncu_stderr.txt"), "w") as f:
        f.write(r.stderr)
    if r.returncode != 0:
        print(r.stderr[-3000:], r.stdout[-2000:])
        raise SystemExit("ncu failed")
    lab_line = [ln for ln in r.stdout.splitlines() if ln.startswith("LABELS ")]
    labels = json.loads(lab_line[0][7:])
    body = [ln for ln in r.stdout.splitlines() if ln.startswith('"')]
    table = list(csv.DictReader(body))[1:]  # the row after the header holds the units
    with open(os.path.join(a.out, "ncu_raw.csv"), "w") as f:
        f.write("\n".join(body))
    return summarize(table, labels)


def timings(shapes) -> list[dict]:
    import torch
    import torch.nn.functional as F
    sys.path.insert(0, str(ROOT / "benchmarks"))
    from fused_matmul import graph_time

    from wcodec.gpu import fixed as fx
    out = []
    for N, K in shapes:
        w, fw, xs, cs = cases(fx, F, N, K, torch)
        n_copies = max(1, -(-3 * (50 << 20) // (N * K * 2)))
        fws = [fw] + [fx.encode_weight(w.clone()) for _ in range(n_copies - 1)]
        ws = [w] + [w.clone() for _ in range(n_copies - 1)]
        for label, m, call in cs:
            ref = xs[m].float() @ w.float().T
            arg = ws if label.startswith("cublas") else fws
            err = float((call(arg[0]).float() - ref).norm() / ref.norm())
            assert err < 5e-3, (N, K, label, err)
            t = graph_time(torch, [lambda a_=a_, call=call: call(a_) for a_ in arg] * (20 // len(arg) + 1))
            out.append(dict(shape=f"{N}x{K}", case=label, us=round(t * 1e6, 2)))
            print(json.dumps(out[-1]), flush=True)
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--shapes", default="4096x4096,11008x4096")
    ap.add_argument("--out", default=os.environ.get("OUT", "."))
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--no-ncu", action="store_true")
    a = ap.parse_args()
    shapes = [tuple(int(v) for v in s.split("x")) for s in a.shapes.split(",")]
    if a.child:
        child(shapes)
        return 0
    os.makedirs(a.out, exist_ok=True)
    times = timings(shapes)
    prof = [] if a.no_ncu else profile(a)
    with open(os.path.join(a.out, "profile_serving.json"), "w") as f:
        json.dump(dict(times=times, ncu=prof), f, indent=1)
    print("\n| case | kernel | grid | block | regs | us | occ % (theory) | SM % | mem % | DRAM % | issue % | "
          "thread inst / weight | pipes % | stalls (cycles per issue) |")
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|---|")
    for p in prof:
        f = lambda v: "-" if v is None else f"{v:.1f}"  # noqa: E731
        print(f"| {p['case']} | {p['kernel']} | {p['grid']} | {p['block']} | {p['regs']} | {p['us']:.1f} | "
              f"{f(p['occ'])} ({f(p['occ_theory'])}) | {f(p['sm_pct'])} | {f(p['mem_pct'])} | {f(p['dram_pct'])} | "
              f"{f(p['issue_pct'])} | {f(p['thread_inst_per_w'])} | "
              + ", ".join(f"{k} {v:.0f}" for k, v in p["pipes"]) + " | "
              + ", ".join(f"{k} {v:.1f}" for k, v in p["stalls"]) + " |")
    print("\n| case | " + " | ".join(s for s in dict.fromkeys(t["shape"] for t in times)) + " |  (us, graphs)")
    for c in dict.fromkeys(t["case"] for t in times):
        print(f"| {c} | " + " | ".join(str(t["us"]) for t in times if t["case"] == c) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
