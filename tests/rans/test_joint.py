"""The joint low plane (16-bit symbols, format version 2): the C extension and numba against the
pure-Python reference (wcodec.rans.reference16), same bits and same corruption reports."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from wcodec import native
from wcodec.errors import CorruptDataError
from wcodec.rans import joint

BACKENDS = ["numba"] + (["native"] if native.available() else [])


def _symbols(n, seed=0, spike=3):
    """Uniform 16-bit symbols, the first 1/spike of them with their low 13 bits zero (fp16 rows)."""
    rng = np.random.default_rng(seed)
    s = rng.integers(0, 1 << 16, n).astype(np.uint16)
    s[:n // spike] = (rng.integers(0, 8, n // spike) << 13).astype(np.uint16)
    return s


def _same(a: joint.JointPlane, b: joint.JointPlane):
    assert a.params() == b.params()
    for k, v in a.sections("p").items():
        assert np.array_equal(v, b.sections("p")[k]) and v.dtype == b.sections("p")[k].dtype, k


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("n,steps", [(0, 1), (1, 1), (33, 1), (700, 2), (3000, 4), (3000, None)])
def test_bit_exact_with_reference(backend, n, steps):
    s = _symbols(n, seed=n)
    ref = joint.encode(s, steps, backend="reference")
    ref.validate()
    _same(ref, joint.encode(s, steps, backend=backend))
    assert np.array_equal(joint.decode(ref, backend="reference"), s)
    assert np.array_equal(joint.decode(ref, backend=backend), s)
    # OR-ed into the low half of 32-bit words (the float codec's merge)
    out = np.full(n, 0x5A5A0000, dtype=np.uint32)
    joint.decode(ref, backend=backend, out=out)
    assert np.array_equal(out & 0xFFFF, s) and (out >> 16 == 0x5A5A).all()


@pytest.mark.parametrize("backend", BACKENDS)
def test_tables_kinds(backend):
    # a constant chunk (sparse table, default 0), a uniform one (flat, no exceptions), a spiky one
    rng = np.random.default_rng(5)
    s = np.concatenate([np.full(64, 7, np.uint16), rng.integers(0, 1 << 16, 64).astype(np.uint16),
                        _symbols(64, 6, spike=2)])
    p = joint.encode(s, 2, backend="reference")
    _same(p, joint.encode(s, 2, backend=backend))
    assert np.array_equal(joint.decode(p, backend=backend), s)


def test_smaller_than_two_byte_planes_on_fp16_rows():
    s = _symbols(1 << 16, spike=2)
    p = joint.encode(s)
    from wcodec import rans
    v1 = sum(min(rans.encode(b).nbytes, s.size) for b in ((s >> 8).astype(np.uint8), (s & 0xFF).astype(np.uint8)))
    assert p.nbytes < v1


def _corrupt(p, **kw):
    return dataclasses.replace(p, **kw)


@pytest.mark.parametrize("backend", ["reference"] + BACKENDS)
def test_corrupt_streams_reported(backend):
    s = _symbols(2000, 3)
    p = joint.encode(s, 4, backend="reference", flat_raw=False)
    words = p.words.copy()
    words[5] ^= 0x40
    st = p.states.copy()
    st[3] = 5  # below 2**31
    for bad in (_corrupt(p, words=words), _corrupt(p, states=st)):
        try:
            got = joint.decode(bad, backend=backend)
        except CorruptDataError as e:
            assert "chunk" in str(e)
        else:  # a flipped word may decode to other symbols, never silently to the same ones
            assert not np.array_equal(got, s)


@pytest.mark.parametrize("change,msg", [
    (lambda p: dict(default=p.default + 1), "sums to"),
    (lambda p: dict(prob_bits=30), "prob_bits"),
    (lambda p: dict(exc_symbols=p.exc_symbols[::-1].copy()), "increasing"),
    (lambda p: dict(exc_freqs=np.zeros_like(p.exc_freqs)), "frequency 0"),
    (lambda p: dict(exc_offsets=p.exc_offsets + 1), "span"),
    (lambda p: dict(offsets=p.offsets[:-1]), "offsets"),
    (lambda p: dict(states=p.states.astype(np.uint32)), "states"),
    (lambda p: dict(n_symbols=1 << 41), "n_symbols"),
])
def test_validation(change, msg):
    p = joint.encode(_symbols(500, 4), 16, backend="reference", flat_raw=False)
    assert p.exc_symbols.size > 1
    with pytest.raises(CorruptDataError, match=msg):
        _corrupt(p, **change(p)).validate()


def test_from_sections_rejects_missing_and_bad_types():
    p = joint.encode(_symbols(100), 1)
    secs = p.sections("low16")
    joint.JointPlane.from_sections(p.params(), secs, "low16")
    del secs["low16.exc_freqs"]
    with pytest.raises(CorruptDataError, match="missing or bad field"):
        joint.JointPlane.from_sections(p.params(), secs, "low16")
    with pytest.raises(CorruptDataError, match="integer"):
        joint.JointPlane.from_sections({**p.params(), "prob_bits": 24.0}, p.sections("low16"), "low16")


def test_input_not_modified_and_bad_arguments():
    s = _symbols(300)
    keep = s.copy()
    joint.encode(s)
    assert np.array_equal(s, keep)
    with pytest.raises(ValueError):
        joint.encode(s, chunk_steps=0)
    with pytest.raises(ValueError):
        joint.encode(s, prob_bits=12)
