# Issue 28 must-have 2 on a GPU machine (device tool: `bash tools/device_moe_grouped.sh`): build
# the C extension, run the experts / grouped-kernel tests compiled on the GPU, then the
# Mixtral-shaped model forward, kept compressed (grouped kernels; per-expert loop) against bf16
# (benchmarks/moe_model.py). Logs under $OUT; the benchmark's table last.
OUT=${OUT:-/tmp/moe_grouped_out}
mkdir -p "$OUT"
python3 setup.py build_ext --inplace -q > "$OUT/build.log" 2>&1; echo "build rc=$?"
export PYTHONPATH=src
WCODEC_GPU_TESTS_ON_DEVICE=1 timeout ${TESTS_S:-150} python3 -m pytest -q -rfE -p no:cacheprovider \
    ${TESTS:-tests/torch/test_experts_grouped.py tests/gpu/test_fixed_grouped.py tests/torch/test_experts.py} \
    > "$OUT/tests.log" 2>&1; echo "tests rc=$?"; grep -E "passed|failed|Error" "$OUT/tests.log" | tail -8
timeout ${BENCH_S:-240} python3 benchmarks/moe_model.py --layers ${LAYERS:-2} --out "$OUT" ${BENCH_ARGS:-} > "$OUT/moe_model.log" 2>&1
echo "bench rc=$?"; grep -v "^ \|^#" "$OUT/moe_model.log" | tail -3; grep "^#\|^|\|experts\|lm_head" "$OUT/moe_model.log" | tail -26
