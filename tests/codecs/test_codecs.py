import numpy as np
import pytest
from hypothesis import given, settings, strategies as st
from hypothesis.extra.numpy import arrays

from wcodec.codecs import decode_tensor, encode_tensor
from wcodec.codecs.int8 import N_PRED
from wcodec.errors import CorruptDataError, WcodecError

NP = {"F32": np.float32, "F16": np.float16, "BF16": np.uint16, "I8": np.int8, "U8": np.uint8}
SHAPES = [(1,), (7,), (830, 545), (0,), (3, 0), (), (300,), (17, 19, 3)]


def _random(dtype, shape, rng):
    if dtype in ("F32", "F16"):
        return (rng.standard_normal(shape) * 0.05).astype(NP[dtype])
    if dtype == "BF16":
        return rng.integers(0, 1 << 16, shape, dtype=np.uint16)
    return rng.integers(0, 256, shape).astype(np.uint8).view(NP[dtype])


def _roundtrip(a, dtype, **kw):
    before = a.copy()
    rec = encode_tensor(a, dtype, **kw)
    out = decode_tensor(rec, "t")
    assert np.array_equal(a.reshape(-1).view(np.uint8), before.reshape(-1).view(np.uint8)), "the caller's array was modified"
    assert out.shape == a.shape and out.dtype == a.dtype
    assert np.array_equal(out.reshape(-1).view(np.uint8), a.reshape(-1).view(np.uint8)), rec.codec
    return rec


@pytest.mark.parametrize("dtype", list(NP))
@pytest.mark.parametrize("shape", SHAPES)
def test_roundtrip_shapes(dtype, shape):
    _roundtrip(_random(dtype, shape, np.random.default_rng(0)), dtype)


@pytest.mark.parametrize("dtype", ["F32", "F16", "BF16"])
def test_special_float_patterns_bit_exact(dtype):
    width = 32 if dtype == "F32" else 16
    rng = np.random.default_rng(1)
    n = 4000
    ui = np.uint32 if width == 32 else np.uint16
    bits = rng.integers(0, 1 << width, n, dtype=np.uint64).astype(ui)  # all patterns: NaN payloads too
    if dtype == "F32":
        specials = np.array([0x7FC00001, 0xFFC12345, 0x7F800000, 0xFF800000, 0x80000000, 0x00000001, 0x807FFFFF], np.uint32)
    elif dtype == "F16":
        specials = np.array([0x7E01, 0xFE55, 0x7C00, 0xFC00, 0x8000, 0x0001, 0x83FF], np.uint16)
    else:
        specials = np.array([0x7FC1, 0xFF81, 0x7F80, 0xFF80, 0x8000, 0x0001, 0x807F], np.uint16)
    bits[: specials.size] = specials
    _roundtrip(bits.view(NP[dtype]) if dtype != "BF16" else bits, dtype, codec="float")


@pytest.mark.parametrize("dtype", ["F32", "F16", "BF16"])
@pytest.mark.parametrize("head_bits", [0, 1, 2, 3])
def test_float_every_head_bits(dtype, head_bits):
    a = _random(dtype, (333, 7), np.random.default_rng(head_bits))
    if dtype == "BF16":
        from tests._models import to_bf16_bits
        a = to_bf16_bits(np.random.default_rng(5).standard_normal((333, 7)) * 0.02)
    rec = _roundtrip(a, dtype, codec="float", head_bits=head_bits, chunk_steps=3)
    assert rec.params["head_bits"] == head_bits


@settings(max_examples=40, deadline=None)
@given(st.sampled_from(list(NP)), st.lists(st.integers(0, 40), min_size=0, max_size=3), st.integers(0, 2**32 - 1))
def test_roundtrip_property(dtype, shape, seed):
    a = _random(dtype, tuple(shape), np.random.default_rng(seed))
    _roundtrip(a, dtype, chunk_steps=2)


@settings(max_examples=25, deadline=None)
@given(arrays(np.int8, st.tuples(st.integers(1, 70), st.integers(1, 70))), st.integers(1, 9))
def test_int8_all_modes_roundtrip(a, tile):
    from wcodec.codecs.int8 import Int8Codec

    rows, cols = a.shape
    n_tiles = -(-rows // tile) * -(-cols // tile)
    for signed, arr, dtype in ((True, a, "I8"), (False, a.view(np.uint8), "U8")):
        xs = arr.astype(np.int16)
        modes = (np.arange(n_tiles) % N_PRED).astype(np.uint8)  # transforms: tests/codecs/test_transform.py
        codec = Int8Codec()
        rec = codec._pack(dtype, arr.shape, xs, tile, tile, modes, 12, 2, "auto", signed)
        assert np.array_equal(codec.decode(rec).view(np.uint8), arr.view(np.uint8))


def test_prediction_wins_on_smooth_and_loses_nothing_on_noise():
    yy, xx = np.mgrid[0:256, 0:200]
    smooth = (np.sin(yy / 30.0) * 60 + np.cos(xx / 25.0) * 60).astype(np.int8)
    rec = _roundtrip(smooth, "I8")
    none = encode_tensor(smooth, "I8", predict=False)
    assert rec.nbytes < 0.5 * none.nbytes and "NONE" not in rec.info["modes"]
    noise = np.random.default_rng(0).integers(-128, 128, (256, 200)).astype(np.int8)
    rec = _roundtrip(noise, "I8")
    assert rec.nbytes <= encode_tensor(noise, "I8", predict=False).nbytes


@pytest.mark.parametrize("dtype", ["F32", "F16", "BF16"])
def test_int8_quant_snr_floor(dtype):
    from tests._models import to_bf16_bits

    w = np.random.default_rng(2).standard_normal((256, 384)).astype(np.float32) * 0.02
    a = to_bf16_bits(w) if dtype == "BF16" else w.astype(NP[dtype])
    rec = encode_tensor(a, dtype, mode="int8")
    assert rec.codec == "int8-quant"
    out = decode_tensor(rec)
    assert out.dtype == a.dtype and out.shape == a.shape
    # Gaussian weights, per-row absmax scales: about 40 dB; never a loose atol
    assert rec.info["snr_db"] > 38
    assert rec.bits_per_weight < 8


def test_int8_quant_rejects_non_finite():
    a = np.ones((300,), np.float32)
    a[5] = np.nan
    with pytest.raises(ValueError):
        encode_tensor(a, "F32", mode="int8")


@pytest.mark.parametrize("dtype", ["F32", "BF16", "I8"])
def test_corrupt_records_raise(dtype):
    a = _random(dtype, (64, 70), np.random.default_rng(3))
    rec = encode_tensor(a, dtype)
    rng = np.random.default_rng(4)
    for name in rec.sections:
        for _ in range(5):
            secs = {k: v.copy() for k, v in rec.sections.items()}
            s = secs[name]
            if s.size == 0:
                continue
            s.view(np.uint8)[int(rng.integers(0, s.nbytes))] ^= np.uint8(1 << int(rng.integers(0, 8)))
            bad = type(rec)(rec.codec, rec.dtype, rec.shape, rec.params, secs)
            try:
                out = decode_tensor(bad, "w")
            except WcodecError as e:
                assert "'w'" in str(e)
                continue
            # raw tail/low bytes carry no redundancy: a flip there changes just that value
            assert name in ("tail", "low1.raw", "low0.raw", "modes", "head.alphabet") or \
                not np.array_equal(out, a)
    for trunc in rec.sections:
        if rec.sections[trunc].size == 0:
            continue
        secs = dict(rec.sections)
        secs[trunc] = secs[trunc][:-1]
        with pytest.raises(CorruptDataError):
            decode_tensor(type(rec)(rec.codec, rec.dtype, rec.shape, rec.params, secs), "w")
    with pytest.raises(WcodecError):
        decode_tensor(type(rec)("no-such-codec", rec.dtype, rec.shape, rec.params, rec.sections), "w")
