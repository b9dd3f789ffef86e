"""safetensors' low-level writer under its names: ``TensorSpec`` (a dtype, a shape and a raw
buffer given by address and length) and ``serialize`` / ``serialize_file``, which write those
buffers as a .wcodec checkpoint (lossless) instead of a .safetensors one.

As in safetensors 0.8.0 the caller keeps every buffer alive while it is written: the bytes are
read from the addresses given, once, when ``serialize`` runs. ``dtype`` takes safetensors'
constructor names ("float32", "bfloat16", ...); the ``dtype`` property gives its format code
("F32", "BF16"). Float8 / float4 / complex codes are refused (wcodec does not store them).
"""

from __future__ import annotations

import ctypes

import numpy as np

from .errors import InvalidInputError, UnsupportedError

#: safetensors' constructor name -> (format code, numpy dtype of the buffer)
_DTYPES = {"bool": ("BOOL", np.bool_), "int8": ("I8", np.int8), "uint8": ("U8", np.uint8),
           "int16": ("I16", np.int16), "uint16": ("U16", np.uint16), "int32": ("I32", np.int32),
           "uint32": ("U32", np.uint32), "int64": ("I64", np.int64), "uint64": ("U64", np.uint64),
           "float16": ("F16", np.float16), "float32": ("F32", np.float32), "float64": ("F64", np.float64),
           "bfloat16": ("BF16", np.uint16)}
#: names safetensors knows that wcodec does not store
_UNSTORED = ("float8_e4m3fn", "float8_e4m3fnuz", "float8_e5m2", "float8_e5m2fnuz", "float8_e8m0fnu",
             "float4_e2m1fn_x2", "complex64")


class TensorSpec:
    """One tensor to serialize: ``TensorSpec(dtype, shape, data_ptr, data_len)``.

    dtype: a safetensors constructor name (see the module doc); shape: dims (ints >= 0);
    data_ptr: the address of a C-contiguous buffer of data_len bytes, prod(shape) * itemsize.
    Raises InvalidInputError (a safetensors SafetensorError under the shim) for an unknown
    dtype, a bad shape, or a length that does not match; UnsupportedError for a dtype wcodec
    does not store."""

    __slots__ = ("_name", "_shape", "_ptr", "_len")

    def __init__(self, dtype: str, shape, data_ptr: int, data_len: int):
        if dtype in _UNSTORED:
            raise UnsupportedError(f"TensorSpec: dtype {dtype!r} is not stored by wcodec")
        if dtype not in _DTYPES:
            raise InvalidInputError(f"Unknown dtype {dtype!r}. Supported dtypes: {', '.join(_DTYPES)}")
        try:
            dims = tuple(int(d) for d in shape)
        except (TypeError, ValueError):
            raise InvalidInputError(f"TensorSpec: shape must be a sequence of ints, got {shape!r}") from None
        if any(d < 0 for d in dims):
            raise InvalidInputError(f"TensorSpec: negative dim in shape {list(dims)}")
        need = int(np.prod(dims, dtype=np.int64)) * np.dtype(_DTYPES[dtype][1]).itemsize
        if int(data_len) != need:
            raise InvalidInputError(f"TensorSpec: data_len {data_len} does not match shape {list(dims)} of "
                                    f"{dtype} ({need} bytes)")
        if need and not int(data_ptr):
            raise InvalidInputError("TensorSpec: data_ptr is null")
        self._name, self._shape, self._ptr, self._len = dtype, dims, int(data_ptr), need

    @property
    def dtype(self) -> str:
        """The safetensors format code, e.g. "F32"."""
        return _DTYPES[self._name][0]

    @property
    def shape(self) -> list[int]:
        return list(self._shape)

    @property
    def data_ptr(self) -> int:
        return self._ptr

    @property
    def data_len(self) -> int:
        return self._len

    def __repr__(self) -> str:
        return f"TensorSpec(dtype='{self.dtype}', shape={list(self._shape)}, data_ptr={self._ptr}, data_len={self._len})"

    def array(self) -> np.ndarray:
        """A copy of the buffer as a numpy array of the spec's shape (BF16 as uint16 bits)."""
        raw = np.frombuffer((ctypes.c_uint8 * self._len).from_address(self._ptr), np.uint8) if self._len \
            else np.zeros(0, np.uint8)
        return raw.copy().view(_DTYPES[self._name][1]).reshape(self._shape)


def _tensors(tensor_dict) -> dict:
    """{name: array} of the specs' buffers (copied), for wcodec's savers. A bfloat16 buffer
    becomes a torch bfloat16 tensor (numpy has no such dtype; MissingDependencyError without torch)."""
    if not isinstance(tensor_dict, dict) or not all(isinstance(v, TensorSpec) for v in tensor_dict.values()):
        raise TypeError("serialize takes a dict of {name: TensorSpec} (raw dicts are not accepted, as in "
                        "safetensors 0.8.0)")
    out = {}
    for name, spec in tensor_dict.items():
        a = spec.array()
        if spec.dtype == "BF16":
            from .loading import import_torch
            torch = import_torch()
            a = torch.from_numpy(a.view(np.int16)).view(torch.bfloat16)
        out[name] = a
    return out


def serialize(tensor_dict: dict, metadata: dict | None = None) -> bytes:
    """The .wcodec bytes (lossless) of {name: TensorSpec} with optional str -> str metadata.
    Raises TypeError (not a dict of TensorSpec), InvalidInputError (names, metadata)."""
    from .numpy import save
    return save(_tensors(tensor_dict), metadata)


def serialize_file(tensor_dict: dict, filename, metadata: dict | None = None) -> None:
    """serialize() written to ``filename`` (replaced atomically). Errors as serialize, and
    OSError from the file system."""
    from .numpy import save_file
    save_file(_tensors(tensor_dict), filename, metadata)
