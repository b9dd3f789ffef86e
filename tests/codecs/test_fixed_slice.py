"""codecs.fixed_slice: a block of a codec "fixed" record (a tensor-parallel shard) is the canonical
record of the block's values, made from the parent's bytes without decoding: rows, columns on
and off the 16-column groups, the last shard's padding, 32-bit escape columns, 3-D records."""

from __future__ import annotations

import numpy as np
import pytest

from wcodec.codecs import decode_tensor, encode_tensor
from wcodec.codecs.fixed import check_record, decode_bits, encode_bits
from wcodec.codecs.fixed_slice import region_block, slice_record, slice_sections
from wcodec.errors import CorruptDataError, InvalidInputError


def _bits(rng, shape):
    """bf16 bit patterns with heavy tails (escapes in most rows), zeros and -0.0 among them."""
    u = (rng.standard_t(3, shape) * 0.02).astype(np.float32).view(np.uint32)
    bits = (u >> 16).astype(np.uint16)
    bits.reshape(-1)[::37] = 0
    bits.reshape(-1)[5::41] = 0x8000
    return bits


BLOCKS = [(0, 9, 0, 100), (3, 7, 0, 100), (0, 9, 16, 64), (0, 9, 48, 100), (2, 5, 3, 77), (0, 9, 7, 8),
          (4, 4, 0, 100), (1, 8, 99, 100), (0, 9, 96, 100), (0, 9, 0, 16)]


@pytest.mark.parametrize("block", BLOCKS)
def test_block_is_the_canonical_record_of_its_values(block):
    rows, cols = 9, 100
    bits = _bits(np.random.default_rng(sum(block)), (rows, cols))
    params, sections = encode_bits(bits.reshape(-1), rows, cols)
    r0, r1, c0, c1 = block
    p, s = slice_sections(params, sections, rows, cols, r0, r1, c0, c1)
    check_record(p, s, r1 - r0, c1 - c0)  # canonical (raises otherwise)
    got = decode_bits(p, s, r1 - r0, c1 - c0).reshape(r1 - r0, c1 - c0)
    assert np.array_equal(got, bits[r0:r1, c0:c1])
    assert p["base"] == params["base"] and p["n_escapes"] == s["esc.col"].size
    for k, a in s.items():  # the block owns its bytes: no view of the parent (the file's memory)
        assert not any(np.shares_memory(a, b) for b in sections.values()), k


def test_wide_records_rebase_32_bit_escape_columns():
    rows, cols = 2, 70000  # 32-bit escape columns; a half is under 65536: 16-bit in the block
    bits = _bits(np.random.default_rng(3), (rows, cols))
    params, sections = encode_bits(bits.reshape(-1), rows, cols)
    assert params["col_bits"] == 32
    for c0, c1 in ((0, 35000), (35000, 70000), (0, 70000)):
        p, s = slice_sections(params, sections, rows, cols, 0, rows, c0, c1)
        assert p["col_bits"] == (16 if c1 - c0 <= 0x10000 else 32)
        assert np.array_equal(decode_bits(p, s, rows, c1 - c0).reshape(rows, -1), bits[:, c0:c1])


def test_slice_record_of_a_3d_region():
    """A 3-D record's view is [E, N*K]: a block of experts and rows is one block of the view; a
    cut along the last dim is not one (None: the caller decodes instead)."""
    bits = _bits(np.random.default_rng(4), (4, 6, 16))
    rec = encode_tensor(bits, "BF16", codec="fixed")
    cut = slice_record(rec, [(1, 3), (2, 5), (0, 16)])
    assert cut.shape == (2, 3, 16) and np.array_equal(decode_tensor(cut), bits[1:3, 2:5])
    assert slice_record(rec, [(0, 4), (0, 6), (0, 8)]) is None
    assert region_block((4, 6, 16), [(1, 3), (2, 5), (0, 16)]) == (1, 3, 32, 80)


def test_bad_blocks_and_records_are_refused():
    rows, cols = 9, 100
    params, sections = encode_bits(_bits(np.random.default_rng(5), (rows, cols)).reshape(-1), rows, cols)
    with pytest.raises(InvalidInputError, match="outside"):
        slice_sections(params, sections, rows, cols, 0, 10, 0, cols)
    with pytest.raises(InvalidInputError, match="does not fit"):
        region_block((rows, cols), [(0, rows), (0, cols + 1)])
    bad = dict(sections, **{"esc.ptr": sections["esc.ptr"][::-1].copy()})
    with pytest.raises(CorruptDataError, match="esc.ptr"):
        slice_sections(params, bad, rows, cols, 0, 2, 0, cols)
