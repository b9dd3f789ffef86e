"""Codec "fixed16": fixed-rate lossless fp16 for compute (decoded inside matmul kernels).

An fp16 value ``v`` (sign 1, exponent 5, mantissa 10 bits) is split into its low byte
``lo = v & 0xFF`` (mantissa bits 0-7, raw), its top two mantissa bits ``m2 = (v >> 8) & 3``
(a 2-bit plane) and a 4-bit code ``nibble = sign << 3 | d`` with ``d = exponent - base`` when
``0 <= d <= 6``: a window of 7 exponents chosen per tensor (the one holding the most values),
which holds 92-98 % of real weights cast to fp16 (benchmarks/fp16_window.py). Any other value
is an *escape*: nibble ``sign << 3 | 7``, its full 16 bits in a sparse list (row pointer,
column, value) as in codec "fixed". Cost: 14 bits per weight plus 32 bits per escape.

Why not codec "fixed" on fp16 bits: its 7-value window of the high byte spans under 2 fp16
exponents (the byte holds 2 mantissa bits), 44-52 % coverage. This layout keeps "fixed"'s
planes (``lo``, ``nib``: same order, same SWAR rebuild) and adds the ``m2`` plane, ordered so
that one shift and one mask spread 4 of its fields to the byte lanes of a nibble word.

Storage (rows = shape[0], cols = the rest, ``kpad`` = cols rounded up to 16; padding 0):
- ``lo`` u8[rows*kpad], ``nib`` u8[rows*kpad/2]: exactly codec "fixed"'s planes.
- ``m2`` u8[rows*kpad/4]: per row, u32 word j (bytes 4j..4j+3) covers columns 16j..16j+15;
  byte 4j+q holds in bits 2k..2k+1 the m2 of column 16j+4k+q (k = 0..3), so for the 8-column
  group 2j+g the nibble lanes of nibble half h read ``(word >> (4g + 2h)) & 0x03030303``.
- ``esc.ptr`` u32[rows+1], ``esc.col`` u16/u32 (``col_bits``), ``esc.val`` u16, as "fixed".
params ``{"base": 0..23, "kpad", "n_escapes", "col_bits"}``; an escape's placeholder exponent
is ``base + 7 <= 30`` (finite). Decoding is exact for every bit pattern (NaN payloads,
infinities, -0.0, subnormals). The encoder refuses (UnsupportedError) a tensor that would take
>= MAX_BITS_PER_WEIGHT: the caller keeps it in another codec or dense.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from ..errors import CorruptDataError, UnsupportedError
from .base import Codec, EncodedTensor, register, view_2d
from .fixed import _check_params, _m2_at, _sec, check_layout, padded_cols, unpack_nibbles
from .fixed import encode_bits_numpy as _fixed_encode

#: largest base: the escape placeholder's exponent base + 7 must stay below 31 (inf/NaN)
MAX_BASE = 23
#: the encoder refuses tensors that would cost this much or more (dense fp16 is 16)
MAX_BITS_PER_WEIGHT = 15.5


def choose_base(exp_counts: np.ndarray) -> int:
    """The window start (0..MAX_BASE) holding the most values; exp_counts: [32] int counts."""
    c = np.concatenate([[0], np.cumsum(exp_counts[:MAX_BASE + 7], dtype=np.int64)])
    return int(np.argmax(c[7:MAX_BASE + 8] - c[:MAX_BASE + 1]))


def _as_fixed_bits(v: np.ndarray) -> np.ndarray:
    """fp16 bits -> the 16-bit words whose codec "fixed" fields are this layout's: bit 15 the
    sign, bits 8-14 the exponent (in "fixed"'s 7-bit window field), bits 0-7 the low byte.
    Exponents 30 and 31 (never in a window, base <= MAX_BASE) become field 127, which no window
    of "fixed" reaches either: its window choice then never starts above MAX_BASE and equals
    :func:`choose_base` (both take the first maximum)."""
    v = v.astype(np.uint16)
    e = (v >> 10) & 0x1F
    return (v & 0x80FF) | (np.where(e < 30, e, 127).astype(np.uint16) << 8)


def record_bits(rows: int, cols: int, n_escapes: int) -> int:
    """Stored bits of a record: the three planes, the row pointer and the escapes."""
    return rows * padded_cols(cols) * 14 + 32 * (rows + 1) + 32 * n_escapes


def encode_bits(bits: np.ndarray, rows: int, cols: int,
                max_bits: float = MAX_BITS_PER_WEIGHT) -> tuple[dict, dict]:
    """bits: uint16 [rows*cols] fp16 bit patterns -> (params, sections). Never modifies bits.
    The C extension's encoder where built (``native.fixed_encode(fp16=True)``; 4096x4096 on the
    2-vCPU VM, 40 MB/s in numpy), else :func:`encode_bits_numpy`; the same bytes.

    Raises UnsupportedError when the record would take >= ``max_bits`` bits per weight."""
    from .. import native

    if not native.available():
        return encode_bits_numpy(bits, rows, cols, max_bits)
    bits = np.ascontiguousarray(bits, dtype=np.uint16).reshape(-1)
    counts = native.head_histogram(bits, 10, 0x1F) if bits.size else np.zeros(32, np.int64)
    base = choose_base(counts) if bits.size else 0
    _check_cost(rows, cols, base, int(bits.size - counts[base:base + 7].sum()), max_bits)
    kpad = padded_cols(cols)
    lo, nib, ptr, col, val, m2 = native.fixed_encode(bits, rows, cols, kpad, base, fp16=True)
    params = {"base": base, "kpad": kpad, "n_escapes": int(val.size), "col_bits": 16 if cols <= 0x10000 else 32}
    return params, {"lo": lo, "nib": nib, "esc.ptr": ptr, "esc.col": col, "esc.val": val, "m2": m2}


def _check_cost(rows: int, cols: int, base: int, n_esc: int, max_bits: float) -> None:
    n = rows * cols
    cost = record_bits(rows, cols, n_esc) / max(1, n)
    if cost >= max_bits:
        raise UnsupportedError(f"codec fixed16 would not save: {cost:.2f} bits/weight (window of exponents "
                               f"{base}..{base + 6} holds {100 * (1 - n_esc / max(1, n)):.2f} %), the limit "
                               f"is {max_bits}")


def encode_bits_numpy(bits: np.ndarray, rows: int, cols: int,
                      max_bits: float = MAX_BITS_PER_WEIGHT) -> tuple[dict, dict]:
    """:func:`encode_bits` in numpy (the reference of the C encoder)."""
    v = bits.reshape(rows, cols)
    exp = (v >> 10) & 0x1F
    base = choose_base(np.bincount(exp.reshape(-1), minlength=32)) if v.size else 0
    in_window = (exp >= base) & (exp <= base + 6)
    _check_cost(rows, cols, base, int(v.size - np.count_nonzero(in_window)), max_bits)
    # "fixed"'s encoder on the remapped words builds lo, nib and the escape list; its window (the
    # most values in 7 consecutive 7-bit fields) is ours, with ties to the lower start as ours
    mapped = _as_fixed_bits(v).reshape(-1)
    params, sections = _fixed_encode(mapped, rows, cols)
    kpad = params["kpad"]
    m2 = np.zeros((rows, kpad), np.uint8)
    m2[:, :cols] = (v >> 8) & 3
    sections["m2"] = pack_m2(m2)
    sections["esc.val"] = v[np.repeat(np.arange(rows), np.diff(sections["esc.ptr"].astype(np.int64))),
                            sections["esc.col"].astype(np.int64)].astype(np.uint16)
    return params, sections


def pack_m2(m2: np.ndarray) -> np.ndarray:
    """m2 values uint8 [rows, kpad] (0..3, column order) -> the ``m2`` section uint8 [rows*kpad/4]."""
    rows, kpad = m2.shape
    f = m2.reshape(rows, kpad // 16, 4, 4)  # [row, word j, k, q]: column 16j + 4k + q
    b = f[:, :, 0, :] | (f[:, :, 1, :] << 2) | (f[:, :, 2, :] << 4) | (f[:, :, 3, :] << 6)
    return b.astype(np.uint8).reshape(-1)


def unpack_m2(sec: np.ndarray, rows: int, kpad: int) -> np.ndarray:
    """The ``m2`` section uint8 [rows*kpad/4] -> m2 values uint8 [rows, kpad] in column order."""
    b = sec.reshape(rows, kpad // 16, 1, 4)
    f = (b >> (2 * np.arange(4, dtype=np.uint8))[None, None, :, None]) & 3
    return f.reshape(rows, kpad)


class Checked(NamedTuple):
    """A canonical record's fields (see :func:`check_record`); erow: int64 [n_escapes]."""

    base: int
    kpad: int
    col_bits: int
    lo: np.ndarray
    nib: np.ndarray
    m2: np.ndarray
    ptr: np.ndarray
    col: np.ndarray
    val: np.ndarray
    erow: np.ndarray


def check_record(params: dict, sections: dict, rows: int, cols: int) -> Checked:
    """The one validation of a codec "fixed16" record (numpy decode, GPU upload, module state
    dicts): params and section sizes (codec "fixed"'s checks, base <= MAX_BASE, the ``m2``
    section), then :func:`check_layout16`. Raises CorruptDataError naming the field."""
    with _as_fixed16():
        base, kpad, n_esc, col_bits = _check_params(params, rows, cols)
        if base > MAX_BASE:
            raise CorruptDataError(f"codec fixed: field params.base {base} > {MAX_BASE}")
        lo = _sec(sections, "lo", np.uint8, rows * kpad)
        nib = _sec(sections, "nib", np.uint8, rows * kpad // 2)
        m2 = _sec(sections, "m2", np.uint8, rows * kpad // 4)
        ptr = _sec(sections, "esc.ptr", np.uint32, rows + 1)
        col = _sec(sections, "esc.col", np.uint16 if col_bits == 16 else np.uint32, n_esc)
        val = _sec(sections, "esc.val", np.uint16, n_esc)
    erow = check_layout16(base, rows, cols, lo.reshape(rows, kpad), nib.reshape(rows, kpad // 2),
                          m2.reshape(rows, kpad // 4), ptr, col, val)
    return Checked(base, kpad, col_bits, lo, nib, m2, ptr, col, val, erow)


class _as_fixed16:
    """Context manager: codec "fixed"'s CorruptDataError messages (its checks run here on this
    layout's shared fields) name codec "fixed16"."""

    def __enter__(self):
        return self

    def __exit__(self, kind, e, tb):
        if isinstance(e, CorruptDataError):
            raise CorruptDataError(str(e).replace("codec fixed:", "codec fixed16:")) from None
        return False


def check_layout16(base: int, rows: int, cols: int, lo: np.ndarray, nib: np.ndarray, m2: np.ndarray,
                   ptr: np.ndarray, col: np.ndarray, val: np.ndarray) -> np.ndarray:
    """Check that a fixed16 layout is the encoder's (canonical), so that every decoder gives the
    same weights. lo uint8 [rows, kpad], nib uint8 [rows, kpad/2], m2 uint8 [rows, kpad/4],
    ptr [rows+1], col, val [E] (any integer dtypes: values are checked, not cast). Returns the
    row of each escape, int64 [E]. Raises CorruptDataError naming the field: codec "fixed"'s
    checks (``codecs.fixed.check_layout``: CSR pointer, sorted columns < cols, escape nibbles
    exactly at the escapes, low bytes, zero padding) on the values with their exponent in
    "fixed"'s window field, so that an escape whose exponent lies in [base, base+6] is refused;
    then 16-bit values, the escapes' m2 fields their values' and zero m2 padding."""
    v = np.asarray(val).astype(np.int64)
    if v.size and (int(v.min()) < 0 or int(v.max()) > 0xFFFF):
        raise CorruptDataError("codec fixed16: field esc.val: escape value outside 16 bits")
    with _as_fixed16():
        erow = check_layout(base, rows, cols, lo, nib, ptr, col, _as_fixed_bits(v) if v.size else v, m2=m2)
    if v.size and np.any(_m2_at(m2, erow, np.asarray(col).astype(np.int64)) != ((v >> 8) & 3)):
        raise CorruptDataError("codec fixed16: field m2: an escape's m2 is not its value's")
    return erow


def decode_bits(params: dict, sections: dict, rows: int, cols: int, out: np.ndarray | None = None) -> np.ndarray:
    """(params, sections) -> uint16 [rows*cols] fp16 bits, written into ``out`` (writable
    C-contiguous uint16 [rows*cols]) when given. Raises CorruptDataError naming the field for a
    record that is not canonical (:func:`check_record`), before ``out`` is touched. The C
    extension's decoder where built, else numpy (the reference: tests/codecs/test_fixed_native.py)."""
    rec = check_record(params, sections, rows, cols)
    from .. import native

    if native.available():  # the C decoder of codec fixed with this layout's m2 plane
        dst = out if out is not None else np.empty(rows * cols, np.uint16)
        native.fixed_decode(rec.lo, rec.nib, rec.ptr, rec.col, rec.val, rows, cols, rec.kpad, rec.base, dst, m2=rec.m2)
        return dst
    nib = unpack_nibbles(rec.nib, rows, rec.kpad).astype(np.uint16)
    m2 = unpack_m2(rec.m2, rows, rec.kpad).astype(np.uint16)
    v = ((nib & 0x08) << 12) | (((nib & 0x07) + rec.base) << 10) | (m2 << 8) | rec.lo.reshape(rows, rec.kpad)
    v[rec.erow, rec.col.astype(np.int64)] = rec.val
    if out is None:
        return np.ascontiguousarray(v[:, :cols]).reshape(-1)
    out.reshape(rows, cols)[...] = v[:, :cols]
    return out


def reference_decode_value(lo: int, nibble: int, m2: int, base: int) -> int:
    """The spec for one non-escaped value, in plain Python: fp16 bits from its three fields."""
    return ((nibble >> 3) << 15) | ((base + (nibble & 7)) << 10) | (m2 << 8) | lo


class Fixed16Codec(Codec):
    """Fixed-rate lossless F16 (14 bits/weight + escapes), the layout the fp16 kernels read."""

    id = "fixed16"

    def encode(self, array: np.ndarray, dtype: str, **options) -> EncodedTensor:
        """Raises UnsupportedError for a dtype other than F16 or a tensor this layout would not
        shrink below MAX_BITS_PER_WEIGHT."""
        if dtype != "F16":
            raise UnsupportedError(f"codec fixed16 codes F16 tensors only, got {dtype}")
        shape = tuple(array.shape)
        params, sections = encode_bits(np.ascontiguousarray(array).view(np.uint16).reshape(-1), *view_2d(shape))
        escaped = params["n_escapes"] / max(1, array.size)
        return EncodedTensor(self.id, dtype, shape, params, sections, info={"escape_fraction": escaped})

    def decode(self, record: EncodedTensor, out: np.ndarray | None = None) -> np.ndarray:
        """out: see Codec.decode; the decoder writes into it."""
        if record.dtype != "F16":
            raise CorruptDataError(f"codec fixed16: dtype must be F16, got {record.dtype}")
        rows, cols = view_2d(tuple(record.shape))
        bits = decode_bits(record.params, record.sections, rows, cols, out=None if out is None else out.view(np.uint16))
        return bits.reshape(record.shape).view(np.float16)


register(Fixed16Codec())
