# Build the kernel pack for the device's Triton and GPU, then measure and check it (device tool,
# from the repository root: `bash tools/device_kernel_pack.sh`). Writes the pack and logs under
# $OUT; the tables of tools/warmup_cold.py last (a 7B layer + lm_head; one Mixtral-wide layer;
# then 13B shapes that no shipped configuration names: held out from the build, WITH_13B=0 skips
# them). ROWS_7B / ROWS_MOE pick the rows of the first two.
OUT=${OUT:-/tmp/kernel_pack_out}
mkdir -p "$OUT"
python3 setup.py build_ext --inplace -q > "$OUT/build.log" 2>&1; echo "build rc=$?"
export PYTHONPATH=src PYTHONUNBUFFERED=1
python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__, torch.cuda.get_device_name())"
python3 tools/build_kernel_pack.py > "$OUT/build_pack.log" 2>&1; echo "build_kernel_pack rc=$?"; tail -6 "$OUT/build_pack.log"
mkdir -p src/wcodec/gpu/packs && cp "$OUT"/triton-*.tar.xz src/wcodec/gpu/packs/
# the kernels as loaded from the pack, in a fresh cache, against a float32 reference
TRITON_CACHE_DIR=$(mktemp -d) python3 - <<'PY' 2>&1 | tee "$OUT/check.log"
import time, torch
from wcodec.gpu import kernel_pack
from wcodec.torch.linear import CompressedLinear
rep = kernel_pack.install()
print("install", rep)
g = torch.Generator(device="cuda").manual_seed(1)
worst, slow = 0.0, []
for n, k in ((4096, 4096), (11008, 4096), (4096, 11008)):
    w = (torch.randn(n, k, device="cuda", generator=g) * 0.02).to(torch.bfloat16)
    lin = CompressedLinear.from_weight(w)
    for m in (1, 5, 16, 24, 32, 48, 64, 100, 128, 200, 256, 300):
        x = torch.randn(m, k, device="cuda", generator=g).to(torch.bfloat16)
        t = time.perf_counter()
        y = lin(x)
        torch.cuda.synchronize()
        dt = time.perf_counter() - t
        if dt > 0.15:
            slow.append((n, k, m, round(dt, 2)))
        ref = x.float() @ w.float().T
        worst = max(worst, ((y.float() - ref).abs().max() / ref.abs().max()).item())
print(f"check: worst relative error {worst:.2e}; calls over 0.15 s (a compile): {slow}")
assert worst < 2e-2
PY
ROWS=${ROWS_7B:-"cold, workers;warm;cold, pack"} python3 tools/warmup_cold.py > "$OUT/warmup_7b.log" 2>&1
tail -5 "$OUT/warmup_7b.log"
MODEL=mixtral ROWS=${ROWS_MOE:-"cold, workers;warm;cold, pack"} python3 tools/warmup_cold.py > "$OUT/warmup_moe.log" 2>&1
tail -5 "$OUT/warmup_moe.log"
if [ "${WITH_13B:-1}" = 1 ]; then
  SHAPES=5120x5120,13824x5120,5120x13824,32000x5120 ROWS="cold, workers;cold, pack" python3 tools/warmup_cold.py \
      > "$OUT/warmup_13b.log" 2>&1; tail -4 "$OUT/warmup_13b.log"
fi
