"""Codec "fixed": one validation (codecs.fixed.check_record) shared by every consumer. A record
is the encoder's canonical layout or refused with CorruptDataError naming the tensor and the
field, by the numpy decode, the partial decode (get_slice), the GPU loader's CPU fallback and
``gpu.fixed.from_sections`` alike (issue 27: a duplicated escape decoded to three values)."""

from __future__ import annotations

import numpy as np
import pytest

from wcodec.codecs import decode_tensor, encode_tensor, fixed as F
from wcodec.codecs.partial import decode_range
from wcodec.errors import CorruptDataError


def record():
    """6 x 40 bf16 record with escapes: two in row 1 (zeros escape: exponent 0 is outside the window)."""
    rng = np.random.default_rng(0)
    u = (rng.standard_normal((6, 40)) * 0.05).astype(np.float32).view(np.uint32)
    bits = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)
    bits[1, 3] = bits[1, 9] = 0
    bits[4, 39] = 0x8000  # -0.0: an escape with the sign bit
    rec = encode_tensor(bits, "BF16", codec="fixed")
    assert rec.params["n_escapes"] >= 3
    return rec, bits


def _escapes(rec):
    ptr = rec.sections["esc.ptr"].astype(np.int64)
    rows = np.repeat(np.arange(ptr.size - 1), np.diff(ptr))
    return rows, rec.sections["esc.col"].astype(np.int64)


def _set_nibble(rec, r, c, value):
    kpad = rec.params["kpad"]
    nib = rec.sections["nib"].copy()
    i, j = divmod(c, 8)
    byte = r * kpad // 2 + 4 * i + (j % 4)
    shift = 4 * (j // 4)
    nib[byte] = (int(nib[byte]) & (0xFF ^ (0xF << shift))) | (value << shift)
    rec.sections["nib"] = nib


def _dup_first(rec):
    """The first escape listed twice (pointer and count adjusted: a well-formed CSR list)."""
    rows, cols = _escapes(rec)
    r = int(rows[0])
    rec.sections["esc.col"] = np.insert(rec.sections["esc.col"], 0, rec.sections["esc.col"][0])
    rec.sections["esc.val"] = np.insert(rec.sections["esc.val"], 0, np.uint16(0x4000))
    ptr = rec.sections["esc.ptr"].copy()
    ptr[r + 1:] += 1
    rec.sections["esc.ptr"] = ptr
    rec.params["n_escapes"] += 1


def _swap_row1(rec):
    rows, _ = _escapes(rec)
    i = int(np.flatnonzero(rows == 1)[0])
    col = rec.sections["esc.col"].copy()
    val = rec.sections["esc.val"].copy()
    col[[i, i + 1]] = col[[i + 1, i]]
    val[[i, i + 1]] = val[[i + 1, i]]
    rec.sections["esc.col"], rec.sections["esc.val"] = col, val


def _plain_nibble_escape(rec):
    rows, cols = _escapes(rec)
    _set_nibble(rec, int(rows[0]), int(cols[0]), 2)


def _orphan_seven(rec):
    rows, cols = _escapes(rec)
    c = next(c for c in range(40) if c not in set(cols[rows == 0].tolist()))
    _set_nibble(rec, 0, c, 7)


def _sign_mismatch(rec):
    rows, cols = _escapes(rec)
    i = int(np.flatnonzero(rec.sections["esc.val"] == 0x8000)[0])
    _set_nibble(rec, int(rows[i]), int(cols[i]), 7)  # sign 0, the value is -0.0


def _lo_mismatch(rec):
    rows, cols = _escapes(rec)
    lo = rec.sections["lo"].copy()
    lo[int(rows[0]) * rec.params["kpad"] + int(cols[0])] ^= 1
    rec.sections["lo"] = lo


def _value_in_window(rec):
    val = rec.sections["esc.val"].copy()
    val[0] = (rec.params["base"] + 2) << 8  # has a nibble: never an escape
    rec.sections["esc.val"] = val


def _padding(rec):
    lo = rec.sections["lo"].copy()
    lo[rec.params["kpad"] - 1] = 5  # row 0, column 47 of 48 (K = 40)
    rec.sections["lo"] = lo


def _wrong_row(rec):
    """An escape moved to the previous row through the pointer (its nibble stays where it was)."""
    ptr = rec.sections["esc.ptr"].copy()
    ptr[1] += 1 if ptr[1] < ptr[2] else 0
    rec.sections["esc.ptr"] = ptr


def _col_bits(rec):
    rec.params["col_bits"] = 32
    rec.sections["esc.col"] = rec.sections["esc.col"].astype(np.uint32)


MUTATIONS = {
    "duplicate": (_dup_first, "esc.col"),
    "unsorted": (_swap_row1, "esc.col"),
    "plain nibble at an escape": (_plain_nibble_escape, "nib"),
    "7 without an escape": (_orphan_seven, "nib"),
    "escape sign": (_sign_mismatch, "nib"),
    "escape low byte": (_lo_mismatch, "lo"),
    "escape value inside the window": (_value_in_window, "esc.val"),
    "padding": (_padding, "lo"),
    "escape in the wrong row": (_wrong_row, "esc."),
    "col_bits": (_col_bits, "col_bits"),
}


@pytest.mark.parametrize("case", sorted(MUTATIONS))
def test_every_decoder_refuses_a_non_canonical_record(case):
    mutate, field = MUTATIONS[case]
    rec, _ = record()
    mutate(rec)
    with pytest.raises(CorruptDataError, match=f"tensor 'w'.*{field}"):
        decode_tensor(rec, "w")
    with pytest.raises(CorruptDataError, match=f"tensor 'w'.*{field}"):
        decode_range(rec, 0, 40, name="w")  # get_slice's partial decode
    torch = pytest.importorskip("torch")
    from wcodec.gpu import fixed as fx
    from wcodec.gpu.loader import load_records
    with pytest.raises(CorruptDataError, match=f"tensor 'w'.*{field}"):
        fx.from_sections(rec.params, rec.sections, rec.shape, "cpu", name="w")
    with pytest.raises(CorruptDataError, match="tensor 'w'"):
        load_records([("w", rec)], device=torch.device("cpu"))  # the CPU fallback


def test_canonical_record_passes_every_consumer():
    rec, bits = record()
    assert np.array_equal(decode_tensor(rec, "w"), bits)
    assert np.array_equal(decode_range(rec, 41, 90, name="w"), bits.reshape(-1)[41:90])
    c = F.check_record(rec.params, rec.sections, 6, 40)
    assert c.erow.tolist() == sorted(c.erow.tolist()) and c.nib.shape == (6 * 24,)


def test_check_layout_takes_wide_integers_without_casting():
    """Columns and values are checked as given: 65539 must not wrap to column 3 (uint16)."""
    rec, _ = record()
    c = F.check_record(rec.params, rec.sections, 6, 40)
    col = c.col.astype(np.int64)
    col[0] += 65536
    with pytest.raises(CorruptDataError, match="esc.col"):
        F.check_layout(c.base, 6, 40, c.lo.reshape(6, 48), c.nib.reshape(6, 24), c.ptr, col, c.val)
    val = c.val.astype(np.int64)
    val[0] += 1 << 16
    with pytest.raises(CorruptDataError, match="esc.val"):
        F.check_layout(c.base, 6, 40, c.lo.reshape(6, 48), c.nib.reshape(6, 24), c.ptr, c.col, val)
