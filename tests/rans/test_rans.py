import hashlib

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st
from hypothesis.extra.numpy import arrays

from wcodec import rans
from wcodec.errors import CorruptDataError
from wcodec.rans.tables import normalize_freqs


def _same(a: rans.RansPlane, b: rans.RansPlane) -> bool:
    return a.params() == b.params() and all(
        np.array_equal(x, y) for x, y in zip(a.sections("p").values(), b.sections("p").values()))


def _skewed(rng, n):
    return np.clip(rng.geometric(0.25, size=n), 0, 255).astype(np.uint8)


@pytest.mark.parametrize("n", [0, 1, 7, 31, 32, 33, 127, 128, 129, 1000])
@pytest.mark.parametrize("kind", ["skewed", "constant", "uniform", "two"])
@pytest.mark.parametrize("prob_bits", [11, 12])
def test_reference_and_numba_bit_identical(n, kind, prob_bits):
    rng = np.random.default_rng(n)
    sym = {"skewed": _skewed(rng, n), "constant": np.full(n, 200, np.uint8),
           "uniform": rng.integers(0, 256, n).astype(np.uint8),
           "two": rng.choice([3, 250], n).astype(np.uint8)}[kind]
    a = rans.encode(sym, prob_bits, chunk_steps=2, backend="reference")
    b = rans.encode(sym, prob_bits, chunk_steps=2, backend="numba")
    assert _same(a, b)
    assert np.array_equal(rans.decode(a, backend="reference"), sym)
    assert np.array_equal(rans.decode(b, backend="numba"), sym)


@settings(max_examples=60, deadline=None)
@given(arrays(np.uint8, st.integers(0, 700)), st.integers(1, 9), st.sampled_from([11, 12]),
       st.sampled_from(["auto", 1, 2]))
def test_roundtrip_property(sym, chunk_steps, prob_bits, tables):
    a = rans.encode(sym, prob_bits, chunk_steps, tables=tables, backend="reference")
    b = rans.encode(sym, prob_bits, chunk_steps, tables=tables)
    assert _same(a, b)
    assert np.array_equal(rans.decode(b), sym)
    assert np.array_equal(rans.decode(a, backend="reference"), sym)


def test_golden_bytes():
    """Pinned bytes of a fixed stream: changing them needs a format version bump."""
    sym = np.frombuffer(b"wcodec: interleaved rANS, 32 lanes, 16-bit words. " * 9, dtype=np.uint8)
    plane = rans.encode(sym, 11, chunk_steps=4, tables=1, backend="reference")
    assert plane.params() == {"n_symbols": 450, "prob_bits": 11, "chunk_steps": 4,
                              "chunks_per_table": 1, "alphabet_size": 120}
    assert plane.states[:4].tolist() == GOLDEN_STATES
    digest = hashlib.sha256(b"".join(a.tobytes() for a in plane.sections("p").values())).hexdigest()
    assert digest == GOLDEN_SHA256
    assert np.array_equal(rans.decode(plane), sym)


GOLDEN_STATES = [2246031296, 560012, 1789546, 541690832]
GOLDEN_SHA256 = "9e99412c9decd7f1d7300f17e1fba5b07f6286eb48eec03bb1553175f3c07e4d"


def test_normalize_keeps_every_present_symbol():
    counts = np.zeros(256, np.int64)
    counts[0] = 10**9
    counts[1:] = 1
    f = normalize_freqs(counts, 11)
    assert f.sum() == 2048 and (f[1:] >= 1).all()
    one = np.zeros(256, np.int64)
    one[77] = 5
    f = normalize_freqs(one, 12)
    assert f[77] == 4096 and f.sum() == 4096


def test_tables_auto_uses_segments_when_statistics_drift():
    rng = np.random.default_rng(0)
    sym = np.concatenate([np.zeros(1 << 17, np.uint8) + rng.integers(0, 2, 1 << 17).astype(np.uint8),
                          rng.integers(0, 256, 1 << 17).astype(np.uint8)])
    plane = rans.encode(sym, chunk_steps=64)
    assert plane.n_tables > 1
    assert plane.nbytes < rans.encode(sym, chunk_steps=64, tables=10**9).nbytes
    assert np.array_equal(rans.decode(plane), sym)


def _plane(n=5000):
    return rans.encode(_skewed(np.random.default_rng(3), n), chunk_steps=8)


@pytest.mark.parametrize("field", ["states", "offsets", "words", "freqs"])
def test_corruption_raises_wcodec_error(field):
    base = _plane()
    rng = np.random.default_rng(7)
    for trial in range(40):
        secs = {k: v.copy() for k, v in base.sections("p").items()}
        a = secs[f"p.{field}"]
        i = int(rng.integers(0, a.size))
        a[i] ^= a.dtype.type(1 << int(rng.integers(0, a.itemsize * 8)))
        # every single-bit flip is caught: table sums, offset checks, or the final-state check
        with pytest.raises(CorruptDataError):
            rans.decode(rans.RansPlane.from_sections(base.params(), secs, "p"))


def test_packed_tables_roundtrip_and_validate():
    freqs = np.array([0, 1, 254, 255, 256, 4096, 17], np.uint16)
    small, big = rans.pack_freqs(freqs)
    assert small.dtype == np.uint8 and big.tolist() == [255, 256, 4096]
    assert np.array_equal(rans.unpack_freqs(small, big), freqs)
    with pytest.raises(CorruptDataError):
        rans.unpack_freqs(small, big[:-1])


def test_truncated_words_and_bad_params():
    base = _plane()
    short = rans.RansPlane(base.n_symbols, base.prob_bits, base.chunk_steps, base.chunks_per_table,
                           base.alphabet_size, base.freqs, base.states, base.offsets, base.words[:-1])
    with pytest.raises(CorruptDataError):
        rans.decode(short)
    for change in [dict(prob_bits=13), dict(chunk_steps=0), dict(n_symbols=-1), dict(alphabet_size=300),
                   dict(n_symbols=base.n_symbols + 10**6)]:
        params = {**base.params(), **change}
        with pytest.raises(CorruptDataError):
            rans.RansPlane.from_sections(params, base.sections("p"), "p")
    with pytest.raises(CorruptDataError):
        rans.RansPlane.from_sections({"n_symbols": 1}, base.sections("p"), "p")


@settings(max_examples=60, deadline=None)
@given(arrays(np.int64, 256, elements=st.integers(0, 10**9)), st.sampled_from([11, 12]))
def test_normalize_properties(counts, prob_bits):
    from wcodec.rans.tables import normalize_many

    counts[counts % 3 == 0] = 0  # many absent symbols
    f = normalize_freqs(counts, prob_bits).astype(np.int64)
    assert f.sum() == 1 << prob_bits
    if counts.any():
        assert ((f > 0) == (counts > 0)).all()
    rows = normalize_many(np.stack([counts, counts[::-1]]), prob_bits)
    assert np.array_equal(rows[0], f) and np.array_equal(rows[1], normalize_freqs(counts[::-1], prob_bits))
