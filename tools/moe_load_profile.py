"""Profile kept-compressed loads of the Mixtral-shaped folders of benchmarks/hf_ab.py --moe (GPU).

    PYTHONPATH=src python3 tools/moe_load_profile.py --layers 4 [--workdir /tmp/hf_ab_moe]

Loads each variant (bf16 folder; fused from the fixed folder; fused and jit from the rANS folder)
twice in this process and prints the wall time and GPU memory of each load, then cProfile's top
functions by own time for the second load (the first one compiles Triton kernels).
"""

import argparse
import cProfile
import gc
import io
import pstats
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
import hf_ab  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--workdir", default="/tmp/hf_ab_moe", help="where hf_ab.py --moe writes its folders")
    ap.add_argument("--top", type=int, default=16, help="functions listed per profile")
    args = ap.parse_args()
    import transformers

    from wcodec.hf import WCodecModel

    src, fixed, rans = hf_ab.moe_folders(argparse.Namespace(workdir=args.workdir, layers=args.layers, smoke=False))
    loads = {
        "bf16": lambda: transformers.AutoModelForCausalLM.from_pretrained(str(src), dtype=torch.bfloat16,
                                                                          device_map="cuda"),
        "fused": lambda: WCodecModel.from_pretrained(fixed, device="cuda", keep_compressed=True),
        "fused_rans": lambda: WCodecModel.from_pretrained(rans, device="cuda", keep_compressed=True),
        "jit": lambda: WCodecModel.from_pretrained(rans, device="cuda", keep_compressed="jit"),
    }
    for name, load in loads.items():
        for i in range(2):
            gc.collect()
            torch.cuda.empty_cache()
            torch.cuda.synchronize()
            pr = cProfile.Profile() if i else None
            t = time.perf_counter()
            if pr:
                pr.enable()
            model = load()
            torch.cuda.synchronize()
            if pr:
                pr.disable()
            print(f"== {name} load {i}: {time.perf_counter() - t:.2f} s, allocated "
                  f"{torch.cuda.memory_allocated() / 1e9:.2f} GB", flush=True)
            del model
            if pr:
                s = io.StringIO()
                pstats.Stats(pr, stream=s).sort_stats("tottime").print_stats(args.top)
                print(s.getvalue())


if __name__ == "__main__":
    main()
