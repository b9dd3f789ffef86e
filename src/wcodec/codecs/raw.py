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

    def decode(self, record: EncodedTensor, out: np.ndarray | None = None) -> np.ndarray:
        """out: see Codec.decode; the section is copied into it once."""
        data = record.section("data", np.uint8, record.numel * itemsize(record.dtype))
        try:
            view = data.view(DTYPES[record.dtype]).reshape(record.shape)
        except (KeyError, ValueError) as e:
            raise CorruptDataError(f"raw codec: cannot view data as {record.dtype}{list(record.shape)}: {e}") from None
        if out is None:
            return view.copy()
        out.view(np.uint8)[...] = data
        return out.reshape(record.shape)


register(RawCodec())
