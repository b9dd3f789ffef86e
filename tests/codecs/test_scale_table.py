"""int8-quant scale tables (docs/CODEC_LAYOUT.md, "int8-quant"): the rate-controlled steps on a log
grid, stored as a table of distinct float32 values + one byte per row; golden bytes of both
layouts (the float32 ``scales`` one pins what every earlier writer wrote); corrupt records.

Regenerate (only together with a format change): WCODEC_REGEN_GOLDEN=1 pytest tests/codecs/test_scale_table.py
"""

from __future__ import annotations

import os
import zlib
from pathlib import Path

import numpy as np
import pytest

from wcodec.codecs import decode_tensor, encode_tensor, lossy
from wcodec.codecs.base import EncodedTensor
from wcodec.codecs.int8 import decode_int8
from wcodec.codecs.quant import checked_scales
from wcodec.errors import CorruptDataError, WcodecError
from wcodec.format import Reader, Writer
from wcodec.format.params import check_params

GOLDEN = Path(__file__).resolve().parents[1] / "golden"


def _w(shape=(40, 96), seed=5):
    rng = np.random.default_rng(seed)
    w = rng.standard_normal(shape).astype(np.float32) * 0.02
    w *= np.exp2(rng.integers(-3, 3, (shape[0], 1))).astype(np.float32)  # rows 1/8x .. 4x
    w[1, 7] = 0.9  # an outlier: that row's step is floored at absmax / 127
    w[2] = 0.0  # an all-zero row (step 1.0)
    return w


def _row_weight(rows, seed=6):
    return np.random.default_rng(seed).random(rows) * 10 + 0.01


def _indices(rec) -> np.ndarray:
    p = rec.params["q"]
    return decode_int8(rec, p).view(np.int8).reshape(p["rows"], p["cols"])


def test_grid_steps_go_into_a_table():
    w = _w()
    rw = _row_weight(w.shape[0])
    rec = encode_tensor(w, "F32", "lossy:qp=36", row_weight=rw)
    exact = encode_tensor(w, "F32", "lossy:qp=36", row_weight=rw, scale_grid=0)
    assert "scales" in exact.sections and "scale_table" not in exact.params
    k = rec.params["scale_table"]
    table, index = rec.sections["scale_table"], rec.sections["scale_index"]
    assert "scales" not in rec.sections and table.dtype == np.float32 and index.dtype == np.uint8
    assert k == table.size == np.unique(table).size and index.size == w.shape[0] and index.max() < k
    s, s0 = checked_scales(rec, w.shape[0]), exact.sections["scales"]
    nz = np.abs(w).max(1) > 0
    # every step on the grid anchored at the tensor's step, within half a grid step of the exact
    # one (or one step up at the floor)
    k2 = np.log2(s[nz].astype(np.float64) / s[nz].max()) * lossy.SCALE_GRID
    assert np.allclose(k2, np.round(k2), atol=1e-4)
    ratio = s[nz] / s0[nz]
    assert np.all(ratio > 2 ** (-0.5 / lossy.SCALE_GRID) - 1e-6) and np.all(ratio < 2 ** (1.0 / lossy.SCALE_GRID) + 1e-6)
    assert s[2] == 1.0
    q = _indices(rec)
    assert np.abs(q.astype(int)).max() <= 127
    # decoded = float32(q) * step, bit for bit; half a step of error at most (plain rounding)
    d = decode_tensor(rec)
    assert np.array_equal(d, (q.astype(np.float32) * s[:, None]).astype(np.float32))
    assert np.all(np.abs(d - w) <= s[:, None] * 0.5001)
    assert rec.nbytes < exact.nbytes


def test_table_record_decodes_as_the_same_steps_in_a_scales_section():
    # the residual plane is untouched: the same record with the expanded float32 scales decodes the same
    for dtype, w in (("F32", _w()), ("BF16", (_w().view(np.uint32) >> 16).astype(np.uint16))):
        rec = encode_tensor(w, dtype, "lossy:snr=24", tile=8)
        assert "scale_table" in rec.params
        s = checked_scales(rec, 40)
        sections = {k: v for k, v in rec.sections.items() if not k.startswith("scale_")}
        plain = EncodedTensor(rec.codec, rec.dtype, rec.shape, {"q": rec.params["q"]}, {**sections, "scales": s})
        assert np.array_equal(decode_tensor(rec), decode_tensor(plain))


def test_no_table_where_it_would_not_save():
    w = np.random.default_rng(2).standard_normal((1, 300)).astype(np.float32)
    rec = encode_tensor(w, "F32", "lossy:qp=30")
    assert "scales" in rec.sections  # one row: a table + index is larger than one float
    plain = encode_tensor(_w(), "F32", "int8")  # absmax scales: the layout every reader reads
    assert "scales" in plain.sections and "scale_table" not in plain.params
    rows = 300
    many = np.random.default_rng(1).standard_normal((rows, 64)).astype(np.float32)
    many *= np.exp2(np.linspace(-20, 20, rows, dtype=np.float32))[:, None]
    rec = encode_tensor(many, "F32", "lossy:snr=150")  # every row at its floor: 300 grid values
    assert "scales" in rec.sections and "scale_table" not in rec.params
    assert np.array_equal(decode_tensor(rec), decode_tensor(rec))


def _golden_write(path, grid):
    w = _w((24, 40), seed=11)
    rec = encode_tensor(w, "F32", "lossy:qp=34", row_weight=_row_weight(24, 12), tile=8, chunk_steps=16,
                        scale_grid=grid)
    with Writer(path, {"name": "tiny-lossy"}) as wr:
        wr.add_record("w", rec, zlib.crc32(decode_tensor(rec).tobytes()))
    return rec


@pytest.mark.parametrize("grid,name", [(16, "tiny_lossy_table_v1.wcodec"), (0, "tiny_lossy_scales_v1.wcodec")])
def test_golden_bytes(tmp_path, grid, name):
    out = tmp_path / name
    rec = _golden_write(out, grid)
    assert ("scale_table" in rec.params) == bool(grid)
    if os.environ.get("WCODEC_REGEN_GOLDEN"):
        (GOLDEN / name).write_bytes(out.read_bytes())
    assert out.read_bytes() == (GOLDEN / name).read_bytes()
    with Reader(GOLDEN / name) as r:
        assert np.array_equal(r.get_numpy("w"), decode_tensor(rec))


def _table_record():
    return encode_tensor(_w(), "F32", "lossy:qp=36", row_weight=_row_weight(40))


def _with(rec, params=None, **sections):
    secs = {**rec.sections, **sections}
    secs = {k: v for k, v in secs.items() if v is not None}
    return EncodedTensor(rec.codec, rec.dtype, rec.shape, rec.params if params is None else params, secs)


def test_corrupt_tables_raise():
    rec = _table_record()
    k = rec.params["scale_table"]
    bad_index = rec.sections["scale_index"].copy()
    bad_index[3] = k
    nan_table = rec.sections["scale_table"].copy()
    nan_table[-1] = np.nan
    q = {"q": rec.params["q"]}
    cases = [
        _with(rec, scale_index=bad_index),  # past the table
        _with(rec, scale_table=nan_table),  # not finite
        _with(rec, scale_table=rec.sections["scale_table"][:-1]),  # fewer entries than params say
        _with(rec, scale_index=rec.sections["scale_index"][:-1]),  # not one per row
        _with(rec, scale_index=rec.sections["scale_index"].astype(np.uint16)),
        _with(rec, scales=checked_scales(rec, 40)),  # both forms
        _with(rec, params=q),  # table sections without the param
        _with(rec, params={**q, "scale_table": 0}),
        _with(rec, params={**q, "scale_table": 257}),
        _with(rec, params={**q, "scale_table": "8"}),
        _with(rec, scale_table=None),
    ]
    for bad in cases:
        with pytest.raises(CorruptDataError):
            check_params(bad.codec, bad.dtype, bad.shape, bad.params)
            decode_tensor(bad)


def test_fuzzed_table_file_raises_only_wcodec_errors(tmp_path):
    path = tmp_path / "t.wcodec"
    rec = _table_record()
    with Writer(path, {}) as wr:
        wr.add_record("w", rec, zlib.crc32(decode_tensor(rec).tobytes()))
    data = path.read_bytes()
    rng = np.random.default_rng(0)
    for i in range(60):
        b = bytearray(data)
        if i % 3 == 0:
            b = b[:int(rng.integers(8, len(b)))]  # truncated
        else:
            for pos in rng.integers(0, len(b), int(rng.integers(1, 8))):
                b[pos] = int(rng.integers(0, 256))
        p = tmp_path / f"f{i}.wcodec"
        p.write_bytes(bytes(b))
        try:
            with Reader(p) as r:
                r.get_numpy("w")
        except WcodecError:
            pass
