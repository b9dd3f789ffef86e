"""Codec "fixed": fixed-rate lossless bf16 for compute (decoded inside matmul kernels).

Every bf16 value ``v`` (16 bits: sign, 8 exponent, 7 mantissa) is split into its low byte
``lo = v & 0xFF`` (exponent LSB + mantissa, stored raw) and its high byte ``hi = v >> 8``
(sign + the exponent's top 7 bits). The high byte becomes a 4-bit code
``nibble = sign << 3 | d`` with ``d = (hi & 0x7F) - base`` when ``0 <= d <= 6``: a window of 7
high bytes, i.e. 14 consecutive exponents, which holds 99.8-99.99 % of trained weights. Any other
value is an *escape*: its nibble is ``sign << 3 | 7`` and its full 16 bits are stored in a sparse
list (row pointer, column, value). Cost: 12 bits per weight plus 32 bits per escape.

Why this layout (measured in benchmarks/fused_matmul.py): a 32-bit word of ``lo`` and the
matching 4 nibbles rebuild two bf16 pairs with a handful of SWAR operations and no table, no
serial scan and no cross-word shifts, so a matmul can decode in registers at memory speed. A
3-bit code (11 bits/weight) would need a popcount rank per weight to find its escapes.

Storage order (rows = shape[0], cols = the rest; padded row length ``kpad`` = cols rounded up to
a multiple of 16; padding: lo 0, nibble 0):
- ``lo``  u8[rows*kpad]: row-major low bytes.
- ``nib`` u8[rows*kpad/2]: per group of 8 columns ``8i..8i+7`` of a row, byte ``4i+q`` holds the
  nibble of column ``8i+q`` (bits 0-3) and of column ``8i+4+q`` (bits 4-7), so the u32 word
  ``i`` spreads to byte lanes with one mask (``& 0x0F0F0F0F`` / ``>> 4``).
- ``esc.ptr`` u32[rows+1] (CSR row pointer), ``esc.col`` u16 or u32 (``params.col_bits``),
  ``esc.val`` u16: escapes sorted by row, then column.
params: ``{"base": int, "kpad": int, "n_escapes": int, "col_bits": 16|32}``.
Decoding is exact for every bit pattern (NaN payloads, infinities, -0.0, subnormals).
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from ..errors import CorruptDataError, UnsupportedError
from .base import Codec, EncodedTensor, register, view_2d

#: the escape value of the 3-bit offset field
ESCAPE_D = 7
#: largest base: base + 7 must stay below 127 so that an escape's placeholder stays finite
MAX_BASE = 119
KPAD_MULTIPLE = 16


def padded_cols(cols: int) -> int:
    return -(-cols // KPAD_MULTIPLE) * KPAD_MULTIPLE


def choose_base(hi7_counts: np.ndarray) -> int:
    """The window start (0..MAX_BASE) holding the most values; hi7_counts: [128] int counts."""
    c = np.concatenate([[0], np.cumsum(hi7_counts[:MAX_BASE + 7], dtype=np.int64)])
    window = c[7:MAX_BASE + 8] - c[:MAX_BASE + 1]
    return int(np.argmax(window))


def nibble_order(kpad: int) -> np.ndarray:
    """Index map: packed position p (0..kpad-1) -> column; byte p//2 ... see module docstring.

    Packed position ``2b + h`` is nibble h (0 low, 1 high) of byte b.
    """
    b = np.arange(kpad // 2)
    i, q = b // 4, b % 4
    order = np.empty(kpad, np.int64)
    order[0::2] = 8 * i + q
    order[1::2] = 8 * i + 4 + q
    return order


def encode_bits(bits: np.ndarray, rows: int, cols: int) -> tuple[dict, dict]:
    """bits: uint16 [rows*cols] bf16 bit patterns -> (params, sections). Never modifies bits.
    The C extension's encoder where it is built (``native.fixed_encode``: 4096x4096 Student-t
    bf16 on the 2-vCPU VM, 51 MB/s in numpy), else :func:`encode_bits_numpy`; the same bytes."""
    from .. import native

    if native.available():
        bits = np.ascontiguousarray(bits, dtype=np.uint16).reshape(-1)
        kpad = padded_cols(cols)
        base = choose_base(native.head_histogram(bits, 8, 0x7F) if bits.size else np.zeros(128, np.int64))
        lo, nib, ptr, col, val = native.fixed_encode(bits, rows, cols, kpad, base)
        sections = {"lo": lo, "nib": nib, "esc.ptr": ptr, "esc.col": col, "esc.val": val}
        params = {"base": base, "kpad": kpad, "n_escapes": int(val.size), "col_bits": 16 if cols <= 0x10000 else 32}
        return params, sections
    return encode_bits_numpy(bits, rows, cols)


def encode_bits_numpy(bits: np.ndarray, rows: int, cols: int) -> tuple[dict, dict]:
    """:func:`encode_bits` in numpy (the reference of the C encoder; :func:`reference_encode`
    is this one's)."""
    kpad = padded_cols(cols)
    v = np.zeros((rows, kpad), np.uint16)
    v[:, :cols] = bits.reshape(rows, cols)
    hi = (v >> 8).astype(np.uint8)
    hi7 = hi & 0x7F
    counts = np.bincount(hi7[:, :cols].reshape(-1), minlength=128) if cols else np.zeros(128, np.int64)
    base = choose_base(counts)
    d = hi7.astype(np.int16) - base
    esc = (d < 0) | (d > 6)
    esc[:, cols:] = False
    d = np.where(esc, ESCAPE_D, np.where(np.arange(kpad) < cols, d, 0)).astype(np.uint8)
    sign = np.where(np.arange(kpad) < cols, hi >> 7, 0).astype(np.uint8)
    nib = (sign << 3) | d
    order = nibble_order(kpad)
    packed = nib[:, order].reshape(rows, kpad // 2, 2)
    nib_bytes = (packed[:, :, 0] | (packed[:, :, 1] << 4)).astype(np.uint8)
    er, ec = np.nonzero(esc)
    col_bits = 16 if cols <= 0x10000 else 32
    ptr = np.zeros(rows + 1, np.uint32)
    np.cumsum(np.bincount(er, minlength=rows), out=ptr[1:])
    sections = {
        "lo": (v & 0xFF).astype(np.uint8).reshape(-1),
        "nib": nib_bytes.reshape(-1),
        "esc.ptr": ptr,
        "esc.col": ec.astype(np.uint16 if col_bits == 16 else np.uint32),
        "esc.val": v[er, ec].astype(np.uint16),
    }
    params = {"base": base, "kpad": kpad, "n_escapes": int(er.size), "col_bits": col_bits}
    return params, sections


def decode_bits(params: dict, sections: dict, rows: int, cols: int, out: np.ndarray | None = None) -> np.ndarray:
    """(params, sections) -> uint16 [rows*cols] bf16 bits, written into ``out`` (writable
    C-contiguous uint16 [rows*cols]) when given. Raises CorruptDataError naming the field for a
    record that is not canonical (:func:`check_record`), before ``out`` is touched. The C
    extension's decoder where built (``native.fixed_decode``), else :func:`decode_bits_numpy`."""
    rec = check_record(params, sections, rows, cols)
    from .. import native

    if not native.available():
        return _decode_checked_numpy(rec, rows, cols, out)
    dst = out if out is not None else np.empty(rows * cols, np.uint16)
    native.fixed_decode(rec.lo, rec.nib, rec.ptr, rec.col, rec.val, rows, cols, rec.kpad, rec.base, dst)
    return dst


def decode_bits_numpy(params: dict, sections: dict, rows: int, cols: int, out: np.ndarray | None = None) -> np.ndarray:
    """:func:`decode_bits` in numpy (the reference of the C decoder)."""
    return _decode_checked_numpy(check_record(params, sections, rows, cols), rows, cols, out)


def _decode_checked_numpy(rec: "Checked", rows: int, cols: int, out: np.ndarray | None) -> np.ndarray:
    nib = unpack_nibbles(rec.nib, rows, rec.kpad)
    hi = ((nib & 0x08).astype(np.uint16) << 4) | ((nib & 0x07).astype(np.uint16) + rec.base)
    v = (hi << 8) | rec.lo.reshape(rows, rec.kpad)
    v[rec.erow, rec.col.astype(np.int64)] = rec.val
    if out is None:
        return np.ascontiguousarray(v[:, :cols]).reshape(-1)
    out.reshape(rows, cols)[...] = v[:, :cols]
    return out


class Checked(NamedTuple):
    """A canonical record's fields (see :func:`check_record`): the sections as stored and the
    row of each escape, int64 [n_escapes]."""

    base: int
    kpad: int
    col_bits: int
    lo: np.ndarray
    nib: np.ndarray
    ptr: np.ndarray
    col: np.ndarray
    val: np.ndarray
    erow: np.ndarray


def check_record(params: dict, sections: dict, rows: int, cols: int) -> Checked:
    """The one validation of a codec "fixed" record, shared by every consumer (numpy decode,
    partial decode, CPU fallback, GPU loader, ``gpu.fixed.from_sections``, the state dicts of
    ``CompressedLinear`` / ``CompressedEmbedding``): params and section sizes, then
    :func:`check_layout`. Raises CorruptDataError naming the field."""
    base, kpad, n_esc, col_bits = _check_params(params, rows, cols)
    lo = _sec(sections, "lo", np.uint8, rows * kpad)
    nib = _sec(sections, "nib", np.uint8, rows * kpad // 2)
    ptr = _sec(sections, "esc.ptr", np.uint32, rows + 1)
    col = _sec(sections, "esc.col", np.uint16 if col_bits == 16 else np.uint32, n_esc)
    val = _sec(sections, "esc.val", np.uint16, n_esc)
    erow = check_layout(base, rows, cols, lo.reshape(rows, kpad), nib.reshape(rows, kpad // 2), ptr, col, val)
    return Checked(base, kpad, col_bits, lo, nib, ptr, col, val, erow)


def unpack_nibbles(nib: np.ndarray, rows: int, kpad: int) -> np.ndarray:
    """Packed nibble bytes uint8 [rows*kpad/2] -> nibbles uint8 [rows, kpad] in column order."""
    nib_b = nib.reshape(rows, kpad // 2)
    out = np.empty((rows, kpad), np.uint8)
    order = nibble_order(kpad)
    out[:, order[0::2]] = nib_b & 0x0F
    out[:, order[1::2]] = nib_b >> 4
    return out


def check_layout(base: int, rows: int, cols: int, lo: np.ndarray, nib: np.ndarray, ptr: np.ndarray,
                 col: np.ndarray, val: np.ndarray, m2: np.ndarray | None = None) -> np.ndarray:
    """Check that a fixed layout is the encoder's (canonical), so that every decoder (numpy, the
    rows / GEMV / tiled / mma kernels, which add ``value - placeholder`` per listed escape) gives
    the same weights. lo: uint8 [rows, kpad]; nib: packed nibble bytes uint8 [rows, kpad/2];
    ptr: [rows+1] ints; col, val: [E] ints (any integer dtype: values are checked, not cast).
    Returns the row of each escape, int64 [E]. Works on the packed planes (a few passes over the
    nibble bytes, no unpacking). Raises CorruptDataError naming the field:

    - ``esc.ptr``: starts at 0, ends at E, never decreases;
    - ``esc.col``: every column < cols, strictly increasing within a row (sorted, no duplicate);
    - ``esc.val``: 16-bit values whose high byte is outside the window [base, base+6] (a value
      inside it has a nibble and is never an escape);
    - ``nib``: nibble ``sign|7`` exactly at the escapes (sign: the value's), 0 in the padding;
    - ``lo``: the value's low byte at each escape, 0 in the padding;
    - ``m2`` (codec fixed16's plane uint8 [rows, kpad/4], when given): 0 in the padding.
    """
    ptr = np.asarray(ptr).astype(np.int64)
    n_esc = int(col.size)
    steps = np.diff(ptr)
    if ptr.size != rows + 1 or ptr[0] != 0 or ptr[-1] != n_esc or np.any(steps < 0):
        raise CorruptDataError("codec fixed: field esc.ptr: escape row pointer is not a CSR index of "
                               f"{n_esc} escapes over {rows} rows")
    if val.size != n_esc:
        raise CorruptDataError(f"codec fixed: field esc.val: {val.size} values for {n_esc} escapes")
    erow = np.repeat(np.arange(rows, dtype=np.int64), steps)
    kpad = lo.shape[1] if lo.ndim == 2 else padded_cols(cols)
    failed = _escape_checks_native(lo, nib, erow, col, val, kpad, cols, base)
    if failed is None:
        failed = _escape_checks_numpy(lo, nib, erow, col, val, cols, base)
    for bit, msg in ((1, f"field esc.col: escape column out of range [0, {cols})"),
                     (2, "field esc.col: escape columns not strictly increasing within a row (unsorted or duplicate)"),
                     (4, "field esc.val: an escape value lies inside the window (it has a nibble)"),
                     (64, "field esc.val: escape value outside 16 bits")):
        if failed & bit:
            raise CorruptDataError(f"codec fixed: {msg}")
    planes = _plane_checks_native(lo, nib, rows, cols, kpad, m2)
    if planes is None:
        sevens = None
        padding_ok = not any(np.any(_nibble_at(nib, slice(None), p)) or np.any(lo[:, p])
                             for p in range(cols, kpad))  # at most 15 padding columns
        m2_ok = m2 is None or not any(np.any(_m2_at(m2, slice(None), p)) for p in range(cols, kpad))
    else:
        sevens, padding_ok, m2_ok = planes
    if not padding_ok:
        raise CorruptDataError("codec fixed: field nib/lo: padding columns are not zero")
    if not m2_ok:
        raise CorruptDataError("codec fixed: field m2: padding columns are not zero")
    if failed & 8:
        raise CorruptDataError("codec fixed: field nib: an escape's nibble is not sign|7 of its value")
    if failed & 16:
        raise CorruptDataError("codec fixed: field lo: an escape's low byte is not its value's")
    if sevens is None:
        sevens = _escape_nibbles(nib)
    if sevens != n_esc:  # all at escapes (checked above, escapes unique): so none elsewhere
        raise CorruptDataError("codec fixed: field nib: escape nibble (7) where no escape is listed")
    return erow


#: records from this many escapes on are checked by the C extension (threads), when present
_NATIVE_MIN_ESCAPES = 1


def _plane_checks_native(lo, nib, rows: int, cols: int, kpad: int, m2=None):
    """(escape nibbles, lo and nib padding zero, m2 padding zero) of the planes from the C
    extension's one threaded pass, or None without it (then numpy: :func:`_escape_nibbles` and
    the padding columns)."""
    from .. import native

    e = native.ext()
    if e is None or lo.dtype != np.uint8 or nib.dtype != np.uint8 or (m2 is not None and m2.dtype != np.uint8):
        return None
    c = np.ascontiguousarray
    return e.fixed_plane_checks(c(lo), c(nib), rows, cols, kpad, 0 if rows * kpad >= native.PARALLEL_MIN else 1,
                                None if m2 is None else c(m2))


def _m2_at(m2: np.ndarray, r, c):
    """codec fixed16's m2 fields of plane m2 [rows, kpad/4] at rows ``r`` and columns ``c``
    (column 16w+4k+q: bits 2k of byte 4w+q)."""
    w, f = c // 16, c % 16
    return (m2[r, 4 * w + f % 4] >> (2 * (f // 4))) & 3


def _escape_checks_native(lo, nib, erow, col, val, kpad: int, cols: int, base: int) -> int | None:
    """:func:`_escape_checks_numpy`'s mask from the C extension (one threaded pass), or None where
    it does not apply (few escapes, no extension, other dtypes)."""
    if (erow.size < _NATIVE_MIN_ESCAPES or val.dtype != np.uint16 or col.dtype not in (np.uint16, np.uint32)
            or lo.dtype != np.uint8 or nib.dtype != np.uint8 or kpad < 16):
        return None
    from .. import native

    e = native.ext()
    if e is None:
        return None
    return e.fixed_check_escapes(np.ascontiguousarray(lo).reshape(-1), np.ascontiguousarray(nib).reshape(-1), erow,
                                 np.ascontiguousarray(col), np.ascontiguousarray(val), kpad, cols, base,
                                 native.threads())


def _escape_checks_numpy(lo, nib, erow, col, val, cols: int, base: int) -> int:
    """Bit mask of the per-escape checks that fail (the reference of the C extension's
    fixed_check_escapes): 1 a column >= cols, 2 columns not strictly increasing within a row,
    4 a value inside the window, 8 a nibble that is not sign|7, 16 a low byte that is not the
    value's, 64 a value outside 16 bits. lo: [rows, kpad]; nib: [rows, kpad/2]."""
    c = np.asarray(col).astype(np.int64)
    v = np.asarray(val).astype(np.int64)
    n = c.size
    if n and (int(c.min()) < 0 or int(c.max()) >= cols):
        return 1
    if n and (int(v.min()) < 0 or int(v.max()) > 0xFFFF):
        return 64
    failed = 0
    if n > 1 and np.any((np.diff(c) <= 0) & (erow[1:] == erow[:-1])):
        failed |= 2
    d = ((v >> 8) & 0x7F) - base
    if np.any((d >= 0) & (d <= 6)):
        failed |= 4
    if np.any(_nibble_at(nib, erow, c) != ((v >> 15) << 3 | ESCAPE_D)):
        failed |= 8
    if np.any(lo[erow, c] != (v & 0xFF)):
        failed |= 16
    return failed


#: escape nibbles (7 in the low 3 bits) in each possible nibble byte
_SEVENS = np.array([((b & 0x07) == 0x07) + ((b & 0x70) == 0x70) for b in range(256)], dtype=np.int64)
#: planes from this size on are counted by the C extension's threaded byte histogram
_HISTOGRAM_MIN_BYTES = 1 << 24


def _escape_nibbles(nib: np.ndarray) -> int:
    """How many nibbles of the packed nibble bytes are escapes (low 3 bits 7). A large plane (an
    MoE layer's experts: ~0.5 GB) goes through the C extension's threaded byte histogram, where
    numpy's two passes with temporaries took ~0.6 s; else numpy."""
    flat = nib.reshape(-1)
    if flat.size >= _HISTOGRAM_MIN_BYTES:
        from .. import native

        if native.available():
            block = min(1 << 22, -(-flat.size // (4 * max(1, native.threads()))))  # the C counts take <= 2^24
            counts = native.chunk_histograms(np.ascontiguousarray(flat), block)
            return int(counts.sum(axis=0) @ _SEVENS)
    return int(np.count_nonzero((flat & 0x07) == 0x07) + np.count_nonzero((flat & 0x70) == 0x70))


def _nibble_at(nib: np.ndarray, r, c):
    """Nibbles of packed bytes nib [rows, kpad/2] at rows ``r`` and columns ``c`` (see the
    module docstring: column 8i+q+4h is nibble h of byte 4i+q)."""
    i, j = c // 8, c % 8
    return (nib[r, 4 * i + j % 4] >> (4 * (j // 4))) & 0x0F


def _check_params(params: dict, rows: int, cols: int) -> tuple[int, int, int, int]:
    try:
        base, kpad = params["base"], params["kpad"]
        n_esc, col_bits = params["n_escapes"], params["col_bits"]
    except (KeyError, TypeError):
        raise CorruptDataError("codec fixed: params need base, kpad, n_escapes, col_bits") from None
    for k, x in (("base", base), ("kpad", kpad), ("n_escapes", n_esc), ("col_bits", col_bits)):
        if type(x) is not int or x < 0:
            raise CorruptDataError(f"codec fixed: field params.{k} must be a non-negative integer")
    if base > MAX_BASE:
        raise CorruptDataError(f"codec fixed: field params.base {base} > {MAX_BASE}")
    if kpad != padded_cols(cols):
        raise CorruptDataError(f"codec fixed: field params.kpad {kpad} is not {padded_cols(cols)} for {cols} columns")
    if col_bits != (16 if cols <= 0x10000 else 32):
        raise CorruptDataError(f"codec fixed: field params.col_bits {col_bits} is not the encoder's for {cols} columns")
    if n_esc > rows * cols:
        raise CorruptDataError(f"codec fixed: field params.n_escapes {n_esc} > the {rows}x{cols} weights")
    return base, kpad, n_esc, col_bits


def _sec(sections: dict, name: str, dtype, size: int) -> np.ndarray:
    arr = sections.get(name)
    if arr is None or arr.dtype != np.dtype(dtype) or arr.ndim != 1 or arr.size != size:
        got = "missing" if arr is None else f"{arr.dtype}[{arr.size}]"
        raise CorruptDataError(f"codec fixed: section '{name}' must be {np.dtype(dtype).name}[{size}], got {got}")
    return arr


def reference_decode_value(lo: int, nibble: int, base: int) -> int:
    """The spec for one non-escaped value, in plain Python: bf16 bits from lo byte and nibble."""
    sign, d = nibble >> 3, nibble & 7
    return (((sign << 7) | (base + d)) << 8) | lo


def reference_encode(bits: list[int], rows: int, cols: int) -> dict:
    """Pure-Python encoder of the spec (tiny inputs only; the numpy encoder must match it)."""
    kpad = padded_cols(cols)
    counts = [0] * 128
    for b in bits:
        counts[(b >> 8) & 0x7F] += 1
    base = max(range(MAX_BASE + 1), key=lambda s: (sum(counts[s:s + 7]), -s))
    lo, nib = bytearray(rows * kpad), bytearray(rows * kpad // 2)
    ptr, col, val = [0], [], []
    for r in range(rows):
        for c in range(kpad):
            v = bits[r * cols + c] if c < cols else 0
            d = ((v >> 8) & 0x7F) - base if c < cols else 0
            sign = v >> 15
            if not 0 <= d <= 6:
                d = ESCAPE_D
                col.append(c)
                val.append(v)
            lo[r * kpad + c] = v & 0xFF
            i, j = divmod(c, 8)
            byte = r * kpad // 2 + 4 * i + (j % 4)
            nib[byte] |= ((sign << 3) | d) << (4 * (j // 4))
        ptr.append(len(col))
    return {"base": base, "kpad": kpad, "lo": bytes(lo), "nib": bytes(nib), "ptr": ptr,
            "col": col, "val": val}


class FixedCodec(Codec):
    """Fixed-rate lossless BF16 (12 bits/weight + escapes), the layout the fused kernels read."""

    id = "fixed"

    def encode(self, array: np.ndarray, dtype: str, **options) -> EncodedTensor:
        if dtype != "BF16":
            raise UnsupportedError(f"codec fixed codes BF16 tensors only, got {dtype}")
        bits = np.ascontiguousarray(array).reshape(-1).view(np.uint16)
        rows, cols = view_2d(tuple(array.shape))
        params, sections = encode_bits(bits, rows, cols)
        return EncodedTensor(self.id, dtype, tuple(array.shape), params, sections,
                             info={"escape_fraction": params["n_escapes"] / max(1, bits.size)})

    def decode(self, record: EncodedTensor, out: np.ndarray | None = None) -> np.ndarray:
        """out: see Codec.decode; the C decoder writes straight into it (the numpy one, without
        the extension, in its last step after padded [rows, kpad] temporaries)."""
        if record.dtype != "BF16":
            raise CorruptDataError(f"codec fixed: dtype must be BF16, got {record.dtype}")
        rows, cols = view_2d(tuple(record.shape))
        bits = decode_bits(record.params, record.sections, rows, cols, out=out)
        return bits.reshape(record.shape)


register(FixedCodec())
