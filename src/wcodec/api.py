"""The Python API, in the idiom of ``safetensors``: save_file / load_file / safe_open, plus
checkpoint conversion (:func:`encode_safetensors_to_wcodec`) and torch.load-style loading
(:func:`load_wcodec_checkpoint`).

torch is optional: numpy in, numpy out (``framework="np"``) works without it. BF16 tensors are
torch.bfloat16 in torch and uint16 bit patterns in numpy. The caller's tensors are only read.
"""

from __future__ import annotations

import importlib
import importlib.util
from pathlib import Path

import numpy as np

from .errors import DeviceError, InvalidInputError, MissingDependencyError, UnsupportedError
from .format import CheckpointReader, Item, ShardedWriter, Writer, encode_into
from .format.encode import map_in_threads
from .format import sources
from .safeopen import safe_open  # re-exported: wcodec.safe_open

__all__ = ["save_file", "load_file", "save", "load", "safe_open", "encode_safetensors_to_wcodec",
           "load_wcodec_checkpoint", "decode_to_safetensors", "placement", "torch_device", "import_torch"]

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


def save_file(tensors: dict, filename, metadata: dict | None = None, mode: str = "lossless",
              workers: int | None = None, codec: str | None = None, qp: float | None = None,
              target_snr_db: float | None = None) -> None:
    """Compress a dict of tensors into one .wcodec file (atomic: nothing is left on failure).

    tensors: {name: numpy array or torch tensor}; any dtype of :data:`wcodec.codecs.DTYPES`
    (torch bfloat16 included). Tensors sharing memory (tied weights) are stored once, the others
    as aliases. metadata: str -> str. mode: "lossless" (bit-exact) or "int8" (lossy
    per-channel quantization of float tensors). workers: encoding threads (default: up to 4).
    codec: ``"fixed"`` stores BF16 weights in the fixed-rate layout the fused matmul kernels read
    (``wcodec.torch.CompressedLinear``; about 12 bits/weight), other tensors as the policy says.
    mode "lossy" with ``qp`` (0-63, 6 per halving of the step) or ``target_snr_db`` (per tensor,
    dB): rate-controlled quantization of float matrices (:mod:`wcodec.codecs.lossy`).
    Raises UnsupportedError (dtype), InvalidInputError (a ValueError: not a tensor / bad
    metadata), ValueError (bad mode settings), OSError.
    """
    from .codecs.lossy import mode_string

    _check_args(tensors, metadata)
    mode = mode_string(mode, qp, target_snr_db)
    with Writer(filename, metadata) as w:
        encode_into(w, (_item(str(k), v) for k, v in tensors.items()), mode, workers, codec=codec)


def _to_torch(arr: np.ndarray, dtype: str):
    from .torch.tensors import from_numpy
    return from_numpy(arr, dtype)


def _gpu_load_records():
    """wcodec.gpu.loader.load_records if that module is importable (it needs triton), else None."""
    try:
        if importlib.util.find_spec("wcodec.gpu.loader") is None:
            return None
        return importlib.import_module("wcodec.gpu.loader").load_records
    except ImportError:
        return None


def import_torch():
    """torch, or MissingDependencyError naming the extra that installs it."""
    try:
        import torch
    except ImportError:
        raise MissingDependencyError("this needs torch, which is not installed: pip install 'wcodec[torch]' "
                                     "(or load numpy arrays with framework='np' / wcodec.numpy)") from None
    return torch


def torch_device(device):
    """A device as torch.load / safetensors accept it (None, str, int index, torch.device) as a
    torch.device that exists here. Raises DeviceError (e.g. CUDA asked for and absent)."""
    torch = import_torch()
    try:
        dev = torch.device("cpu" if device is None else f"cuda:{device}" if isinstance(device, int) else device)
    except (RuntimeError, TypeError) as e:
        raise InvalidInputError(f"not a device: {device!r} ({e})") from None
    if dev.type == "cuda":
        if not torch.cuda.is_available():
            raise DeviceError(f"device '{dev}' was asked for but CUDA is not available here "
                              f"(torch {torch.__version__}, torch.cuda.is_available() is False); "
                              "load with device='cpu'")
        if dev.index is not None and dev.index >= torch.cuda.device_count():
            raise DeviceError(f"device '{dev}' was asked for but only {torch.cuda.device_count()} CUDA devices exist")
    elif dev.type not in ("cpu", "meta"):
        try:
            torch.empty(0, device=dev)
        except Exception as e:  # noqa: BLE001  (each backend raises its own type)
            raise DeviceError(f"device '{dev}' is not available: {e}") from None
    return dev


def placement(map_location):
    """torch.load's map_location as (torch.device to decode onto, post-function or None).

    str / int / torch.device: that device. dict: the location the tensors were saved from is
    "cpu" for every wcodec tensor, so ``map_location.get("cpu", "cpu")``. callable: called as
    ``fn(tensor, "cpu")`` on each tensor decoded to the CPU (the tensor stands for torch.load's
    storage); a None result keeps the CPU tensor.
    """
    if callable(map_location) and not isinstance(map_location, (str, int)) and \
            type(map_location).__name__ != "device":
        return torch_device("cpu"), map_location
    if isinstance(map_location, dict):
        return torch_device(map_location.get("cpu", "cpu")), None
    return torch_device(map_location), None


def _load(reader: CheckpointReader, names: list[str], device, framework: str, verify: bool) -> dict:
    """Decode ``names``; aliases come back as the same object as their target (tied weights)."""
    target = {n: reader.alias_of(n) or n for n in names}
    stored = list(dict.fromkeys(target.values()))  # cost=reader.numel: the largest start first
    if framework in ("np", "numpy"):
        if str(device) != "cpu":
            raise InvalidInputError("framework='np' only loads to device='cpu'")
        out = map_in_threads(lambda n: reader.get_numpy(n, verify=verify), stored, cost=reader.numel)
    elif framework in ("pt", "torch"):
        dev, post = placement(device)
        if post is not None:
            cpu = _load(reader, names, "cpu", framework, verify)
            moved = {}  # tied names share one result (and one call of the callable)
            for t in cpu.values():
                if id(t) not in moved:
                    moved[id(t)] = _apply(post, t)
            return {n: moved[id(t)] for n, t in cpu.items()}
        load_records = _gpu_load_records() if dev.type == "cuda" else None
        if load_records is not None:
            # section checksums are checked by the loader in parallel while it stages the bytes
            # for upload (the reader's verify is one thread, ~4 GB/s: 3.09 s vs 0.87 s for a 7B)
            crcs = ({n: {k: v["crc32"] for k, v in reader.entry(n)["sections"].items()}
                     for n in stored} if verify else None)
            # zero-copy views of the mapping (size checked): the loader copies them into pinned
            # buffers batch by batch; copies of every record up front would hold the whole
            # compressed checkpoint in memory
            out = load_records([(n, reader.record(n, verify=False, copy=False)) for n in stored], dev,
                               crcs=crcs)
        else:
            out = map_in_threads(lambda n: _to_torch(reader.get_numpy(n, verify=verify),
                                                     reader.entry(n)["dtype"]).to(dev), stored, cost=reader.numel)
    else:
        raise InvalidInputError(f"framework must be 'pt' or 'np', got {framework!r}")
    return {n: out[target[n]] for n in names}


def _apply(fn, t):
    r = fn(t, "cpu")
    return t if r is None else r


def load_file(filename, device="cpu", framework: str = "pt", verify: bool = True) -> dict:
    """Load every tensor of a .wcodec file (or sharded folder / index) into a dict.

    device: "cpu", "cuda", "cuda:1", an int (CUDA index), a torch.device, or any
    ``map_location`` of torch.load (dict, callable; see :func:`placement`). CUDA uses the GPU
    decoder when available, else decodes on the CPU and copies. framework: "pt" (torch tensors)
    or "np" (numpy arrays, BF16 / FP8 as unsigned bits, CPU only). verify: check section and
    decoded checksums on the CPU path. Raises FormatError / CorruptDataError / ChecksumError
    naming the tensor, DeviceError (device absent), MissingDependencyError (no torch).
    """
    with CheckpointReader(filename) as r:
        return _load(r, r.keys(), device, framework, verify)


def encode_safetensors_to_wcodec(src, dst, mode: str = "lossless", workers: int | None = None,
                                 metadata: dict | None = None, max_shard_size: int | None = None,
                                 progress: bool = False, codec: str | None = None) -> list[Path]:
    """Convert a checkpoint to .wcodec, streaming tensor by tensor.

    src: a .safetensors file, a torch .pt/.pth/.bin/.ckpt state dict, or a model folder
    (sharded or not; safetensors preferred over .bin). dst: a ``*.wcodec`` file, or a folder
    that receives ``model.wcodec`` (or shards + ``model.wcodec.index.json`` beyond
    ``max_shard_size`` bytes, default 5 GiB) and, for a folder source, copies of its config,
    tokenizer and other non-weight files. metadata: extra str -> str merged into the source's.
    codec: as in :func:`save_file`.
    Returns the written paths. Raises WcodecError subclasses on bad input, OSError on I/O.
    """
    src, dst = Path(src), Path(dst)
    meta, items = sources.read_source(src)
    meta = {**meta, **(metadata or {}), "wcodec_mode": mode}
    bar = _progress(progress, f"encode {src.name}")
    try:
        if dst.suffix == ".wcodec":
            with Writer(dst, meta) as w:
                encode_into(w, items, mode, workers, bar, codec=codec)
            return [w.path]
        kw = {} if max_shard_size is None else {"max_shard_size": max_shard_size}
        with ShardedWriter(dst, metadata=meta, **kw) as w:
            encode_into(w, items, mode, workers, bar, codec=codec)
        paths = list(w.paths)
        if src.is_dir():
            paths += sources.copy_side_files(src, dst)
        return paths
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

    Aliases (tied weights) are written under each name. The wcodec metadata becomes the
    safetensors ``__metadata__``. Returns dst.
    """
    with CheckpointReader(src) as r:
        specs = []
        for n in r.keys():
            e = r.entry(n)
            specs.append((n, e["dtype"], tuple(e["shape"])))
        bar = _progress(progress, f"decode {Path(src).name}")
        try:
            return sources.write_safetensors(dst, specs, r.get_numpy, r.metadata(), bar)
        finally:
            if bar is not None:
                bar.close()


def save(tensors: dict, metadata: dict | None = None, mode: str = "lossless", workers: int | None = None) -> bytes:
    """The .wcodec file of ``tensors`` as bytes (as ``safetensors.torch.save``); arguments and
    errors as :func:`save_file`. The container is written through a temporary file (the writer
    streams to disk), read back and removed."""
    import tempfile
    _check_args(tensors, metadata)
    with tempfile.TemporaryDirectory(prefix="wcodec-") as d:
        path = Path(d) / "data.wcodec"
        save_file(tensors, path, metadata, mode, workers)
        return path.read_bytes()


def load(data: bytes, device="cpu", framework: str = "pt", verify: bool = True) -> dict:
    """Decode every tensor of a .wcodec file given as bytes (as ``safetensors.torch.load``).
    Arguments and errors as :func:`load_file`; the bytes are memory-mapped from a temporary file."""
    import tempfile
    if not isinstance(data, (bytes, bytearray, memoryview)):
        raise InvalidInputError(f"data must be bytes, got {type(data).__name__}")
    with tempfile.TemporaryDirectory(prefix="wcodec-") as d:
        path = Path(d) / "data.wcodec"
        path.write_bytes(data)
        out = load_file(path, device, framework, verify)
        return out
