"""A wcodec folder seen by transformers as a safetensors checkpoint.

transformers (5.x) reads every checkpoint through ``safetensors.safe_open`` (imported by name
into ``transformers.modeling_utils``): ``keys()``, then ``get_slice(name)`` per tensor, whose
``get_shape()`` / ``get_dtype()`` it reads at once and whose ``[...]`` it calls when the tensor
is due. :func:`install` puts :func:`safe_open` in that name: for the one file name that
:mod:`wcodec.hf.quantizer` points transformers at (:data:`CHECKPOINT_NAME`) it returns a
:class:`CheckpointView` of the folder's .wcodec shards, whose slices decode on demand; any
other path goes to safetensors unchanged. Everything transformers does with tensors it reads
(renames, ``key_mapping``, merging per-expert tensors, tied weights, ``device_map`` placement,
missing / unexpected key reports) then happens to real, decoded tensors, by its own code.

While a ``keep_compressed`` load of a folder runs (:func:`keep_lazily`), a slice comes back as a
:class:`StoredTensor` instead: the record's shape and dtype with no data, which moves to a
device without decoding. The quantize operation of :mod:`wcodec.hf.keep` then takes a stored
fixed-rate record as it is, or makes a just-in-time weight from the record, never reading the
values; any other use of the tensor (transformers merging experts, a cast, a dense weight)
decodes it there and then, on its device (the GPU decoder on CUDA). So a fixed or rANS folder
kept compressed is read once, compressed, instead of decoded on the CPU and thrown away.

Under a tensor-parallel plan (``tp_plan``) each rank indexes a slice with its shard's block
(``DtensorShardOperation``: unit-step slices, :func:`region_of`): a plain load decodes only that
block's part of the record (codec "fixed": the block's bytes; rANS: the chunks of its rows, so a
column split decodes the whole tensor), a keep_compressed load gets a :class:`StoredTensor` of the
block, which :mod:`wcodec.hf.keep` cuts from a fixed record or decodes and encodes for the rank
(:mod:`wcodec.hf.tp`). :func:`decoded_bytes` counts what each load decoded, per tensor.
"""

from __future__ import annotations

import threading
from pathlib import Path

import torch
from torch.utils._pytree import tree_map

from ..codecs.base import itemsize

CHECKPOINT_NAME = "wcodec-checkpoint.safetensors"  # named to transformers, never a file on disk


def is_checkpoint_name(path) -> bool:
    return Path(str(path)).name == CHECKPOINT_NAME


def region_of(index, shape) -> list[tuple[int, int]] | None:
    """The block ``[(start, stop)]`` (one pair per dim) that ``index`` selects from a tensor of
    ``shape``, when it is one: a tuple of unit-step slices (an Ellipsis, or fewer slices than
    dims, take the rest whole), as transformers' shard-on-read asks (``DtensorShardOperation``).
    None for any other index (ints, steps, masks)."""
    idx = index if isinstance(index, tuple) else (index,)
    if sum(i is Ellipsis for i in idx) > 1:
        return None
    if any(i is Ellipsis for i in idx):
        at = next(k for k, i in enumerate(idx) if i is Ellipsis)
        idx = idx[:at] + (slice(None),) * (len(shape) - len(idx) + 1) + idx[at + 1:]
    if len(idx) > len(shape) or any(not isinstance(i, slice) or i.step not in (None, 1) for i in idx):
        return None
    region = []
    for k, n in enumerate(shape):
        a, b, _ = (idx[k] if k < len(idx) else slice(None)).indices(n)
        region.append((a, max(a, b)))
    return region


class LazySlice:
    """One stored tensor, as safetensors' ``get_slice`` gives it: shape and dtype from the
    header, the values decoded (CPU, checksums checked) when indexed. A block index (a
    tensor-parallel rank's shard, see :func:`region_of`) decodes only that block's part of the
    record (:func:`wcodec.codecs.partial.decode_region`: codec "fixed" the block's bytes, rANS
    the chunks of its rows); during a keep_compressed load it gives a :class:`StoredTensor` of the
    block instead, whose record is cut, not decoded, where a layer takes it as stored."""

    def __init__(self, view: "CheckpointView", name: str):
        self._view, self._name = view, name
        entry = view.reader.entry(name)
        self._shape, self._dtype = list(entry["shape"]), entry["dtype"]

    def get_shape(self) -> list[int]:
        return list(self._shape)

    def get_dtype(self) -> str:
        """safetensors' dtype string ("BF16", "F32", ...)."""
        return self._dtype

    def __getitem__(self, index) -> torch.Tensor:
        region = region_of(index, self._shape)
        if region is None:  # not a block: decoded whole, then indexed
            return self._view.get_tensor(self._name)[index]
        block = None if region == [(0, n) for n in self._shape] else region
        if self._view.lazy:
            shape = self._shape if block is None else [b - a for a, b in block]
            return StoredTensor(self._view, self._name, shape, torch.device("cpu"), block)
        return self._view.get_tensor(self._name) if block is None else self._view.read_region(self._name, block)


_TO_COPY_NEUTRAL = {"layout": (None, torch.strided), "pin_memory": (None, False), "non_blocking": (None, False, True),
                    "memory_format": (None, torch.preserve_format)}


class StoredTensor(torch.Tensor):
    """A stored record, or the block ``region`` of it (``[(start, stop)]`` per dim: a
    tensor-parallel shard; None: the whole tensor), as a tensor with no data yet (a wrapper
    subclass: shape, dtype, device).

    ``.to(device)`` (same dtype) gives another StoredTensor on that device; every other
    operation decodes the record (its block) on the tensor's device first (checksums checked;
    the GPU decoder on CUDA for a whole tensor) and runs on the decoded tensor.
    :func:`materialize` decodes explicitly. Only made during a keep_compressed load, whose
    quantize operation takes every tensor."""

    @staticmethod
    def __new__(cls, view: "CheckpointView", name: str, shape, device, region=None):
        from .._torch_tensors import torch_dtype

        dtype = torch_dtype(view.reader.entry(name)["dtype"])
        t = torch.Tensor._make_wrapper_subclass(cls, tuple(shape), dtype=dtype, device=device)
        t.view_of, t.stored_name, t.region = view, name, region
        return t

    def __repr__(self):
        cut = "" if self.region is None else f", region={self.region}"
        return f"StoredTensor({self.stored_name!r}{cut}, shape={tuple(self.shape)}, dtype={self.dtype}, " \
               f"device={self.device})"

    __torch_function__ = torch._C._disabled_torch_function_impl

    @classmethod
    def __torch_dispatch__(cls, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func is torch.ops.aten._to_copy.default and len(args) == 1 and isinstance(args[0], StoredTensor):
            src = args[0]
            if kwargs.get("dtype") in (None, src.dtype) and all(kwargs.get(k) in ok for k, ok in _TO_COPY_NEUTRAL.items()):
                return StoredTensor(src.view_of, src.stored_name, src.shape, kwargs.get("device") or src.device,
                                    src.region)
        if func in (torch.ops.aten.detach.default, torch.ops.aten.alias.default) and isinstance(args[0], StoredTensor):
            a = args[0]
            return StoredTensor(a.view_of, a.stored_name, a.shape, a.device, a.region)
        args, kwargs = tree_map(lambda a: materialize(a) if isinstance(a, StoredTensor) else a, (args, kwargs))
        return func(*args, **kwargs)


def materialize(t: torch.Tensor) -> torch.Tensor:
    """``t`` decoded on its device if it is a :class:`StoredTensor`, else ``t`` itself."""
    if not isinstance(t, StoredTensor):
        return t
    from ..loading import load_tensors

    view, name = t.view_of, t.stored_name
    if t.region is not None:
        return view.read_region(name, t.region).to(t.device)
    view.count(name, view.reader.numel(name))
    return load_tensors(view.reader, [name], t.device, "pt", view.verify)[name]


_LAZY: dict[Path, bool] = {}  # folder -> verify, while a keep_compressed load of it runs
_LAZY_LOCK = threading.Lock()


def keep_lazily(folder, on: bool, verify: bool = True) -> None:
    """Mark a folder's checkpoint as read by a keep_compressed load (slices come back as
    :class:`StoredTensor`, decoded with checksums checked unless ``verify`` is False), or unmark
    it. Every wcodec folder load sets this for its folder before its weights load, so a load that
    failed half way cannot leave the mark behind."""
    key = Path(folder).resolve()
    with _LAZY_LOCK:
        if on:
            _LAZY[key] = bool(verify)
        else:
            _LAZY.pop(key, None)


_DECODED: dict[Path, dict[str, int]] = {}  # folder -> {tensor: bytes decoded}, see decoded_bytes
_DECODED_LOCK = threading.Lock()


def decoded_bytes(folder, reset: bool = False) -> dict[str, int]:
    """{tensor name: bytes of values decoded for it} by this process's loads of ``folder`` (a
    wcodec folder read through transformers) since the last reset: the values the codecs wrote,
    whole rANS chunks / int8 tile rows / fixed rows or blocks, in the tensor's dtype. A
    tensor-parallel rank decodes its shards only: compare with the tensors' sizes. ``reset``:
    start counting again (the counts returned are those before)."""
    key = Path(folder).resolve()
    with _DECODED_LOCK:
        out = dict(_DECODED.get(key, {}))
        if reset:
            _DECODED.pop(key, None)
    return out


def count_decoded(folder, reader, name: str, elements: int) -> None:
    """Add ``elements`` of tensor ``name`` (a tensor of ``reader``, the folder's) to :func:`decoded_bytes`."""
    nbytes = int(elements) * itemsize(reader.entry(name)["dtype"])
    with _DECODED_LOCK:
        per = _DECODED.setdefault(Path(folder).resolve(), {})
        per[name] = per.get(name, 0) + nbytes


class CheckpointView:
    """The .wcodec file(s) of ``folder`` with safetensors' ``safe_open`` interface (framework
    "pt", tensors decoded on the CPU; transformers moves each to its device). Names resolve
    aliases (tied weights stored once). Raises FileNotFoundError when the folder holds no
    .wcodec checkpoint, WcodecError subclasses for a corrupt one (when read)."""

    def __init__(self, folder, verify: bool = True):
        from ..format import CheckpointReader

        self.folder = Path(folder)
        self.reader = CheckpointReader(self.folder)
        self.verify = verify
        self._verified: set = set()  # tensors whose section checksums a block read checked
        self._lock = threading.Lock()  # transformers reads tensors on threads
        lazy = _LAZY.get(self.folder.resolve())
        self.lazy = lazy is not None
        if self.lazy:
            self.verify = lazy

    def keys(self) -> list[str]:
        return list(self.reader.keys())

    def metadata(self) -> dict[str, str]:
        md = dict(self.reader.metadata() or {})
        md.setdefault("format", "pt")
        return md

    def get_slice(self, name: str) -> LazySlice:
        return LazySlice(self, name)

    def get_tensor(self, name: str) -> torch.Tensor:
        from ..api import _load

        self.count(name, self.reader.numel(name))
        return _load(self.reader, [name], "cpu", "pt", self.verify)[name]

    def read_region(self, name: str, region) -> torch.Tensor:
        """The block ``region`` (``[(start, stop)]`` per dim) of tensor ``name``, decoded on the
        CPU (:func:`wcodec.codecs.partial.decode_region`: only the part of the record holding it).
        The section checksums are checked (each whole section is read for them) on the first
        block of a tensor; the decoded-tensor checksum covers the whole tensor, so it is not."""
        from ..codecs.partial import decode_region
        from ..loading import to_torch

        stored = self.reader.alias_of(name) or name
        with self._lock:
            check = self.verify and stored not in self._verified
            self._verified.add(stored)
        rec = self.reader.record(stored, verify=check, copy=False)
        stats: dict = {}
        arr = decode_region(rec, region, name, stats)
        self.count(name, stats.get("decoded", 0))
        return to_torch(arr, rec.dtype)

    def count(self, name: str, elements: int) -> None:
        """Add ``elements`` decoded for tensor ``name`` to this folder's :func:`decoded_bytes`."""
        count_decoded(self.folder, self.reader, name, elements)

    def close(self) -> None:
        self.reader.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False


def safe_open(filename, framework="pt", device="cpu", **kwargs):
    """safetensors' ``safe_open``, except for :data:`CHECKPOINT_NAME`, which opens a
    :class:`CheckpointView` of the folder it names."""
    if is_checkpoint_name(filename):
        return CheckpointView(Path(str(filename)).parent)
    return _REAL_SAFE_OPEN(filename, framework=framework, device=device, **kwargs)


safe_open._wcodec = True
_REAL_SAFE_OPEN = None


def install() -> bool:
    """Route ``transformers.modeling_utils.safe_open`` through :func:`safe_open` (idempotent).
    Returns False when that name is missing (a transformers that reads checkpoints otherwise:
    the quantizer then refuses the load with a clear error)."""
    global _REAL_SAFE_OPEN
    import transformers.modeling_utils as mu

    current = getattr(mu, "safe_open", None)
    if current is None:
        return False
    if not getattr(current, "_wcodec", False):
        _REAL_SAFE_OPEN = current
        mu.safe_open = safe_open
    return True
