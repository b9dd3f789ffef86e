#!/usr/bin/env python
"""Long fuzz runs of the readers (the bounded CI run is tests/fuzz/test_fuzz_hostile.py).

Hostile files come from ``tests/fuzz/hostile.py``: valid seeds mutated with every checksum
recomputed, codec "fixed" records with mutated escape lists (read by every CPU consumer, and run
through the Triton kernels in the interpreter against the decoder), and module state dicts
(``torch.load(weights_only=True)`` + ``load_state_dict``). Kinds are drawn with
``hostile.WEIGHTS`` (``--kinds`` restricts them). Cases run in worker processes, each limited to ``--mem-gb`` of address space; a
case that runs longer than ``--case-timeout`` seconds is a hang and its worker is killed. A
worker that dies (SIGBUS, SIGSEGV, out of memory) is charged to the case it was running. Every
non-WcodecError outcome is saved as a reproducer under ``--out``.

    nice -n 10 python tools/fuzz.py --minutes 30 --out /tmp/wcodec-fuzz

Prints a table of cases and outcomes per kind at the end (and writes summary.json).
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests" / "fuzz"))


def worker(args) -> None:
    """Run ``args.cases`` cases; log 'start' before and the outcome after each (JSON lines)."""
    gb = int(args.mem_gb * (1 << 30))
    resource.setrlimit(resource.RLIMIT_AS, (gb, gb))
    os.environ.setdefault("TRITON_INTERPRET", "1")  # the fixed-kernels kind, on the CPU; before triton loads
    import hostile

    fz = hostile.Fuzzer(Path(args.out) / f"work-{os.getpid()}", seed=args.seed)
    hostile.warm_up()  # torch / triton imports once, not inside the first case's hang timer
    log = open(args.log, "a", buffering=1)
    kinds = args.kinds.split(",") if args.kinds else list(hostile.KINDS)
    weights = [hostile.WEIGHTS[k] for k in kinds]
    for i in range(args.cases):
        kind = fz.rng.choices(kinds, weights)[0]
        os.utime(args.log)  # making a case is not a hang of the previous one
        fn, path, desc, raw = fz.make(kind)
        (Path(args.out) / f"current-{os.getpid()}.bin").write_bytes(raw)
        log.write(json.dumps({"event": "start", "kind": kind, "desc": desc, "pid": os.getpid()}) + "\n")
        res = hostile.outcome(fn, path)
        log.write(json.dumps({"event": "done", "kind": kind, "desc": desc, "outcome": res}) + "\n")
        if res.startswith("leak"):
            rep = Path(args.out) / "leaks" / f"{kind}-{args.seed}-{i}.bin"
            rep.parent.mkdir(exist_ok=True)
            rep.write_bytes(raw)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--minutes", type=float, default=30.0)
    ap.add_argument("--out", default="/tmp/wcodec-fuzz")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--batch", type=int, default=300, help="cases per worker process")
    ap.add_argument("--mem-gb", type=float, default=4.0)
    ap.add_argument("--case-timeout", type=float, default=30.0)
    ap.add_argument("--kinds", default="", help="comma-separated kinds of tests/fuzz/hostile.py (default: all)")
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--cases", type=int, default=0, help=argparse.SUPPRESS)
    ap.add_argument("--log", default="", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        worker(args)
        return 0

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    log = out / "cases.jsonl"
    counts: dict = collections.defaultdict(collections.Counter)
    deadline = time.monotonic() + 60 * args.minutes
    seed = args.seed
    t0 = time.monotonic()
    env = {**os.environ, "PYTHONPATH": f"{REPO / 'src'}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    while time.monotonic() < deadline:
        batch_log = out / f"batch-{seed}.jsonl"
        batch_log.unlink(missing_ok=True)
        p = subprocess.Popen([sys.executable, __file__, "--worker", "--seed", str(seed), "--cases",
                              str(args.batch), "--out", str(out), "--log", str(batch_log),
                              "--mem-gb", str(args.mem_gb), "--kinds", args.kinds], env=env)
        hung = False
        while p.poll() is None:
            time.sleep(1.0)
            if batch_log.exists() and time.time() - batch_log.stat().st_mtime > args.case_timeout:
                p.kill()
                hung = True
            if time.monotonic() > deadline + args.case_timeout:
                p.kill()
        p.wait()
        last_start = None
        for line in batch_log.read_text().splitlines() if batch_log.exists() else []:
            ev = json.loads(line)
            if ev["event"] == "start":
                last_start = ev
            else:
                counts[ev["kind"]][ev["outcome"]] += 1
                last_start = None
        if last_start is None and p.returncode and not hung and time.monotonic() < deadline:
            counts["(worker)"][f"error:rc={p.returncode}"] += 1  # died outside a case (seeds)
        if last_start is not None and time.monotonic() < deadline:
            what = "hang" if hung else f"crash:rc={p.returncode}"
            counts[last_start["kind"]][what] += 1
            cur = out / f"current-{last_start['pid']}.bin"
            if cur.exists():
                (out / "leaks").mkdir(exist_ok=True)
                cur.rename(out / "leaks" / f"{last_start['kind']}-{seed}-{what}.bin")
            with open(out / "crashes.txt", "a") as f:
                f.write(f"{what} {last_start['kind']} {last_start['desc']}\n")
        with open(log, "a") as f:
            f.write(batch_log.read_text() if batch_log.exists() else "")
        batch_log.unlink(missing_ok=True)
        seed += 1
        summary = {"minutes": (time.monotonic() - t0) / 60, "batches": seed - args.seed,
                   "counts": {k: dict(v) for k, v in counts.items()}}
        (out / "summary.json").write_text(json.dumps(summary, indent=2))
    total = collections.Counter()
    print(f"{'kind':20s} {'cases':>7s}  outcomes")
    for kind in sorted(counts):
        total.update(counts[kind])
        print(f"{kind:20s} {sum(counts[kind].values()):7d}  {dict(counts[kind])}")
    print(f"{'total':20s} {sum(total.values()):7d}  {dict(total)}  in {(time.monotonic() - t0) / 60:.1f} min")
    return 1 if any(k not in ("ok", "rejected") for k in total) else 0


if __name__ == "__main__":
    sys.exit(main())
