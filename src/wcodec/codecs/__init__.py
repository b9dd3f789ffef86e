"""Tensor codecs: a registry of stable string ids, and the policy that picks one per tensor.

Entry points: :func:`encode_tensor` and :func:`decode_tensor`. Codec modules register
themselves on import; ids are written into files and never change meaning.
"""

from __future__ import annotations

import numpy as np

from ..errors import CorruptDataError, UnsupportedError, WcodecError
from .base import DTYPES, FLOAT_DTYPES, FP8_DTYPES, REGISTRY, Codec, EncodedTensor, get_codec, register
from . import raw  # noqa: F401  (registers "raw")

MODES = ("lossless", "int8")
#: tensors with fewer elements than this are stored raw (tables and states would cost more)
MIN_CODED_NUMEL = 256

__all__ = ["EncodedTensor", "Codec", "encode_tensor", "decode_tensor", "get_codec", "register",
           "REGISTRY", "DTYPES", "MODES", "PREFERABLE", "choose_codec"]


def _load_all() -> None:
    # Imported lazily: these modules compile numba kernels on first use.
    from . import float as _f, int8 as _i, quant as _q, fixed as _x  # noqa: F401
    from . import fp8 as _f8  # noqa: F401


#: codecs a caller may prefer (``save_file(..., codec=...)``): id -> which tensors it can take;
#: the others keep the policy's codec
PREFERABLE = {"fixed": lambda dtype, numel: dtype == "BF16" and numel >= MIN_CODED_NUMEL}


def choose_codec(dtype: str, shape: tuple, mode: str = "lossless") -> str:
    """The codec id the policy uses for a tensor of this dtype and shape in this mode."""
    from .lossy import parse_mode

    lossy = parse_mode(mode)[0] == "lossy"
    mode = "int8" if lossy else mode
    if mode not in MODES:
        raise ValueError(f"mode must be one of {MODES} or 'lossy:qp=N' / 'lossy:snr=X', got {mode!r}")
    numel = int(np.prod(shape, dtype=np.int64))
    if numel < MIN_CODED_NUMEL:
        return "raw"
    if lossy and dtype in FLOAT_DTYPES and len(shape) < 2:
        return "float"  # vectors (biases, norms): few weights, sensitive, kept exact
    if dtype in FLOAT_DTYPES:
        return "int8-quant" if mode == "int8" and len(shape) >= 1 else "float"
    if dtype in ("I8", "U8"):
        return "int8"
    if dtype in FP8_DTYPES:
        return "fp8"
    return "raw"


def encode_tensor(array: np.ndarray, dtype: str, mode: str = "lossless", name: str = "",
                  codec: str | None = None, prefer: str | None = None, **options) -> EncodedTensor:
    """Encode one tensor. array: numpy array (bfloat16 given as uint16 bits); never modified.

    dtype: safetensors dtype name. mode: ``"lossless"`` (bit-exact) or ``"int8"`` (lossy
    per-channel quantization of float tensors), or ``"lossy:qp=N"`` / ``"lossy:snr=X"`` (rate
    control of float matrices, :mod:`wcodec.codecs.lossy`). codec: force a codec id. prefer: a
    codec of :data:`PREFERABLE` used for the tensors it can take (e.g. ``"fixed"``: BF16 tensors
    of at least MIN_CODED_NUMEL elements), the policy's codec for the others. Raises UnsupportedError.
    """
    if dtype not in DTYPES:
        raise UnsupportedError(f"tensor '{name}': dtype {dtype} is not supported")
    if prefer is not None and prefer not in PREFERABLE:
        raise UnsupportedError(f"codec {prefer!r} cannot be chosen per file (choose from {sorted(PREFERABLE)})")
    if codec is None and prefer is not None and PREFERABLE[prefer](dtype, int(array.size)):
        codec = prefer
    codec_id = codec or choose_codec(dtype, tuple(array.shape), mode)
    if codec_id != "raw":
        _load_all()
    if codec_id == "int8-quant":
        from .lossy import parse_mode

        options = {**parse_mode(mode)[1], **options}
    return get_codec(codec_id).encode(array, dtype, **options)


def decode_tensor(record: EncodedTensor, name: str = "", out: np.ndarray | None = None) -> np.ndarray:
    """Decode one record to a numpy array (bfloat16 as uint16 bits).

    out: optional writable C-contiguous array of the tensor's byte size (a view of a torch
    tensor, pinned memory, an mmap); the float codec decodes straight into it, other codecs copy
    their result in. Returns the decoded array (a view of ``out`` when given).
    Raises a WcodecError subclass naming the tensor when the record is corrupt.
    """
    if out is not None and not (isinstance(out, np.ndarray) and out.flags.c_contiguous
                                and out.flags.writeable and out.nbytes == record.raw_nbytes):
        raise ValueError(f"tensor '{name}': out must be a writable C-contiguous array of {record.raw_nbytes} bytes")
    if record.codec != "raw":
        _load_all()
    from ..format.params import check_params

    try:
        check_params(record.codec, record.dtype, record.shape, record.params)
        codec = get_codec(record.codec)
        if out is not None and record.codec == "float":
            return codec.decode(record, out=out)
        res = codec.decode(record)
        if out is not None:
            dst = out.reshape(-1).view(np.uint8)
            dst[...] = np.ascontiguousarray(res).reshape(-1).view(np.uint8)
            return out.view(res.dtype).reshape(res.shape)
        out = res
    except WcodecError as e:
        raise type(e)(f"tensor '{name}': {e}") from None
    except (ValueError, IndexError, KeyError, TypeError, AttributeError, OverflowError) as e:  # malformed params
        raise CorruptDataError(f"tensor '{name}': malformed record ({type(e).__name__}: {e})") from None
    return out
