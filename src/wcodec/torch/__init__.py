"""torch integration: tensors from decoded records, and weights kept compressed that decode just
in time (forward pre-hooks sharing one scratch buffer).

Imported only on use (``import wcodec`` never imports torch). Entry points:

- :class:`CompressedWeights` (``wcodec.torch.jit``): Linear / Embedding weights kept as encoded
  records on a device, each decoded into a shared scratch buffer just before its module runs.
- :func:`from_numpy`, :func:`torch_dtype` (``wcodec.torch.tensors``).
- safetensors.torch's API (``wcodec.torch.st``): :func:`save_file`, :func:`load_file`,
  :func:`save`, :func:`load`, :func:`save_model`, :func:`load_model`, and its shared-tensor
  helpers under their names (``storage_ptr``, ``storage_size``, ``_end_ptr``, ``_is_complete``,
  ``_find_shared_tensors``, ``_remove_duplicate_names``).
- the seed's :func:`make_decompression_hook` (``wcodec.torch.hooks``).
- :class:`CompressedLinear`, :func:`compress_model` (``wcodec.torch.linear``): Linear layers
  whose bf16 weight stays in the fixed-rate layout and is decoded inside the matmul.
"""

from __future__ import annotations

try:
    import torch as _torch  # noqa: F401
except ImportError:
    from ..errors import MissingDependencyError
    raise MissingDependencyError("wcodec.torch needs torch, which is not installed: pip install 'wcodec[torch]'") from None

from .jit import CompressedWeights
from .tensors import from_numpy, torch_dtype

__all__ = ["CompressedWeights", "from_numpy", "torch_dtype", "save_file", "load_file", "save", "load",
           "save_model", "load_model", "make_decompression_hook", "CompressedLinear", "compress_model",
           "storage_ptr", "storage_size"]

# name -> submodule, imported on first access (PEP 562) so that other submodules stay unloaded
_LAZY = {"save_file": "st", "load_file": "st", "save": "st", "load": "st", "save_model": "st",
         "load_model": "st", "make_decompression_hook": "hooks", "CompressedLinear": "linear",
         "compress_model": "linear", "storage_ptr": "st", "storage_size": "st", "_end_ptr": "st",
         "_find_shared_tensors": "st", "_remove_duplicate_names": "st", "_is_complete": "st"}


def __getattr__(name):
    if name in _LAZY:
        import importlib
        value = getattr(importlib.import_module(f"{__name__}.{_LAZY[name]}"), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
