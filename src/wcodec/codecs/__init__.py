"""Tensor codecs: a registry of stable string ids, and the policy that picks one per tensor.

Entry points: :func:`encode_tensor` and :func:`decode_tensor`. Codec modules register
themselves on import; ids are written into files and never change meaning.
"""

from __future__ import annotations

import numpy as np

from ..errors import CorruptDataError, UnsupportedError, WcodecError
from .base import DTYPES, FLOAT_DTYPES, REGISTRY, Codec, EncodedTensor, get_codec, register
from . import raw  # noqa: F401  (registers "raw")

MODES = ("lossless", "int8")
#: tensors with fewer elements than this are stored raw (tables and states would cost more)
MIN_CODED_NUMEL = 256

__all__ = ["EncodedTensor", "Codec", "encode_tensor", "decode_tensor", "get_codec", "register",
           "REGISTRY", "DTYPES", "MODES", "choose_codec"]


def _load_all() -> None:
    # Imported lazily: these modules compile numba kernels on first use.
    from . import float as _f, int8 as _i, quant as _q  # noqa: F401


def choose_codec(dtype: str, shape: tuple, mode: str = "lossless") -> str:
    """The codec id the policy uses for a tensor of this dtype and shape in this mode."""
    if mode not in MODES:
        raise ValueError(f"mode must be one of {MODES}, got {mode!r}")
    numel = int(np.prod(shape, dtype=np.int64))
    if numel < MIN_CODED_NUMEL:
        return "raw"
    if dtype in FLOAT_DTYPES:
        return "int8-quant" if mode == "int8" and len(shape) >= 1 else "float"
    if dtype in ("I8", "U8"):
        return "int8"
    return "raw"


def encode_tensor(array: np.ndarray, dtype: str, mode: str = "lossless", name: str = "",
                  codec: str | None = None, **options) -> EncodedTensor:
    """Encode one tensor. array: numpy array (bfloat16 given as uint16 bits); never modified.

    dtype: safetensors dtype name. mode: ``"lossless"`` (bit-exact) or ``"int8"`` (lossy
    per-channel quantization of float tensors). codec: force a codec id. Raises UnsupportedError.
    """
    if dtype not in DTYPES:
        raise UnsupportedError(f"tensor '{name}': dtype {dtype} is not supported")
    codec_id = codec or choose_codec(dtype, tuple(array.shape), mode)
    if codec_id != "raw":
        _load_all()
    return get_codec(codec_id).encode(array, dtype, **options)


def decode_tensor(record: EncodedTensor, name: str = "") -> np.ndarray:
    """Decode one record to a numpy array (bfloat16 as uint16 bits).

    Raises a WcodecError subclass naming the tensor when the record is corrupt.
    """
    if record.codec != "raw":
        _load_all()
    from ..format.params import check_params

    try:
        check_params(record.codec, record.dtype, record.shape, record.params)
        out = get_codec(record.codec).decode(record)
    except WcodecError as e:
        raise type(e)(f"tensor '{name}': {e}") from None
    except (ValueError, IndexError, KeyError, TypeError, AttributeError, OverflowError) as e:  # malformed params
        raise CorruptDataError(f"tensor '{name}': malformed record ({type(e).__name__}: {e})") from None
    return out
