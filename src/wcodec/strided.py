"""safetensors' ``get_strided_slice`` over any slice object (wcodec's lazy ``Slice`` or the
safetensors library's), shared by :mod:`wcodec.safeopen` and :mod:`wcodec.stopen`."""

from __future__ import annotations

import numpy as np

from .errors import InvalidInputError


def strided_slice(sl, name: str, dim, intervals, framework: str):
    """The [a, b) ranges of ``intervals`` along ``dim`` of the tensor behind ``sl`` (an object
    with ``get_shape()`` and ``[index]``), concatenated in the order given: a torch tensor, or a
    numpy array for framework "np"/"numpy". Raises InvalidInputError naming the tensor."""
    shape = list(sl.get_shape())
    if not (isinstance(dim, int) and not isinstance(dim, bool) and -len(shape) <= dim < len(shape)):
        raise InvalidInputError(f"tensor '{name}': dim {dim!r} is out of range for a tensor of "
                                f"{len(shape)} dimension(s)")
    dim %= len(shape)
    ivs = [tuple(iv) for iv in intervals]
    if not ivs:
        raise InvalidInputError(f"tensor '{name}': get_strided_slice needs at least one interval")
    for iv in ivs:
        if len(iv) != 2 or not all(isinstance(x, int) and not isinstance(x, bool) for x in iv) \
                or not 0 <= iv[0] < iv[1] <= shape[dim]:
            raise InvalidInputError(f"tensor '{name}': interval {iv} must be (a, b) with 0 <= a < b <= "
                                    f"{shape[dim]} (the size of dimension {dim})")
    pieces = [sl[(slice(None),) * dim + (slice(a, b),)] for a, b in ivs]
    if framework in ("np", "numpy"):
        return np.concatenate(pieces, axis=dim)
    import torch
    return torch.cat(pieces, dim=dim)
