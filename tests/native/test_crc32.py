"""wcodec.native.crc32 / crc32_many (csrc/crc32.c) against zlib: every length around the
folding steps (16, 64, 128 and 256 bytes, the 256 KiB pieces of the threaded path), unaligned
starts, a running value, each instruction set (the 512-bit, 256-bit and 128-bit carry-less
multiplies, the slice-by-8 tables), the numba fallback's zlib, and bad arguments."""

from __future__ import annotations

import zlib

import numpy as np
import pytest

from wcodec import native

ext = native.ext()
needs_ext = pytest.mark.skipif(ext is None, reason="C extension wcodec._cext not built (or WCODEC_NATIVE=0)")
PIECE = 1 << 18  # crc32.c's piece of the threaded path
PARALLEL = 4 << 20  # and the bytes from which it runs

LENGTHS = [*range(0, 300), 383, 384, 511, 512, 513, 767, 768, 1000, 1040, 4096 + 13, PIECE - 1, PIECE, PIECE + 1, 3 * PIECE + 17]


@needs_ext
def test_equals_zlib_every_length_and_alignment(isa):
    data = np.random.default_rng(0).integers(0, 256, LENGTHS[-1] + 8, dtype=np.uint8)
    for n in LENGTHS:
        for off in (0, 1, 7):
            b = data[off:off + n]
            want = zlib.crc32(b)
            assert ext.crc32(b) == want, (isa, n, off)
            assert ext.crc32(b, 0xDEADBEEF) == zlib.crc32(b, 0xDEADBEEF), (isa, n, off)


@needs_ext
def test_threaded_pieces_equal_one_thread():
    data = np.random.default_rng(1).integers(0, 256, PARALLEL + 5 * PIECE + 3, dtype=np.uint8)
    one = ext.crc32(data, 0, 1)
    assert one == zlib.crc32(data)
    assert ext.crc32(data, 0, 2) == ext.crc32(data, 0, 4) == one
    assert ext.crc32(data, 77, 3) == zlib.crc32(data, 77)


@needs_ext
def test_many_equals_each():
    rng = np.random.default_rng(2)
    bufs = [rng.integers(0, 256, n, dtype=np.uint8) for n in (0, 5, 64, PIECE, 2 * PIECE + 9, 1000, PARALLEL + 1)]
    bufs.append(b"bytes too")
    bufs.append(memoryview(bytearray(b"x" * 300)))
    bufs.append(rng.standard_normal(7000).astype(np.float32))  # any C-contiguous buffer: its bytes
    want = [zlib.crc32(b) for b in bufs]
    assert ext.crc32_many(bufs) == want
    assert ext.crc32_many(tuple(bufs), 1) == want
    assert ext.crc32_many([]) == []


@needs_ext
def test_bad_arguments_raise():
    with pytest.raises((BufferError, ValueError)):
        ext.crc32(np.zeros((4, 4), np.uint8)[:, ::2])  # not contiguous
    with pytest.raises(TypeError):
        ext.crc32("text")
    with pytest.raises(TypeError):
        ext.crc32_many(5)
    with pytest.raises(TypeError):
        ext.crc32_many([b"ok", object()])


def test_wrappers_match_zlib_with_and_without_the_extension():
    data = np.random.default_rng(3).integers(0, 256, 70_001, dtype=np.uint8)
    want = zlib.crc32(data)
    assert native.crc32(data) == want
    assert native.crc32(data, 5) == zlib.crc32(data, 5)
    assert native.crc32_many([data, b""]) == [want, 0]
    with native.disabled():  # the numba path: zlib
        assert native.crc32(data) == want
        assert native.crc32_many([data]) == [want]


needs_pread = pytest.mark.skipif(not native.has_pread_crc(), reason="no C pread_crc here")


@needs_pread
def test_pread_crc_reads_and_checksums_sections(tmp_path, isa):
    """Sections in any order, overlapping, empty, across the 256 KiB read pieces, at an offset."""
    data = np.random.default_rng(4).integers(0, 256, 3 * PIECE + 999, dtype=np.uint8)
    path = tmp_path / "f.bin"
    path.write_bytes(b"x" * 77 + data.tobytes())
    spans = [(0, 10), (PIECE - 5, 11), (100, 3 * PIECE), (5, 0), (0, data.size), (data.size - 1, 1), (3, 300)]
    buf = np.zeros(data.size, np.uint8)
    with open(path, "rb") as f:
        got = native.pread_crc(f.fileno(), buf, 77, [a for a, _ in spans], [n for _, n in spans])
    assert buf.tobytes() == data.tobytes()
    assert got == [zlib.crc32(data[a:a + n]) for a, n in spans]


@needs_pread
def test_pread_crc_short_read_and_bad_sections(tmp_path):
    path = tmp_path / "f.bin"
    path.write_bytes(bytes(range(256)) * 10)
    with open(path, "rb") as f:
        assert native.pread_crc(f.fileno(), np.zeros(3000, np.uint8), 0, [0], [3000]) is None  # the file ends first
        assert native.pread_crc(f.fileno(), np.zeros(10, np.uint8), 0, [], []) == []
        with pytest.raises(ValueError, match="outside"):
            native.pread_crc(f.fileno(), np.zeros(10, np.uint8), 0, [5], [6])
        with pytest.raises(ValueError):
            native.pread_crc(f.fileno(), np.zeros(10, np.uint8), 0, [0, 1], [1])
        with pytest.raises((BufferError, TypeError)):
            native.pread_crc(f.fileno(), b"read-only", 0, [0], [1])
    with pytest.raises(OSError):
        native.pread_crc(-1, np.zeros(10, np.uint8), 0, [0], [1])


@needs_pread
def test_pread_crc_large_span_on_threads(tmp_path):
    """A span of 4 MiB or more is read in pieces on the extension's threads: the same bytes and
    CRCs as the one-thread read, whatever the thread count; a short read is still None."""
    size = 17 * PIECE + 12345  # above the 4 MiB threshold, a short last piece
    data = np.random.default_rng(5).integers(0, 256, size, dtype=np.uint8)
    path = tmp_path / "big.bin"
    path.write_bytes(b"y" * 4099 + data.tobytes())
    spans = [(0, 64), (64, 5 * PIECE - 64), (5 * PIECE, 0), (5 * PIECE + 1, 7 * PIECE), (3, size - 3),
             (size - 7, 7), (2 * PIECE + 17, 17), (size, 0)]
    want = [zlib.crc32(data[a:a + n]) for a, n in spans]
    before = native.threads()
    try:
        with open(path, "rb") as f:
            for t in (1, 2, 3):
                native.set_threads(t)
                buf = np.zeros(size, np.uint8)
                got = native.pread_crc(f.fileno(), buf, 4099, [a for a, _ in spans], [n for _, n in spans])
                assert buf.tobytes() == data.tobytes(), t
                assert got == want, t
            one = native.ext().pread_crc(f.fileno(), np.zeros(size, np.uint8), 4099, [0], [size], 1)
            assert one == [zlib.crc32(data)]
            # the file ends 100 bytes before the span does, in its last piece
            assert native.pread_crc(f.fileno(), np.zeros(size, np.uint8), 4199, [0], [size]) is None
    finally:
        native.set_threads(before)
