"""Build the kernel pack for this machine's Triton and GPU (wcodec.gpu.kernel_pack), on the GPU.

In a fresh Triton cache directory: the load-time warm-up (wcodec.hf.warmup, its precompile workers
included) of a CompressedLinear for every weight shape of the shipped configurations
(gpu/configs/<arch>.json) with and without a bias, a 32000x4096 and a 128256x4096 lm_head, a
CompressedEmbedding's row lookup, one Mixtral-8x7B-wide layer kept compressed (its experts on the
grouped kernels: benchmarks/moe_model.py), fp16 weights (CompressedLinear16) of two shapes; then the GPU
decoders: load_file(device="cuda") of lossless bf16 / fp16 / fp32, int8 and fixed-codec files.
Everything Triton compiled there is packed (metadata and cubin per kernel) into
``$OUT/triton-<version>-sm<cc>.tar.xz`` (or ``--out``); copy it to src/wcodec/gpu/packs/.

    PYTHONPATH=src python3 tools/build_kernel_pack.py [--out PATH]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time

CACHE = tempfile.mkdtemp(prefix="wcodec_pack_")
os.environ["TRITON_CACHE_DIR"] = CACHE  # before triton is imported: every compile lands here
os.environ["WCODEC_KERNEL_PACK"] = "0"  # build from the compiler, not from an older pack


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", help="pack path (default: $OUT or . / the pack's standard name)")
    args = ap.parse_args()

    import torch
    import triton

    import wcodec
    from wcodec.gpu import fixed as fx
    from wcodec.gpu import kernel_pack, shipped
    from wcodec.hf import warmup
    from wcodec.torch.embedding import CompressedEmbedding
    from wcodec.torch.linear import CompressedLinear
    from wcodec.torch.linear16 import CompressedLinear16

    arch = fx._arch(torch.device("cuda"))
    shapes = sorted({(e["N"], e["K"]) for es in shipped.table(arch).values() for e in es})
    if not shapes:
        print(f"no shipped configs for {arch}: nothing to build from", file=sys.stderr)
        return 1
    g = torch.Generator(device="cuda").manual_seed(0)

    def weight(n, k, dtype=torch.bfloat16):
        return (torch.randn(n, k, device="cuda", generator=g) * 0.02).to(dtype)

    t0 = time.perf_counter()
    mods = [CompressedLinear.from_weight(weight(n, k), bias) for n, k in shapes + [(32000, 4096), (128256, 4096)]
            for bias in (None, torch.zeros(n, dtype=torch.bfloat16, device="cuda"))]
    mods.append(CompressedEmbedding.from_embedding(torch.nn.Embedding.from_pretrained(weight(32000, 4096))))
    rep = warmup.warmup(torch.nn.Sequential(*mods))
    print(f"bf16 warm-up: {rep['weights']} weights, {rep['calls']} calls, {rep['seconds']:.1f} s", flush=True)
    del mods
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "benchmarks"))
    import moe_model  # the Mixtral-shaped model the MoE benchmarks run

    moe = moe_model.build(1)
    moe_model.compress(moe)
    rep = warmup.warmup(moe)
    print(f"Mixtral layer warm-up: {rep['weights']} weights, {rep['calls']} calls, {rep['seconds']:.1f} s", flush=True)
    del moe
    torch.cuda.empty_cache()
    mods16 = [CompressedLinear16.from_weight(weight(n, k, torch.float16)) for n, k in ((4096, 4096), (11008, 4096))]
    rep = warmup.warmup(torch.nn.Sequential(*mods16), dtype=torch.float16)
    print(f"fp16 warm-up: {rep['weights']} weights, {rep['calls']} calls, {rep['seconds']:.1f} s", flush=True)
    del mods16

    with tempfile.TemporaryDirectory() as d:  # the GPU decoders, as load_file(device="cuda") runs them
        cpu = {"w": weight(1024, 4096).cpu(), "b": torch.randn(4096) * 0.02}
        tensors = {**{f"w.{t}": cpu["w"].to(t) for t in (torch.bfloat16, torch.float16, torch.float32)}, "b": cpu["b"]}
        for mode, codec in (("lossless", None), ("int8", None), ("lossless", "fixed")):
            path = os.path.join(d, f"{mode}-{codec}.wcodec")
            try:  # a decoder that fails here is left out of the pack, not the pack itself
                wcodec.save_file(tensors if codec is None else {"w": tensors["w.torch.bfloat16"]}, path,
                                 mode=mode, codec=codec)
                wcodec.load_file(path, device="cuda")
            except Exception as e:
                print(f"decoders, {mode} {codec}: {type(e).__name__}: {e}", file=sys.stderr)
        torch.cuda.synchronize()
    print(f"decoders done, {time.perf_counter() - t0:.1f} s in all", flush=True)

    name = kernel_pack.pack_name(triton.__version__, arch)
    out = args.out or os.path.join(os.environ.get("OUT", "."), name)
    man = kernel_pack.build(CACHE, out, triton_version=triton.__version__, arch=arch,
                            device=torch.cuda.get_device_name())
    size = os.path.getsize(out)
    print(f"| pack | kernels | distinct names | bytes | sources |\n|---|---:|---:|---:|---|\n"
          f"| {os.path.basename(out)} | {man['kernels']} | {len(man['names'])} | {size} | {man['sources'][:12]} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
