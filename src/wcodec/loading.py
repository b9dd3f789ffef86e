"""Decoding tensors of an open checkpoint into torch or numpy, and where they go (devices,
torch.load's map_location). Shared by :mod:`wcodec.api` and :mod:`wcodec.safeopen`, which
import it (and not each other). Also: opening a checkpoint path with a WcodecError for a
missing one, and telling a .safetensors file from a .wcodec one.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import struct
import threading
from pathlib import Path

from .errors import DeviceError, InvalidInputError, MissingDependencyError, NotFoundError
from .format import CheckpointReader
from .format.encode import map_in_threads
from .format.reader import SpanBuffer

BACKENDS = ("mmap", "pread")


def check_backend(backend) -> None:
    """safetensors' ``backend`` argument: "mmap" or "pread". wcodec reads a .wcodec file both
    ways alike, with pread: the float decoder reads each pair of chunks' bytes just before it
    decodes them (a mapping was no faster here, and a file truncated while mapped would raise
    SIGBUS: SECURITY.md). Raises InvalidInputError (a ValueError)."""
    if backend not in BACKENDS:
        raise InvalidInputError(f"backend must be one of {BACKENDS}, got {backend!r}")


def is_safetensors(path) -> bool:
    """Whether ``path`` is a regular file that starts like a safetensors file (a little-endian
    u64 header size that fits the file, then '{'); .wcodec files start with their magic."""
    p = Path(path)
    if not p.is_file():
        return False
    with open(p, "rb") as f:
        head = f.read(9)
    if len(head) < 9 or head[8:9] != b"{":
        return False
    (n,) = struct.unpack("<Q", head[:8])
    return 8 + n <= os.path.getsize(p)


def open_checkpoint(filename) -> CheckpointReader:
    """CheckpointReader of a .wcodec file, sharded folder or index. Raises NotFoundError (a
    FileNotFoundError) when it is missing or a folder holds none, FormatError and others as the
    reader raises them."""
    if not os.path.lexists(filename):  # the message as safetensors words it
        raise NotFoundError(filename, "checkpoint", f"No such file or directory: {filename}")
    try:
        return CheckpointReader(filename)
    except NotFoundError:
        raise
    except FileNotFoundError as e:
        raise NotFoundError(filename, "checkpoint", str(e.strerror or e)) from None


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


def to_torch(arr, dtype: str):
    from .torch.tensors import from_numpy
    return from_numpy(arr, dtype)


def apply_post(fn, t):
    """A map_location callable applied to a CPU tensor; a None result keeps the tensor."""
    r = fn(t, "cpu")
    return t if r is None else r


def _gpu_load_records():
    """wcodec.gpu.loader.load_records if that module is importable (it needs triton), else None."""
    try:
        if importlib.util.find_spec("wcodec.gpu.loader") is None:
            return None
        return importlib.import_module("wcodec.gpu.loader").load_records
    except ImportError:
        return None


def cpu_decoder(reader: CheckpointReader, verify: bool = True):
    """``fn(name) -> numpy array`` (``reader.get_numpy``) for :func:`map_in_threads` and
    ``imap_in_threads``: each thread reads the compressed bytes into its own reused SpanBuffer
    (dropped with ``fn``, after the load)."""
    local = threading.local()

    def decode(name):
        into = getattr(local, "into", None)
        if into is None:
            into = local.into = SpanBuffer()
        return reader.get_numpy(name, verify=verify, into=into)

    return decode


def decode_cpu(reader: CheckpointReader, names: list[str], verify: bool = True) -> dict:
    """{name: numpy array} of stored tensors ``names`` decoded on the CPU: each shard's float
    records in one call of ``Reader.decode_floats`` (their chunks over the C extension's
    threads, sections read as they are decoded), the other records in threads
    (:func:`cpu_decoder`, the largest first)."""
    shards: dict = {}
    for n in names:
        r = reader.reader(n) if isinstance(reader, CheckpointReader) else reader
        shards.setdefault(id(r), (r, []))[1].append(n)
    out, rest = {}, []
    for r, group in shards.values():
        fast = [n for n in group if r.file_decodable(n)]
        if fast:
            out.update(r.decode_floats(fast, verify))
        rest += [n for n in group if n not in out]
    if rest:
        out.update(map_in_threads(cpu_decoder(reader, verify), rest, cost=reader.numel))
    return out


def load_tensors(reader: CheckpointReader, names: list[str], device, framework: str, verify: bool) -> dict:
    """Decode ``names``; aliases come back as the same object as their target (tied weights)."""
    target = {n: reader.alias_of(n) or n for n in names}
    stored = list(dict.fromkeys(target.values()))
    if framework in ("np", "numpy"):
        if str(device) != "cpu":
            raise InvalidInputError("framework='np' only loads to device='cpu'")
        out = decode_cpu(reader, stored, verify)
    elif framework in ("pt", "torch"):
        dev, post = placement(device)
        if post is not None:
            cpu = load_tensors(reader, names, "cpu", framework, verify)
            moved = {}  # tied names share one result (and one call of the callable)
            for t in cpu.values():
                if id(t) not in moved:
                    moved[id(t)] = apply_post(post, t)
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
        elif dev.type == "cpu":
            out = {n: to_torch(a, reader.entry(n)["dtype"]) for n, a in decode_cpu(reader, stored, verify).items()}
        else:  # each tensor moved as it is decoded: the host holds a few tensors, not all
            decode = cpu_decoder(reader, verify)
            out = map_in_threads(lambda n: to_torch(decode(n), reader.entry(n)["dtype"]).to(dev), stored,
                                 cost=reader.numel)
    else:
        raise InvalidInputError(f"framework must be 'pt' or 'np', got {framework!r}")
    return {n: out[target[n]] for n in names}
