"""The raw codec: the tensor's bytes as they are (int64 buffers, bool, tiny tensors)."""

from __future__ import annotations

import numpy as np

from ..errors import CorruptDataError
from .base import DTYPES, Codec, EncodedTensor, itemsize, register


class RawCodec(Codec):
    """Stores the little-endian bytes unchanged in one section ``data`` (uint8)."""

    id = "raw"

    def encode(self, array: np.ndarray, dtype: str, **options) -> EncodedTensor:
        data = np.ascontiguousarray(array).reshape(-1).view(np.uint8).copy()
        return EncodedTensor(self.id, dtype, tuple(array.shape), {}, {"data": data})

    def decode(self, record: EncodedTensor) -> np.ndarray:
        data = record.section("data", np.uint8, record.numel * itemsize(record.dtype))
        try:
            return data.view(DTYPES[record.dtype]).reshape(record.shape).copy()
        except (KeyError, ValueError) as e:
            raise CorruptDataError(f"raw codec: cannot view data as {record.dtype}{list(record.shape)}: {e}") from None


register(RawCodec())
