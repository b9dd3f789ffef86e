# The MoE load run of issue 26 on a GPU machine (device tool: `bash tools/device_moe_load.sh`):
# build the C extension as pip install does, run the GPU tests of the load path, then the
# Mixtral-shaped benchmark (fresh processes) and a profile of each load. Logs under $OUT.
OUT=${OUT:-/tmp/moe_load_out}
mkdir -p "$OUT"
python3 setup.py build_ext --inplace > "$OUT/build.log" 2>&1; echo "build rc=$?"
export PYTHONPATH=src
WCODEC_GPU_TESTS_ON_DEVICE=1 timeout 240 python3 -m pytest -q -rfE tests/torch/test_experts.py tests/hf/test_hf_lazy.py \
    tests/codecs/test_fixed_check_native.py tests/gpu/test_upload.py tests/gpu/test_fixed_encode_interp.py \
    > "$OUT/tests.log" 2>&1; echo "tests rc=$?"; tail -3 "$OUT/tests.log"
timeout 330 python3 benchmarks/hf_ab.py --moe --layers 4 --rounds 1 --max-minutes 5.2 --workdir /tmp/hf_ab_moe \
    > "$OUT/moe.log" 2>&1; echo "moe rc=$?"
timeout 100 python3 tools/moe_load_profile.py --layers 4 > "$OUT/profile.log" 2>&1; echo "profile rc=$?"
grep "^== " "$OUT/profile.log"
grep -v "Loading weights\|Warning\|warn\|^# round" "$OUT/moe.log" | tail -9
