"""Hostile-input generator shared by the bounded CI fuzz test and ``tools/fuzz.py``.

Valid seed files (a container holding every codec, a sharded folder, a safetensors file, a
vectors index) are mutated structurally: one JSON value of a header, index or metadata is
replaced by a hostile one (NaN, Infinity, 2**64, -1, a string, a list, deep nesting...), deleted,
or section bytes are flipped. Every checksum the mutation invalidates is then **recomputed**
(preamble header crc32, section crc32s), so the checksums are not what catches the mutation:
the schema checks and the decoders' validation must.

Families added for issue 27: codec "fixed" records whose escape lists, row pointer, nibbles,
low bytes and values are mutated structurally (escapes duplicated, dropped, swapped, moved;
the file then written with a consistent checksum), read by every CPU consumer ("fixed-record")
or, when the decoder accepts one, run through the Triton kernels in the interpreter and compared
with the decoder's weights ("fixed-kernels": a difference is the outcome ``leak:KernelMismatch``);
and ``CompressedLinear`` / ``CompressedEmbedding`` state dicts saved with ``torch.save``, mutated
(packed bytes, sizes, strides, dtypes, ``_extra_state``, the six-buffer layout) and loaded with
``torch.load(weights_only=True)`` + ``load_state_dict`` into a fresh module, then run ("state-dict").

A case's outcome is ``"ok"`` (read without error), ``"rejected"`` (a WcodecError) or
``"leak:<ExceptionType>"`` (anything else: a defect).
"""

from __future__ import annotations

import copy
import functools
import json
import random
import struct
import zlib
from pathlib import Path

import numpy as np

KINDS = ("container-header", "container-params", "container-sections", "sharded-index",
         "safetensors", "safetensors-index", "vectors", "fixed-record", "fixed-kernels", "state-dict")
#: relative frequency of each kind in long runs (tools/fuzz.py): a "fixed-kernels" case runs five
#: Triton kernels in the interpreter (~1 s), the others take milliseconds
WEIGHTS = {k: 10 for k in KINDS} | {"fixed-kernels": 1}

HOSTILE = [float("nan"), float("inf"), -float("inf"), 2 ** 64, 2 ** 63, 2 ** 63 - 1, 2 ** 62, 2 ** 40,
           2 ** 31, 2 ** 32 + 1, -1, -2 ** 63, 0, 1, 2, 3, 255, 256, 65536, 1.5, -0.0, 1e308, True, False,
           None, "", "x", "F32", "I8", "float", "int8", "raw", "int8-quant", "../x", "/etc/passwd",
           "a\x00b", "missing.safetensors", "missing-00001-of-00002.wcodec", [], [1, 2], [[1]], {}, {"a": 1}, [0] * 40, "deep"]


def _crc(b) -> int:
    return zlib.crc32(b) & 0xFFFFFFFF


def _paths(obj, prefix=()):
    """Every (path) to a value inside a JSON tree."""
    yield prefix
    if isinstance(obj, dict):
        for k, v in obj.items():
            yield from _paths(v, prefix + (k,))
    elif isinstance(obj, list):
        for i, v in enumerate(obj):
            yield from _paths(v, prefix + (i,))


def _get(obj, path):
    for k in path:
        obj = obj[k]
    return obj


def mutate_json(obj, rng: random.Random, focus=()):
    """A deep copy of ``obj`` with one value replaced, deleted or duplicated (under ``focus``).

    Returns (new object, description). Deep nesting is marked with the string "DEEP" and
    expanded by :func:`dump`.
    """
    obj = copy.deepcopy(obj)
    paths = [p for p in _paths(obj) if p[:len(focus)] == tuple(focus) and len(p) > 0]
    if not paths:
        return obj, "no-op"
    path = rng.choice(paths)
    parent, key = _get(obj, path[:-1]), path[-1]
    op = rng.random()
    if op < 0.12 and isinstance(parent, dict):
        del parent[key]
        return obj, f"del {path}"
    if op < 0.2 and isinstance(parent, list):
        parent.append(copy.deepcopy(parent[key]))
        return obj, f"dup {path}"
    old = parent[key]
    if op < 0.3 and type(old) is int:
        new = rng.choice([old + 1, old - 1, old * 2, old * 1000, old // 2, -old, old + (1 << 32), old ^ (1 << rng.randrange(64))])
    elif op < 0.35:
        new = "DEEP"
    else:
        new = rng.choice(HOSTILE)
    parent[key] = new
    return obj, f"set {path} = {new!r}"[:200]


def dump(obj, rng: random.Random | None = None) -> bytes:
    """JSON bytes allowing NaN/Infinity (hostile on purpose); "DEEP" becomes deep nesting."""
    text = json.dumps(obj, separators=(",", ":"), allow_nan=True)
    if '"DEEP"' in text:
        depth = (rng or random).choice([65, 200, 5000, 100_000])
        text = text.replace('"DEEP"', "[" * depth + "]" * depth, 1)
    return text.encode("utf-8")


# -- seeds -----------------------------------------------------------------------------------------
def seed_tensors() -> dict:
    """Small tensors covering every codec: float (BF16/F16/F32), int8 (I8/U8), raw, 0-d, empty."""
    rng = np.random.default_rng(0)
    w = (rng.standard_normal((48, 40)) * 0.05).astype(np.float32)
    smooth = np.cumsum(rng.integers(-2, 3, (40, 40)), axis=1).astype(np.int8)
    return {
        "f32": w,
        "bf16": (w.view(np.uint32) >> 16).astype(np.uint16),
        "f16": w.astype(np.float16),
        "i8": rng.integers(-128, 128, (30, 20), dtype=np.int8),
        "i8.smooth": smooth,
        "u8": rng.integers(0, 4, (300,), dtype=np.uint8),
        "i64": np.arange(7, dtype=np.int64),
        "scalar": np.array(2.5, dtype=np.float32),
        "empty": np.zeros((0, 4), dtype=np.float16),
    }


DTYPE = {"f32": "F32", "bf16": "BF16", "f16": "F16", "i8": "I8", "i8.smooth": "I8", "u8": "U8",
         "i64": "I64", "scalar": "F32", "empty": "F16"}


def newer_codec_records(t: dict) -> dict:
    """Records of the fixed-rate, fp8 and lossy codecs and an int8 record whose tiles use every
    mode, transform tiles (DCT / ADST, with their "hi" plane) included."""
    from wcodec.codecs import encode_tensor
    from wcodec.codecs.int8 import Int8Codec

    rng = np.random.default_rng(1)
    yy, xx = np.mgrid[0:64, 0:96]
    smooth = (np.sin(yy / 7.0) * 60 + np.cos(xx / 5.0) * 50 + rng.integers(-2, 3, yy.shape)).astype(np.int8)
    modes = (np.arange(6) % 7).astype(np.uint8)  # 2 x 3 tiles of 32: NONE..PLANAR, DCT
    modes[-1] = 6  # ... and ADST
    modes[-2] = 5
    tiles = Int8Codec()._pack("I8", smooth.shape, smooth.astype(np.int16), 32, 32, modes, 12, None, "auto", True)
    assert "hi.words" in tiles.sections
    return {"i8.tiles": tiles,
            "bf16.fixed": encode_tensor(t["bf16"], "BF16", codec="fixed"),
            "fp8": encode_tensor(rng.integers(0, 256, (40, 24), dtype=np.uint8), "F8_E4M3"),
            "f32.lossy": encode_tensor(t["f32"], "F32", "lossy:qp=20")}


def make_seeds(folder) -> dict:
    """Write the valid seed files into ``folder``; returns {kind: path}."""
    from wcodec.codecs import encode_tensor
    from wcodec.format import ShardedWriter, Writer, spec

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    t = seed_tensors()
    out = {}
    cont = folder / "seed.wcodec"
    with Writer(cont, {"origin": "fuzz"}) as w:
        for name, arr in t.items():
            rec = encode_tensor(arr, DTYPE[name], "lossless", name)
            w.add_record(name, rec, spec.crc32(arr))
        q = encode_tensor(t["f32"], "F32", "int8", "q")
        from wcodec.codecs import decode_tensor
        w.add_record("f32.q", q, spec.crc32(decode_tensor(q)))
        for name, rec in newer_codec_records(t).items():  # the layouts added after the first fuzz runs
            w.add_record(name, rec, spec.crc32(decode_tensor(rec)))
        w.add_alias("tied", "f32")
    out["container"] = cont
    shard_dir = folder / "sharded"
    with ShardedWriter(shard_dir, max_shard_size=2000, metadata={"origin": "fuzz"}) as sw:
        for name in ("f32", "i8", "i64", "scalar"):
            arr = t[name]
            sw.add_record(name, encode_tensor(arr, DTYPE[name], "lossless", name), spec.crc32(arr))
    out["sharded"] = shard_dir
    st = folder / "seed.safetensors"
    from wcodec.format.sources import write_safetensors
    specs = [(k, DTYPE[k], tuple(v.shape)) for k, v in t.items()]
    write_safetensors(st, specs, lambda n: t[n], {"format": "pt"})
    out["safetensors"] = st
    try:
        from wcodec.vectors import AnnealingConfig, compress
        pts = np.random.default_rng(1).standard_normal((300, 16)).astype(np.float32)
        idx = compress(pts, AnnealingConfig(m=8, max_iterations=4, bytes_per_vector=40, pq_iterations=2))
        idx.save(folder / "seed.vectors.wcodec")
        out["vectors"] = folder / "seed.vectors.wcodec"
    except ImportError:  # pragma: no cover - vectors extras missing
        pass
    return out


# -- container surgery -----------------------------------------------------------------------------
def split_container(data: bytes):
    from wcodec.format import spec
    _, _, _, h_off, h_size, _ = spec.PREAMBLE.unpack(data[:spec.PREAMBLE_SIZE])
    return h_off, json.loads(data[h_off:h_off + h_size])


def join_container(data: bytes, h_off: int, header_raw: bytes) -> bytes:
    """Sections of ``data`` + a new header, with the preamble's size and crc32 recomputed."""
    from wcodec.format import spec
    body = bytearray(data[:h_off])
    version = int.from_bytes(data[8:12], "little")  # the file's own: mutations stay past the version check
    body[:spec.PREAMBLE_SIZE] = spec.pack_preamble(h_off, len(header_raw), _crc(header_raw), version)
    return bytes(body) + header_raw


def fix_section_crcs(data: bytearray, header: dict) -> None:
    """Recompute every section crc32 of the header from the (mutated) bytes."""
    tensors = header.get("tensors")
    for e in (tensors.values() if isinstance(tensors, dict) else ()):
        if not isinstance(e, dict):
            continue
        secs = e.get("sections")
        for s in (secs.values() if isinstance(secs, dict) else ()):
            try:
                off, size = int(s["offset"]), int(s["size"])
                if 0 <= off <= off + size <= len(data):
                    s["crc32"] = _crc(bytes(data[off:off + size]))
            except (KeyError, TypeError, ValueError, OverflowError):
                pass


def hostile_container(data: bytes, rng: random.Random, kind: str) -> tuple[bytes, str]:
    h_off, header = split_container(data)
    names = [n for n, e in header["tensors"].items() if "alias_of" not in e]
    name = rng.choice(names)
    if kind == "container-params" and rng.random() < 0.2:
        new, desc = claim_larger(header, name, rng.choice([2, 16, 1024, 1 << 16, 1 << 24]))
    elif kind == "container-params":
        new, desc = mutate_json(header, rng, ("tensors", name, "params"))
    elif kind == "container-header":
        new, desc = mutate_json(header, rng)
    else:  # container-sections: flip bytes of one section, then recompute every checksum
        new, desc = header, ""
        secs = header["tensors"][name]["sections"]
        sname = rng.choice(sorted(secs))
        s = secs[sname]
        buf = bytearray(data)
        for _ in range(rng.choice([1, 1, 2, 8])):
            if s["size"]:
                i = s["offset"] + rng.randrange(s["size"])
                buf[i] = rng.randrange(256) if rng.random() < 0.7 else buf[i] ^ 0xFF
        data, desc = bytes(buf), f"bytes of {name}.{sname}"
    buf = bytearray(data)
    if isinstance(new, dict):
        fix_section_crcs(buf, new)
    return join_container(bytes(buf), h_off, dump(new, rng)), f"{kind}: {name}: {desc}"


def claim_larger(header: dict, name: str, k: int) -> tuple[dict, str]:
    """The tensor ``name`` claims ``k`` times more elements, with its shape, view and every
    plane's ``n_symbols`` scaled consistently: only the ratio and memory bounds can catch it."""
    header = copy.deepcopy(header)
    e = header["tensors"][name]
    e["shape"] = [k] + list(e["shape"]) if e["shape"] else [k]
    numel = 1
    for d in e["shape"]:
        numel *= d

    def scale(p):
        if isinstance(p, dict):
            if "n_symbols" in p:
                p["n_symbols"] = numel
            if "rows" in p and "cols" in p:
                p["rows"], p["cols"] = numel // max(p["cols"], 1) if p["cols"] else 0, p["cols"]
            for v in p.values():
                scale(v)
        elif isinstance(p, list):
            for v in p:
                scale(v)

    scale(e.get("params"))
    return header, f"claims {k}x more elements"


def hostile_safetensors(data: bytes, rng: random.Random) -> tuple[bytes, str]:
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + n])
    if rng.random() < 0.1:
        header = rng.choice([[], [1, 2], "x", 1, None])
        desc = f"header = {header!r}"
    else:
        header, desc = mutate_json(header, rng)
    raw = dump(header, rng)
    return struct.pack("<Q", len(raw)) + raw + data[8 + n:], f"safetensors: {desc}"


def hostile_index(index: dict, rng: random.Random) -> tuple[bytes, str]:
    new, desc = mutate_json(index, rng, ("weight_map",) if rng.random() < 0.7 else ())
    return dump(new, rng), f"index: {desc}"


def hostile_vectors(data: bytes, rng: random.Random) -> tuple[bytes, str]:
    h_off, header = split_container(data)
    meta = json.loads(header["metadata"]["wcodec.vectors"])
    new, desc = mutate_json(meta, rng)
    header["metadata"]["wcodec.vectors"] = dump(new, rng).decode("utf-8")
    return join_container(data, h_off, dump(header, rng)), f"vectors: {desc}"


# -- targets ---------------------------------------------------------------------------------------
def read_container(path) -> None:
    """Open a .wcodec file or folder and decode every tensor, as ``wcodec verify`` does, then
    run ``wcodec info`` on it (which reads records without decoding them)."""
    import contextlib
    import io

    from wcodec.format import CheckpointReader
    try:
        with CheckpointReader(path) as r:
            for name in r.keys():
                r.get_numpy(name, verify=True)
    finally:
        from unittest import mock

        from wcodec import cli
        # cli.main builds its argparse parser on every call (~20 ms of gettext look-ups, half of a
        # case's time); the parser is the same each time, so main runs with one built once
        with mock.patch.object(cli, "build_parser", functools.partial(_cli_parser, cli.build_parser)), \
                contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
            cli.main(["info", str(path)])  # returns 1 on a WcodecError; anything else escapes


@functools.lru_cache(maxsize=None)
def _cli_parser(build_parser):
    return build_parser()


def read_safetensors_file(path) -> None:
    from wcodec.format.sources import read_safetensors
    _, items = read_safetensors(path)
    for it in items:
        np.asarray(it.array).sum()


def read_model_folder(path) -> None:
    """Read a Hugging Face style folder (index + safetensors shards) as ``wcodec encode`` does."""
    from wcodec.format.sources import read_source
    _, items = read_source(path)
    for it in items:
        np.asarray(it.array).sum()


def read_vectors(path) -> None:
    from wcodec.vectors.index import load_index
    load_index(path)


# -- codec "fixed" records: structural mutations, every consumer, the kernels ----------------------
FIXED_SPECIALS = [0x7FC1, 0xFFC0, 0x7F80, 0xFF80, 0x8000, 0x0000, 0x0001, 0x7F7F, 0x4F00, 0x2000]
FIXED_OPS = ("col", "dup", "swap", "nib", "lo", "val", "ptr", "drop", "move")


class KernelMismatch(AssertionError):
    """A kernel computed with other weights than the decoder (the defect of issue 27)."""


def fixed_record(r: np.random.Generator, n: int, k: int):
    """A valid codec "fixed" record of an [n, k] bf16 weight with escapes (specials, zeros)."""
    from wcodec.codecs import encode_tensor
    u = (r.standard_normal((n, k)) * 0.05).astype(np.float32).view(np.uint32)
    bits = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)
    flat = bits.reshape(-1)
    m = max(1, flat.size // 6)
    flat[r.integers(0, flat.size, m)] = r.choice(FIXED_SPECIALS, m)
    return encode_tensor(bits, "BF16", codec="fixed")


def mutate_fixed(rec, op: str, r: np.random.Generator) -> str:
    """Mutate a fixed record's escape list / pointer / planes in place (params kept consistent
    with the section sizes); returns a description."""
    s, p = rec.sections, rec.params
    col, val, ptr = s["esc.col"].copy(), s["esc.val"].copy(), s["esc.ptr"].copy()
    n_esc = col.size
    i = int(r.integers(n_esc)) if n_esc else 0
    row = int(np.searchsorted(ptr, i, side="right")) - 1 if n_esc else 0
    if op == "col" and n_esc:
        col[i] = r.integers(0, int(rec.shape[-1]) + 2)
    elif op == "dup" and n_esc:  # a well-formed CSR list with one escape listed twice
        col, val = np.insert(col, i, col[i]), np.insert(val, i, val[i] ^ np.uint16(r.integers(0, 2) << 14))
        ptr[row + 1:] += 1
        p["n_escapes"] += 1
    elif op == "swap" and n_esc > 1:
        j = min(i + 1, n_esc - 1)
        col[[i, j]] = col[[j, i]]
    elif op == "nib":
        nib = s["nib"].copy()
        nib[r.integers(nib.size)] ^= np.uint8(r.integers(1, 256))
        s["nib"] = nib
    elif op == "lo":
        lo = s["lo"].copy()
        lo[r.integers(lo.size)] ^= np.uint8(r.integers(1, 256))
        s["lo"] = lo
    elif op == "val" and n_esc:
        val[i] = r.integers(0, 1 << 16)
    elif op == "ptr":
        ptr[r.integers(ptr.size)] += np.uint32(r.integers(1, 3))
    elif op == "drop" and n_esc:
        col, val = np.delete(col, i), np.delete(val, i)
        ptr[row + 1:] -= 1
        p["n_escapes"] -= 1
    elif op == "move" and n_esc and ptr.size > 2:  # the escape into a neighbouring row
        if row + 1 < ptr.size - 1 and ptr[row + 1] == i + 1:
            ptr[row + 1] -= 1
        elif row > 0 and ptr[row] == i:
            ptr[row] += 1
    s["esc.col"], s["esc.val"], s["esc.ptr"] = col, val, ptr
    return f"{op} at escape {i} of {n_esc}"


def hostile_fixed(rng: random.Random) -> tuple:
    """(record, description) of a mutated fixed record of a small random shape."""
    r = np.random.default_rng(rng.randrange(1 << 32))
    n, k = rng.randint(1, 9), rng.choice([1, 5, 16, 17, 40])
    rec = fixed_record(r, n, k)
    descs = [mutate_fixed(rec, rng.choice(FIXED_OPS), r) for _ in range(rng.choice([0, 1, 1, 2, 3]))]
    return rec, f"fixed [{n}, {k}]: " + ("; ".join(descs) or "unchanged")


def write_record(path, name: str, rec) -> bytes:
    """A .wcodec file of ``rec`` whose checksum is the decoder's output (or 0 when it refuses
    the record), so the decoders' checks, not the checksum, must catch the mutation."""
    from wcodec.codecs import decode_tensor
    from wcodec.errors import WcodecError
    from wcodec.format import Writer, spec
    try:
        crc = spec.crc32(decode_tensor(rec, name))
    except WcodecError:
        crc = 0
    with Writer(path) as w:
        w.add_record(name, rec, crc)
    return Path(path).read_bytes()


def read_fixed_file(path) -> None:
    """Every CPU consumer of a fixed record: verify, get_slice, the GPU loader's CPU path,
    from_sections into a CompressedLinear and its forward."""
    import wcodec
    read_container(path)
    with wcodec.safe_open(path, framework="np") as f:
        for name in f.keys():
            sl = f.get_slice(name)
            sl[0:1]
            sl[len(sl) - 1:]
    try:
        import torch
    except ImportError:  # pragma: no cover
        return
    from wcodec.format import Reader
    from wcodec.gpu import fixed as fx
    from wcodec.gpu.loader import load_records
    from wcodec.torch.linear import CompressedLinear
    with Reader(path) as r:
        items = [(n, r.record(n)) for n in r.keys()]
    load_records(items, device=torch.device("cpu"))
    for name, rec in items:
        fw = fx.from_sections(rec.params, rec.sections, rec.shape, "cpu", name=name)
        cl = CompressedLinear(fw)
        cl(torch.ones(2, fw.K, dtype=torch.bfloat16))


def check_fixed_kernels(rec, r: np.random.Generator, device: str = "cpu") -> None:
    """If the decoder accepts ``rec``, every Triton kernel must compute with its weights:
    decode and rows kernels bit for bit, GEMV / tiled (split-K too) / input gradient up to fp32
    rounding of the sums and of ``placeholder + (value - placeholder)``. Raises the decoder's
    CorruptDataError (after checking that from_sections refuses the record too) or KernelMismatch."""
    import os

    import torch
    from wcodec.codecs import decode_tensor
    from wcodec.errors import CorruptDataError
    from wcodec.gpu import fixed as fx
    try:
        w_bits = decode_tensor(rec, "w")
    except CorruptDataError:
        try:
            fx.from_sections(rec.params, rec.sections, rec.shape, device, name="w")
        except CorruptDataError:
            raise
        raise KernelMismatch("the decoder refuses the record, from_sections takes it") from None
    n, k = w_bits.shape
    old = os.environ.get("WCODEC_FIXED_TRITON")
    os.environ["WCODEC_FIXED_TRITON"] = "1"
    try:
        w = torch.from_numpy(w_bits.view(np.int16).copy()).view(torch.bfloat16).to(device)
        fw = fx.from_sections(rec.params, rec.sections, rec.shape, device, name="w")
        if not torch.equal(fx.decode(fw).view(torch.int16), w.view(torch.int16)):
            raise KernelMismatch("decode kernel")
        if not torch.equal(fx.embedding(torch.arange(n, device=device), fw).view(torch.int16), w.view(torch.int16)):
            raise KernelMismatch("rows kernel")
        wd = w.double().cpu().numpy()
        placeholder = np.where(np.isfinite(wd), np.abs(wd), 0) + 2.0 ** (2 * (fw.base + 7) - 126)
        # fp32 sums (interpreter); on a GPU fp32 tensor-core products round to tf32 and bf16
        # outputs to 8 bits: a double-counted or misplaced escape still errs by ~|placeholder|
        tol = 1e-5 if device == "cpu" else 1e-2
        m = int(r.integers(1, 4))
        x = torch.from_numpy(r.uniform(-1e-3, 1e-3, (m, k)).astype(np.float32)).to(device)
        runs = [(x, kind, split) for kind, split in (("gemv", None), ("mm", None), ("mm", 2))]
        if device != "cpu":  # bf16 activations: the default routing, the mma kernel for 3-16 rows
            runs += [(x.to(torch.bfloat16), None, None), (torch.cat([x] * 3).to(torch.bfloat16), None, None)]
        for xi, kind, split in runs:
            xd = xi.double().cpu().numpy()
            ref, scale = np.einsum("mk,nk->mn", xd, wd), np.abs(xd) @ placeholder.T
            if not _close(fx.linear(xi, fw, kind=kind, split=split), ref, scale, tol):
                raise KernelMismatch(f"linear kind={kind} split={split} x {xi.dtype} {tuple(xi.shape)}")
        g = torch.from_numpy(r.uniform(-1e-3, 1e-3, (m, n)).astype(np.float32)).to(device)
        gd = g.double().cpu().numpy()
        if not _close(fx.grad_input(g, fw), np.einsum("mn,nk->mk", gd, wd), np.abs(gd) @ placeholder, tol):
            raise KernelMismatch(f"grad_input M={m}")
    finally:
        if old is None:
            os.environ.pop("WCODEC_FIXED_TRITON", None)
        else:
            os.environ["WCODEC_FIXED_TRITON"] = old


def _close(y, ref: np.ndarray, scale: np.ndarray, tol: float) -> bool:
    y = y.double().cpu().numpy()
    fin = np.isfinite(ref)
    if not np.array_equal(np.isnan(y), np.isnan(ref)) or not np.array_equal(y[np.isinf(ref)], ref[np.isinf(ref)]):
        return False
    return bool(np.all(np.abs(y[fin] - ref[fin]) <= tol * scale[fin] + 1e-30))


def run_fixed_kernels(path) -> None:
    from wcodec.format import Reader
    with Reader(path) as rd:
        rec = rd.record("w", verify=False)
    check_fixed_kernels(rec, np.random.default_rng(len(rec.sections["lo"])))


# -- CompressedLinear / CompressedEmbedding state dicts ---------------------------------------------
def module_state(kind: str, seed: int = 0):
    """(module class, its state dict) of a small layer with escapes."""
    import torch
    from wcodec.gpu import fixed as fx
    from wcodec.torch.embedding import CompressedEmbedding
    from wcodec.torch.linear import CompressedLinear
    g = torch.Generator().manual_seed(seed)
    w = (torch.randn(24, 40, generator=g) * 0.05).to(torch.bfloat16)
    w.view(torch.int16).view(-1)[torch.randperm(960, generator=g)[:25]] = 0
    cls = CompressedLinear if kind == "linear" else CompressedEmbedding
    m = cls(fx.encode_weight(w), torch.zeros(24, dtype=torch.bfloat16)) if cls is CompressedLinear \
        else cls(fx.encode_weight(w))
    return cls, m.state_dict()


OLD_NAMES = {"lo": "w_lo", "nib": "w_nib", "eptr": "esc_ptr", "ecol": "esc_col", "eval": "esc_val", "erow": "esc_row"}


def hostile_state(rng: random.Random) -> tuple:
    """(module kind, mutated state dict, description)."""
    import torch
    from wcodec.gpu import fixed as fx
    kind = rng.choice(["linear", "embedding"])
    _, sd = module_state(kind, rng.randrange(1000))
    sd = dict(sd)
    op = rng.choice(["bytes", "bytes", "size", "stride0", "dtype", "extra", "old", "old-bytes", "old-size"])
    packed = sd["w_packed"].clone()
    if op in ("old", "old-bytes", "old-size"):  # the six-buffer layout of earlier versions
        extra = sd["_extra_state"]
        fw = fx.unpack(sd.pop("w_packed"), extra["base"], 24, 40)
        old = {name: getattr(fw, f).clone() for f, name in OLD_NAMES.items()}
        name = rng.choice(sorted(old))
        t = old[name]
        if op == "old-bytes" and t.numel():
            b = t.view(torch.uint8).view(-1)
            b[rng.randrange(b.numel())] = rng.randrange(256)
        elif op == "old-size":
            old[name] = t.reshape(-1)[:rng.randrange(t.numel() + 1)].clone() if rng.random() < 0.5 \
                else torch.cat([t.reshape(-1), t.reshape(-1)[:rng.randrange(1, 40)]])
        sd.update(old)
        return kind, sd, f"{kind}: {op} {name}"
    if op == "bytes":
        for _ in range(rng.choice([1, 2, 4])):
            packed[rng.randrange(packed.numel())] = rng.randrange(256)
        sd["w_packed"] = packed
    elif op == "size":
        cut = rng.choice([0, 1, 16, 17, 32, packed.numel() // 2])
        sd["w_packed"] = packed[:-cut].clone() if cut and rng.random() < 0.5 else \
            torch.cat([packed, torch.zeros(cut or 16, dtype=torch.uint8)])
    elif op == "stride0":
        sd["w_packed"] = torch.zeros(1, dtype=torch.uint8).expand(rng.choice([packed.numel(), packed.numel() + 16, 1 << 31]))
    elif op == "dtype":
        sd["w_packed"] = packed.to(rng.choice([torch.int16, torch.float32, torch.int64]))
    else:
        new, desc = mutate_json(dict(sd["_extra_state"]), rng)
        sd["_extra_state"] = new
        return kind, sd, f"{kind}: extra_state {desc}"
    return kind, sd, f"{kind}: {op}"


def load_state(path) -> None:
    """torch.load(weights_only=True) into a fresh module of the same shape, then run it."""
    import torch
    sd = torch.load(path, weights_only=True)
    extra = sd.get("_extra_state") if isinstance(sd, dict) else None
    if isinstance(extra, dict) and ("in_features" in extra or "num_embeddings" in extra):
        kind = "linear" if "in_features" in extra else "embedding"  # a reproducer file's name has no kind
    else:
        kind = "linear" if "linear" in Path(path).name else "embedding"
    cls, _ = module_state(kind, 12345)
    from wcodec.gpu import fixed as fx
    m = cls(fx.encode_weight(torch.zeros(24, 40, dtype=torch.bfloat16)))
    m.load_state_dict(sd, strict=False)
    if kind == "linear":
        m(torch.ones(3, 40, dtype=torch.bfloat16))
    else:
        m(torch.tensor([0, 23]))
    m.decoded_weight()


def warm_up() -> None:
    """Import what the torch and kernel kinds use (seconds on a busy machine), when available."""
    try:
        import torch  # noqa: F401
        import wcodec.torch.embedding  # noqa: F401
        import wcodec.gpu.fixed_kernels  # noqa: F401
    except ImportError:  # pragma: no cover
        pass


class Fuzzer:
    """Generates and runs hostile cases from the seeds in ``workdir``."""

    def __init__(self, workdir, seed: int = 0):
        self.work = Path(workdir)
        self.seeds = make_seeds(self.work / "seeds")
        self.rng = random.Random(seed)
        self.data = {k: Path(p).read_bytes() for k, p in self.seeds.items() if Path(p).is_file()}
        idx = next(Path(self.seeds["sharded"]).glob("*.index.json"))
        self.index_name = idx.name
        self.index = json.loads(idx.read_text())
        self.case_dir = self.work / "case"

    def make(self, kind: str):
        """(target function, path, description, bytes) of one new case of ``kind``."""
        import shutil
        rng = self.rng
        if kind.startswith("container"):
            raw, desc = hostile_container(self.data["container"], rng, kind)
            path = self.work / "case.wcodec"
            path.write_bytes(raw)
            return read_container, path, desc, raw
        if kind == "safetensors":
            raw, desc = hostile_safetensors(self.data["safetensors"], rng)
            path = self.work / "case.safetensors"
            path.write_bytes(raw)
            return read_safetensors_file, path, desc, raw
        if kind == "vectors":
            raw, desc = hostile_vectors(self.data["vectors"], rng)
            path = self.work / "case.vectors.wcodec"
            path.write_bytes(raw)
            return read_vectors, path, desc, raw
        if kind in ("fixed-record", "fixed-kernels"):
            from wcodec.errors import UnsupportedError
            path = self.work / "case.fixed.wcodec"
            while True:  # until the writer takes the record (it refuses params out of range)
                rec, desc = hostile_fixed(rng)
                try:
                    raw = write_record(path, "w", rec)
                    break
                except UnsupportedError:
                    continue
            return (read_fixed_file if kind == "fixed-record" else run_fixed_kernels), path, desc, raw
        if kind == "state-dict":
            import torch
            mkind, sd, desc = hostile_state(rng)
            path = self.work / f"case.{mkind}.pt"
            torch.save(sd, path)
            return load_state, path, desc, path.read_bytes()
        if kind == "safetensors-index":
            folder = self.work / "st-folder"
            if folder.exists():
                shutil.rmtree(folder)
            folder.mkdir()
            (folder / "model-00001-of-00001.safetensors").write_bytes(self.data["safetensors"])
            names = json.loads(self.data["safetensors"][8:8 + struct.unpack("<Q", self.data["safetensors"][:8])[0]])
            index = {"metadata": {"total_size": 1},
                     "weight_map": {k: "model-00001-of-00001.safetensors" for k in names if k != "__metadata__"}}
            raw, desc = hostile_index(index, rng)
            (folder / "model.safetensors.index.json").write_bytes(raw)
            return read_model_folder, folder, f"safetensors {desc}", raw
        if kind == "sharded-index":
            if self.case_dir.exists():
                shutil.rmtree(self.case_dir)
            shutil.copytree(self.seeds["sharded"], self.case_dir)
            raw, desc = hostile_index(self.index, rng)
            (self.case_dir / self.index_name).write_bytes(raw)
            return read_container, self.case_dir, desc, raw
        raise ValueError(kind)


def outcome(fn, path) -> str:
    from wcodec.errors import WcodecError
    try:
        fn(path)
    except WcodecError:
        return "rejected"
    except Exception as e:  # noqa: BLE001 - the point: anything else is a finding
        return f"leak:{type(e).__name__}"
    return "ok"
