#!/usr/bin/env bash
# A/B of the C extension on the device tool's host CPU (quiet, unlike the shared 2-vCPU VM):
# this tree's kernels against an older wcodec_cext.c, in alternating whole processes, on two
# physical cores, for each instruction set named (WCODEC_ISA caps it: "avx2" is what a CPU
# without AVX-512 runs, e.g. AMD Zen 3). MiniLM BF16, kernels and the public API, ZipNN beside.
#
#   device tool, carrying a folder with zipnn-<version>.tar.gz, minilm_bf16r.safetensors.gz
#   (as tools/device_cpu_bench.sh says) and old_wcodec_cext.c (`git show REV:src/wcodec/csrc/wcodec_cext.c`):
#
#     bash tools/device_cpu_ab.sh carry "avx2 avx512" 3
#
# Logs under $OUT; the last lines are one table row per run.
set -uo pipefail
carry=${1:-carry}
isas=${2:-"avx2 avx512"}
rounds=${3:-3}
out=${OUT:-/tmp/wcodec_cpu_ab}
mkdir -p "$out"
root=$(pwd)

python -m pip install -q --no-deps --no-build-isolation "$carry"/zipnn-*.tar.gz >"$out/zipnn_install.log" 2>&1 \
    || echo "zipnn did not build: ZipNN columns print nan (see zipnn_install.log)"
python setup.py build_ext --inplace -q >"$out/build_new.log" 2>&1 || { echo "new build failed"; tail "$out/build_new.log"; exit 1; }
old=/tmp/wcodec_old
rm -rf "$old" && mkdir -p "$old" && cp -r setup.py pyproject.toml src "$old"/ && cp "$carry/old_wcodec_cext.c" "$old/src/wcodec/csrc/wcodec_cext.c"
(cd "$old" && rm -f src/wcodec/_cext*.so && python setup.py build_ext --inplace -q) >"$out/build_old.log" 2>&1 \
    || { echo "old build failed"; tail "$out/build_old.log"; exit 1; }
gunzip -c "$carry/minilm_bf16r.safetensors.gz" >/tmp/all-MiniLM-L6-v2.safetensors
lscpu | grep -E "^(Model name|Flags)" | cut -c1-200 | tee "$out/cpu.txt"
two=$(lscpu -p=CPU,CORE | grep -v '^#' | sort -t, -k2,2n -u | head -2 | cut -d, -f1 | paste -sd,)
echo "CPUs $two" | tee -a "$out/cpu.txt"

args=(--shared /nonexistent --quick --scaling-only --dtypes BF16 --safetensors /tmp/all-MiniLM-L6-v2.safetensors
      --threads 1,2 --repeat 5 --api)
for r in $(seq 1 "$rounds"); do
    for isa in $isas; do
        for side in old new; do
            src=$root/src
            [ "$side" = old ] && src=$old/src
            WCODEC_ISA=$isa PYTHONPATH=$src taskset -c "$two" python benchmarks/codec_cpu.py "${args[@]}" \
                >"$out/r${r}_${isa}_${side}.md" 2>&1
        done
    done
done
echo "== rows (round, isa, side): kernels table, then the API table"
for f in "$out"/r*_*.md; do
    b=$(basename "$f" .md)
    grep -E "^\| all-MiniLM" "$f" | sed "s/^/$b /"
done
