"""Small conversions between wcodec's numpy/safetensors view of tensors and torch.

Below both ``wcodec.torch`` (which re-exports them: ``wcodec.torch.tensors``) and ``wcodec.gpu``,
which may not import ``wcodec.torch``.
"""

from __future__ import annotations

import numpy as np
import torch

_DTYPES = {"BOOL": torch.bool, "U8": torch.uint8, "I8": torch.int8, "I16": torch.int16,
           "U16": torch.uint16, "I32": torch.int32, "U32": torch.uint32, "I64": torch.int64,
           "U64": torch.uint64, "F16": torch.float16, "BF16": torch.bfloat16,
           "F32": torch.float32, "F64": torch.float64, "F8_E4M3": torch.float8_e4m3fn,
           "F8_E5M2": torch.float8_e5m2, "F8_E4M3FNUZ": torch.float8_e4m3fnuz,
           "F8_E5M2FNUZ": torch.float8_e5m2fnuz, "F8_E8M0": torch.float8_e8m0fnu,
           "F4_X2": torch.float4_e2m1fn_x2, "C64": torch.complex64}


def torch_dtype(name: str) -> torch.dtype:
    """safetensors dtype name ("BF16", "F32", ...) -> torch dtype. Raises KeyError if unknown."""
    return _DTYPES[name]


def from_numpy(arr: np.ndarray, dtype: str) -> torch.Tensor:
    """Zero-copy torch view of a decoded numpy array of safetensors dtype ``dtype``.

    BF16 arrives as uint16 bit patterns (numpy has no bfloat16) and is reinterpreted, not converted;
    so do FP8 / E8M0 / FP4 pairs (uint8 bits). 0-d arrays stay 0-d.
    """
    arr = np.ascontiguousarray(arr).reshape(arr.shape)  # ascontiguousarray makes 0-d arrays 1-d
    if dtype == "BF16":
        return torch.from_numpy(arr.view(np.int16)).view(torch.bfloat16)
    if arr.dtype == np.uint8 and dtype not in ("U8", "BOOL"):  # FP8 / E8M0 / FP4 bits
        return torch.from_numpy(arr).view(_DTYPES[dtype])
    return torch.from_numpy(arr)


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


def _folds(x: torch.Tensor) -> bool:
    """Whether ``x.reshape(-1, x.shape[-1])`` is a view (its leading dimensions are contiguous)."""
    return all(x.stride(i) == x.stride(i + 1) * x.shape[i + 1] for i in range(x.dim() - 2))


def linear_as_parameter(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
    """``F.linear(x, weight, bias)`` rounded as nn.Linear rounds it with its weight a Parameter
    that requires grad (every model's default), for a frozen or decoded ``weight``.

    x: [..., K]; weight: [N, K]; bias: [N] or None, all one dtype; returns [..., N]. ATen's
    matmul folds a >= 3-D x whose leading dimensions do not fold without a copy (a transposed
    patch embedding's output) into one matrix when the weight requires grad, even under
    no_grad, and multiplies it batched otherwise: bf16 results differ in the last bit (AIMv2's
    vision tower: 0.0039 after two layers). Autograd flows through both paths alike.
    """
    if x.dim() < 3 or weight.requires_grad or _folds(x) or x.numel() == 0:
        return torch.nn.functional.linear(x, weight, bias)
    y = torch.mm(x.reshape(-1, x.shape[-1]), weight.t()).view(*x.shape[:-1], weight.shape[0])
    return y if bias is None else y + bias
