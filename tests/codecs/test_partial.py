"""decode_range (the partial decode behind get_slice) and decode_region (a tensor-parallel
shard's block) equal slicing the full decode: property tests over codecs, shapes, chunk lengths,
table segmentations and ranges; what each decodes (its ``stats``)."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

import pytest

from wcodec.codecs import decode_tensor, encode_tensor
from wcodec.codecs.partial import decode_range, decode_region, sub_planes
from wcodec.errors import InvalidInputError

CASES = {  # name -> (dtype, codec options, maker(rng, shape))
    "bf16": ("BF16", {"codec": "float"},
             lambda r, s: ((r.standard_normal(s) * 0.02).astype(np.float32).view(np.uint32) >> 16).astype(np.uint16)),
    "f16": ("F16", {"codec": "float"}, lambda r, s: (r.standard_normal(s) * 0.1).astype(np.float16)),
    "f32": ("F32", {"codec": "float"}, lambda r, s: (r.standard_normal(s) * 0.02).astype(np.float32)),
    "fp8": ("F8_E5M2", {"codec": "fp8"}, lambda r, s: r.integers(0, 256, s).astype(np.uint8)),
    "i8": ("I8", {"codec": "int8", "tile": 4},
           lambda r, s: np.cumsum(r.integers(-1, 2, s), axis=-1).astype(np.int8)),
    "q": ("F32", {"mode": "int8", "tile": 8}, lambda r, s: r.standard_normal(s).astype(np.float32)),
    "raw": ("I32", {"codec": "raw"}, lambda r, s: r.integers(-9, 9, s).astype(np.int32)),
    # heavy tails: escapes in most rows
    "fixed": ("BF16", {"codec": "fixed"},
              lambda r, s: ((r.standard_t(3, s) * 0.02).astype(np.float32).view(np.uint32) >> 16).astype(np.uint16)),
}


def _record(case, rng, shape, steps=2, cpt=2):
    dtype, opts, make = CASES[case]
    arr = make(rng, shape)
    extra = {} if opts.get("codec") in ("raw", "fixed") else {"chunk_steps": steps, "tables": cpt}
    return arr, encode_tensor(arr, dtype, **opts, **extra)


@settings(max_examples=60, deadline=None)
@given(st.sampled_from(sorted(CASES)), st.integers(1, 40), st.integers(1, 70), st.integers(1, 6),
       st.integers(1, 5), st.integers(0, 2**31 - 1), st.data())
def test_decode_range_equals_slicing(case, rows, cols, steps, cpt, seed, data):
    arr, rec = _record(case, np.random.default_rng(seed), (rows, cols), steps, cpt)
    full = decode_tensor(rec).reshape(-1)
    n = full.size
    e0 = data.draw(st.integers(0, n))
    e1 = data.draw(st.integers(e0, n))
    got = decode_range(rec, e0, e1)
    assert got.dtype == full.dtype and np.array_equal(got.view(np.uint8), full[e0:e1].view(np.uint8))


def test_sub_planes_cut_at_table_segments():
    from wcodec import rans
    sym = np.random.default_rng(0).integers(0, 50, 32 * 4 * 10).astype(np.uint8)
    plane = rans.encode(sym, chunk_steps=4, tables=3)  # 10 chunks, tables of 3 chunks
    pieces = list(sub_planes(plane, 2 * 128 + 1, 7 * 128 - 1))
    assert [(p.n_symbols // 128, start // 128) for p, start in pieces] == [(1, 2), (3, 3), (1, 6)]
    assert np.array_equal(np.concatenate([rans.decode(p) for p, _ in pieces]), sym[2 * 128:7 * 128])


@settings(max_examples=60, deadline=None)
@given(st.sampled_from(sorted(CASES)), st.sampled_from([(9, 40), (33, 17), (4, 6, 16), (70,)]),
       st.integers(0, 2**31 - 1), st.data())
def test_decode_region_equals_slicing(case, shape, seed, data):
    arr, rec = _record(case, np.random.default_rng(seed), shape)
    region = [tuple(sorted(data.draw(st.lists(st.integers(0, n), min_size=2, max_size=2)))) for n in shape]
    got = decode_region(rec, region, "w")
    want = decode_tensor(rec)[tuple(slice(a, b) for a, b in region)]
    assert got.shape == want.shape and np.array_equal(got.view(np.uint8), np.ascontiguousarray(want).view(np.uint8))


def test_decode_region_decodes_the_chunks_of_its_rows_only():
    """A row shard of a rANS record decodes the chunks holding its rows (a tensor-parallel rank's
    half: about half the tensor), a column shard every chunk (rows are runs of chunks), a fixed
    record exactly the block in either direction."""
    rng = np.random.default_rng(1)
    _, rec = _record("bf16", rng, (64, 256), steps=8, cpt=4)  # 256 elements per chunk: 64 chunks
    top, left = {}, {}
    decode_region(rec, [(0, 32), (0, 256)], "w", top)
    decode_region(rec, [(0, 64), (0, 128)], "w", left)
    assert top["decoded"] == 32 * 256 and left["decoded"] == 64 * 256
    _, fixed = _record("fixed", rng, (64, 256))
    for region in ([(32, 64), (0, 256)], [(0, 64), (128, 256)], [(5, 9), (3, 77)]):
        stats = {}
        decode_region(fixed, region, "w", stats)
        assert stats["decoded"] == (region[0][1] - region[0][0]) * (region[1][1] - region[1][0])


def test_decode_region_refuses_a_region_that_does_not_fit():
    _, rec = _record("bf16", np.random.default_rng(0), (4, 8))
    for bad in ([(0, 5), (0, 8)], [(0, 4)], [(2, 1), (0, 8)]):
        with pytest.raises(InvalidInputError, match="region"):
            decode_region(rec, bad, "w")


def test_decode_range_whole_above_none_never_decodes_the_whole_tensor():
    _, rec = _record("bf16", np.random.default_rng(2), (64, 256), steps=8, cpt=4)
    stats = {}
    decode_range(rec, 0, 48 * 256, "w", stats, whole_above=None)
    assert stats["decoded"] == 48 * 256
    stats = {}
    decode_range(rec, 0, 48 * 256, "w", stats)  # over half: one decode of the whole tensor
    assert stats["decoded"] == 64 * 256
