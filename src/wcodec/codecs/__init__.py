"""Tensor codecs: a registry of stable string ids, and the policy that picks one per tensor.

Entry points: :func:`encode_tensor` and :func:`decode_tensor`. Codec modules register
themselves on import; ids are written into files and never change meaning.
"""

from __future__ import annotations

import numpy as np

from ..errors import CorruptDataError, InvalidInputError, UnsupportedError, WcodecError
from .base import DTYPES, FLOAT_DTYPES, FP8_DTYPES, REGISTRY, Codec, EncodedTensor, get_codec, register
from . import raw  # noqa: F401  (registers "raw")

MODES = ("lossless", "int8")
#: tensors with fewer elements than this are stored raw (tables and states would cost more)
MIN_CODED_NUMEL = 256

__all__ = ["EncodedTensor", "Codec", "encode_tensor", "decode_tensor", "get_codec", "register",
           "REGISTRY", "DTYPES", "MODES", "PREFERABLE", "choose_codec", "check_out"]


_loaded = False
_check_params = None  # format.params.check_params, bound at the first decode


def _load_all() -> None:
    # Imported lazily: these modules compile numba kernels on first use. Once: the import
    # statements cost ~5 us per decoded tensor (MiniLM has 25 tensors of 147K weights).
    global _loaded
    if _loaded:
        return
    from . import float as _f, int8 as _i, quant as _q, fixed as _x  # noqa: F401
    from . import fp8 as _f8, fixed16 as _x16  # noqa: F401
    _loaded = True


def _checker():
    global _check_params
    if _check_params is None:
        from ..format.params import check_params

        _check_params = check_params
    return _check_params


#: codecs a caller may prefer (``save_file(..., codec=...)``): id -> the codec id it stores a
#: tensor of (dtype, numel) in, or None; the others keep the policy's codec. "fixed": BF16 in
#: codec "fixed", F16 in codec "fixed16" where that saves (its encoder refuses otherwise)
PREFERABLE = {"fixed": lambda dtype, numel: {"BF16": "fixed", "F16": "fixed16"}.get(dtype)
              if numel >= MIN_CODED_NUMEL else None}


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
    of at least MIN_CODED_NUMEL elements, and F16 ones in codec "fixed16" unless that layout
    would not save: those keep the policy's codec), the policy's codec for the others.
    Raises UnsupportedError.
    """
    if dtype not in DTYPES:
        raise UnsupportedError(f"tensor '{name}': dtype {dtype} is not supported")
    if prefer is not None and prefer not in PREFERABLE:
        raise UnsupportedError(f"codec {prefer!r} cannot be chosen per file (choose from {sorted(PREFERABLE)})")
    preferred = PREFERABLE[prefer](dtype, int(array.size)) if codec is None and prefer is not None else None
    if preferred == "fixed16":
        _load_all()
        try:
            return get_codec(preferred).encode(array, dtype, **options)
        except UnsupportedError:  # would not save: the policy's codec below
            preferred = None
    codec_id = codec or preferred or choose_codec(dtype, tuple(array.shape), mode)
    if codec_id != "raw":
        _load_all()
    if codec_id == "int8-quant":
        from .lossy import parse_mode

        options = {**parse_mode(mode)[1], **options}
    return get_codec(codec_id).encode(array, dtype, **options)


def check_out(record: EncodedTensor, out, name: str = "") -> np.ndarray:
    """``out`` checked as a destination for ``record``; returns it flat, viewed as the tensor's
    numpy dtype (BF16 as uint16). Accepted: a writable C-contiguous numpy array (a view of a torch
    tensor, pinned memory, an np.memmap) whose elements are either the tensor's width (any dtype
    of that itemsize: bf16 as uint16/int16, shape the tensor's or flat [numel]) or bytes (uint8 /
    int8, shape [raw_nbytes]). Raises InvalidInputError (a ValueError) naming the tensor and the
    mismatch; ``out`` is not touched then.
    """
    want = np.dtype(DTYPES[record.dtype])
    if not isinstance(out, np.ndarray):
        raise InvalidInputError(f"tensor '{name}': out must be a numpy array, got {type(out).__name__}")
    if not (out.flags.c_contiguous and out.flags.writeable):
        raise InvalidInputError(f"tensor '{name}': out must be writable and C-contiguous")
    if out.dtype.itemsize == want.itemsize and out.dtype.kind in "uifbc":
        shapes = (tuple(record.shape), (record.numel,))
    elif out.dtype in (np.uint8, np.int8):
        shapes = ((record.raw_nbytes,),)
    else:
        raise InvalidInputError(f"tensor '{name}': out has dtype {out.dtype}, the tensor is {record.dtype} "
                                f"(give an array of its width or of bytes)")
    if out.shape not in shapes:
        raise InvalidInputError(f"tensor '{name}': out has shape {list(out.shape)}, expected "
                                + " or ".join(str(list(s)) for s in shapes))
    return out.reshape(-1).view(want)


def decode_tensor(record: EncodedTensor, name: str = "", out: np.ndarray | None = None, checksum: bool = False):
    """Decode one record to a numpy array (bfloat16 as uint16 bits).

    out: optional destination (see :func:`check_out` for what is accepted; a bad one raises
    InvalidInputError, a ValueError, before anything is written). Every codec decodes straight
    into it, with no full-size copy of the result: float, fp8 and int8 without prediction
    (one tile column) write from their rANS decoder; int8 with prediction keeps its residual plane
    (1 byte/weight, tile-major) and writes the inverse prediction; int8-quant dequantizes block
    by block into it; raw copies its section once; fixed writes its last step into it. Returns
    the decoded tensor as a view of ``out`` (the tensor's dtype and shape). On a corrupt record
    the error is raised and ``out`` may be partly written: treat its contents as undefined then.
    checksum: return (array, CRC-32 of its C-order bytes) instead: the float codec computes it in
    its decode pass, chunk by chunk while the bytes are in cache; other codecs in a pass after.
    Raises a WcodecError subclass naming the tensor when the record is corrupt.
    """
    if out is not None:
        out = check_out(record, out, name)
    with named_errors(name):
        check_record_params(record)
        codec = get_codec(record.codec)
        if not checksum:
            return codec.decode(record) if out is None else codec.decode(record, out=out)
        arr, crc = codec.decode_checked(record, out)
    if crc is None:
        from .. import native

        crc = native.crc32(np.ascontiguousarray(arr).reshape(-1).view(np.uint8))
    return arr, crc


def check_record_params(record: EncodedTensor) -> None:
    """The codec's params schema (``format.params.check_params``), loading the codec modules
    first; raises CorruptDataError. Run by every decode path (full and partial)."""
    if record.codec != "raw":
        _load_all()
    (_check_params or _checker())(record.codec, record.dtype, record.shape, record.params)


class named_errors:
    """Context manager: a WcodecError raised inside gets "tensor '<name>': " in front, and a
    ValueError / IndexError / KeyError / TypeError / AttributeError / OverflowError (malformed
    params reaching a decoder) becomes a CorruptDataError naming the tensor."""

    def __init__(self, name: str):
        self.name = name

    def __enter__(self):
        return self

    def __exit__(self, kind, e, tb):
        if e is None:
            return False
        if isinstance(e, WcodecError):
            if str(e).startswith(f"tensor '{self.name}': "):
                return False  # named by an inner decode
            raise type(e)(f"tensor '{self.name}': {e}") from None
        if isinstance(e, (ValueError, IndexError, KeyError, TypeError, AttributeError, OverflowError)):
            raise CorruptDataError(f"tensor '{self.name}': malformed record ({type(e).__name__}: {e})") from None
        return False
