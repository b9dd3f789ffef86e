"""numpy flavour of the API (as ``safetensors.numpy``): BF16 travels as uint16 bit patterns."""

from __future__ import annotations

from .api import load_file as _load_file
from .api import save_file

__all__ = ["save_file", "load_file"]


def load_file(filename, verify: bool = True) -> dict:
    """Load every tensor of a .wcodec file as numpy arrays (BF16 as uint16). See wcodec.load_file."""
    return _load_file(filename, device="cpu", framework="np", verify=verify)
