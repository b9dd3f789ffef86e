"""Small conversions between wcodec's numpy/safetensors view of tensors and torch."""

from __future__ import annotations

import numpy as np
import torch

_DTYPES = {"BOOL": torch.bool, "U8": torch.uint8, "I8": torch.int8, "I16": torch.int16,
           "U16": torch.uint16, "I32": torch.int32, "U32": torch.uint32, "I64": torch.int64,
           "U64": torch.uint64, "F16": torch.float16, "BF16": torch.bfloat16,
           "F32": torch.float32, "F64": torch.float64}


def torch_dtype(name: str) -> torch.dtype:
    """safetensors dtype name ("BF16", "F32", ...) -> torch dtype. Raises KeyError if unknown."""
    return _DTYPES[name]


def from_numpy(arr: np.ndarray, dtype: str) -> torch.Tensor:
    """Zero-copy torch view of a decoded numpy array of safetensors dtype ``dtype``.

    BF16 arrives as uint16 bit patterns (numpy has no bfloat16) and is reinterpreted, not converted.
    """
    if dtype == "BF16":
        return torch.from_numpy(np.ascontiguousarray(arr).view(np.int16)).view(torch.bfloat16)
    return torch.from_numpy(np.ascontiguousarray(arr))


def resolve_dtype(dtype) -> torch.dtype | None:
    """None, a torch.dtype, or a name ("bfloat16", "torch.float16", "auto" -> None) as a torch dtype."""
    if dtype is None or isinstance(dtype, torch.dtype):
        return dtype
    name = str(dtype).removeprefix("torch.")
    if name == "auto":
        return None
    value = getattr(torch, name, None)
    if not isinstance(value, torch.dtype):
        raise ValueError(f"unknown torch dtype {dtype!r}")
    return value
