# The merged tree's GPU check on a device machine (device tool, from the repository root:
# `bash tools/device_final_check.sh`): build the C extension as pip does, then the compiled GPU
# tests of every kernel family and of the torch / HF paths that run them (CUDA, no interpreter),
# several pytest workers sharing one Triton cache, tests dealt one by one (DIST=loadfile: a file a
# worker; one long file then ran on one worker past the limit, 2026-12-03). Logs under $OUT (a line
# per test); the summary last.
OUT=${OUT:-/tmp/final_check_out}
mkdir -p "$OUT"
python3 setup.py build_ext --inplace -q > "$OUT/build.log" 2>&1; echo "build rc=$?"
export PYTHONPATH=src PYTHONUNBUFFERED=1 WCODEC_GPU_TESTS_ON_DEVICE=1
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
python3 -c "import torch, triton, transformers; print('torch', torch.__version__, 'triton', triton.__version__, 'transformers', transformers.__version__)"
t0=$(date +%s)
timeout "${TESTS_S:-420}" python3 -m pytest -v -rfE -p no:cacheprovider -n "${WORKERS:-8}" --dist "${DIST:-load}" ${PYTEST_EXTRA:-} \
    ${TESTS:-tests/gpu tests/torch tests/fuzz/test_fixed_kernels.py tests/hf/test_hf_llama.py tests/hf/test_hf_fused.py \
    tests/hf/test_warmup.py tests/hf/test_hf_auto.py tests/hf/test_hf_fp16.py tests/hf/test_hf_loading.py} > "$OUT/tests.log" 2>&1
echo "tests rc=$? $(( $(date +%s) - t0 )) s"
grep -E "^(FAILED|ERROR) " "$OUT/tests.log" | cut -c1-300 | head -30  # -rfE summary (-v lines say them too)
# per-test lines (-v), so a run cut by the limit still says which tests passed
echo "passed $(grep -c " PASSED" "$OUT/tests.log"), failed $(grep -c " FAILED" "$OUT/tests.log"), skipped $(grep -c " SKIPPED" "$OUT/tests.log")"
tail -2 "$OUT/tests.log"
