"""Profile WCodecModel.from_pretrained on a synthetic Llama-2-7B-shaped folder (GPU machine).

    PYTHONPATH=src python3 tools/hf_profile.py --layers 32
Prints wall times of the stages and cProfile's top functions by cumulative time.
"""

import argparse
import cProfile
import io
import pstats
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
from hf_lowmem import llama7b_config, write_synthetic  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--layers", type=int, default=32)
    ap.add_argument("--workdir", default="/tmp/hf_prof")
    args = ap.parse_args()
    from wcodec.hf import WCodecModel, convert_folder
    from wcodec.api import load_file

    src, dst = Path(args.workdir) / "bf16", Path(args.workdir) / "wcodec"
    if not dst.exists():
        write_synthetic(src, llama7b_config(args.layers))
        convert_folder(src, dst)
    for rep in range(2):
        torch.cuda.synchronize()
        t = time.perf_counter()
        sd = load_file(dst, device="cuda")
        torch.cuda.synchronize()
        print(f"load_file to cuda: {time.perf_counter() - t:.3f} s")
        del sd
        torch.cuda.empty_cache()
    prof = cProfile.Profile()
    for rep in range(2):
        torch.cuda.synchronize()
        t = time.perf_counter()
        if rep:
            prof.enable()
        m = WCodecModel.from_pretrained(dst, device="cuda")
        torch.cuda.synchronize()
        if rep:
            prof.disable()
        print(f"from_pretrained: {time.perf_counter() - t:.3f} s")
        del m
        torch.cuda.empty_cache()
    s = io.StringIO()
    pstats.Stats(prof, stream=s).sort_stats("cumulative").print_stats(35)
    print(s.getvalue()[-9000:])


if __name__ == "__main__":
    main()
