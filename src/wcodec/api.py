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

from .errors import UnsupportedError
from .format import CheckpointReader, Item, ShardedWriter, Writer, encode_into
from .format.encode import map_in_threads
from .format import sources

_NP_DTYPES = {"bool": "BOOL", "uint8": "U8", "int8": "I8", "int16": "I16", "uint16": "U16", "int32": "I32",
              "uint32": "U32", "int64": "I64", "uint64": "U64", "float16": "F16", "bfloat16": "BF16",
              "float32": "F32", "float64": "F64"}


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
        arr, dtype, ident = sources.torch_to_numpy(t, name)
        return Item(name, arr, dtype, ident)
    raise TypeError(f"tensor '{name}': expected a numpy array or torch tensor, got {type(t).__name__}")


def _progress(enabled: bool, desc: str):
    if not enabled:
        return None
    from tqdm.auto import tqdm
    return tqdm(unit="B", unit_scale=True, unit_divisor=1024, desc=desc)


def save_file(tensors: dict, filename, metadata: dict | None = None, mode: str = "lossless",
              workers: int | None = None) -> None:
    """Compress a dict of tensors into one .wcodec file (atomic: nothing is left on failure).

    tensors: {name: numpy array or torch tensor}; any dtype of :data:`wcodec.codecs.DTYPES`
    (torch bfloat16 included). Tensors sharing memory (tied weights) are stored once, the others
    as aliases. metadata: str -> str. mode: "lossless" (bit-exact) or "int8" (lossy
    per-channel quantization of float tensors). workers: encoding threads (default: up to 4).
    Raises UnsupportedError (dtype), TypeError (not a tensor / bad metadata), OSError.
    """
    with Writer(filename, metadata) as w:
        encode_into(w, (_item(str(k), v) for k, v in tensors.items()), mode, workers)


def _to_torch(arr: np.ndarray, dtype: str):
    import torch
    if dtype == "BF16":
        return torch.from_numpy(arr.view(np.int16)).view(torch.bfloat16)
    return torch.from_numpy(arr)


def _gpu_load_records():
    """wcodec.gpu.loader.load_records if that module is importable (it needs triton), else None."""
    try:
        if importlib.util.find_spec("wcodec.gpu.loader") is None:
            return None
        return importlib.import_module("wcodec.gpu.loader").load_records
    except ImportError:
        return None


def _load(reader: CheckpointReader, names: list[str], device, framework: str, verify: bool) -> dict:
    """Decode ``names``; aliases come back as the same object as their target (tied weights)."""
    target = {n: reader.alias_of(n) or n for n in names}
    stored = list(dict.fromkeys(target.values()))
    if framework in ("np", "numpy"):
        if str(device) != "cpu":
            raise ValueError("framework='np' only loads to device='cpu'")
        out = map_in_threads(lambda n: reader.get_numpy(n, verify=verify), stored)
    elif framework in ("pt", "torch"):
        import torch
        dev = torch.device(device if device is not None else "cpu")
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
                                                     reader.entry(n)["dtype"]).to(dev), stored)
    else:
        raise ValueError(f"framework must be 'pt' or 'np', got {framework!r}")
    return {n: out[target[n]] for n in names}


def load_file(filename, device="cpu", framework: str = "pt", verify: bool = True) -> dict:
    """Load every tensor of a .wcodec file (or sharded folder / index) into a dict.

    device: "cpu", "cuda", "cuda:1", a torch.device... CUDA uses the GPU decoder when
    available, else decodes on the CPU and copies. framework: "pt" (torch tensors) or "np"
    (numpy arrays, BF16 as uint16, CPU only). verify: check section and decoded checksums on
    the CPU path. Raises FormatError / CorruptDataError / ChecksumError naming the tensor.
    """
    with CheckpointReader(filename) as r:
        return _load(r, r.keys(), device, framework, verify)


class safe_open:  # noqa: N801  (the safetensors name)
    """Lazy per-tensor access, as ``safetensors.safe_open``.

    ``with wcodec.safe_open(path, framework="pt", device="cpu") as f:`` then ``f.keys()``,
    ``f.get_tensor(name)``, ``f.metadata()``; ``f.record(name)`` gives the EncodedTensor with
    zero-copy sections and ``f.span(name)`` its byte range in the file.
    Opening validates the header; nothing is decoded until asked for.
    """

    def __init__(self, filename, framework: str = "pt", device="cpu", verify: bool = True):
        self._reader = CheckpointReader(filename)
        self.framework, self.device, self.verify = framework, device, verify

    def keys(self) -> list[str]:
        return self._reader.keys()

    def metadata(self) -> dict[str, str]:
        return self._reader.metadata()

    def get_tensor(self, name: str, device=None):
        """Decode one tensor (torch or numpy per ``framework``) onto ``device`` (default: the one given to open)."""
        return _load(self._reader, [name], self.device if device is None else device, self.framework,
                     self.verify)[name]

    def record(self, name: str, verify: bool = False):
        return self._reader.record(name, verify=verify)

    def span(self, name: str) -> tuple[int, int]:
        return self._reader.span(name)

    def close(self) -> None:
        self._reader.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def encode_safetensors_to_wcodec(src, dst, mode: str = "lossless", workers: int | None = None,
                                 metadata: dict | None = None, max_shard_size: int | None = None,
                                 progress: bool = False) -> list[Path]:
    """Convert a checkpoint to .wcodec, streaming tensor by tensor.

    src: a .safetensors file, a torch .pt/.pth/.bin/.ckpt state dict, or a model folder
    (sharded or not; safetensors preferred over .bin). dst: a ``*.wcodec`` file, or a folder
    that receives ``model.wcodec`` (or shards + ``model.wcodec.index.json`` beyond
    ``max_shard_size`` bytes, default 5 GiB) and, for a folder source, copies of its config,
    tokenizer and other non-weight files. metadata: extra str -> str merged into the source's.
    Returns the written paths. Raises WcodecError subclasses on bad input, OSError on I/O.
    """
    src, dst = Path(src), Path(dst)
    meta, items = sources.read_source(src)
    meta = {**meta, **(metadata or {}), "wcodec_mode": mode}
    bar = _progress(progress, f"encode {src.name}")
    try:
        if dst.suffix == ".wcodec":
            with Writer(dst, meta) as w:
                encode_into(w, items, mode, workers, bar)
            return [w.path]
        kw = {} if max_shard_size is None else {"max_shard_size": max_shard_size}
        with ShardedWriter(dst, metadata=meta, **kw) as w:
            encode_into(w, items, mode, workers, bar)
        paths = list(w.paths)
        if src.is_dir():
            paths += sources.copy_side_files(src, dst)
        return paths
    finally:
        if bar is not None:
            bar.close()


def load_wcodec_checkpoint(path, map_location=None, verify: bool = True) -> dict:
    """Load a .wcodec file, sharded folder or index as a torch state dict (torch.load style).

    map_location: None / "cpu" / "cuda[:i]" / torch.device. Tied weights come back as one tensor
    under both names. Raises WcodecError subclasses on corrupt input.
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
