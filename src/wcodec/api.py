"""The Python API, in the idiom of ``safetensors``: save_file / load_file / safe_open, plus
checkpoint conversion (:func:`encode_safetensors_to_wcodec`) and torch.load-style loading
(:func:`load_wcodec_checkpoint`).

torch is optional: numpy in, numpy out (``framework="np"``) works without it. BF16 tensors are
torch.bfloat16 in torch and uint16 bit patterns in numpy. The caller's tensors are only read.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from .errors import InvalidInputError, NotFoundError, UnsupportedError
from .format import Item, ShardedWriter, Writer, encode_into
from .format import sources
from .loading import import_torch, placement, torch_device  # noqa: F401  (public here since 0.1)
from .loading import check_backend, is_safetensors, load_tensors, open_checkpoint
from .safeopen import safe_open  # re-exported: wcodec.safe_open

_load = load_tensors  # the name wcodec.hf.materialize imports

__all__ = ["save_file", "load_file", "save", "load", "safe_open", "encode_safetensors_to_wcodec",
           "load_wcodec_checkpoint", "decode_to_safetensors", "decode_to_folder", "placement", "torch_device",
           "import_torch"]

_NP_DTYPES = {"bool": "BOOL", "uint8": "U8", "int8": "I8", "int16": "I16", "uint16": "U16", "int32": "I32",
              "uint32": "U32", "int64": "I64", "uint64": "U64", "float16": "F16", "bfloat16": "BF16",
              "float32": "F32", "float64": "F64", "complex64": "C64"}


def _item(name: str, t) -> Item:
    """A numpy array or torch tensor as an Item; copies only when not C-contiguous little-endian."""
    if isinstance(t, np.ndarray):
        dtype = _NP_DTYPES.get(t.dtype.name)
        if dtype is None:
            raise UnsupportedError(f"tensor '{name}': numpy dtype {t.dtype} is not supported")
        ident = (t.__array_interface__["data"][0], t.shape, t.strides, t.dtype.str)
        arr = t.view(np.uint16) if dtype == "BF16" else t  # ml_dtypes bfloat16
        if arr.dtype.byteorder == ">":
            arr = arr.astype(arr.dtype.newbyteorder("<"))
        # np.require keeps 0-d arrays 0-d (np.ascontiguousarray makes them shape (1,))
        return Item(name, np.require(arr, requirements="C"), dtype, ident)
    if type(t).__module__.startswith("torch"):
        if str(getattr(t, "layout", "torch.strided")) != "torch.strided":
            raise InvalidInputError(f"tensor '{name}': {t.layout} tensors are not supported (dense tensors only)")
        arr, dtype, ident = sources.torch_to_numpy(t, name)
        return Item(name, arr, dtype, ident)
    raise InvalidInputError(f"tensor '{name}': expected a numpy array or torch tensor, got {type(t).__name__}")


def _check_args(tensors, metadata) -> None:
    """safetensors' argument rules, raised as InvalidInputError (a ValueError)."""
    from collections.abc import Mapping
    if not isinstance(tensors, Mapping):
        raise InvalidInputError(f"tensors must be a dict {{name: tensor}}, got {type(tensors).__name__}")
    if metadata is not None and not (isinstance(metadata, Mapping) and all(
            isinstance(k, str) and isinstance(v, str) for k, v in metadata.items())):
        raise InvalidInputError("metadata must be a dict mapping str to str (as in safetensors), "
                                f"got {type(metadata).__name__}")


def _progress(enabled: bool, desc: str):
    if not enabled:
        return None
    from tqdm.auto import tqdm
    return tqdm(unit="B", unit_scale=True, unit_divisor=1024, desc=desc)


def _entries(w) -> dict:
    """{name: header entry} of a Writer or a ShardedWriter, before commit."""
    shards = getattr(w, "shards", None)
    return w.tensors if shards is None else {k: v for sh in shards for k, v in sh.tensors.items()}


def _encode(w, items, mode: str, workers, bar=None, codec=None, plan=None, low_joint: bool = False) -> None:
    """Encode ``items`` into the open writer ``w`` and check that the settings took
    (:func:`wcodec.encodeopts.check_results`); an exception aborts ``w``'s ``with`` block."""
    from .encodeopts import check_results

    encode_into(w, items, mode, workers, bar, codec=codec, plan=plan, low_joint=low_joint)
    check_results(_entries(w), mode, codec)


def save_file(tensors: dict, filename, metadata: dict | None = None, mode: str = "lossless",
              workers: int | None = None, codec: str | None = None, qp: float | None = None,
              target_snr_db: float | None = None, low_joint: bool = False) -> None:
    """Compress a dict of tensors into one .wcodec file (atomic: nothing is left on failure).

    tensors: {name: numpy array or torch tensor}; any dtype of :data:`wcodec.codecs.DTYPES`
    (torch bfloat16 included). Tensors sharing memory (tied weights) are stored once, the others
    as aliases. Tensors are stored in name order, so the file's bytes do not depend on the
    dict's order. metadata: str -> str. mode: "lossless" (bit-exact) or "int8" (lossy
    per-channel quantization of float tensors). workers: encoding threads (default: up to 4).
    codec: ``"fixed"`` stores BF16 weights in the fixed-rate layout the fused matmul kernels read
    (``wcodec.torch.CompressedLinear``; about 12 bits/weight), other tensors as the policy says;
    mode "lossless" only, and some BF16 matrix must take it.
    mode "lossy" with ``qp`` (0-63, 6 per halving of the step) or ``target_snr_db`` (per tensor,
    dB; every float matrix must reach it): rate-controlled quantization of float matrices
    (:mod:`wcodec.codecs.lossy`).
    low_joint: also try, for each F32 tensor the float codec stores, its two low mantissa bytes
    as one 16-bit rANS plane, kept where that is smaller (format version 2: readers before it
    refuse the file; all-MiniLM-L6-v2 fp32 26.207 -> 26.111 bits/weight, faster to decode, slower
    to encode). Other tensors are stored as without it.
    Raises UnsupportedError (dtype; an SNR target some tensors cannot reach, naming them; a
    codec no tensor takes), InvalidInputError (a ValueError: not a tensor, bad metadata, bad
    mode settings, a low_joint that is not a bool), NotFoundError (a FileNotFoundError: the
    folder does not exist), OSError.
    """
    _save(tensors, filename, metadata, mode, workers, codec, qp, target_snr_db, low_joint)


def _save(tensors, filename, metadata, mode, workers, codec=None, qp=None, target_snr_db=None,
          low_joint: bool = False) -> bytes | None:
    """save_file's work; filename None: the file's bytes, built in memory, returned."""
    from .encodeopts import check_flag, mode_of

    _check_args(tensors, metadata)
    mode = mode_of(mode, qp, target_snr_db, codec)
    check_flag("low_joint", low_joint)
    # name order: save()'s bytes are canonical whatever the dict order (as safetensors')
    items = sorted(((str(k), v) for k, v in tensors.items()), key=lambda kv: kv[0])
    meta = None if metadata is None else dict(sorted(metadata.items()))
    with Writer(filename, meta) as w:
        _encode(w, (_item(k, v) for k, v in items), mode, workers, codec=codec, low_joint=low_joint)
    return w.data


def load_file(filename, device="cpu", framework: str = "pt", verify: bool = True, backend: str = "mmap") -> dict:
    """Load every tensor of a .wcodec file (or sharded folder / index), or of a .safetensors
    file (through the safetensors library), into a dict.

    device: "cpu", "cuda", "cuda:1", an int (CUDA index), a torch.device, or any
    ``map_location`` of torch.load (dict, callable; see :func:`placement`). CUDA uses the GPU
    decoder when available, else decodes on the CPU and copies. framework: "pt" (torch tensors)
    or "np" (numpy arrays, BF16 / FP8 as unsigned bits, CPU only). verify: check section and
    decoded checksums on the CPU path. backend: "mmap" or "pread", as safetensors takes it.
    Raises NotFoundError (a FileNotFoundError: no such file), FormatError / CorruptDataError /
    ChecksumError naming the tensor, DeviceError (device absent), MissingDependencyError (no torch).
    """
    check_backend(backend)
    if is_safetensors(filename):
        with safe_open(filename, framework=framework, device=device) as f:
            return f.get_tensors()
    with open_checkpoint(filename) as r:
        return _load(r, r.keys(), device, framework, verify)


def encode_safetensors_to_wcodec(src, dst, mode: str = "lossless", workers: int | None = None,
                                 metadata: dict | None = None, max_shard_size: int | None = None,
                                 progress: bool = False, codec: str | None = None, qp: float | None = None,
                                 target_snr_db: float | None = None, plan: dict | None = None,
                                 low_joint: bool = False) -> list[Path]:
    """Convert a checkpoint to .wcodec, streaming tensor by tensor.

    src: a .safetensors file, a torch .pt/.pth/.bin/.ckpt state dict, or a model folder
    (sharded or not; safetensors preferred over .bin). dst: a ``*.wcodec`` file, or a folder
    that receives ``model.wcodec`` (or shards + ``model.wcodec.index.json`` beyond
    ``max_shard_size`` bytes, default 5 GiB) and, for a folder source, copies of its config,
    tokenizer and other non-weight files (a folder source with such files needs a folder dst).
    metadata: extra str -> str merged into the source's. mode, qp, target_snr_db, codec, low_joint:
    as in :func:`save_file`. plan: {tensor name: (mode string, encode_tensor options)} overriding
    ``mode`` per tensor (what ``wcodec.lossy_target`` computes; the file's ``wcodec_mode`` is then
    ``"lossy:per-tensor"``). A failed or interrupted conversion leaves nothing: a folder it
    created is removed, an existing one keeps its previous checkpoint.
    Returns the written paths. Raises NotFoundError (no input, no weights in a folder),
    InvalidInputError (settings), WcodecError subclasses on bad input, OSError on I/O.
    """
    import shutil

    from .encodeopts import check_flag, mode_of

    src, dst = Path(src), Path(dst)
    mode = mode_of(mode, qp, target_snr_db, codec)
    check_flag("low_joint", low_joint)
    if not src.exists():
        raise NotFoundError(src, "input")
    if src.is_dir() and dst.suffix == ".wcodec" and sources.side_files(src):
        raise InvalidInputError(f"{src} is a model folder with config/tokenizer files; a single '{dst.name}' "
                                "would drop them: convert into a folder instead")
    meta, items = sources.read_source(src)
    meta = {**meta, **(metadata or {}), "wcodec_mode": mode if plan is None else "lossy:per-tensor"}
    layout = sources.source_layout(src)  # what decoding needs to give safetensors files back byte for byte
    if layout is not None:
        meta[sources.LAYOUT_KEY] = layout
    bar = _progress(progress, f"encode {src.name}")
    created = dst.suffix != ".wcodec" and not dst.exists()
    try:
        if dst.suffix == ".wcodec":
            with Writer(dst, meta) as w:
                _encode(w, items, mode, workers, bar, codec=codec, plan=plan, low_joint=low_joint)
            return [w.path]
        kw = {} if max_shard_size is None else {"max_shard_size": max_shard_size}
        with ShardedWriter(dst, metadata=meta, **kw) as w:
            _encode(w, items, mode, workers, bar, codec=codec, plan=plan, low_joint=low_joint)
        paths = list(w.paths)
        if src.is_dir():
            paths += sources.copy_side_files(src, dst)
        return paths
    except BaseException:
        if created:  # ours alone: nothing of a failed or interrupted write stays
            shutil.rmtree(dst, ignore_errors=True)
        raise
    finally:
        if bar is not None:
            bar.close()


def load_wcodec_checkpoint(path, map_location=None, verify: bool = True) -> dict:
    """Load a .wcodec file, sharded folder or index as a torch state dict (torch.load style).

    map_location: as torch.load takes it: None / "cpu" / "cuda[:i]" / torch.device / int, a dict
    of locations ({"cpu": "cuda:0"}; wcodec tensors are saved from "cpu") or a callable
    ``fn(tensor, "cpu")`` (see :func:`placement`). Tied weights come back as one tensor under
    both names. Raises WcodecError subclasses on corrupt input, DeviceError for an absent device.
    """
    return load_file(path, device=map_location or "cpu", framework="pt", verify=verify)


def decode_to_safetensors(src, dst, progress: bool = False) -> Path:
    """Decode a .wcodec checkpoint into one safetensors file, one tensor in memory at a time.

    A checkpoint encoded from one .safetensors file gives that file back byte for byte (header,
    key order, metadata, padding: stored in the container, docs/FORMAT.md "Source layout").
    Otherwise (older versions, torch or multi-file sources) every tensor is written, aliases
    (tied weights) under each name, with the wcodec metadata as ``__metadata__``. Atomic.
    Returns dst. Raises NotFoundError, WcodecError subclasses on bad input, OSError.
    """
    from .restore import decode_file

    with open_checkpoint(src) as r:
        bar = _progress(progress, f"decode {Path(src).name}")
        try:
            return decode_file(r, dst, bar)
        finally:
            if bar is not None:
                bar.close()


def decode_to_folder(src, dst, progress: bool = False) -> list[Path]:
    """Decode a .wcodec checkpoint (a converted model folder, sharded or not) into a model
    folder ``dst``: each original safetensors file byte for byte with its index and
    config.json (when the checkpoint was encoded from safetensors files), else
    ``model.safetensors``; the source folder's other files (tokenizer, ...) are copied. A
    folder this call creates is removed again on failure. Returns the written paths.
    """
    import shutil

    from .restore import decode_folder

    src, dst = Path(src), Path(dst)
    created = not dst.exists()
    with open_checkpoint(src) as r:
        bar = _progress(progress, f"decode {src.name}")
        try:
            dst.mkdir(parents=False, exist_ok=True)
            return decode_folder(r, src if src.is_dir() else None, dst, bar)
        except BaseException:
            if created:
                shutil.rmtree(dst, ignore_errors=True)
            raise
        finally:
            if bar is not None:
                bar.close()


def save(tensors: dict, metadata: dict | None = None, mode: str = "lossless", workers: int | None = None,
         low_joint: bool = False) -> bytes:
    """The .wcodec file of ``tensors`` as bytes (as ``safetensors.torch.save``); arguments and
    errors as :func:`save_file`. Built in memory (each section copied once into the bytes), the
    same bytes save_file writes."""
    return _save(tensors, None, metadata, mode, workers, low_joint=low_joint)


def load(data: bytes, device="cpu", framework: str = "pt", verify: bool = True) -> dict:
    """Decode every tensor of a .wcodec file given as bytes (as ``safetensors.torch.load``).
    Arguments and errors as :func:`load_file` (errors name the file ``<bytes>``); the bytes are
    read in place, never copied, and are not modified."""
    from .format import Reader

    if not isinstance(data, (bytes, bytearray, memoryview)):
        raise InvalidInputError(f"data must be bytes, got {type(data).__name__}")
    with Reader("<bytes>", data=data) as r:
        return _load(r, r.keys(), device, framework, verify)
