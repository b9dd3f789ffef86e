"""The fp8 codec: pure-Python reference vs numba bit-exact, golden bytes, round trips of every
byte pattern for the four FP8 dtypes, corrupt records rejected."""

from __future__ import annotations

import hashlib

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from wcodec.codecs import choose_codec, decode_tensor, encode_tensor
from wcodec.codecs.fp8 import FP8_DTYPES, Fp8Codec
from wcodec.errors import CorruptDataError

# a fixed e4m3-like byte pattern: small magnitudes frequent, both signs (no torch needed)
GOLDEN_INPUT = np.array([(i * i * 37 + i // 3) % 23 + 48 + 128 * (i % 3 == 0) for i in range(300)], dtype=np.uint8)
GOLDEN_SHA256 = "e2cca8fa2b48f0d6baa9ac83f3ed69c6378b7de975a1eef12acc1e8131cf26cb"


def test_reference_and_numba_are_bit_exact_and_golden():
    codec = Fp8Codec()
    ref = codec.encode(GOLDEN_INPUT.reshape(20, 15), "F8_E4M3", chunk_steps=4, tables=1, backend="reference")
    fast = codec.encode(GOLDEN_INPUT.reshape(20, 15), "F8_E4M3", chunk_steps=4, tables=1)
    assert ref.params == fast.params and ref.sections.keys() == fast.sections.keys()
    assert all(np.array_equal(ref.sections[k], fast.sections[k]) for k in ref.sections)
    assert ref.params["data"] == {"n_symbols": 300, "prob_bits": 12, "chunk_steps": 4,
                                  "chunks_per_table": 1, "alphabet_size": 199}
    digest = hashlib.sha256(b"".join(a.tobytes() for a in ref.sections.values())).hexdigest()
    assert digest == GOLDEN_SHA256  # changing it needs a format version bump
    for backend in ("reference", "numba"):
        assert np.array_equal(codec.decode(ref, backend=backend), GOLDEN_INPUT.reshape(20, 15))


def test_policy_picks_fp8_for_large_fp8_tensors_only():
    assert all(choose_codec(d, (64, 64)) == "fp8" for d in FP8_DTYPES)
    assert choose_codec("F8_E4M3", (7,)) == "raw" and choose_codec("F8_E8M0", (64, 64)) == "raw"
    assert choose_codec("F4_X2", (64, 64)) == "raw" and choose_codec("C64", (64, 64)) == "raw"


@settings(max_examples=40, deadline=None)
@given(arrays(np.uint8, st.tuples(st.integers(0, 40), st.integers(1, 90))), st.sampled_from(FP8_DTYPES),
       st.integers(1, 8))
def test_round_trip_every_byte_pattern(a, dtype, steps):
    before = a.copy()
    rec = encode_tensor(a, dtype, codec="fp8", chunk_steps=steps)
    assert np.array_equal(a, before)
    out = decode_tensor(rec, "t")
    assert out.dtype == np.uint8 and out.shape == a.shape and np.array_equal(out, a)


def test_all_256_patterns_and_one_symbol_planes():
    for a in (np.arange(256, dtype=np.uint8).repeat(3), np.full(1000, 0x7F, np.uint8), np.zeros(0, np.uint8)):
        rec = encode_tensor(a, "F8_E5M2", codec="fp8")
        assert np.array_equal(decode_tensor(rec), a)


def test_corrupt_records_raise_corrupt_data_error():
    a = np.random.default_rng(0).integers(0, 256, 5000).astype(np.uint8)
    rec = encode_tensor(a, "F8_E4M3", codec="fp8", chunk_steps=8)
    bad = dict(rec.sections)
    w = bad["data.words"].copy()
    w[::3] ^= 0x1234
    bad["data.words"] = w
    for r in (type(rec)(rec.codec, rec.dtype, rec.shape, rec.params, bad),
              type(rec)(rec.codec, "F16", rec.shape, rec.params, rec.sections),
              type(rec)(rec.codec, rec.dtype, (4999,), rec.params, rec.sections)):
        with pytest.raises(CorruptDataError, match="t"):
            decode_tensor(r, "t")
