"""The float codec's format-version-2 option (low_joint): F32 low 16 bits as one joint plane
where it is smaller; bit-exact on the C and numba paths; malformed records rejected."""

from __future__ import annotations

import numpy as np
import pytest

from wcodec import native
from wcodec.codecs import decode_tensor, encode_tensor
from wcodec.errors import CorruptDataError
from wcodec.format import params as P


def _f32(seed=0, rows=40, cols=256, fp16_rows=24):
    rng = np.random.default_rng(seed)
    a = rng.standard_normal((rows, cols)).astype(np.float32) * 0.05
    a[:fp16_rows] = a[:fp16_rows].astype(np.float16).astype(np.float32)
    a.view(np.uint32)[-1, :5] = [0x7FC00001, 0xFF800000, 0x80000000, 0x00000001, 0x7F800000]
    return a


def _enc(a, **kw):
    return encode_tensor(a, "F32", codec="float", chunk_steps=64, low_joint=True, **kw)


def test_roundtrip_both_paths_same_bits():
    a = _f32()
    keep = a.copy()
    rec = _enc(a)
    assert "low_joint" in rec.params and rec.params["low"] == []
    assert not any(k.startswith(("low1.", "low0.")) for k in rec.sections)
    assert np.array_equal(a, keep, equal_nan=True)
    assert np.array_equal(decode_tensor(rec).view(np.uint32), a.view(np.uint32))
    out = np.full(a.size, 0xFFFFFFFF, dtype=np.uint32)  # decode into a dirty buffer
    decode_tensor(rec, out=out.view(np.float32))
    assert np.array_equal(out, a.view(np.uint32).reshape(-1))
    with native.disabled():
        assert np.array_equal(decode_tensor(rec).view(np.uint32), a.view(np.uint32))
        rec2 = _enc(a)
    assert rec.params == rec2.params
    assert all(np.array_equal(rec.sections[k], rec2.sections[k]) for k in rec.sections)


def test_smaller_than_v1_and_kept_only_where_smaller():
    a = _f32()
    v1 = encode_tensor(a, "F32", codec="float", chunk_steps=64)
    v2 = _enc(a)
    size = lambda r: sum(x.nbytes for x in r.sections.values())  # noqa: E731
    assert size(v2) < size(v1)
    # uniform low bits: the joint plane is no smaller, the v1 layout stays
    b = np.random.default_rng(1).standard_normal((40, 256)).astype(np.float32)
    assert "low_joint" not in _enc(b).params
    # BF16 has no low bytes: the option changes nothing
    bf = (b.view(np.uint32) >> 16).astype(np.uint16)
    assert "low_joint" not in encode_tensor(bf, "BF16", codec="float", low_joint=True).params


def test_malformed_joint_records_rejected():
    rec = _enc(_f32())
    bad = dict(rec.params, low=[{"coded": False}, {"coded": False}])
    with pytest.raises(CorruptDataError, match="low_joint"):
        P.check_params("float", "F32", list(rec.shape), bad)
    with pytest.raises(CorruptDataError, match="prob_bits"):
        P.check_params("float", "F32", list(rec.shape),
                       dict(rec.params, low_joint=dict(rec.params["low_joint"], prob_bits=12)))
    rec.sections.pop("low16.default")
    with pytest.raises(CorruptDataError, match="low16"):
        decode_tensor(rec)


def test_raw_chunks_roundtrip_and_hostile_records_name_the_tensor():
    # fp16 rows fill the first three chunks (coded), uniform rows the last two (raw: flat_raw)
    a = _f32(rows=40, cols=256, fp16_rows=24)
    rec = _enc(a, tables=1)
    joint = rec.params["low_joint"]
    assert joint["flat_raw"] == 1 and rec.sections["low16.states"].size == 3 * 32
    assert np.array_equal(decode_tensor(rec).view(np.uint32), a.view(np.uint32))
    with native.disabled():
        assert np.array_equal(decode_tensor(rec).view(np.uint32), a.view(np.uint32))
    for params, msg in ((dict(joint, flat_raw=0), "states"), (dict(joint, flat_raw=7), "flat_raw"),
                        (dict(joint, flat_raw=1.0), "integer")):
        bad = type(rec)(rec.codec, rec.dtype, rec.shape, dict(rec.params, low_joint=params), rec.sections)
        with pytest.raises(CorruptDataError, match=f"emb.w.*{msg}|{msg}.*emb.w"):
            decode_tensor(bad, "emb.w")
    offsets = rec.sections["low16.offsets"].copy()
    offsets[4] += 1  # the raw chunk 3 one word longer, raw chunk 4 one shorter
    bad = type(rec)(rec.codec, rec.dtype, rec.shape, rec.params, {**rec.sections, "low16.offsets": offsets})
    with pytest.raises(CorruptDataError, match="emb.w.*raw chunk 3 holds 2049 words"):
        decode_tensor(bad, "emb.w")
