"""Golden bytes of a tiny format-version-2 file (an F32 tensor whose low 16 bits are one joint
rANS plane), and the version rules: a file says the lowest version its records need.

Regenerate (only together with a format change): WCODEC_REGEN_GOLDEN=1 pytest tests/format
"""

from __future__ import annotations

import os
import zlib
from pathlib import Path

import numpy as np
import pytest

from wcodec.codecs import encode_tensor
from wcodec.errors import CorruptDataError, FormatError
from wcodec.format import Reader, Writer, spec

GOLDEN = Path(__file__).resolve().parents[1] / "golden" / "tiny_float_joint_v2.wcodec"


def _tensor() -> np.ndarray:
    rng = np.random.default_rng(2)
    a = rng.standard_normal((16, 128)).astype(np.float32)
    a[:12] = a[:12].astype(np.float16).astype(np.float32)  # low 13 bits zero: what the plane exploits
    return a


def _write(path, low_joint=True):
    a = _tensor()
    rec = encode_tensor(a, "F32", codec="float", chunk_steps=64, low_joint=low_joint)
    with Writer(path, {"name": "tiny-v2"}) as w:
        w.add_record("w", rec, zlib.crc32(a.tobytes()))
    return rec


def test_golden_v2_bytes(tmp_path):
    out = tmp_path / "v2.wcodec"
    rec = _write(out)
    assert "low_joint" in rec.params  # the test pins a joint plane, not the v1 fallback
    if os.environ.get("WCODEC_REGEN_GOLDEN"):
        GOLDEN.write_bytes(out.read_bytes())
    assert out.read_bytes() == GOLDEN.read_bytes()


def test_golden_v2_reads_back():
    data = GOLDEN.read_bytes()
    assert int.from_bytes(data[8:12], "little") == 2
    with Reader(GOLDEN) as r:
        assert np.array_equal(r.get_numpy("w").view(np.uint32), _tensor().view(np.uint32))


def test_without_joint_plane_file_stays_v1(tmp_path):
    _write(tmp_path / "v1.wcodec", low_joint=False)
    assert int.from_bytes((tmp_path / "v1.wcodec").read_bytes()[8:12], "little") == 1


def _patch_version(data: bytes, preamble: int | None, header: int | None) -> bytes:
    b = bytearray(data)
    h_off = int.from_bytes(b[16:24], "little")
    raw = bytes(b[h_off:])
    if header is not None:
        raw = raw.replace(b'"format_version":2', f'"format_version":{header}'.encode())
    out = bytes(b[:h_off]) + raw
    pre = bytearray(out[:64])
    pre[24:32] = len(raw).to_bytes(8, "little")
    pre[32:36] = zlib.crc32(raw).to_bytes(4, "little")
    if preamble is not None:
        pre[8:12] = preamble.to_bytes(4, "little")
    return bytes(pre) + out[64:]


def test_v2_record_in_v1_file_rejected(tmp_path):
    p = tmp_path / "bad.wcodec"
    p.write_bytes(_patch_version(GOLDEN.read_bytes(), 1, 1))
    with pytest.raises(CorruptDataError, match="needs format version 2"):
        Reader(p)


def test_header_version_must_match_preamble(tmp_path):
    p = tmp_path / "bad.wcodec"
    p.write_bytes(_patch_version(GOLDEN.read_bytes(), None, 1))
    with pytest.raises(FormatError, match="does not match the preamble"):
        Reader(p)
    assert spec.VERSIONS == (1, 2)


GOLDEN_RAW = GOLDEN.with_name("tiny_float_joint_v2_raw.wcodec")


def _tensor_raw() -> np.ndarray:
    """Two chunks of fp16 rows (coded), then three of uniform low bits (raw chunks, flat_raw)."""
    rng = np.random.default_rng(3)
    a = rng.standard_normal((40, 256)).astype(np.float32)
    a[:16] = a[:16].astype(np.float16).astype(np.float32)
    return a


def test_golden_v2_raw_chunks_bytes(tmp_path):
    out = tmp_path / "v2raw.wcodec"
    a = _tensor_raw()
    rec = encode_tensor(a, "F32", codec="float", chunk_steps=64, tables=1, low_joint=True)
    assert rec.params["low_joint"]["flat_raw"] == 1 and rec.sections["low16.states"].size == 2 * 32
    with Writer(out, {"name": "tiny-v2-raw"}) as w:
        w.add_record("w", rec, zlib.crc32(a.tobytes()))
    if os.environ.get("WCODEC_REGEN_GOLDEN"):
        GOLDEN_RAW.write_bytes(out.read_bytes())
    assert out.read_bytes() == GOLDEN_RAW.read_bytes()


def test_golden_v2_raw_chunks_read_back():
    assert int.from_bytes(GOLDEN_RAW.read_bytes()[8:12], "little") == 2
    with Reader(GOLDEN_RAW) as r:
        assert np.array_equal(r.get_numpy("w").view(np.uint32), _tensor_raw().view(np.uint32))
