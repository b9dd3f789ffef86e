"""Checkpoint inputs (safetensors, Hugging Face folders, torch state dicts) and safetensors output.

Inputs are read lazily: safetensors files are memory-mapped (parsed here, so BF16 works without
torch), torch files are loaded with ``torch.load(weights_only=True, mmap=True)``. Each source
yields :class:`~wcodec.format.encode.Item` objects one tensor at a time.
"""

from __future__ import annotations

import json
import os
import shutil
import struct
import warnings
from pathlib import Path
from typing import Iterator

import numpy as np

from ..errors import CorruptDataError, FormatError, NoDataError, NotFoundError, UnsupportedError
from . import _io, spec
from .encode import Item

ST_DTYPES = {"BOOL": "|b1", "U8": "|u1", "I8": "|i1", "I16": "<i2", "U16": "<u2", "I32": "<i4", "U32": "<u4",
             "I64": "<i8", "U64": "<u8", "F16": "<f2", "BF16": "<u2", "F32": "<f4", "F64": "<f8",
             "F8_E4M3": "|u1", "F8_E5M2": "|u1", "F8_E4M3FNUZ": "|u1", "F8_E5M2FNUZ": "|u1",
             "F8_E8M0": "|u1", "C64": "<c8", "F4_X2": "|u1"}
TORCH_SUFFIXES = (".pt", ".pth", ".bin", ".ckpt")
INDEX_NAMES = ("model.safetensors.index.json", "pytorch_model.bin.index.json")
OTHER_WEIGHT_SUFFIXES = (".safetensors", ".wcodec", ".msgpack", ".h5", ".gguf", ".onnx")


# -- safetensors -----------------------------------------------------------------------------------
def _st_entry(fname: str, name, e, data_size: int) -> tuple:
    """Schema check of one safetensors header entry: (offset, name, dtype, shape, numpy dtype, numel)."""
    where = f"{fname}: tensor {name!r}"
    if not isinstance(e, dict):
        raise CorruptDataError(f"{where}: entry is not an object")
    dtype, shape, offs = e.get("dtype"), e.get("shape"), e.get("data_offsets")
    if not isinstance(dtype, str):
        raise CorruptDataError(f"{where}: dtype must be a string, got {dtype!r}"[:300])
    if not isinstance(shape, list) or len(shape) > spec.MAX_NDIM or \
            not all(type(d) is int and 0 <= d < (1 << 48) for d in shape):
        raise CorruptDataError(f"{where}: shape must be a list of at most {spec.MAX_NDIM} "
                               f"non-negative integers, got {shape!r}"[:300])
    if dtype == "F4":  # safetensors counts FP4 values; wcodec stores torch's packed pairs
        if not shape or shape[-1] % 2:
            raise UnsupportedError(f"tensor '{name}': F4 with an odd last dimension is not supported")
        dtype, shape = "F4_X2", shape[:-1] + [shape[-1] // 2]
    elif dtype == "F4_X2" or dtype not in ST_DTYPES:
        raise UnsupportedError(f"tensor '{name}': dtype {dtype} is not supported")
    if not (isinstance(offs, list) and len(offs) == 2 and all(type(o) is int for o in offs)):
        raise CorruptDataError(f"{where}: data_offsets must be two integers, got {offs!r}"[:300])
    a, b = offs
    numel = 1
    for d in shape:
        numel *= d
    dt = np.dtype(ST_DTYPES[dtype])
    if not (0 <= a <= b <= data_size) or b - a != numel * dt.itemsize:
        raise CorruptDataError(f"{where}: data_offsets {a, b} do not fit {dtype}{shape} in {data_size} data bytes")
    return a, name, dtype, shape, dt, numel


def read_safetensors(path) -> tuple[dict, Iterator[Item]]:
    """Open a safetensors file: returns (metadata, lazy iterator of Items).

    The header is schema-checked before any tensor is read (dtype a known string, shape a list
    of at most 32 non-negative integers, data_offsets two integers inside the data region,
    ``__metadata__`` str -> str). Tensor bytes are read with pread, one tensor at a time (no
    memory map: see :mod:`wcodec.format.reader` on SIGBUS). Raises FormatError /
    CorruptDataError on a malformed file, UnsupportedError for dtypes wcodec does not handle
    (e.g. F8_E4M3), naming the tensor.
    """
    path = Path(path)
    raw, meta, entries = read_safetensors_header(path)
    n = len(raw)
    entries.sort(key=lambda t: t[0])  # file order: sequential reads
    f = _io.open_regular(path, "safetensors file")

    def items():
        with f:
            for a, name, dtype, shape, dt, numel in entries:
                buf = np.empty(numel * dt.itemsize, dtype=np.uint8)
                if not _io.pread_into(f.fileno(), buf, 8 + n + a):
                    raise CorruptDataError(f"{path.name}: tensor '{name}': short read (file truncated while open)")
                yield Item(name, buf.view(dt).reshape(shape), dtype, (str(path), a, dtype, tuple(shape)))

    return dict(meta), items()


def read_safetensors_header(path) -> tuple[bytes, dict, list[tuple]]:
    """A safetensors file's raw header bytes (after the 8-byte size, padding included), its
    ``__metadata__`` and its schema-checked entries (data offset, name, dtype, shape, numpy
    dtype, numel) in the header's order. Raises as :func:`read_safetensors`."""
    path = Path(path)
    with _io.open_regular(path, "safetensors file") as f:
        size = os.fstat(f.fileno()).st_size
        head = f.read(8)
        if len(head) < 8:
            raise FormatError(f"{path.name}: not a safetensors file (too short)")
        (n,) = struct.unpack("<Q", head)
        if n > spec.MAX_HEADER_SIZE or 8 + n > size:
            raise FormatError(f"{path.name}: safetensors header size {n} is invalid")
        raw = f.read(n)
    header = _io.loads(raw, f"{path.name}: safetensors header", FormatError)
    if not isinstance(header, dict):
        raise FormatError(f"{path.name}: the safetensors header is not an object")
    meta = header.pop("__metadata__", None) or {}
    if not isinstance(meta, dict) or not all(isinstance(v, str) for v in meta.values()):
        raise CorruptDataError(f"{path.name}: __metadata__ must map strings to strings")
    return raw, meta, [_st_entry(path.name, name, e, size - 8 - n) for name, e in header.items()]


def read_safetensors_tensor(path, name: str) -> np.ndarray:
    """One tensor of a safetensors file as numpy (BF16 / FP8 as unsigned bits, F4 as packed
    pairs). Raises KeyError for an unknown name, errors of :func:`read_safetensors_header`."""
    raw, _, entries = read_safetensors_header(path)
    for a, n, dtype, shape, dt, numel in entries:
        if n == name:
            buf = np.empty(numel * dt.itemsize, dtype=np.uint8)
            with _io.open_regular(Path(path), "safetensors file") as f:
                if not _io.pread_into(f.fileno(), buf, 8 + len(raw) + a):
                    raise CorruptDataError(f"{Path(path).name}: tensor '{name}': short read")
            return buf.view(dt).reshape(shape)
    raise KeyError(name)


def write_safetensors(path, specs: list[tuple[str, str, tuple]], produce, metadata: dict | None = None,
                      progress=None) -> Path:
    """Stream tensors into a safetensors file, atomically (temporary file, then rename).

    specs: [(name, dtype name, shape)] in output order. produce(name) -> numpy array of that
    dtype/shape (BF16 as uint16), called once per tensor, so memory holds one tensor at a time.
    """
    path = Path(path)
    header, off = {}, 0
    if metadata:
        header["__metadata__"] = dict(metadata)
    for name, dtype, shape in specs:
        if name == "__metadata__" or name in header or "\x00" in name:
            raise UnsupportedError(f"tensor name {name!r} cannot be stored in safetensors "
                                   "(reserved for the metadata, used twice, or holds a NUL byte)")
        nbytes = int(np.prod(shape, dtype=np.int64)) * spec.TENSOR_ITEMSIZE[dtype]
        header[name] = {"dtype": dtype, "shape": list(shape), "data_offsets": [off, off + nbytes]}
        if dtype == "F4_X2":  # safetensors' F4 counts FP4 values: two per byte
            header[name].update(dtype="F4", shape=list(shape[:-1]) + [2 * shape[-1]] if shape else [2])
        off += nbytes
    raw = json.dumps(header, separators=(",", ":")).encode("utf-8")
    raw += b" " * (-(len(raw)) % 8)  # safetensors pads the header to 8 bytes with spaces
    if not path.parent.is_dir():  # else the OSError would name our temporary file
        raise NotFoundError(path.parent, "folder", f"cannot write '{path.name}': folder '{path.parent}' does not exist")
    _io.clean_stale_temps(path.parent, path.name)
    tmp = _io.temp_path(path)  # unique: two writers to one path never mix their tensors
    try:
        with open(tmp, "wb") as f:
            f.write(struct.pack("<Q", len(raw)) + raw)
            for name, dtype, shape in specs:
                arr = np.ascontiguousarray(produce(name))
                want = header[name]["data_offsets"]
                if arr.nbytes != want[1] - want[0]:
                    raise CorruptDataError(f"tensor '{name}': produced {arr.nbytes} bytes, expected {want[1] - want[0]}")
                f.write(memoryview(arr.reshape(-1).view(np.uint8)))
                if progress is not None:
                    progress.update(arr.nbytes)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return path


# -- torch -----------------------------------------------------------------------------------------
TORCH_DTYPES = {"bool": "BOOL", "uint8": "U8", "int8": "I8", "int16": "I16", "uint16": "U16", "int32": "I32",
                "uint32": "U32", "int64": "I64", "uint64": "U64", "float16": "F16", "bfloat16": "BF16",
                "float32": "F32", "float64": "F64", "float8_e4m3fn": "F8_E4M3", "float8_e5m2": "F8_E5M2",
                "float8_e4m3fnuz": "F8_E4M3FNUZ", "float8_e5m2fnuz": "F8_E5M2FNUZ",
                "float8_e8m0fnu": "F8_E8M0", "float4_e2m1fn_x2": "F4_X2", "complex64": "C64"}
#: dtypes without a numpy dtype, viewed as unsigned bits of their size
BITS_DTYPES = ("BF16", "F8_E4M3", "F8_E5M2", "F8_E4M3FNUZ", "F8_E5M2FNUZ", "F8_E8M0", "F4_X2")


def torch_to_numpy(t, name: str = "") -> tuple[np.ndarray, str, tuple]:
    """A CPU torch tensor as (numpy array sharing its memory when contiguous, dtype name, ident).

    BF16 is viewed as uint16 bits. The tensor is never modified. Raises UnsupportedError.
    """
    import torch

    if t.layout != torch.strided:
        raise UnsupportedError(f"tensor '{name}': {t.layout} tensors are not supported (convert with .to_dense())")
    if t.device.type == "meta":
        raise NoDataError(f"tensor '{name}': Cannot copy out of meta tensor; no data! (as torch says: "
                          "nothing to store)")
    tname = str(t.dtype).removeprefix("torch.")
    dtype = TORCH_DTYPES.get(tname)
    if dtype is None:
        raise UnsupportedError(f"tensor '{name}': torch dtype {tname} is not supported")
    # identity of the caller's memory (before any copy): tied weights share it
    ident = (str(t.device), t.untyped_storage().data_ptr(), t.storage_offset(), tuple(t.shape),
             tuple(t.stride()), tname)
    t = t.detach().cpu().contiguous()
    if dtype == "BF16":
        arr = t.view(torch.int16).numpy().view(np.uint16)
    elif dtype in BITS_DTYPES:
        import torch
        arr = t.view(torch.uint8).numpy()
    else:
        arr = t.numpy()
    return arr, dtype, ident


def read_torch(path) -> tuple[dict, Iterator[Item]]:
    """Load a torch state dict with ``weights_only=True`` (mmap for zip files). Returns (meta, items).

    Accepts a flat {name: tensor} dict, or one nested under "state_dict"/"model"/"module".
    Raises UnsupportedError when torch is missing or entries are not tensors.
    """
    try:
        import torch
    except ImportError:
        raise UnsupportedError("reading torch checkpoints needs torch (pip install torch)") from None
    import pickle
    import zipfile

    try:
        sd = torch.load(path, map_location="cpu", weights_only=True, mmap=zipfile.is_zipfile(path))
    except (pickle.UnpicklingError, RuntimeError, EOFError, ValueError, OSError, AttributeError) as e:
        # weights_only refuses pickled code: report it as bad input, not a crash
        msg = str(e).splitlines()[0] if str(e) else type(e).__name__
        raise FormatError(f"{Path(path).name}: cannot load as a weights-only torch state dict: {msg}") from None
    if isinstance(sd, dict) and not all(isinstance(v, torch.Tensor) for v in sd.values()):
        for key in ("state_dict", "model", "module"):
            if isinstance(sd.get(key), dict):
                sd = sd[key]
                break
    if not isinstance(sd, dict):
        raise UnsupportedError(f"{Path(path).name}: expected a state dict, got {type(sd).__name__}")
    bad = [k for k, v in sd.items() if not isinstance(v, torch.Tensor)]
    if bad:
        raise UnsupportedError(f"{Path(path).name}: entries that are not tensors: {bad[:5]}")

    def items():
        for name, t in sd.items():
            arr, dtype, ident = torch_to_numpy(t, name)
            yield Item(str(name), arr, dtype, ident)

    return {"format": "pt"}, items()


# -- folders ---------------------------------------------------------------------------------------
def weight_files(folder) -> list[Path]:
    """The weight files of a Hugging Face style folder, in shard order.

    Prefers safetensors (index, single file, or all *.safetensors), then torch .bin/.pt. Index
    entries and files must resolve inside ``folder`` (no ``../``, absolute paths or symlinks out);
    the index's weight_map must be a non-empty object without duplicate keys.
    Raises NotFoundError (a FileNotFoundError) when there are none, FormatError on a bad index or a path outside.
    """
    folder = Path(folder)
    for index in INDEX_NAMES:
        p = folder / index
        if p.is_file():
            idx = _io.read_json(p, "weight index")
            wm = idx.get("weight_map") if isinstance(idx, dict) else None
            if not isinstance(wm, dict) or not wm or not all(isinstance(v, str) for v in wm.values()):
                raise FormatError(f"{p}: bad index: weight_map must be a non-empty object of file names")
            return [_io.inside(folder, f, f"{index} entry", must_exist=True) for f in dict.fromkeys(wm.values())]
    for pattern in ("*.safetensors", "*.bin", "*.pt", "*.pth"):
        files = sorted(folder.glob(pattern))
        if files:
            return [_io.inside(folder, f.name, "weight file") for f in files]
    raise NotFoundError(folder, "weights", f"{folder}: no safetensors or torch weight files")


def read_source(path) -> tuple[dict, Iterator[Item]]:
    """Any supported input file or folder as (metadata, lazy items); folder shards are chained."""
    path = Path(path)
    if path.is_dir():
        files = weight_files(path)

        def items():
            for f in files:
                yield from read_source(f)[1]

        meta = read_safetensors(files[0])[0] if files[0].suffix == ".safetensors" else {"format": "pt"}
        return meta, items()
    if path.suffix == ".safetensors":
        return read_safetensors(path)
    if path.suffix in TORCH_SUFFIXES:
        _io.check_regular(path, "torch checkpoint")
        return read_torch(path)
    raise UnsupportedError(f"{path.name}: unknown input type (expected .safetensors, {', '.join(TORCH_SUFFIXES)} or a folder)")


def side_files(src_folder) -> list[Path]:
    """The non-weight files of a model folder that :func:`copy_side_files` copies (config,
    tokenizer, generation config, README, sub-folders such as ``1_Pooling``), hidden entries,
    non-regular files and the converted weights left out; symlinks out of the folder included
    (the copy skips them with a warning)."""
    src_folder = Path(src_folder)
    converted = set(weight_files(src_folder))
    out = []
    for p in sorted(src_folder.rglob("*")):
        rel = p.relative_to(src_folder)
        if any(part.startswith(".") for part in rel.parts) or not p.is_file():
            continue
        # Skip the converted weights and other weight formats, but not every *.bin: tokenizers
        # (llama2.c's tok512.bin) and training args use that suffix too.
        if p in converted or p.name in INDEX_NAMES or p.name.endswith(OTHER_WEIGHT_SUFFIXES) \
                or (p.name.startswith("pytorch_model") and p.suffix == ".bin"):
            continue
        out.append(p)
    return out


def copy_side_files(src_folder, dst_folder) -> list[Path]:
    """Copy :func:`side_files` of a model folder beside the converted weights; symlinks
    resolving outside ``src_folder`` are skipped (warned). Returns the destination paths."""
    src_folder, dst_folder = Path(src_folder), Path(dst_folder)
    out = []
    for p in side_files(src_folder):
        rel = p.relative_to(src_folder)
        if not _io.is_inside(src_folder, p):
            # a symlink out of the model folder: copying it would embed a file the user never named
            warnings.warn(f"{rel}: skipped, it is a symlink to {p.resolve()} outside {src_folder}")
            continue
        dest = dst_folder / rel
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(p, dest)
        out.append(dest)
    return out


# -- the layout of safetensors sources, for byte-exact decoding -----------------------------------
#: metadata key holding :func:`source_layout` as JSON (docs/FORMAT.md, "Source layout")
LAYOUT_KEY = "wcodec_source"
#: side files of a folder whose original bytes are kept (the conversion rewrites config.json)
KEPT_FILES = ("config.json",) + INDEX_NAMES[:1]
#: bytes of a data region not covered by tensors that are kept (beyond this: no exact layout)
MAX_GAP_BYTES = 1 << 20


def _file_layout(path: Path) -> dict | None:
    """{"header": raw header text (padding included), "gaps": [[offset, base64 bytes]]} of one
    safetensors file: the bytes of its data region no tensor covers (trailing or between
    tensors) are kept, up to MAX_GAP_BYTES; None when they exceed it."""
    import base64

    raw, _, entries = read_safetensors_header(path)
    data_size = os.path.getsize(path) - 8 - len(raw)
    spans = sorted((a, a + numel * dt.itemsize) for a, _, _, _, dt, numel in entries)
    gaps, pos = [], 0
    for a, b in spans + [(data_size, data_size)]:
        if a > pos:
            gaps.append((pos, a))
        pos = max(pos, b)
    if sum(b - a for a, b in gaps) > MAX_GAP_BYTES:
        return None
    out = []
    if gaps:
        with _io.open_regular(path, "safetensors file") as f:
            for a, b in gaps:
                buf = np.empty(b - a, np.uint8)
                if not _io.pread_into(f.fileno(), buf, 8 + len(raw) + a):
                    return None
                out.append([a, base64.b64encode(buf.tobytes()).decode("ascii")])
    return {"header": raw.decode("utf-8"), "gaps": out}


def source_layout(src) -> str | None:
    """JSON text of what a byte-exact decode of ``src`` needs beyond its tensors: for a
    .safetensors file or a folder of them, each file's header bytes and uncovered data bytes
    (:func:`_file_layout`) by file name, and a folder's original index and config.json text.
    None for torch sources and for files whose layout cannot be kept."""
    src = Path(src)
    files = weight_files(src) if src.is_dir() else [src]
    if not files or any(f.suffix != ".safetensors" for f in files):
        return None
    layout = {"safetensors": {}, "files": {}}
    for f in files:
        one = _file_layout(f)
        if one is None:
            return None
        layout["safetensors"][f.name if not src.is_dir() else f.relative_to(src).as_posix()] = one
    if src.is_dir():
        for name in KEPT_FILES:
            p = src / name
            if p.is_file() and _io.is_inside(src, p):
                try:
                    layout["files"][name] = p.read_bytes().decode("utf-8")
                except UnicodeDecodeError:
                    pass
    return json.dumps(layout, separators=(",", ":"), ensure_ascii=False)
