"""Hostile-input generator shared by the bounded CI fuzz test and ``tools/fuzz.py``.

Valid seed files (a container holding every codec, a sharded folder, a safetensors file, a
vectors index) are mutated structurally: one JSON value of a header, index or metadata is
replaced by a hostile one (NaN, Infinity, 2**64, -1, a string, a list, deep nesting...), deleted,
or section bytes are flipped. Every checksum the mutation invalidates is then **recomputed**
(preamble header crc32, section crc32s), so the checksums are not what catches the mutation:
the schema checks and the decoders' validation must.

A case's outcome is ``"ok"`` (read without error), ``"rejected"`` (a WcodecError) or
``"leak:<ExceptionType>"`` (anything else: a defect).
"""

from __future__ import annotations

import copy
import json
import random
import struct
import zlib
from pathlib import Path

import numpy as np

KINDS = ("container-header", "container-params", "container-sections", "sharded-index",
         "safetensors", "safetensors-index", "vectors")

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
        from wcodec.vectors.storage import save_index
        pts = np.random.default_rng(1).standard_normal((300, 16)).astype(np.float32)
        idx = compress(pts, AnnealingConfig(m=8, max_iterations=4, bytes_per_vector=40, pq_iterations=2))
        save_index(idx, folder / "seed.vectors.wcodec")
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
        from wcodec.cli import main
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
            main(["info", str(path)])  # returns 1 on a WcodecError; anything else escapes


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
    from wcodec.vectors.storage import load_index
    load_index(path)


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
