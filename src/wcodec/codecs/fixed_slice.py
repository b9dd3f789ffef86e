"""A block of a codec "fixed" record as a record of its own, without decoding (tensor-parallel
shards: a row range is a column-parallel shard of a Linear weight, a column range a row-parallel one).

The block ``[r0, r1) x [c0, c1)`` of the record's [rows, cols] view keeps the parent's window
``base`` (any base is canonical: a value outside its window is an escape either way), so its low
bytes and nibbles are the parent's, moved, and its escapes the parent's within the block:

- rows: the rows' bytes of ``lo`` / ``nib`` and the CSR escape range ``ptr[r0] .. ptr[r1]``,
  the row pointer re-based to 0;
- columns: the shard's own padded width ``kpad' = padded_cols(c1 - c0)`` (multiple of 16, zero
  padding); escapes filtered to ``c0 <= col < c1`` and re-indexed by ``- c0``. Nibbles are packed
  per group of 8 columns (columns ``8i + q`` and ``8i + 4 + q`` in byte ``4i + q``), so a block
  that starts on a multiple of 16 and ends on one (or at the last column) is a byte slice of the
  planes; any other bound moves each nibble (unpacked and packed again: a pass over the block's
  bytes, still no decode).

The parent is validated whole first (:func:`wcodec.codecs.fixed.check_record`: every consumer
refuses a record that is not canonical, wherever the fault is), then only the block's bytes are
copied; the block owns its arrays (no view of the parent's memory) and is canonical.
"""

from __future__ import annotations

import numpy as np

from ..errors import InvalidInputError
from .base import EncodedTensor, view_2d
from .fixed import KPAD_MULTIPLE, check_record, nibble_order, padded_cols, unpack_nibbles


def slice_sections(params: dict, sections: dict, rows: int, cols: int, r0: int, r1: int, c0: int,
                   c1: int) -> tuple[dict, dict]:
    """(params, sections) of the block ``[r0, r1) x [c0, c1)`` of a codec "fixed" record of
    ``rows x cols``: a canonical record of ``(r1 - r0) x (c1 - c0)``. Raises InvalidInputError for
    a block outside the record, CorruptDataError (naming the field) for a parent that is not
    canonical."""
    r0, r1, c0, c1 = int(r0), int(r1), int(c0), int(c1)
    if not (0 <= r0 <= r1 <= rows and 0 <= c0 <= c1 <= cols):
        raise InvalidInputError(f"block rows [{r0}, {r1}) x columns [{c0}, {c1}) is outside a {rows} x {cols} record")
    c = check_record(params, sections, rows, cols)  # the whole record: canonical, or refused (issue 27)
    lo = c.lo.reshape(rows, c.kpad)[r0:r1]
    nib = c.nib.reshape(rows, c.kpad // 2)[r0:r1]
    a, b = int(c.ptr[r0]), int(c.ptr[r1])
    erow, col, val = c.erow[a:b] - r0, c.col[a:b].astype(np.int64), c.val[a:b]
    R, W = r1 - r0, c1 - c0
    kpad2 = padded_cols(W)
    if (c0, c1) != (0, cols):
        inside = (col >= c0) & (col < c1)
        erow, col, val = erow[inside], col[inside] - c0, val[inside]
        if c0 % KPAD_MULTIPLE == 0 and (c1 % KPAD_MULTIPLE == 0 or c1 == cols):
            lo, nib = lo[:, c0:c0 + kpad2], nib[:, c0 // 2:(c0 + kpad2) // 2]  # whole groups, zero padding
        else:
            lo, nib = _regroup(lo, nib, R, c.kpad, c0, c1, kpad2)
    out_bits = 16 if W <= 0x10000 else 32
    new_ptr = np.zeros(R + 1, np.uint32)
    np.cumsum(np.bincount(erow, minlength=R), out=new_ptr[1:])
    out = {"lo": np.array(lo, np.uint8, order="C").reshape(-1), "nib": np.array(nib, np.uint8, order="C").reshape(-1),
           "esc.ptr": new_ptr, "esc.col": col.astype(np.uint16 if out_bits == 16 else np.uint32),
           "esc.val": np.array(val, np.uint16)}
    return {"base": c.base, "kpad": kpad2, "n_escapes": int(col.size), "col_bits": out_bits}, out


def _regroup(lo: np.ndarray, nib: np.ndarray, R: int, kpad: int, c0: int, c1: int, kpad2: int):
    """lo [R, kpad2] and packed nibbles [R, kpad2/2] of columns [c0, c1) of a band of rows whose
    planes are lo [R, kpad], nib [R, kpad/2] (bounds off the 16-column groups)."""
    W = c1 - c0
    lo2 = np.zeros((R, kpad2), np.uint8)
    lo2[:, :W] = lo[:, c0:c1]
    nibbles = np.zeros((R, kpad2), np.uint8)
    nibbles[:, :W] = unpack_nibbles(np.ascontiguousarray(nib).reshape(-1), R, kpad)[:, c0:c1]
    pairs = nibbles[:, nibble_order(kpad2)].reshape(R, kpad2 // 2, 2)
    return lo2, pairs[:, :, 0] | (pairs[:, :, 1] << 4)


def region_block(shape: tuple, region) -> tuple[int, int, int, int] | None:
    """The block ``(r0, r1, c0, c1)`` of the [rows, cols] view (``view_2d``) that the region
    ``[(start, stop) per dim]`` of a tensor of ``shape`` is, or None when it is not one block:
    dims after the second must be whole (a 3-D region cut along its last dim is strided in the
    view). Raises InvalidInputError for a region of another rank or outside the tensor."""
    region = [tuple(map(int, d)) for d in region]
    if len(region) != len(shape) or any(not 0 <= a <= b <= n for (a, b), n in zip(region, shape)):
        raise InvalidInputError(f"region {region} does not fit a tensor of shape {tuple(shape)}")
    if len(shape) < 2:
        a, b = region[0] if region else (0, 1)
        return (0, 1, a, b) if region else (0, 1, 0, 1)
    if any((a, b) != (0, n) for (a, b), n in zip(region[2:], shape[2:])):
        return None
    inner = int(np.prod(shape[2:], dtype=np.int64))
    (r0, r1), (c0, c1) = region[0], region[1]
    return r0, r1, c0 * inner, c1 * inner


def slice_record(rec: EncodedTensor, region) -> EncodedTensor | None:
    """The codec "fixed" record of ``region`` (``[(start, stop) per dim]``) of ``rec``, a record of
    its own (shape: the region's sizes), or None when the region is not one block of the record's
    view (:func:`region_block`). Raises what :func:`slice_sections` raises."""
    block = region_block(tuple(rec.shape), region)
    if block is None:
        return None
    rows, cols = view_2d(tuple(rec.shape))
    params, sections = slice_sections(rec.params, rec.sections, rows, cols, *block)
    shape = tuple(b - a for a, b in region)
    return EncodedTensor(rec.codec, rec.dtype, shape, params, sections)
