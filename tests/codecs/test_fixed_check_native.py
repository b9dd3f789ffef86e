"""Codec "fixed": the C extension's per-escape checks (records with many escapes, e.g. an MoE
layer's experts) give the numpy reference's verdict on canonical records and on each kind of
corruption, and check_layout raises the same message whichever path ran."""

from __future__ import annotations

import numpy as np
import pytest

from wcodec import native
from wcodec.codecs import encode_tensor, fixed as F
from wcodec.errors import CorruptDataError

pytestmark = pytest.mark.skipif(native.ext() is None, reason="the C extension is not built")


@pytest.fixture(scope="module")
def rec():
    """40 x 1032 bf16 (kpad 1040: padding columns) of random bit patterns: ~95 % escapes, more
    than _NATIVE_MIN_ESCAPES (NaN payloads, infinities and subnormals included)."""
    bits = np.random.default_rng(1).integers(0, 1 << 16, size=(40, 1032), dtype=np.uint16)
    r = encode_tensor(bits, "BF16", codec="fixed")
    assert r.params["n_escapes"] >= F._NATIVE_MIN_ESCAPES
    return r


def _planes(rec, **changes):
    s = {k: v.copy() for k, v in rec.sections.items()}
    s.update(changes)
    rows, kpad = rec.shape[0], rec.params["kpad"]
    return (s["lo"].reshape(rows, kpad), s["nib"].reshape(rows, kpad // 2), s["esc.ptr"], s["esc.col"],
            s["esc.val"])


def _both(rec, **changes):
    lo, nib, ptr, col, val = _planes(rec, **changes)
    erow = np.repeat(np.arange(rec.shape[0], dtype=np.int64), np.diff(ptr.astype(np.int64)))
    args = (lo, nib, erow, col, val)
    c = F._escape_checks_native(*args, rec.params["kpad"], rec.shape[1], rec.params["base"])
    n = F._escape_checks_numpy(*args, rec.shape[1], rec.params["base"])
    return c, n


def corruptions(rec):
    col, val, lo, nib = (rec.sections[k] for k in ("esc.col", "esc.val", "lo", "nib"))
    k = col.size // 2
    out = {}
    c = col.copy(); c[k] = rec.shape[1] + 3  # noqa: E702
    out["out of range"] = dict(col=c)
    c = col.copy(); c[k], c[k + 1] = c[k + 1], c[k]  # noqa: E702
    out["not strictly increasing"] = dict(col=c)
    v = val.copy(); v[k] = (v[k] & 0x80FF) | ((rec.params["base"] + 2) << 8)  # noqa: E702
    out["inside the window"] = dict(val=v)
    v = val.copy(); v[k] ^= 0x8000  # noqa: E702
    out["nibble is not sign"] = dict(val=v)
    v = val.copy(); v[k] ^= 0x0001  # noqa: E702
    out["low byte"] = dict(val=v)
    return {m: {{"col": "esc.col", "val": "esc.val"}[f]: a for f, a in ch.items()} for m, ch in out.items()}


def _first(mask):
    return next(bit for bit in (1, 2, 4, 64, 8, 16) if mask & bit)


def test_native_matches_numpy_on_a_canonical_record(rec):
    c, n = _both(rec)
    assert c == n == 0
    F.check_record(rec.params, rec.sections, rec.shape[0], rec.shape[1])


def test_native_matches_numpy_on_each_corruption(rec):
    for msg, change in corruptions(rec).items():
        c, n = _both(rec, **change)
        # numpy stops at a column out of range (its gathers need valid columns); the first
        # failure in check_layout's order is the same
        assert c is not None and c and _first(c) == _first(n), msg
        sections = {**rec.sections, **change}
        with pytest.raises(CorruptDataError, match=msg):
            F.check_record(rec.params, sections, rec.shape[0], rec.shape[1])
        F_min = F._NATIVE_MIN_ESCAPES
        try:  # the numpy path raises the same message
            F._NATIVE_MIN_ESCAPES = 1 << 62
            with pytest.raises(CorruptDataError, match=msg):
                F.check_record(rec.params, sections, rec.shape[0], rec.shape[1])
        finally:
            F._NATIVE_MIN_ESCAPES = F_min


def test_large_nibble_planes_count_escapes_by_histogram(monkeypatch):
    rng = np.random.default_rng(2)
    nib = rng.integers(0, 256, size=(1 << 20) + 37, dtype=np.uint8)
    want = int(np.count_nonzero((nib & 7) == 7) + np.count_nonzero((nib & 0x70) == 0x70))
    monkeypatch.setattr(F, "_HISTOGRAM_MIN_BYTES", 1 << 16)
    assert F._escape_nibbles(nib) == want
