"""decode_range (the partial decode behind get_slice) equals slicing the full decode: property
test over codecs, shapes, chunk lengths, table segmentations and ranges."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from wcodec.codecs import decode_tensor, encode_tensor
from wcodec.codecs.partial import decode_range, sub_planes

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
}


@settings(max_examples=60, deadline=None)
@given(st.sampled_from(sorted(CASES)), st.integers(1, 40), st.integers(1, 70), st.integers(1, 6),
       st.integers(1, 5), st.integers(0, 2**31 - 1), st.data())
def test_decode_range_equals_slicing(case, rows, cols, steps, cpt, seed, data):
    dtype, opts, make = CASES[case]
    rng = np.random.default_rng(seed)
    arr = make(rng, (rows, cols))
    extra = {} if opts.get("codec") == "raw" else {"chunk_steps": steps, "tables": cpt}
    rec = encode_tensor(arr, dtype, **opts, **extra)
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
