"""The joint low plane (16-bit symbols, format version 2): the C extension and numba against the
pure-Python reference (wcodec.rans.reference16), same bits and same corruption reports."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

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


@pytest.mark.parametrize("backend", BACKENDS)
def test_certain_symbol_table(backend):
    # a constant chunk with its own table: one symbol of frequency 2**prob_bits, where numba's
    # renormalisation bound f << (63 - prob_bits) overflowed int64 (zero states, a plane that no
    # decoder took)
    s = np.concatenate([np.full(512, 7, np.uint16), _symbols(256, 8)])
    ref = joint.encode(s, 8, backend="reference", tables=1)
    assert ref.exc_freqs.max() == 1 << ref.prob_bits
    _same(ref, joint.encode(s, 8, backend=backend, tables=1))
    assert np.array_equal(joint.decode(ref, backend=backend), s)


@pytest.mark.skipif(not native.available(), reason="the screened segments are the C extension's path")
def test_screened_segments_give_the_block_counts_tables():
    """The C path reads whole counts only of segments whose largest count passes the screen; numba
    counts every block. Same tables: fp16 rows, a sparse run across a segment boundary, a constant
    tail, uniform segments."""
    rng = np.random.default_rng(9)
    seg = 1 << 15
    s = rng.integers(0, 1 << 16, 6 * seg + 1000).astype(np.uint16)
    s[seg:2 * seg] &= 0xE000
    s[3 * seg - 5000:3 * seg + 35000] = rng.integers(0, 40, 40000)
    s[-700:] = 5
    tops, total = native.segment_tops16(s, seg)
    full = native.block_histograms16(s, seg)
    assert np.array_equal(tops, full.max(axis=1)) and np.array_equal(total, full.sum(axis=0))
    which = np.array([5, 0, 6])
    assert np.array_equal(native.segment_histograms16(s, seg, which), full[which])
    for steps in (64, None):
        a = joint.encode(s, steps, backend="native")
        _same(a, joint.encode(s, steps, backend="numba"))
        assert a.n_tables > 1 and np.array_equal(joint.decode(a), s)


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


# ---- raw chunks (params flat_raw): a flat table's chunks hold their symbols as words ----------

def _mixed(n_chunks, chunk, seed=0, spiky=(1,)):
    """Uniform chunks, except those in ``spiky`` whose symbols have their low 13 bits zero."""
    rng = np.random.default_rng(seed)
    s = rng.integers(0, 1 << 16, n_chunks * chunk - chunk // 3).astype(np.uint16)  # a partial last chunk
    for c in spiky:
        s[c * chunk:(c + 1) * chunk] = (rng.integers(0, 8, s[c * chunk:(c + 1) * chunk].size) << 13)
    return s


@pytest.mark.parametrize("backend", BACKENDS)
def test_raw_chunks_bit_exact_with_reference(backend):
    s = _mixed(6, 32 * 8, spiky=(1, 3))
    ref = joint.encode(s, 8, backend="reference", tables=1)
    raw = ref.raw_chunks()
    assert ref.flat_raw == 1 and ref.params()["flat_raw"] == 1
    assert raw.tolist() == [True, False, True, False, True, True]
    assert ref.states.size == 2 * 32
    assert np.diff(ref.offsets.astype(np.int64))[raw].tolist() == [256, 256, 256, 256 - 256 // 3]
    _same(ref, joint.encode(s, 8, backend=backend, tables=1))
    for b in ("reference", backend):
        assert np.array_equal(joint.decode(ref, backend=b), s)
        out = np.full(s.size, 0xA5A50000, dtype=np.uint32)
        joint.decode(ref, backend=b, out=out)
        assert np.array_equal(out & 0xFFFF, s) and (out >> 16 == 0xA5A5).all()


@settings(max_examples=25, deadline=None)
@given(st.integers(1, 5), st.sampled_from([1, 2, 4]), st.integers(0, 2**32 - 1),
       st.lists(st.integers(0, 4), max_size=3), st.integers(0, 40))
def test_raw_chunks_property(n_chunks, steps, seed, spiky, cut):
    """Reference, C and numba agree bit for bit on planes that mix raw and coded chunks, with
    either layout; every backend decodes every plane."""
    s = _mixed(n_chunks, 32 * steps, seed, [c for c in spiky if c < n_chunks])
    s = s[:max(1, s.size - cut)]
    for flat_raw in (True, False):
        ref = joint.encode(s, steps, backend="reference", flat_raw=flat_raw, tables=1)
        assert ref.flat_raw == int(flat_raw and ref.raw_chunks().any())
        for b in BACKENDS:
            _same(ref, joint.encode(s, steps, backend=b, flat_raw=flat_raw, tables=1))
            assert np.array_equal(joint.decode(ref, backend=b), s)
        assert np.array_equal(joint.decode(ref, backend="reference"), s)


def test_old_layout_unchanged_where_no_table_is_flat():
    # the layout before raw chunks: the same bytes and no flat_raw param where no table is flat
    s = _symbols(4096, spike=1)
    a, b = joint.encode(s, 16, flat_raw=True, tables=1), joint.encode(s, 16, flat_raw=False, tables=1)
    assert "flat_raw" not in a.params() and not a.raw_chunks().any()
    _same(a, b)


@pytest.mark.parametrize("backend", ["reference"] + BACKENDS)
@pytest.mark.parametrize("change,msg", [
    (lambda p: dict(flat_raw=2), "flat_raw"),
    (lambda p: dict(flat_raw=0), "states"),  # raw chunks read as coded: no states for them
    (lambda p: dict(states=np.concatenate([p.states, p.states[:32]])), "states"),
    (lambda p: dict(offsets=p.offsets - np.isin(np.arange(p.offsets.size), [1]).astype(np.uint32)),
     "raw chunk 0 holds 255 words, expected 256"),
])
def test_hostile_raw_chunks_rejected(backend, change, msg):
    p = joint.encode(_mixed(4, 256, spiky=(2,)), 8, tables=1)
    assert p.raw_chunks()[0] and not p.raw_chunks()[2]
    with pytest.raises(CorruptDataError, match=msg):
        joint.decode(_corrupt(p, **change(p)), backend=backend, where="low16 plane")


@pytest.mark.parametrize("backend", BACKENDS)
def test_kernels_flag_raw_chunk_word_counts(backend):
    # the kernels' own guard, below validation: a raw chunk given the wrong span is flagged
    p = joint.encode(_mixed(3, 256, spiky=(1,)), 8, tables=1)
    sidx = p.state_index()
    assert sidx.tolist() == [-1, 0, -1]
    offs = p.offsets.copy()
    offs[1] -= 2
    out = np.zeros(p.n_symbols, dtype=np.uint16)
    status = native.decode_chunks16(p.states, offs, p.words, p.n_symbols, p.chunk_size, p.chunks_per_table,
                                    p.tables(), p.prob_bits, out, sidx, numba=backend == "numba")
    assert status[0] != 0
