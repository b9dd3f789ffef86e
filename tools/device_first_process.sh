# Issue 28's first-process target on a GPU machine (device tool: `bash tools/device_first_process.sh`):
# the kept-compressed 7B-shaped model (16 layers, fixed folder) served by benchmarks/serve.py in
# processes alternating between an EMPTY Triton cache (the first process on a fresh machine: every
# kernel compiled at load, by the precompile workers and the warm-up sweep) and the cache that
# process left (a warm process), ROUNDS pairs. Compares load time, the first (untimed in serve.py's
# table) batch and tok/s / TTFT at each concurrency. Logs and JSON under $OUT; the table last.
ROUNDS=${ROUNDS:-2}
LEVELS=${LEVELS:-8,64}
OUT=${OUT:-/tmp/first_process_out}
mkdir -p "$OUT"
python3 setup.py build_ext --inplace > "$OUT/build.log" 2>&1; echo "build rc=$?"
export PYTHONPATH=src
nvidia-smi --query-gpu=name --format=csv,noheader
# the model folders first, with a cache of their own (nothing the fused linears run is compiled there)
TRITON_CACHE_DIR=/tmp/triton_prepare python3 benchmarks/serve.py --child prepare --model 7b --layers 16 \
    --variants fused --workdir /tmp/serve > "$OUT/prepare.log" 2>&1; echo "prepare rc=$?"
for r in $(seq 1 "$ROUNDS"); do
    export TRITON_CACHE_DIR=/tmp/triton_first_$r
    rm -rf "$TRITON_CACHE_DIR"
    for kind in first warm; do
        timeout 280 python3 benchmarks/serve.py --model 7b --layers 16 --variants fused --rounds 1 \
            --concurrency "$LEVELS" --workdir /tmp/serve --json "$OUT/${kind}_$r.json" \
            > "$OUT/${kind}_$r.log" 2>&1
        echo "round $r $kind rc=$? ($(du -sh "$TRITON_CACHE_DIR" | cut -f1) Triton cache)"
    done
done
python3 - "$OUT" "$LEVELS" <<'PY'
import json, statistics, sys
from pathlib import Path
out, levels = Path(sys.argv[1]), [f"c{c}" for c in sys.argv[2].split(",")]
rows = {"first": [], "warm": []}
for kind in rows:
    for f in sorted(out.glob(f"{kind}_*.json")):
        runs = json.loads(f.read_text())["runs"].get("auto/fused", [])
        rows[kind] += [r for r in runs if "error" not in r]
med = lambda runs, *path: statistics.median(v for v in (_get(r, path) for r in runs) if v is not None) if runs else None
def _get(r, path):
    for p in path:
        r = r.get(p) if isinstance(r, dict) else None
    return r
head = "| process | n | load s | warm-up s | first batch s |" + "".join(f" {c} tok/s | {c} TTFT ms |" for c in levels)
print(head); print("|---" * (head.count("|") - 1) + "|")
for kind, runs in rows.items():
    cells = [med(runs, "load_s"), med(runs, "warmup", "seconds"), med(runs, "first_batch", "seconds")]
    for c in levels:
        cells += [med(runs, c, "tok_s"), med(runs, c, "ttft_ms_median")]
    print(f"| {kind} | {len(runs)} |" + "".join(f" {v:.1f} |" if v is not None else " - |" for v in cells))
f, w = rows["first"], rows["warm"]
if f and w:
    for c in levels:
        print(f"{c}: first / warm tok/s = {med(f, c, 'tok_s') / med(w, c, 'tok_s'):.3f}")
    print(f"load: first / warm = {med(f, 'load_s') / med(w, 'load_s'):.2f}")
PY
