"""GPU decode of the int8 path (issue 13, must-have 4): int8 with intra prediction, int8 with
nothing to predict, and int8-quant -> bf16, whole decode and its launches apart.

Data: SYNTHETIC, fresh each run (seed printed). ``smooth``: a 4096x4096 int8 tensor of sines +
noise (as benchmarks/gpu_decode.py's int8 case; the encoder picks its tiles' prediction modes, ~half
AVG); ``noise``: the same size, uniform int8, coded without prediction; ``quant``: bf16 weights of
a 11008x4096 (and 4096x4096) layer, N(0, 0.02), coded ``mode="int8"`` (per-row scales, every tile
NONE on such weights). Every decode is checked bit-exact against the CPU decoder (output
poisoned first) before it is timed; times are medians of CUDA-event timed back-to-back calls
(``gpu_decode.bench``); GB/s = bytes written (int8 or bf16) / time. "rANS" and "tiles" time the
byte-plane launches alone and the prediction / dequantisation launches alone (where a tensor
decodes in one launch, "tiles" is empty). A device copy of the same output gives the ceiling.

    PYTHONPATH=src python3 benchmarks/experiments/int8_gpu.py [--label NAME] [--json FILE]

Run it twice, once with an older checkout's src on PYTHONPATH, to compare kernels in one session.
Prints a table last.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # the suites: benchmarks/


def cases(seed: int):
    """(name, EncodedTensor, raw int8/bf16 bytes to compare) of each case."""
    from gpu_decode import layer_bits

    from wcodec.codecs import encode_tensor
    from wcodec.codecs.int8 import Int8Codec
    rng = np.random.default_rng(seed)
    yy, xx = np.mgrid[0:4096, 0:4096]
    smooth = (np.sin(yy / 37.0) * 60 + np.cos(xx / 23.0) * 50 + rng.integers(-3, 4, (4096, 4096))).astype(np.int8)
    noise = rng.integers(-40, 41, (4096, 4096)).astype(np.int8)
    out = [("int8+prediction smooth 4096x4096 -> int8", encode_tensor(smooth, "I8")),
           ("int8 no prediction 4096x4096 -> int8", Int8Codec().encode(noise, "I8", predict=False))]
    for shape in ((4096, 4096), (11008, 4096)):
        bits = layer_bits(shape, seed + shape[0])
        out.append((f"int8-quant {shape[0]}x{shape[1]} -> bf16", encode_tensor(bits, "BF16", mode="int8")))
    return out


def kernel_times(fn, torch, reps: int = 10) -> dict:
    """{kernel name: mean GPU microseconds per call of fn} from torch.profiler."""
    from torch.profiler import ProfilerActivity, profile
    fn()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(reps):
            fn()
        torch.cuda.synchronize()
    out = {}
    for e in prof.key_averages():
        t = getattr(e, "device_time_total", None) or getattr(e, "cuda_time_total", 0)
        if t and "Memcpy" not in e.key and "Memset" not in e.key:
            out[e.key[:40]] = round(t / reps, 1)
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--label", default="this checkout")
    ap.add_argument("--json", help="also write the rows as JSON here")
    ap.add_argument("--tiled-configs", default="8,4 16,8 16,2",
                    type=lambda v: [tuple(int(x) for x in c.split(",")) for c in v.split()],
                    help="(warps, steps) of the straight-to-output launch tried on 11008x4096")
    ap.add_argument("--once", action="store_true",
                    help="decode the int8+prediction case twice and stop (a target for ncu)")
    a = ap.parse_args()
    import torch
    import triton
    from gpu_decode import Decoder, bench

    from wcodec.codecs import decode_tensor
    seed = int(time.time() * 1000) % (1 << 31)
    print(f"device {torch.cuda.get_device_name()} torch {torch.__version__} triton {triton.__version__} "
          f"seed {seed} date {time.strftime('%Y-%m-%d %H:%M')} label {a.label}", flush=True)
    rows = []
    t0 = time.time()
    recs = cases(seed)
    if a.once:
        dec = Decoder(recs[:1])
        for _ in range(2):
            dec.check()
        torch.cuda.synchronize()
        return 0
    print(f"encoded in {time.time() - t0:.1f} s", flush=True)
    from wcodec.gpu import plan as PL
    runs = []
    for name, rec in recs:
        p = rec.params.get("q", rec.params)
        runs.append((name, rec, True))
        if p["all_none"] and getattr(PL, "TILED", None) is not None:  # also the two-launch path
            if rec.dtype == "BF16":
                runs.append((name + " [integer bf16 rounding]", rec, "int"))
            if "11008" in name:  # (warps, steps per iteration) of the straight-to-output launch
                runs += [(name + f" [tiled W={w} S={st}]", rec, (w, st)) for w, st in a.tiled_configs]
            runs.append((name + " [scratch + tile kernel]", rec, False))
    from wcodec.gpu import decode as D
    from wcodec.gpu import layout as K
    cfg0 = dict(getattr(D, "CONFIG", {}))
    for name, rec, tiled in runs:
        if hasattr(PL, "TILED"):
            PL.TILED = bool(tiled)
            D.CVT = tiled != "int"
            D.CONFIG.update(cfg0)
            if isinstance(tiled, tuple):
                D.CONFIG[K.MODE_TILED] = tiled
        modes = rec.info.get("modes") if rec.info else None
        ref = np.ascontiguousarray(decode_tensor(rec)).reshape(-1).view(np.uint8)
        dec = Decoder([("w", rec)])
        got = dec.check()["w"]
        g = got.view(torch.int16) if got.dtype == torch.bfloat16 else got
        ok = np.array_equal(g.cpu().numpy().reshape(-1).view(np.uint8), ref)
        t = bench(dec.run, torch)
        i8, desc = dec.prep.int8, dec.prep.desc
        dec.prep.int8 = {}
        t_r = bench(dec.run, torch)  # byte-plane (and straight-to-output) launches alone
        dec.prep.int8, dec.prep.desc = i8, {}
        t_p = bench(dec.run, torch) if i8 else 0.0  # prediction / dequantisation launches alone
        dec.prep.desc = desc
        src = torch.empty(dec.raw, dtype=torch.uint8, device="cuda")
        dst = torch.empty_like(src)
        t_c = bench(lambda: dst.copy_(src), torch)
        r = {"label": a.label, "case": name, "GB/s": dec.raw / t / 1e9, "us": t * 1e6, "rANS us": t_r * 1e6,
             "tiles us": t_p * 1e6, "copy GB/s": dec.raw / t_c / 1e9, "bits/weight": rec.bits_per_weight,
             "modes": modes, "bit-exact": ok, "kernels us": kernel_times(dec.run, torch)}
        rows.append(r)
        print(json.dumps(r), flush=True)
        del dec, src, dst
        torch.cuda.empty_cache()
    if a.json:
        with open(a.json, "w") as f:
            json.dump(rows, f, indent=1)
    print(f"\n| case ({a.label}) | GB/s written | us | rANS launches us | tile launches us | copy GB/s | bits/w | bit-exact |")
    print("|---|---:|---:|---:|---:|---:|---:|---|")
    for r in rows:
        print(f"| {r['case']} | {r['GB/s']:.0f} | {r['us']:.1f} | {r['rANS us']:.1f} | {r['tiles us']:.1f} | "
              f"{r['copy GB/s']:.0f} | {r['bits/weight']:.2f} | {r['bit-exact']} |")
    print("\nper kernel (torch.profiler, us per decode):")
    for r in rows:
        print(f"  {r['case']}: " + ", ".join(f"{k} {v}" for k, v in r["kernels us"].items()))
    return 0 if all(r["bit-exact"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
