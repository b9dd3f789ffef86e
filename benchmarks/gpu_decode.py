"""GPU decode throughput of wcodec (Triton) on an H100, beside a device copy, DFloat11 and nvCOMP.

Figures are GB/s of decoded output written (bf16 bytes / kernel time, median of CUDA-event timed
repeats after warm-up). Data is SYNTHETIC: Llama-2-7B shapes, each tensor normal with its own std
(fitted to the per-kind range of real Llama weights), rounded to bf16; norms ~ 1 + N(0, 0.05).

    python benchmarks/gpu_decode.py [--no-7b] [--no-e2e] [--competitors] [--out DIR]

Prints one table last; logs under --out (default $OUT or .).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time

import numpy as np

ROWS = []


def log(*a):
    print(*a, flush=True)


def row(what, gbs, extra=""):
    ROWS.append((what, gbs, extra))
    log(f"  {what:<58} {gbs:>9}  {extra}")


def llama7b_shapes():
    """(name, shape, std) of Llama-2-7B; std per kind is a synthetic fit, varied per layer."""
    rng = np.random.default_rng(7)
    out = [("model.embed_tokens.weight", (32000, 4096), 0.017)]
    for i in range(32):
        p = f"model.layers.{i}."
        j = lambda s: float(s * rng.uniform(0.8, 1.25))  # noqa: E731
        out += [(p + "self_attn.q_proj.weight", (4096, 4096), j(0.028)),
                (p + "self_attn.k_proj.weight", (4096, 4096), j(0.028)),
                (p + "self_attn.v_proj.weight", (4096, 4096), j(0.012)),
                (p + "self_attn.o_proj.weight", (4096, 4096), j(0.012)),
                (p + "mlp.gate_proj.weight", (11008, 4096), j(0.021)),
                (p + "mlp.up_proj.weight", (11008, 4096), j(0.018)),
                (p + "mlp.down_proj.weight", (4096, 11008), j(0.018)),
                (p + "input_layernorm.weight", (4096,), -1.0),
                (p + "post_attention_layernorm.weight", (4096,), -1.0)]
    out += [("model.norm.weight", (4096,), -1.0), ("lm_head.weight", (32000, 4096), 0.022)]
    return out


def synth_bf16(torch, shape, std, gen):
    """Synthetic bf16 tensor on the GPU (normal(0, std), or 1 + N(0, 0.05) for norms)."""
    n = int(np.prod(shape))
    x = torch.randn(n, generator=gen, device="cuda", dtype=torch.float32)
    x = x * 0.05 + 1.0 if std < 0 else x * std
    return x.to(torch.bfloat16).reshape(shape)


def bits_np(t):
    import torch
    return t.view(torch.int16).cpu().numpy().view(np.uint16)


def bench(fn, torch, reps=20, warm=3):
    for _ in range(warm):
        fn()
    torch.cuda.synchronize()
    ts = []
    for _ in range(reps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        b.synchronize()
        ts.append(a.elapsed_time(b) * 1e-3)
    return float(np.median(ts))


class Decoder:
    """A plan uploaded once; .run() times kernels only (tables and descriptors prebuilt)."""

    def __init__(self, items, config=None):
        import torch
        from wcodec.gpu import decode as D
        self.D = D
        self.plan = D.build_plan(items)
        host = np.zeros(self.plan.buf_nbytes, np.uint8)
        D.fill_host(self.plan, host)
        self.buf = torch.from_numpy(host).cuda()
        del host
        self.out = torch.empty(max(self.plan.out_nbytes, 16), dtype=torch.uint8, device="cuda")
        self.prep = D.Prepared(self.plan, "cuda", config)
        self.comp = sum(r.nbytes for _, r in items)
        self.raw = sum(r.raw_nbytes for _, r in items)

    def set_config(self, config):
        self.prep.cfg = {**self.D.CONFIG, **config}

    def run(self):
        return self.D.run(self.prep, self.buf, self.out)

    def check(self):
        st = self.run()
        self.D.check(self.plan, st)
        return self.D.tensor_views(self.plan, self.out)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--no-7b", action="store_true")
    ap.add_argument("--no-e2e", action="store_true")
    ap.add_argument("--competitors", action="store_true")
    ap.add_argument("--tune", action="store_true")
    ap.add_argument("--out", default=os.environ.get("OUT", "."))
    args = ap.parse_args()
    import torch
    import triton
    from wcodec.codecs import decode_tensor, encode_tensor
    from wcodec.gpu import layout as K

    log(f"device {torch.cuda.get_device_name()} torch {torch.__version__} triton {triton.__version__} "
        f"cpus {os.cpu_count()}")
    gen = torch.Generator(device="cuda").manual_seed(0)

    # ---- ceiling: device-to-device copy of an 11008x4096 bf16 matrix ----------------------
    src = synth_bf16(torch, (11008, 4096), 0.02, gen)
    dst = torch.empty_like(src)
    t = bench(lambda: dst.copy_(src), torch)
    nbytes = src.numel() * 2
    row("copy 11008x4096 bf16 (D2D)", f"{nbytes / t / 1e9:.0f}", f"{2 * nbytes / t / 1e9:.0f} GB/s read+write")

    # ---- single layers: correctness vs the CPU decoder, then throughput ----------------------
    layers = {}
    for shape in ((4096, 4096), (11008, 4096)):
        w = synth_bf16(torch, shape, 0.02, gen)
        bits = bits_np(w)
        t0 = time.time()
        rec = encode_tensor(bits, "BF16")
        log(f"encode {shape}: {time.time() - t0:.2f} s, {rec.bits_per_weight:.3f} bits/w, head_bits "
            f"{rec.params['head_bits']}, chunk_steps {rec.params['head']['chunk_steps']}")
        layers[shape] = (bits, rec)
        dec = Decoder([("w", rec)])
        got = dec.check()["w"]
        ref = decode_tensor(rec)
        assert np.array_equal(bits_np(got), ref) and np.array_equal(ref, bits), "GPU decode mismatch"
        t = bench(dec.run, torch)
        row(f"wcodec float bf16 {shape[0]}x{shape[1]}", f"{dec.raw / t / 1e9:.0f}",
            f"{t * 1e3:.3f} ms, {rec.bits_per_weight:.3f} b/w, bit-exact")

    # ---- tuning: chunks per program x warps, and chunk_steps, on 11008x4096 -----------------
    bits, rec = layers[(11008, 4096)]
    if args.tune:
        dec = Decoder([("w", rec)])
        best = None
        from wcodec.gpu import decode as D0
        for G, W, BAL in ((1, 1, False), (1, 1, True), (2, 2, False), (2, 2, True), (4, 4, True), (2, 1, False)):
            D0.BALLOT = BAL
            dec.prep.ballot = BAL
            if True:
                dec.set_config({K.MODE_F16BITS: (G, W)})
                try:
                    assert np.array_equal(bits_np(dec.check()["w"]), bits)
                    t = bench(dec.run, torch, reps=10)
                except Exception as e:  # noqa: BLE001
                    log(f"  G={G} W={W}: {type(e).__name__} {e}")
                    continue
                log(f"  tune G={G:<2} warps={W} ballot={BAL}: {dec.raw / t / 1e9:7.0f} GB/s")
                if best is None or t < best[0]:
                    best = (t, G, W, BAL)
        row(f"tuned best G={best[1]} warps={best[2]} ballot={best[3]} (11008x4096)", f"{dec.raw / best[0] / 1e9:.0f}")
        D0.CONFIG[K.MODE_F16BITS] = (best[1], best[2])
        D0.CONFIG[K.MODE_BYTES] = (best[1], best[2])
        D0.BALLOT = best[3]
        for cs in (64, 128, 256):
            r2 = encode_tensor(bits, "BF16", chunk_steps=cs)
            d2 = Decoder([("w", r2)])
            assert np.array_equal(bits_np(d2.check()["w"]), bits)
            t = bench(d2.run, torch)
            row(f"  chunk_steps {cs} (11008x4096)", f"{d2.raw / t / 1e9:.0f}",
                f"{r2.bits_per_weight:.3f} b/w")
            del d2

    # ---- int8 with prediction, and int8-quant -> bf16 --------------------------------------
    yy, xx = np.mgrid[0:4096, 0:4096]
    smooth = (np.sin(yy / 37.0) * 60 + np.cos(xx / 23.0) * 50
              + np.random.default_rng(1).integers(-3, 4, (4096, 4096))).astype(np.int8)
    r8 = encode_tensor(smooth, "I8")
    dec = Decoder([("s", r8)])
    assert np.array_equal(dec.check()["s"].cpu().numpy(), smooth), "int8 mismatch"
    t = bench(dec.run, torch)
    row("wcodec int8+prediction 4096x4096 (I8 out)", f"{dec.raw / t / 1e9:.0f}",
        f"{t * 1e3:.3f} ms, modes {r8.info['modes']}, {r8.bits_per_weight:.2f} b/w")
    rq = encode_tensor(bits, "BF16", mode="int8")
    dec = Decoder([("q", rq)])
    got = bits_np(dec.check()["q"])
    assert np.array_equal(got, decode_tensor(rq).reshape(got.shape)), "int8-quant mismatch"
    t = bench(dec.run, torch)
    row("wcodec int8-quant -> bf16 11008x4096", f"{dec.raw / t / 1e9:.0f}",
        f"{t * 1e3:.3f} ms, modes {rq.info['modes']}, {rq.bits_per_weight:.2f} b/w")
    del dec

    # ---- whole 7B-shaped synthetic model ---------------------------------------------------
    if not args.no_7b:
        from concurrent.futures import ThreadPoolExecutor
        shapes = llama7b_shapes()
        t0 = time.time()
        items, originals = [], {}

        def enc(spec):
            name, shape, std = spec
            w = synth_bf16(torch, shape, std, torch.Generator(device="cuda").manual_seed(hash(name) % 2**31))
            b = bits_np(w)
            return name, b, encode_tensor(b, "BF16")
        with ThreadPoolExecutor(4) as ex:
            for name, b, r in ex.map(enc, shapes):
                items.append((name, r))
                originals[name] = b
        n_w = sum(r.numel for _, r in items)
        comp = sum(r.nbytes for _, r in items)
        log(f"7B synthetic: {len(items)} tensors, {n_w / 1e9:.3f} G weights, encoded in "
            f"{time.time() - t0:.1f} s, {8 * comp / n_w:.3f} bits/w")
        dec = Decoder(items)
        views = dec.check()
        ok = all(np.array_equal(bits_np(views[n]), originals[n]) for n, _ in items[:6])
        ok &= all(torch.equal(views[n].view(torch.int16).cpu().view(torch.uint16),
                              torch.from_numpy(originals[n].view(np.int16)).view(torch.uint16))
                  for n, _ in items[6:])
        assert ok, "7B decode mismatch"
        t = bench(dec.run, torch, reps=10)
        row("wcodec float bf16 whole 7B-shaped model (synthetic)", f"{dec.raw / t / 1e9:.0f}",
            f"{t * 1e3:.2f} ms for {dec.raw / 1e9:.2f} GB, bit-exact")
        del dec, views
        torch.cuda.empty_cache()
        if not args.no_e2e:
            e2e(items, originals, torch, args)

    log("\n| what | GB/s bf16 written | notes |\n|---|---:|---|")
    for w, g, e in ROWS:
        log(f"| {w} | {g} | {e} |")
    with open(os.path.join(args.out, "gpu_decode_table.json"), "w") as f:
        json.dump(ROWS, f, indent=1)


def e2e(items, originals, torch, args):
    """Page cache -> GPU: wcodec.load_file vs safetensors.torch.load_file of the same weights."""
    import safetensors.torch as st
    import wcodec
    from wcodec.format.writer import Writer  # noqa: F401  (container present?)
    tmp = tempfile.mkdtemp(dir="/dev/shm" if os.path.isdir("/dev/shm") else None)
    sf = os.path.join(tmp, "model.safetensors")
    wc = os.path.join(tmp, "model.wcodec")
    st.save_file({n: torch.from_numpy(b.view(np.int16)).view(torch.bfloat16) for n, b in originals.items()}, sf)
    from wcodec.format import spec
    from wcodec.format.writer import Writer as W
    t0 = time.time()
    with W(wc) as w:
        for name, rec in items:
            w.add_record(name, rec, spec.crc32(originals[name]))
    log(f"container written in {time.time() - t0:.1f} s: {os.path.getsize(wc) / 1e9:.2f} GB vs "
        f"safetensors {os.path.getsize(sf) / 1e9:.2f} GB")
    for f in (sf, wc):
        with open(f, "rb") as fh:  # warm the page cache
            while fh.read(1 << 26):
                pass
    torch.cuda.synchronize()
    t0 = time.time()
    a = st.load_file(sf, device="cuda")
    torch.cuda.synchronize()
    t_sf = time.time() - t0
    del a
    torch.cuda.empty_cache()
    t0 = time.time()
    b = wcodec.load_file(wc, device="cuda")
    torch.cuda.synchronize()
    t_wc = time.time() - t0
    ok = all(torch.equal(b[n].view(torch.int16).cpu(), torch.from_numpy(originals[n].view(np.int16)))
             for n in list(originals)[:40])
    log(f"wcodec.load_file bit-exact on 40 tensors: {ok}")
    del b
    torch.cuda.empty_cache()
    from wcodec.format.reader import Reader as CheckpointReader
    from wcodec.gpu.loader import load_records
    t0 = time.time()
    r = CheckpointReader(wc)
    recs = [(n, r.record(n, verify=False)) for n in r.keys()]
    crcs = {n: {k: v["crc32"] for k, v in r.entry(n)["sections"].items()} for n in r.keys()}
    c = load_records(recs, "cuda", crcs=crcs)
    torch.cuda.synchronize()
    t_lr = time.time() - t0
    ok2 = all(torch.equal(c[n].view(torch.int16).cpu(), torch.from_numpy(originals[n].view(np.int16)))
              for n in list(originals)[:40])
    log(f"load_records (parallel crc) bit-exact on 40 tensors: {ok2}")
    row("e2e load 7B page cache -> GPU: reader + load_records(crcs, 16 threads)",
        f"{sum(x.nbytes for x in originals.values()) / t_lr / 1e9:.1f}", f"{t_lr:.2f} s")
    raw = sum(x.nbytes for x in originals.values())
    row("e2e load 7B page cache -> GPU: safetensors", f"{raw / t_sf / 1e9:.1f}", f"{t_sf:.2f} s")
    row("e2e load 7B page cache -> GPU: wcodec.load_file", f"{raw / t_wc / 1e9:.1f}", f"{t_wc:.2f} s")


if __name__ == "__main__":
    sys.exit(main())
