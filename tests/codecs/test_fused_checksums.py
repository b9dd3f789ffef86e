"""The checksums that the float codec's C kernels compute in their own pass (issue 30): the
encoder's CRC-32 of its input while splitting it (``EncodedTensor.source_crc``, what the writer
stores) and the decoder's CRC-32 of what it just wrote (``decode_tensor(checksum=True)``, what
the reader checks). Each must equal zlib's CRC of the same bytes for every instruction set, thread
count, chunk layout and tensor size around the kernels' piece boundaries, and a decode that
fails must still raise."""

from __future__ import annotations

import zlib

import numpy as np
import pytest

from wcodec import native
from wcodec.codecs import decode_tensor, encode_tensor
from wcodec.errors import CorruptDataError

needs_ext = pytest.mark.skipif(native.ext() is None, reason="C extension wcodec._cext not built")
SPLIT_TASK = 4096 * 8  # values per split task in wcodec_cext.c (SPLIT_BLOCKS blocks of 8)


def _weights(n: int, dtype: str, seed: int = 0) -> np.ndarray:
    w = (np.random.default_rng(seed).standard_normal(n) * 0.02).astype(np.float32)
    if dtype == "BF16":
        return (w.view(np.uint32) >> 16).astype(np.uint16)
    return w


SIZES = [0, 1, 7, 4095, SPLIT_TASK - 1, SPLIT_TASK, SPLIT_TASK + 1, 3 * SPLIT_TASK + 5]


@needs_ext
@pytest.mark.parametrize("dtype", ["BF16", "F32"])
def test_encoder_checksum_is_zlibs(isa, dtype):
    for n in SIZES:
        a = _weights(n, dtype, n)
        rec = encode_tensor(a, dtype)
        if rec.codec == "float":
            assert rec.source_crc == zlib.crc32(a.tobytes()), (isa, dtype, n)
        else:  # raw below the coded size: no encoder pass to fold it into
            assert rec.source_crc is None


@needs_ext
@pytest.mark.parametrize("dtype", ["BF16", "F32"])
def test_decoder_checksum_is_zlibs(isa, dtype):
    for n in SIZES[1:]:
        a = _weights(n, dtype, n)
        for steps in (None, 4):  # the default chunks, and many short ones (pairs, odd counts)
            rec = encode_tensor(a, dtype, chunk_steps=steps) if n >= 256 else encode_tensor(a, dtype)
            out, crc = decode_tensor(rec, "w", checksum=True)
            assert out.tobytes() == a.tobytes()
            assert crc == zlib.crc32(a.tobytes()), (isa, dtype, n, steps)


@needs_ext
def test_checksums_do_not_depend_on_threads():
    a = _weights(5 * SPLIT_TASK + 3, "F32", 1)
    want = zlib.crc32(a.tobytes())
    before = native.threads()
    try:
        for t in (1, 2, 3):
            native.set_threads(t)
            rec = encode_tensor(a, "F32", chunk_steps=8)
            assert rec.source_crc == want
            assert decode_tensor(rec, checksum=True)[1] == want
    finally:
        native.set_threads(before)


def test_checksum_without_a_fused_pass():
    """Codecs without a fused checksum (raw, int8) and the numba path compute it after."""
    a = _weights(3000, "F32", 2)
    for rec in (encode_tensor(a[:100], "F32"), encode_tensor(np.arange(5000, dtype=np.int8), "I8")):
        out, crc = decode_tensor(rec, checksum=True)
        assert crc == zlib.crc32(out.tobytes())
    with native.disabled():
        rec = encode_tensor(a, "F32")
        assert rec.source_crc is None
        out, crc = decode_tensor(rec, checksum=True)
    assert out.tobytes() == a.tobytes() and crc == zlib.crc32(a.tobytes())


@needs_ext
def test_corrupt_record_still_raises_with_checksum():
    a = _weights(20000, "BF16", 3)
    rec = encode_tensor(a, "BF16")
    sections = dict(rec.sections)
    words = sections["head.words"].copy()
    words[: words.size // 2] ^= 0x5A5A  # garbage words: chunks fail their final-state check
    sections["head.words"] = words
    bad = type(rec)(rec.codec, rec.dtype, rec.shape, rec.params, sections, rec.info)
    with pytest.raises(CorruptDataError, match="tensor 'w'"):
        decode_tensor(bad, "w", checksum=True)


@needs_ext
@pytest.mark.parametrize("dtype", ["BF16", "F32"])
def test_section_checksums_are_zlibs(isa, dtype):
    """The sections' CRCs that the encoder computed as it wrote them (tail, raw and coded low
    planes, rANS words; format version 2's joint plane included) are what the writer stores."""
    from wcodec.format.writer import prepare_sections

    cases = [_weights(n, dtype, n) for n in SIZES[1:]]
    if dtype == "F32":  # low bytes that code well (a bf16 checkpoint widened): coded low planes
        w = _weights(3 * SPLIT_TASK + 5, "F32", 9)
        cases.append((w.view(np.uint32) & 0xFFFFF000).view(np.float32))
    for a in cases:
        recs = [encode_tensor(a, dtype)]
        if dtype == "F32" and a.size >= 256:
            recs.append(encode_tensor(a, dtype, low_joint=True, chunk_steps=4))
        for rec in recs:
            assert rec.codec != "float" or rec.section_crcs, "the float encoder computed none"
            assert set(rec.section_crcs) <= set(rec.sections)
            for name, (_, data, crc) in prepare_sections(rec).items():
                assert crc == zlib.crc32(data.tobytes()), (isa, dtype, a.size, name)
