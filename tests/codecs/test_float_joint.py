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


# ---- the fused path: the joint plane OR-ed in chunk by chunk inside the merge (C extension) ----

needs_ext = pytest.mark.skipif(native.ext() is None, reason="C extension wcodec._cext not built")


def _unfused(monkeypatch):
    """Decode joint records the way before the fused path: merge, then the plane in a second pass."""
    monkeypatch.setattr(native, "fuses_joint", lambda head, joint: False)


@needs_ext
@pytest.mark.parametrize("rows", [40, 41, 72])  # whole chunks (odd, even count) and a short last chunk
def test_fused_joint_matches_the_two_pass_decode_and_checksums(isa, monkeypatch, rows):
    import zlib

    a = _f32(seed=rows, rows=rows, cols=256, fp16_rows=24)
    rec = _enc(a, tables=1)
    assert "low_joint" in rec.params
    assert native.fuses_joint(*_planes(rec))
    want = a.view(np.uint32).tobytes()
    before = native.threads()
    try:
        for t in (1, 2, 3):
            native.set_threads(t)
            out = np.full(a.size, 0xFFFFFFFF, dtype=np.uint32)  # a dirty destination
            got, crc = decode_tensor(rec, "w", out=out.view(np.float32), checksum=True)
            assert out.tobytes() == want and got.tobytes() == want, (isa, t)
            assert crc == zlib.crc32(want), (isa, t)
    finally:
        native.set_threads(before)
    with monkeypatch.context() as m:
        _unfused(m)
        got, crc = decode_tensor(rec, "w", checksum=True)
    assert got.tobytes() == want and crc == zlib.crc32(want)


def _planes(rec):
    from wcodec.codecs import float as fc

    parts = fc.parse(rec)
    return parts.head, parts.joint


@needs_ext
def test_fused_joint_reports_a_corrupt_chunk(isa):
    rec = _enc(_f32(), tables=1)
    sidx = _planes(rec)[1].state_index()
    coded = int(np.flatnonzero(sidx >= 0)[1])  # the second coded chunk
    offsets = rec.sections["low16.offsets"]
    words = rec.sections["low16.words"].copy()
    words[offsets[coded]:offsets[coded + 1]] ^= 0x3C3C  # its words garbled: its final states differ
    bad = type(rec)(rec.codec, rec.dtype, rec.shape, rec.params, {**rec.sections, "low16.words": words})
    for checksum in (False, True):
        with pytest.raises(CorruptDataError, match=f"low16 plane: chunk {coded}"):
            decode_tensor(bad, "w", checksum=checksum)


@needs_ext
def test_joint_plane_in_other_chunks_takes_the_two_pass_decode():
    """A joint plane whose chunks are not the head's (valid, though the encoder never writes one)."""
    import zlib

    from wcodec.rans import joint as rans_joint

    a = _f32()
    rec = _enc(a)
    plane = rans_joint.encode((a.view(np.uint32).reshape(-1) & 0xFFFF).astype(np.uint16), 16)
    sections = {k: v for k, v in rec.sections.items() if not k.startswith("low16.")}
    sections.update(plane.sections("low16"))
    other = type(rec)(rec.codec, rec.dtype, rec.shape, dict(rec.params, low_joint=plane.params()), sections)
    assert not native.fuses_joint(*_planes(other))
    got, crc = decode_tensor(other, "w", checksum=True)
    assert got.tobytes() == a.tobytes()
    assert crc == zlib.crc32(a.tobytes())


@needs_ext
def test_merge_refuses_a_joint_plane_with_low_planes():
    rec = _enc(_f32())
    head, joint = _planes(rec)
    lookup, words = native.plane_inputs(head)
    out, R, tail = np.empty(rec.numel, np.uint32), rec.params["tail_bits"], rec.sections["tail"]
    with pytest.raises(ValueError, match="joint plane needs F32 without low planes"):
        native.decode_merge_float(head.states, head.offsets, words, head.chunk_size, head.chunks_per_table, lookup,
                                  head.prob_bits, np.zeros(256, np.uint64), tail, R, 8, 31,
                                  (np.zeros(rec.numel, np.uint8),) * 2, out, joint=joint)
    with pytest.raises(ValueError, match="C extension"):
        native.decode_merge_float(head.states, head.offsets, words, head.chunk_size, head.chunks_per_table, lookup,
                                  head.prob_bits, np.zeros(256, np.uint64), tail, R, 16, 31, (),
                                  out, numba=True, joint=joint)
