"""Lossless FP8 codec (F8_E4M3, F8_E5M2, F8_E4M3FNUZ, F8_E5M2FNUZ): each value's byte is one
rANS symbol.

Coding the whole byte (sign, exponent and mantissa jointly) costs order-0 entropy H(byte) <=
H(sign) + H(exponent) + H(mantissa): the joint symbol captures the exponent-mantissa dependence
of weights cast with a per-tensor scale, and with a byte alphabet the table is still one byte
per entry. Measured on all-MiniLM-L6-v2 and the shared models (benchmarks/experiments/fp8_bits.py,
benchmarks/RESULTS.md): joint beats split sign/exponent/mantissa symbols and exponent-coded with
raw sign+mantissa on every model, so the split variants are not stored.

Layout: one plane ``data`` with the rANS layout of :mod:`wcodec.rans` (symbol i = byte i of the
tensor in C order). Decoding is a plain rANS decode of bytes, so the GPU decodes it with the
byte-plane kernel of ``wcodec.gpu`` (``MODE_BYTES``) and the bytes are viewed as float8.
Bit-exact for every byte pattern (NaN, +-0, subnormals).
"""

from __future__ import annotations

import numpy as np

from .. import rans
from ..errors import CorruptDataError
from .base import FP8_DTYPES, Codec, EncodedTensor, register


def parse(record: EncodedTensor) -> "rans.RansPlane":
    """The validated byte plane of an fp8 record. Raises CorruptDataError."""
    if record.dtype not in FP8_DTYPES:
        raise CorruptDataError(f"fp8 codec: dtype {record.dtype} not supported")
    plane = rans.RansPlane.from_sections(record.params["data"], record.sections, "data")
    if plane.n_symbols != record.numel:
        raise CorruptDataError(f"fp8 codec: plane has {plane.n_symbols} symbols, tensor {record.numel}")
    return plane


class Fp8Codec(Codec):
    id = "fp8"

    def encode(self, array: np.ndarray, dtype: str, prob_bits: int = rans.DEFAULT_PROB_BITS,
               chunk_steps: int | None = None, tables: str | int = "auto", backend: str = "numba",
               **options) -> EncodedTensor:
        """array: the tensor's bytes (uint8 bit patterns, any shape), not modified.
        backend: "numba" or "reference" (pure-Python rANS, tiny inputs)."""
        if dtype not in FP8_DTYPES:
            raise ValueError(f"fp8 codec takes {FP8_DTYPES}, got {dtype}")
        data = np.ascontiguousarray(array).reshape(-1).view(np.uint8)
        plane = rans.encode(data, prob_bits, chunk_steps, tables, backend=backend)
        return EncodedTensor(self.id, dtype, tuple(array.shape), {"data": plane.params()},
                             plane.sections("data"))

    def decode(self, record: EncodedTensor, backend: str = "numba", out: np.ndarray | None = None) -> np.ndarray:
        """Returns uint8 bit patterns of the record's shape. out: see Codec.decode (the rANS
        decoder writes into it)."""
        dst = None if out is None else out.view(np.uint8)
        return rans.decode(parse(record), backend=backend, out=dst, where="fp8 data plane").reshape(record.shape)


register(Fp8Codec())
