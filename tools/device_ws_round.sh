# The warp-specialised kernel's round on a GPU machine (device tool, from the repository root:
# `bash tools/device_ws_round.sh`): build the C extension; time every config of fixed_ws.configs
# at splits SPLITS against cuBLAS and the route without the kernel, in one process
# (benchmarks/experiments/ws_kernel.py, Gaussian and Student-t weights); write the fastest per
# shape and M bucket into the shipped configs (tools/ws_ship.py); then the compiled GPU tests and
# the routed figures (benchmarks/serving_kernels.py) with those configs and, last (BEFORE=1, the
# default), with the configs shipped before. Logs, JSON and the new sm90.json under $OUT (8 files
# with BEFORE=0: what the device tool brings back). The tree's sm90.json is left as it was.
OUT=${OUT:-/tmp/ws_round_out}
SHAPES=${SHAPES:-0,1,2,3}
MS=${MS:-32,64,128}
mkdir -p "$OUT"
python3 setup.py build_ext --inplace > "$OUT/build.log" 2>&1; echo "build rc=$?"
export PYTHONPATH=src PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm --format=csv,noheader
CFG=src/wcodec/gpu/configs/sm90.json
cp "$CFG" /tmp/sm90_before.json
t0=$(date +%s)
timeout "${T_EXPLORE:-260}" python3 benchmarks/experiments/ws_kernel.py --shapes "$SHAPES" --ms "$MS" --splits "${SPLITS:-1,2,4}" \
    --configs 0,1,2,3,4,5,6,7,8,9 --heavy --route > "$OUT/ws_kernel.log" 2>&1; echo "explore rc=$? $(( $(date +%s) - t0 )) s"
python3 tools/ws_ship.py "$OUT/ws_kernel.json" "$CFG" --ms 64,128 > "$OUT/ship.log" 2>&1; echo "ship rc=$?"
cp "$CFG" "$OUT/sm90.json"
WCODEC_GPU_TESTS_ON_DEVICE=1 timeout "${T_TESTS:-150}" python3 -m pytest -q -x -p no:cacheprovider \
    tests/gpu/test_fixed_ws.py > "$OUT/tests.log" 2>&1; echo "tests rc=$? $(( $(date +%s) - t0 )) s"
mkdir -p "$OUT/after"; [ "${BEFORE:-1}" = 1 ] && mkdir -p "$OUT/before"
timeout "${T_SERVE:-80}" python3 benchmarks/serving_kernels.py --ms "$MS" --heavy-ms 64 --out "$OUT/after" \
    > "$OUT/serving_after.log" 2>&1; echo "serving after rc=$? $(( $(date +%s) - t0 )) s"
cp /tmp/sm90_before.json "$CFG"
[ "${BEFORE:-1}" = 1 ] && timeout "${T_SERVE:-80}" python3 benchmarks/serving_kernels.py --ms "$MS" --heavy-ms 64 --out "$OUT/before" \
    > "$OUT/serving_before.log" 2>&1; echo "serving before rc=$? $(( $(date +%s) - t0 )) s"
tail -3 "$OUT/tests.log"
cat "$OUT/ship.log"
grep "^|" "$OUT/ws_kernel.log"
echo "routed, new configs:"; grep "^|" "$OUT/serving_after.log"
echo "routed, configs before:"; grep "^|" "$OUT/serving_before.log"
