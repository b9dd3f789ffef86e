"""Transform tile modes of the int8 codec (integer 8x8 DCT-II / ADST by lifting): the pure-Python
spec against the numba kernels, lossless round trips with extremes, golden bytes, corrupt records,
and the rule that keeps them off tensors where they do not pay."""

import hashlib
import subprocess
import sys

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st
from hypothesis.extra.numpy import arrays

from wcodec.codecs import decode_tensor, encode_tensor
from wcodec.codecs import transform as T
from wcodec.codecs.int8 import N_PRED, Int8Codec, planes, tile_sizes
from wcodec.errors import CorruptDataError

KINDS = sorted(T.KINDS)


def test_constants_are_the_givens_factorisation_of_the_float_transforms():
    for k in KINDS:
        assert T.derive(k) == (T.ROTATIONS[k], T.SIGNS)
        q = np.array(T.matrix(k))
        assert np.allclose(q @ q.T, np.eye(8), atol=1e-12)
        x = np.random.default_rng(k).integers(-128, 128, (8, 8))
        # integer lifting stays within a few units of the exact orthonormal transform
        assert np.abs(np.array(T.forward_block(x.tolist(), k)) - q @ x @ q.T).max() < 6


@settings(max_examples=60, deadline=None)
@given(st.lists(st.sampled_from([-128, 127, 0, 255, -1, 1, 64]) | st.integers(-128, 255), min_size=64, max_size=64),
       st.sampled_from(KINDS))
def test_reference_block_is_reversible_and_bounded(vals, kind):
    x = [vals[8 * i:8 * i + 8] for i in range(8)]
    c = T.forward_block(x, kind)
    assert T.inverse_block(c, kind) == x
    for row in c:
        for v in row:
            lo, hi = T.split(v)
            assert T.join(lo, hi) == v and T.HI_MIN <= hi <= T.HI_MAX


def _modes(rows, cols, th, tw, rng, p_tr=0.6):
    """Random modes, transform modes only on tiles of whole 8x8 blocks."""
    hs, ws = tile_sizes(rows, cols, th, tw)
    ok = (hs % 8 == 0) & (ws % 8 == 0)
    modes = rng.integers(0, N_PRED, hs.size)
    tr = ok & (rng.random(hs.size) < p_tr)
    modes[tr] = rng.choice(KINDS, int(tr.sum()))
    return modes.astype(np.uint8)


@pytest.mark.parametrize("signed", [True, False])
def test_numba_matches_reference(signed):
    rng = np.random.default_rng(1)
    rows, cols, th, tw = 40, 56, 16, 24
    x = rng.integers(-128, 128, (rows, cols)) if signed else rng.integers(0, 256, (rows, cols))
    x[:8, :16] = -128 if signed else 255  # extremes
    x[8:16, :8] = 127 if signed else 0
    x = x.astype(np.int16)
    modes = _modes(rows, cols, th, tw, rng, p_tr=0.8)
    assert (modes >= N_PRED).sum() >= 2
    res, hi = planes(x, th, tw, modes)
    lo_ref, hi_ref = T.reference_forward(x.tolist(), th, tw, modes.tolist())
    assert hi.tolist() == [h & 0xFF for h in hi_ref]
    assert all(res[k] == v for k, v in lo_ref.items())
    dec = T.reference_inverse(res, [h - 256 if h >= 128 else h for h in hi.tolist()], rows, cols, th, tw, modes.tolist())
    assert all(x[r, c] == v for (r, c), v in dec.items())
    rec = Int8Codec()._pack("I8" if signed else "U8", (rows, cols), x, th, tw, modes, 12, 3, "auto", signed)
    out = Int8Codec().decode(rec)
    assert np.array_equal(out.astype(np.int16), x)


@settings(max_examples=25, deadline=None)
@given(arrays(np.int8, st.tuples(st.integers(1, 48), st.integers(1, 48))), st.sampled_from([8, 16, 24, 5]),
       st.integers(0, 2 ** 16))
def test_int8_roundtrip_with_transform_tiles(a, tile, seed):
    rows, cols = a.shape
    for signed, arr, dtype in ((True, a, "I8"), (False, a.view(np.uint8), "U8")):
        modes = _modes(rows, cols, tile, tile, np.random.default_rng(seed))
        xs = arr.astype(np.int16)
        rec = Int8Codec()._pack(dtype, arr.shape, xs, tile, tile, modes, 12, 2, "auto", signed)
        assert ("hi" in rec.params) == bool((modes >= N_PRED).any())
        assert np.array_equal(decode_tensor(rec, "t").view(np.uint8), arr.view(np.uint8))


def _golden_input():
    i, j = np.mgrid[0:16, 0:24]
    return (np.round(100 * np.cos(np.pi * (2 * j + 1) * (i % 5) / 48)) + (i * 7 + j * 3) % 5 - 2).astype(np.int8)


GOLDEN_SHA256 = "9356a975988a0d277e3b1d7bd34945c662b97b132b4f41cd148f99d17c797e97"


def test_golden_bytes():
    """Pinned layout of a record with DCT and ADST tiles (docs/CODEC_LAYOUT.md, int8): changing
    these bytes needs a format version bump."""
    x = _golden_input()
    modes = np.array([T.DCT, T.ADST, 0, 1, T.ADST, T.DCT], np.uint8)  # 2x3 tiles of 8x8
    rec = Int8Codec()._pack("I8", x.shape, x.astype(np.int16), 8, 8, modes, 12, 4, 1, True)
    assert rec.params["hi"]["n_symbols"] == 4 * 64
    res, hi = planes(x.astype(np.int16), 8, 8, modes)
    # first tile, DCT: the DC coefficient and the first high parts
    assert (res[:4].tolist(), hi[:8].tolist()) == GOLDEN_HEAD
    digest = hashlib.sha256(b"".join(rec.sections[k].tobytes() for k in sorted(rec.sections))).hexdigest()
    assert digest == GOLDEN_SHA256
    assert np.array_equal(Int8Codec().decode(rec), x)


GOLDEN_HEAD = ([170, 5, 2, 0], [2, 1, 0, 0, 0, 0, 0, 0])  # DC = sext(170) + 2 * 256 = 426


def test_transforms_pay_on_a_cosine_basis_and_auto_rule():
    """An STFT-like basis (silero's stft_conv is one): DCT/ADST tiles win on a 3-D tensor under
    transforms="auto"; the same values as a 2-D tensor are not evaluated under "auto"."""
    n, k = np.mgrid[0:128, 0:256]
    basis = np.round(120 * np.cos(2 * np.pi * n * (k + 0.5) / 2048)).astype(np.int8)
    rec3 = encode_tensor(basis.reshape(128, 1, 256), "I8")
    assert {"DCT", "ADST"} & set(rec3.info["modes"])
    assert rec3.nbytes < 0.8 * encode_tensor(basis.reshape(128, 1, 256), "I8", transforms=False).nbytes
    assert not {"DCT", "ADST"} & set(encode_tensor(basis, "I8").info["modes"])
    assert np.array_equal(decode_tensor(rec3), basis.reshape(128, 1, 256))


def test_auto_rule_does_not_import_the_transform_kernels_for_matrices():
    """The demo's first run must not compile the transform kernels: 2-D tensors never load them."""
    code = ("import sys, numpy as np; from wcodec.codecs import encode_tensor, decode_tensor;"
            "a = (np.arange(64 * 64) % 97).astype(np.int8).reshape(64, 64);"
            "assert np.array_equal(decode_tensor(encode_tensor(a, 'I8')), a);"
            "print('wcodec.codecs._transform' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def _tr_record():
    x = _golden_input()
    modes = np.array([T.DCT, T.ADST, 0, 1, T.ADST, T.DCT], np.uint8)
    return Int8Codec()._pack("I8", x.shape, x.astype(np.int16), 8, 8, modes, 12, 4, 1, True)


def _with(rec, params=None, **sections):
    secs = {**rec.sections, **sections}
    return type(rec)(rec.codec, rec.dtype, rec.shape, params or rec.params, secs)


def test_corrupt_transform_records_raise():
    rec = _tr_record()
    # transform modes without a hi plane (an old reader sees unknown modes; so does this one)
    p = {k: v for k, v in rec.params.items() if k != "hi"}
    with pytest.raises(CorruptDataError, match="hi plane"):
        decode_tensor(_with(rec, p), "w")
    # a hi plane without transform tiles
    with pytest.raises(CorruptDataError, match="hi plane"):
        decode_tensor(_with(rec, modes=np.zeros(6, np.uint8)), "w")
    # a transform mode on a tile that is not whole 8x8 blocks
    y = np.arange(12 * 12, dtype=np.int16).reshape(12, 12) % 100
    r2 = Int8Codec()._pack("I8", (12, 12), y, 8, 8, np.array([T.DCT, 0, 0, 0], np.uint8), 12, 4, 1, True)
    with pytest.raises(CorruptDataError, match="8x8"):
        decode_tensor(_with(r2, modes=np.array([T.DCT, T.DCT, 0, 0], np.uint8)), "w")
    # an unknown mode id
    with pytest.raises(CorruptDataError, match="unknown"):
        decode_tensor(_with(rec, modes=np.array([7, 0, 0, 0, 0, 5], np.uint8)), "w")
    # high parts out of range: re-encode a hi plane of 0x40 bytes
    from wcodec import rans
    hp = rans.encode(np.full(256, 0x40, np.uint8), 12, 4, 1)
    bad = _with(rec, {**rec.params, "hi": hp.params()}, **hp.sections("hi"))
    with pytest.raises(CorruptDataError, match="high parts"):
        decode_tensor(bad, "w")


def test_decode_range_of_a_record_with_transform_tiles():
    from wcodec.codecs.partial import decode_range
    rec = _tr_record()
    full = decode_tensor(rec).reshape(-1)
    for e0, e1 in ((0, 5), (100, 130), (380, 384)):
        assert np.array_equal(decode_range(rec, e0, e1), full[e0:e1])
