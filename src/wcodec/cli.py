"""The ``wcodec`` command line: thin argparse subcommands over the library.

Exit status: 0 on success, 1 when the input is bad (a one-line ``wcodec: error: ...`` on
stderr), 2 on a usage error (argparse). Heavy modules are imported inside the subcommands.
Outputs are checked before any work starts: an existing output is refused without ``--force``,
the input is never overwritten, and the output kind (a ``*.wcodec`` file or a folder) is
explicit (``--to``) or read from the name. A closed stdout (``wcodec info | head``) ends quietly.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
import time
from pathlib import Path

EPILOG = """examples:
  wcodec encode model.safetensors model.wcodec          lossless, bit-exact
  wcodec encode ./hf-model ./hf-model-wcodec --mode int8  folder: shards + config/tokenizer copies
  wcodec encode model.safetensors out/ --force          a folder output, replacing its checkpoint
  wcodec decode model.wcodec model.safetensors
  wcodec info model.wcodec
  wcodec verify model.wcodec
  wcodec bench model.wcodec --repeat 3
"""
MODE_NAMES = ("NONE", "LEFT", "TOP", "AVG", "PLANAR", "DCT", "ADST")  # as wcodec.codecs.int8


def _size(text: str) -> int:
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([kmgt]?i?b?)?\s*", text, re.I)
    if not m:
        raise argparse.ArgumentTypeError(f"bad size {text!r} (e.g. 5GB, 500MiB, 1000000)")
    unit = (m.group(2) or "").lower().rstrip("b").rstrip("i")
    return int(float(m.group(1)) * 1024 ** " kmgt".index(unit or " "))


def _fmt_bytes(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.2f} {unit}"
        n /= 1024


class CliError(Exception):
    """A problem with the command line's files, reported as one line (exit status 1)."""


#: optional module -> the extra that installs it
EXTRAS = {"torch": "torch", "triton": "gpu", "transformers": "hf", "accelerate": "hf"}
TORCH_MAGIC = (b"PK\x03\x04", b"\x80\x02")  # zip (torch.save since 1.6) or legacy pickle


def _check_input(src: Path) -> None:
    if not src.exists():
        raise CliError(f"input '{src}' does not exist")
    if src.is_file() and src.suffix in (".pt", ".pth", ".bin", ".ckpt"):
        with open(src, "rb") as f:
            head = f.read(4)
        if not head.startswith(TORCH_MAGIC):
            raise CliError(f"'{src}' is not a torch checkpoint (neither a torch zip archive nor a pickle)")


def _same(a: Path, b: Path) -> bool:
    try:
        return a.exists() and b.exists() and os.path.samefile(a, b)
    except OSError:
        return False


def _check_output(src: Path, dst: Path, kind: str, force: bool, hint: str = "") -> None:
    """Refuse, before any work: the input as output, an existing output without --force, a
    missing parent folder, a file output that is a folder (or the reverse)."""
    if _same(src, dst) or src.resolve() == dst.resolve():
        raise CliError(f"output '{dst}' is the input; choose another name")
    parent = dst.resolve().parent
    if not parent.is_dir():
        raise CliError(f"output folder '{parent}' does not exist")
    if kind == "file":
        if dst.is_dir():
            raise CliError(f"output '{dst}' is a folder; name a file{hint}")
        if dst.exists() and not force:
            raise CliError(f"output '{dst}' exists; use --force to overwrite it")
    else:
        if dst.exists() and not dst.is_dir():
            raise CliError(f"output '{dst}' is a file, not a folder")
        if dst.is_dir() and any(dst.glob("*.wcodec*")) and not force:
            raise CliError(f"output folder '{dst}' already holds a checkpoint; use --force to overwrite it")


def _output_kind(src: Path, dst: Path, to: str | None, raw_dst: str) -> str:
    """'file' or 'folder': --to, else a *.wcodec name is a file, an existing folder, a name
    ending in '/' or a folder input gives a folder; anything else is ambiguous and refused."""
    if to is not None:
        if to == "file" and dst.suffix != ".wcodec":
            raise CliError(f"a file output must end in .wcodec, got '{dst}'")
        if to == "folder" and dst.suffix == ".wcodec":
            raise CliError(f"a folder output must not end in .wcodec, got '{dst}'")
        return to
    if dst.suffix == ".wcodec":
        return "file"
    if dst.is_dir() or raw_dst.endswith(("/", os.sep)) or src.is_dir():
        return "folder"
    raise CliError(f"output '{dst}': name a .wcodec file, or a folder with --to folder (or a trailing '/')")


def _encode_settings(args) -> str | None:
    """The mode string for encode's options ("lossy:target" for --target-cosine /
    --bits-per-weight), or None after printing a usage error (exit 2) in the command line's own names."""
    from .encodeopts import mode_of

    goal = args.target_cosine is not None or args.bits_per_weight is not None
    rate = (args.qp is not None) + (args.target_snr_db is not None) + goal
    if args.mode == "lossy" and rate != 1:
        msg = ("--mode lossy needs one of --target-cosine C / --bits-per-weight B (model folders: the "
               "Fisher-weighted search), --qp N (0-63) or --target-snr-db DB")
    elif args.mode != "lossy" and rate:
        msg = (f"--qp, --target-snr-db, --target-cosine and --bits-per-weight apply to --mode lossy, "
               f"not --mode {args.mode}")
    elif (args.calibration is not None or args.rounding is not None) and not goal:
        msg = f"{'--calibration' if args.calibration is not None else '--rounding'} applies to --target-cosine / --bits-per-weight"
    elif args.codec is not None and args.mode != "lossless":
        msg = f"--codec {args.codec} is a lossless layout of BF16 weights; it does not combine with --mode {args.mode}"
    elif goal:
        from .lossy_target import check_goal
        try:
            check_goal(args.target_cosine, args.bits_per_weight)
            return "lossy:target"
        except ValueError as e:
            msg = str(e).replace("target cosine", "--target-cosine").replace("bits per weight", "--bits-per-weight")
    else:
        try:
            return mode_of(args.mode, args.qp, args.target_snr_db, args.codec)
        except ValueError as e:
            msg = str(e).replace("qp", "--qp").replace("target_snr_db", "--target-snr-db")
    print(f"wcodec encode: error: {msg}", file=sys.stderr)
    return None


def _encode_to_target(args, src: Path, dst: Path, kind: str) -> int:
    """--target-cosine / --bits-per-weight: the Fisher-weighted lam search, its figures printed."""
    from .lossy_target import DEFAULT_ROUNDING, encode_to_target

    if not src.is_dir():
        raise CliError(f"--target-cosine / --bits-per-weight measure the model: the input must be a model folder "
                       f"(config.json, tokenizer, weights), got the file '{src}' (use --qp or --target-snr-db for files)")
    res = encode_to_target(src, dst, args.target_cosine, args.bits_per_weight, args.calibration,
                           workers=args.workers, max_shard_size=args.max_shard_size, progress=not args.quiet,
                           rounding=args.rounding or DEFAULT_ROUNDING)
    out_size = sum(p.stat().st_size for p in res.paths if p.suffix == ".wcodec")
    print(f"wrote {len(res.paths)} file(s) to {kind} {args.dst}: {_fmt_bytes(out_size)} of .wcodec")
    print(res.summary())
    return 0


def cmd_encode(args) -> int:
    from .api import encode_safetensors_to_wcodec
    from .hf import convert_folder

    mode = _encode_settings(args)
    if mode is None:
        return 2
    src, dst = Path(args.src), Path(args.dst)
    _check_input(src)
    if _same(src, dst):
        raise CliError(f"output '{dst}' is the input; choose another name")
    kind = _output_kind(src, dst, args.to, args.dst)
    _check_output(src, dst, kind, args.force, " (or encode into it with --to folder)")
    if mode == "lossy:target":
        return _encode_to_target(args, src, dst, kind)
    t = time.perf_counter()
    # a model folder also gets the codec recorded in its config.json (quantization_config); a
    # folder output is created by the conversion, and removed by it when the conversion fails
    convert = convert_folder if src.is_dir() else encode_safetensors_to_wcodec
    paths = convert(src, dst, mode=mode, workers=args.workers,
                    max_shard_size=args.max_shard_size, progress=not args.quiet, codec=args.codec,
                    low_joint=args.low_joint)
    src_size = sum(p.stat().st_size for p in ([src] if src.is_file() else src.rglob("*")) if p.is_file())
    out_size = sum(p.stat().st_size for p in paths if p.suffix == ".wcodec")
    print(f"wrote {len(paths)} file(s) to {kind} {args.dst}: {_fmt_bytes(out_size)} of .wcodec "
          f"from {_fmt_bytes(src_size)} in {time.perf_counter() - t:.2f} s")
    return 0


def _decode_kind(src: Path, dst: Path, raw_dst: str) -> str:
    """'file' or 'folder' for decode's output: a *.safetensors name is a file; an existing
    folder, a name ending in '/' or a folder input gives a folder; a *.wcodec name is refused."""
    if dst.suffix == ".wcodec":
        raise CliError(f"output '{dst}' ends in .wcodec but decode writes safetensors: name a .safetensors file")
    if dst.suffix == ".safetensors":
        return "file"
    if dst.is_dir() or raw_dst.endswith(("/", os.sep)) or src.is_dir():
        return "folder"
    raise CliError(f"output '{dst}': name a .safetensors file, or a folder (a trailing '/')")


def cmd_decode(args) -> int:
    from .api import decode_to_folder, decode_to_safetensors

    src, dst = Path(args.src), Path(args.dst)
    _check_input(src)
    kind = _decode_kind(src, dst, args.dst)
    _check_output(src, dst, kind, args.force, " (e.g. model.safetensors)")
    if kind == "folder":
        if dst.is_dir() and any(dst.glob("*.safetensors")) and not args.force:
            raise CliError(f"output folder '{dst}' already holds safetensors files; use --force to overwrite them")
        paths = decode_to_folder(src, dst, progress=not args.quiet)
        print(f"wrote {len(paths)} file(s) to folder {args.dst}")
    else:
        decode_to_safetensors(src, dst, progress=not args.quiet)
        print(f"wrote {args.dst}")
    return 0


def _modes(rec) -> str:
    """Prediction modes used by int8 codecs, from their ``modes`` section or params."""
    import numpy as np

    modes = rec.sections.get("modes")
    if modes is not None and modes.size:
        counts = np.bincount(np.minimum(modes, len(MODE_NAMES)), minlength=len(MODE_NAMES) + 1)
        names = MODE_NAMES + ("?",)
        return " ".join(f"{names[i]}:{100 * c / modes.size:.0f}%" for i, c in enumerate(counts) if c)
    params = rec.params.get("q", rec.params) if isinstance(rec.params.get("q"), dict) else rec.params
    return "NONE" if params.get("all_none") else ""


def _info_safetensors(path: Path) -> int:
    """``wcodec info`` of a .safetensors file: its tensors, sizes and metadata, uncompressed."""
    from .format.sources import read_safetensors_header

    raw, meta, entries = read_safetensors_header(path)
    rows = [(name, dtype, "x".join(map(str, shape)) or "()", _fmt_bytes(numel * dt.itemsize))
            for _, name, dtype, shape, dt, numel in entries]
    head = ("name", "dtype", "shape", "bytes")
    widths = [max(len(str(row[i])) for row in rows + [head]) for i in range(len(head))]
    for row in [head] + rows:
        print("  ".join(str(c).ljust(w) for c, w in zip(row, widths)).rstrip())
    total = sum(numel * dt.itemsize for *_, dt, numel in entries)
    print(f"total: {len(rows)} tensors, {sum(e[-1] for e in entries):,} weights, {_fmt_bytes(total)}; a "
          f".safetensors file (uncompressed): `wcodec encode {path} {path.with_suffix('.wcodec').name}` compresses it")
    if meta:
        print("metadata: " + ", ".join(f"{k}={v}" for k, v in meta.items()))
    return 0


def cmd_info(args) -> int:
    from .loading import is_safetensors, open_checkpoint

    if is_safetensors(args.file):
        return _info_safetensors(Path(args.file))
    with open_checkpoint(args.file) as r:
        rows, raw_total, coded_total, numel_total = [], 0, 0, 0
        for name in r.keys():
            target = r.alias_of(name)
            e = r.entry(name)
            shape = "x".join(map(str, e["shape"])) or "()"
            if target:
                rows.append((name, e["dtype"], shape, "alias", "", "", f"= {target}"))
                continue
            rec = r.record(name, verify=False)
            extra = [_modes(rec)] + [f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}"
                                     for k, v in rec.info.items() if k in ("snr_db", "max_abs_err", "qp", "target_snr_db")]
            rows.append((name, e["dtype"], shape, e["codec"], f"{rec.bits_per_weight:.3f}",
                         f"{rec.raw_nbytes / rec.nbytes:.3f}" if rec.nbytes else "-", " ".join(x for x in extra if x)))
            raw_total += rec.raw_nbytes
            coded_total += rec.nbytes
            numel_total += rec.numel
        head = ("name", "dtype", "shape", "codec", "bits/w", "ratio", "modes / notes")
        widths = [max(len(str(row[i])) for row in rows + [head]) for i in range(len(head))]
        for row in [head] + rows:
            print("  ".join(str(c).ljust(w) for c, w in zip(row, widths)).rstrip())
        files = [r.path] if r.index is None else [r.path.parent / f for f in r.shard_files()]
        fsize = sum(f.stat().st_size for f in files)
        bpw = 8 * coded_total / numel_total if numel_total else 0.0
        print(f"total: {len(rows)} tensors, {numel_total:,} weights, {_fmt_bytes(raw_total)} raw, "
              f"{_fmt_bytes(coded_total)} coded ({bpw:.3f} bits/w, ratio "
              f"{raw_total / max(coded_total, 1):.3f}), files {_fmt_bytes(fsize)} in {len(files)} shard(s)")
        from .restore import layout_of, user_metadata
        meta = user_metadata(r.metadata())
        if meta:
            print("metadata: " + ", ".join(f"{k}={v}" for k, v in meta.items()))
        lay = layout_of(r)
        if lay is not None:
            print(f"source layout: {len(lay['safetensors'])} safetensors file(s) decode byte for byte")
    return 0


def _verify_against(r, original: Path) -> int:
    """Compare the sha256 of each file decode would write with the original's."""
    import hashlib
    import tempfile

    from .restore import file_bytes, layout_of, sha256_of

    def sha_file(p: Path) -> str:
        h = hashlib.sha256()
        with open(p, "rb") as f:
            for block in iter(lambda: f.read(1 << 20), b""):
                h.update(block)
        return h.hexdigest()

    lay = layout_of(r)
    if lay is None:  # no stored layout: what decode writes, through a temporary file
        from .restore import decode_file
        with tempfile.TemporaryDirectory(prefix="wcodec-verify-") as d:
            pairs = [(original, sha_file(decode_file(r, Path(d) / "x.safetensors")))]
        note = " (this checkpoint stores no source layout: older wcodec or a torch source)"
    else:
        one = len(lay["safetensors"]) == 1 and not original.is_dir()
        pairs = [(original if one else original / f, sha256_of(file_bytes(r, f, o)))
                 for f, o in lay["safetensors"].items()]
        pairs += [] if one else [(original / f, hashlib.sha256(t.encode("utf-8")).hexdigest())
                                 for f, t in lay["files"].items()]
        note = ""
    bad = 0
    for path, digest in pairs:
        theirs = sha_file(path) if path.is_file() else None
        if theirs != digest:
            bad += 1
            print(f"DIFFERS {path}: decoded sha256 {digest[:16]}..., original "
                  f"{'missing' if theirs is None else theirs[:16] + '...'}{note}", file=sys.stderr)
    if bad:
        print(f"wcodec: error: {bad} of {len(pairs)} files differ from {original}", file=sys.stderr)
        return 1
    print(f"OK: {len(pairs)} file(s) decode to the same sha256 as {original}")
    return 0


def cmd_verify(args) -> int:
    from tqdm.auto import tqdm

    from .errors import WcodecError
    from .loading import open_checkpoint

    failed = 0
    with open_checkpoint(args.file) as r:
        if args.against is not None:
            if not Path(args.against).exists():
                raise CliError(f"original '{args.against}' does not exist")
            return _verify_against(r, Path(args.against))
        names = [n for n in r.keys() if not r.alias_of(n)]
        for name in tqdm(names, desc="verify", disable=args.quiet, unit="tensor"):
            try:
                r.verify(name)
            except WcodecError as e:
                failed += 1
                print(f"FAIL {e}", file=sys.stderr)
    if failed:
        print(f"wcodec: error: {failed} of {len(names)} tensors failed verification", file=sys.stderr)
        return 1
    print(f"OK: {len(names)} tensors, checksums and full decode verified")
    return 0


def cmd_bench(args) -> int:
    from .codecs import decode_tensor
    from .format import CheckpointReader
    from .format.encode import map_in_threads

    with CheckpointReader(args.file) as r:
        recs = [(n, r.record(n, verify=False)) for n in r.keys() if not r.alias_of(n)]
        raw = sum(rec.raw_nbytes for _, rec in recs)
        coded = sum(rec.nbytes for _, rec in recs)
        by_name = dict(recs)

        def run():  # the way load_file decodes: tensors in pool threads
            map_in_threads(lambda n: decode_tensor(by_name[n], n), list(by_name), args.workers,
                           cost=lambda n: by_name[n].numel)

        run()  # warm-up: numba compiles (or loads its cache) on first use
        best = float("inf")
        for _ in range(args.repeat):
            t = time.perf_counter()
            run()
            best = min(best, time.perf_counter() - t)
    print(f"CPU decode: {_fmt_bytes(raw)} from {_fmt_bytes(coded)} in {best * 1e3:.1f} ms "
          f"= {raw / best / 1e9:.3f} GB/s (best of {args.repeat}, {len(recs)} tensors)")
    from . import native
    from .format.encode import default_workers

    print(f"kernels: {native.path()}, {native.threads()} threads per call, "
          f"{args.workers or default_workers()} tensor workers")
    return 0


def cmd_demo(args) -> int:
    try:
        from .demo.run import main as demo_main
    except ImportError as e:
        raise SystemExit(f"wcodec: error: the demo is not available ({e})")
    return demo_main(args) or 0


def build_parser() -> argparse.ArgumentParser:
    from . import __version__
    from .lossy_target import MARGIN_SE, ROUNDINGS  # numpy only: the help states the margin the search uses

    p = argparse.ArgumentParser(prog="wcodec", description="Compress neural-network weights; decode them on CPU or GPU.",
                                epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--version", action="version", version=f"wcodec {__version__}")
    sub = p.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True

    def add(name, func, help_, examples=""):
        sp = sub.add_parser(name, help=help_, description=help_, epilog=examples,
                            formatter_class=argparse.RawDescriptionHelpFormatter)
        sp.set_defaults(func=func)
        sp.add_argument("-q", "--quiet", action="store_true", help="no progress bars")
        return sp

    sp = add("encode", cmd_encode, "compress a checkpoint (.safetensors, .pt/.pth/.bin, or a model folder)",
             "examples:\n  wcodec encode model.safetensors model.wcodec\n"
             "  wcodec encode pytorch_model.bin out.wcodec --mode int8\n"
             "  wcodec encode ./hf-model ./out --max-shard-size 2GB\n"
             "  wcodec encode ./minilm ./minilm-wcodec --mode lossy --target-cosine 0.999\n"
             "  wcodec encode ./minilm ./minilm-wcodec --mode lossy --bits-per-weight 4.0\n\n"
             "lossy targets (--target-cosine, --bits-per-weight) take a Hugging Face model folder of a\n"
             "sentence-transformers model, a transformers text encoder (BERT-like) or a causal LM, and\n"
             "need torch + transformers (pip install 'wcodec[hf]'). The Fisher weight of every matrix row\n"
             "for the model's output is estimated on 3/4 of the calibration items (shipped with wcodec: its\n"
             "lines joined into items of 1-4 lines; or --calibration FILE, one item per line); one multiplier\n"
             "of the per-row steps is then bisected, each candidate encoded and measured: cosine between\n"
             "the original and the decoded model's output (sentence embedding; a causal LM's centred logits)\n"
             "on the other 1/4, and all-in bits/weight (8 x file bytes / weights). Both are printed and\n"
             "stored in the file metadata (wcodec_lossy_target). --target-cosine C holds for the mean\n"
             f"cosine less {MARGIN_SE} standard errors of it (the held-out items are a sample).\n"
             "The linear layers' integer codes are chosen by GPTQ's error compensation (Frantar et al.\n"
             "2022) from their inputs on the calibration items, at the same steps and in the same format:\n"
             "their output error falls by about half; --rounding nearest rounds every weight instead.\n"
             "The figure holds for text like the calibration's: give --calibration a few hundred lines\n"
             "of your own inputs for a figure that predicts your use. Several minutes on a CPU for a\n"
             "22M-weight model.")
    sp.add_argument("src", help="input file or model folder")
    sp.add_argument("dst", help="output *.wcodec file, or a folder (shards, index, config files)")
    sp.add_argument("--mode", choices=("lossless", "int8", "lossy"), default="lossless",
                    help="lossless (bit-exact, default), int8 (lossy per-channel quantization of float tensors) "
                         "or lossy (rate-controlled quantization of float matrices: needs --target-cosine and/or "
                         "--bits-per-weight, --qp or --target-snr-db)")
    sp.add_argument("--codec", choices=("fixed",), default=None,
                    help="fixed: BF16 weights in the fixed-rate layout that CompressedLinear multiplies "
                         "without decoding to memory (about 12 bits/weight; F16 weights in its fp16 layout, "
                         "about 14-15.5, where that saves; default: rANS, the smallest)")
    sp.add_argument("--low-joint", action="store_true",
                    help="F32 tensors: also try their two low mantissa bytes as one 16-bit rANS plane, kept where "
                         "smaller (format version 2, which older wcodec releases refuse; fp32 all-MiniLM-L6-v2 "
                         "26.207 -> 26.111 bits/weight, faster to decode, slower to encode)")
    sp.add_argument("--workers", type=int, default=None, help="encoding threads (default: up to 4)")
    sp.add_argument("--max-shard-size", type=_size, default=None, help="folder output: bytes per shard (default 5GiB)")
    sp.add_argument("--qp", type=float, default=None, help="--mode lossy: quantization parameter 0-63 (+6 doubles the step)")
    sp.add_argument("--target-snr-db", type=float, default=None, help="--mode lossy: per-tensor SNR target in dB")
    sp.add_argument("--target-cosine", type=float, default=None, metavar="C",
                    help="--mode lossy, model folders: fewest bits whose output cosine to the original "
                         f"(held-out calibration sentences: the mean less {MARGIN_SE} standard errors) is at least C, e.g. 0.999")
    sp.add_argument("--bits-per-weight", type=float, default=None, metavar="B",
                    help="--mode lossy, model folders: best cosine within B bits/weight all-in, e.g. 4.0 "
                         "(with --target-cosine: an upper bound that must hold too)")
    sp.add_argument("--calibration", default=None, metavar="FILE",
                    help="with --target-cosine / --bits-per-weight: UTF-8 text, one sentence per line "
                         "(default: the 439 lines shipped with wcodec)")
    sp.add_argument("--rounding", choices=ROUNDINGS, default=None,
                    help="with --target-cosine / --bits-per-weight: how the linear layers' codes are chosen at "
                         "the allocated steps: gptq (error compensation from their calibration inputs, default) "
                         "or nearest (round to nearest, the reference)")
    sp.add_argument("--to", choices=("file", "folder"), default=None,
                    help="output kind (default: a *.wcodec name is a file; an existing folder, a name ending "
                         "in '/' or a folder input gives a folder)")
    sp.add_argument("-f", "--force", action="store_true", help="overwrite an existing output")

    sp = add("decode", cmd_decode, "decompress to a safetensors file or a model folder (byte for byte "
             "the original files when encoded from safetensors)",
             "examples:\n  wcodec decode model.wcodec model.safetensors\n"
             "  wcodec decode ./hf-model-wcodec ./hf-model-back      folder: shards, index, config, tokenizer")
    sp.add_argument("src", help=".wcodec file, sharded folder or index")
    sp.add_argument("dst", help="output .safetensors file, or a folder (a folder input, an existing folder "
                                "or a name ending in '/')")
    sp.add_argument("-f", "--force", action="store_true", help="overwrite an existing output")

    sp = add("info", cmd_info, "per-tensor table: dtype, shape, codec, bits/weight, ratio, prediction modes")
    sp.add_argument("file", help=".wcodec file, sharded folder or index (or a .safetensors file: its tensors)")

    sp = add("verify", cmd_verify, "check every checksum and decode every tensor",
             "examples:\n  wcodec verify model.wcodec\n"
             "  wcodec verify model.wcodec --against model.safetensors   decode gives the file back (sha256)")
    sp.add_argument("file", help=".wcodec file, sharded folder or index")
    sp.add_argument("--against", default=None, metavar="ORIGINAL",
                    help="instead: compare the sha256 of the decoded safetensors file(s) with ORIGINAL "
                         "(a file, or the model folder that was encoded)")

    sp = add("bench", cmd_bench, "measure CPU decode throughput (GB/s of decoded tensors)")
    sp.add_argument("file", help=".wcodec file, sharded folder or index")
    sp.add_argument("--repeat", type=int, default=3, help="timed passes, best reported (default 3)")
    sp.add_argument("--workers", type=int, default=None, help="decoding threads (default: up to 4)")

    sp = add("demo", cmd_demo, "run the demo: a tiny Llama generating stories from compressed weights "
             "(greedy unless --temperature > 0)")
    try:  # the demo's own options (--temperature, --seed for sampling, --out-dir), one definition
        from .demo.run import add_arguments
    except ImportError:
        add_arguments = None
    if add_arguments is not None:
        add_arguments(sp)

    try:  # the vectors commands are optional: the CLI works without them
        from .vectors.cli import register
    except ImportError:
        register = None
    if register is not None:
        register(sub)
    return p


_TORCH_REFUSAL = "Weights only load failed."
_TMP_NAME = re.compile(r"\.([^\s/'\"]+?)(?:\.[0-9a-f]{12})?\.tmp\b")


def error_line(e: BaseException) -> str:
    """One line for the user: no internal temporary names, no errno prefixes, no tracebacks."""
    from .errors import WcodecError

    if isinstance(e, ImportError) and getattr(e, "name", None):
        top = e.name.split(".")[0]
        extra = EXTRAS.get(top)
        msg = f"this needs {top}, which is not installed" + (f": pip install 'wcodec[{extra}]'" if extra else "")
    elif isinstance(e, OSError) and e.strerror and not isinstance(e, WcodecError):  # ours name the path
        msg = e.strerror + (f": '{e.filename}'" if e.filename else "")
    elif isinstance(e, KeyError) and e.args:
        msg = str(e.args[0])
    else:
        msg = str(e) or type(e).__name__
    msg = _TMP_NAME.sub(r"\1", msg.strip().splitlines()[0] if msg.strip() else msg)
    if _TORCH_REFUSAL in msg:  # drop torch's advice to retry with weights_only=False (unsafe)
        msg = msg[:msg.index(_TORCH_REFUSAL) + len(_TORCH_REFUSAL)] + " (not a plain state dict of tensors, or corrupt)"
    return f"wcodec: error: {msg}"


def _stdout_closed() -> int:
    """stdout's reader went away (``| head``): stop quietly; later flushes go to /dev/null."""
    try:
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    except (OSError, ValueError):
        pass
    return 0


def main(argv: list[str] | None = None) -> int:
    """Run the CLI; returns the exit status (also used by the ``wcodec`` console script)."""
    from .errors import WcodecError

    args = build_parser().parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except BrokenPipeError:
        return _stdout_closed()
    except (CliError, WcodecError, OSError, KeyError, ValueError, ImportError) as e:
        print(error_line(e), file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("wcodec: interrupted", file=sys.stderr)
        if argv is None:  # the program itself: do not wait at exit for encoder threads still running
            for stream in (sys.stdout, sys.stderr):
                try:
                    stream.flush()
                except (OSError, ValueError):
                    pass
            os._exit(130)
        return 130


if __name__ == "__main__":
    sys.exit(main())
