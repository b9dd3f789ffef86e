"""The codec record and the registry of tensor codecs (stable string ids written into files)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from ..errors import CorruptDataError, UnsupportedError

# safetensors dtype names <-> numpy dtypes. bfloat16 has no numpy dtype: it travels as uint16 bits.
DTYPES = {
    "BOOL": np.bool_, "U8": np.uint8, "I8": np.int8, "I16": np.int16, "U16": np.uint16,
    "I32": np.int32, "U32": np.uint32, "I64": np.int64, "U64": np.uint64,
    "F16": np.float16, "BF16": np.uint16, "F32": np.float32, "F64": np.float64,
    # no numpy dtype either: FP8 / E8M0 / packed FP4 pairs travel as uint8 bits
    "F8_E4M3": np.uint8, "F8_E5M2": np.uint8, "F8_E4M3FNUZ": np.uint8, "F8_E5M2FNUZ": np.uint8,
    "F8_E8M0": np.uint8, "F4_X2": np.uint8, "C64": np.complex64,
}
FLOAT_DTYPES = ("BF16", "F16", "F32")
#: the float8 dtypes the fp8 codec entropy-codes (E8M0 scales are stored raw)
FP8_DTYPES = ("F8_E4M3", "F8_E5M2", "F8_E4M3FNUZ", "F8_E5M2FNUZ")


def view_2d(shape: tuple) -> tuple[int, int]:
    """The [rows, cols] view of a tensor: rows = dim 0 (1 for 0-d and 1-d tensors)."""
    numel = int(np.prod(shape, dtype=np.int64))
    rows = int(shape[0]) if len(shape) >= 2 else 1
    return rows, (numel // rows if rows else 0)


def itemsize(dtype: str) -> int:
    return np.dtype(DTYPES[dtype]).itemsize


@dataclass
class EncodedTensor:
    """A tensor as one codec encoded it: everything needed to decode it, on the CPU or the GPU.

    Attributes:
        codec: registry id of the codec (e.g. ``"float"``), stored in the file.
        dtype: safetensors dtype name of the decoded tensor (``"BF16"``, ``"F32"``, ``"I8"``...).
        shape: shape of the decoded tensor.
        params: JSON-serialisable codec parameters (stored in the container header).
        sections: named 1-D numpy arrays (uint8/uint16/uint32/float32), stored as aligned sections.
        info: statistics for reports (not needed to decode; e.g. ``snr_db`` of lossy codecs).
        source_crc: CRC-32 of the encoded array's bytes where a lossless encoder computed it in
            its own pass over them (the writer stores it as the tensor's checksum without reading
            the tensor again), else None; never stored as such, not compared.
        section_crcs: {section name: CRC-32 of its bytes} for the sections whose checksum the
            encoder computed as it wrote them (the writer's section checksums); not compared.
    """

    codec: str
    dtype: str
    shape: tuple
    params: dict
    sections: dict
    info: dict = field(default_factory=dict)
    source_crc: int | None = field(default=None, compare=False, repr=False)
    section_crcs: dict = field(default_factory=dict, compare=False, repr=False)

    @property
    def numel(self) -> int:
        n = math.prod(self.shape)  # ~20x cheaper than np.prod on a short tuple (per-tensor cost)
        if type(n) is int and 0 <= n < 1 << 63:
            return n
        return int(np.prod(self.shape, dtype=np.int64))  # overflowing or odd shapes: as before

    @property
    def nbytes(self) -> int:
        """Compressed size in bytes: all sections (the header's JSON is not counted)."""
        return sum(int(a.nbytes) for a in self.sections.values())

    @property
    def raw_nbytes(self) -> int:
        return self.numel * itemsize(self.dtype)

    @property
    def bits_per_weight(self) -> float:
        return 8.0 * self.nbytes / self.numel if self.numel else 0.0

    def section(self, name: str, dtype, size: int | None = None) -> np.ndarray:
        """A section checked for dtype and (optionally) size; raises CorruptDataError."""
        arr = self.sections.get(name)
        if arr is None:
            raise CorruptDataError(f"codec {self.codec}: missing section '{name}'")
        if arr.dtype != np.dtype(dtype) or arr.ndim != 1 or (size is not None and arr.size != size):
            raise CorruptDataError(
                f"codec {self.codec}: section '{name}' must be {np.dtype(dtype).name}[{size}], "
                f"got {arr.dtype}[{arr.size}]")
        return arr


class Codec:
    """Interface of a tensor codec. Subclasses set ``id`` and implement encode/decode."""

    id: str = ""

    def encode(self, array: np.ndarray, dtype: str, **options) -> EncodedTensor:
        """array: numpy array holding the tensor (bfloat16 as uint16 bits), never modified."""
        raise NotImplementedError

    def decode(self, record: EncodedTensor, out: np.ndarray | None = None) -> np.ndarray:
        """Returns the tensor as a numpy array of the record's dtype and shape (bf16 as uint16).

        out: None, or a flat writable C-contiguous array of the tensor's numpy dtype and numel
        (checked by ``codecs.check_out``) to decode into; the result is then a view of it."""
        raise NotImplementedError

    def decode_checked(self, record: EncodedTensor, out: np.ndarray | None = None) -> tuple:
        """(:meth:`decode`'s array, the CRC-32 of its bytes where the decode pass computed it,
        else None). Codecs that can checksum what they just wrote override it."""
        return (self.decode(record) if out is None else self.decode(record, out=out)), None


REGISTRY: dict[str, Codec] = {}


def register(codec: Codec) -> Codec:
    if codec.id in REGISTRY:
        raise ValueError(f"codec id {codec.id!r} registered twice")
    REGISTRY[codec.id] = codec
    return codec


def get_codec(codec_id: str) -> Codec:
    try:
        return REGISTRY[codec_id]
    except KeyError:
        raise UnsupportedError(f"unknown codec id {codec_id!r} (known: {sorted(REGISTRY)})") from None
