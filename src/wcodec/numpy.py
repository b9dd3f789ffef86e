"""numpy flavour of the API (as ``safetensors.numpy``): save_file, load_file, save, load.

Works without torch. BF16 travels as uint16 bit patterns, FP8 / E8M0 / packed FP4 as uint8 bits
(numpy has no such dtypes); complex64 as numpy complex64.
"""

from __future__ import annotations

from .api import load as _load
from .api import load_file as _load_file
from .api import save as _save
from .api import save_file

__all__ = ["save_file", "load_file", "save", "load"]


def load_file(filename, verify: bool = True) -> dict:
    """Load every tensor of a .wcodec file as numpy arrays. See wcodec.load_file."""
    return _load_file(filename, device="cpu", framework="np", verify=verify)


def save(tensors: dict, metadata: dict | None = None, mode: str = "lossless", low_joint: bool = False) -> bytes:
    """The .wcodec file of ``{name: numpy array}`` as bytes. See wcodec.api.save."""
    return _save(tensors, metadata, mode, low_joint=low_joint)


def load(data: bytes, verify: bool = True) -> dict:
    """``{name: numpy array}`` decoded from .wcodec bytes. See wcodec.api.load."""
    return _load(data, device="cpu", framework="np", verify=verify)
