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
"""

from __future__ import annotations

from pathlib import Path

import torch

CHECKPOINT_NAME = "wcodec-checkpoint.safetensors"  # named to transformers, never a file on disk


def is_checkpoint_name(path) -> bool:
    return Path(str(path)).name == CHECKPOINT_NAME


class LazySlice:
    """One stored tensor, as safetensors' ``get_slice`` gives it: shape and dtype from the
    header, the values decoded (CPU, checksums checked) when indexed."""

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
        t = self._view.get_tensor(self._name)
        return t if index is Ellipsis or index == (Ellipsis,) else t[index]


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

        return _load(self.reader, [name], "cpu", "pt", self.verify)[name]

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
