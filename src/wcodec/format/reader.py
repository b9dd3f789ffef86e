"""Lazy, validating reader of one .wcodec file (memory-mapped; layout in docs/FORMAT.md).

Opening reads the 64-byte preamble and the JSON header only, and validates every entry against
the file size before any section is touched. A tensor's sections are read with one ``pread`` of
its byte span (not exposed as views of a memory map: a file truncated in place while mapped
kills the process with SIGBUS on the next touch of a lost page; a short read is an error
instead), so a GPU loader still uploads a tensor's span in one copy. ``record(copy=False)``
gives zero-copy views of a memory map instead (size checked first) for loaders that copy the
bytes at once.
"""

from __future__ import annotations

import math
import mmap
import os
from pathlib import Path

import numpy as np

from .. import native
from ..errors import ChecksumError, CorruptDataError, FormatError
from . import _io, spec


_EMPTY = np.empty(0, dtype=np.uint8)
_EMPTY.flags.writeable = False


class SpanBuffer:
    """A uint8 buffer that one thread reuses for the byte spans of successive tensors.

    A new buffer per tensor costs its fresh pages: a page fault per 4 KiB, about as much as the
    copy itself (MiniLM, 2-vCPU VM, issue 30). It grows to the largest span asked for (loaders
    ask for the largest tensor first) and is freed with this object: keep one per load call.
    """

    def __init__(self):
        self._buf = np.empty(0, dtype=np.uint8)

    def take(self, n: int) -> np.ndarray:
        """A writable view of the first ``n`` bytes (the old contents are lost on growth)."""
        if self._buf.size < n:
            self._buf = np.empty(n, dtype=np.uint8)
        return self._buf[:n]

    def holds(self, arr: np.ndarray) -> bool:
        """Whether ``arr`` may share memory with the buffer."""
        return bool(self._buf.size) and np.may_share_memory(arr, self._buf)


class Reader:
    """An open .wcodec file.

    Args:
        path: the file. Raises FormatError (not a .wcodec file, unknown version),
            CorruptDataError / ChecksumError (bad header, offsets, sizes; names the tensor),
            OSError (cannot open).
    """

    def __init__(self, path):
        self.path = Path(path)
        self._mm = None
        f = _io.open_regular(self.path, ".wcodec file")
        try:
            size = os.fstat(f.fileno()).st_size
            pre = f.read(spec.PREAMBLE_SIZE)
            h_off, h_size, h_crc = spec.parse_preamble(pre, size)
            raw = os.pread(f.fileno(), h_size, h_off)
            if len(raw) != h_size:
                raise CorruptDataError("truncated header")
            self.header = spec.parse_header(raw, h_crc)
            spec.check_versions(pre, self.header)
            spec.validate_tensors(self.header["tensors"], h_off)
        except (CorruptDataError, FormatError) as e:
            f.close()
            raise type(e)(f"{self.path.name}: {e}") from None
        except BaseException:
            f.close()
            raise
        self._f = f
        self._tensors = self.header["tensors"]
        self.header_offset = h_off
        self.file_size = size

    # -- index ---------------------------------------------------------------------------------
    def keys(self) -> list[str]:
        """Tensor names in file order, aliases included."""
        return list(self._tensors)

    def __contains__(self, name) -> bool:
        return name in self._tensors

    def __len__(self) -> int:
        return len(self._tensors)

    def metadata(self) -> dict[str, str]:
        """The model metadata (str -> str) stored by the writer."""
        return dict(self.header.get("metadata", {}))

    def alias_of(self, name: str) -> str | None:
        """The stored tensor that ``name`` is another name of, or None if ``name`` is stored."""
        return self._entry(name, resolve=False).get("alias_of")

    def _entry(self, name: str, resolve: bool = True) -> dict:
        try:
            e = self._tensors[name]
        except KeyError:
            raise KeyError(f"no tensor named {name!r} in {self.path.name}") from None
        return self._tensors[e["alias_of"]] if resolve and "alias_of" in e else e

    def entry(self, name: str) -> dict:
        """The header entry (dtype, shape, codec, params, sections, crc32, info) of a tensor."""
        return self._entry(name)

    def numel(self, name: str) -> int:
        """Number of elements of a tensor (the product of its header shape; 1 for a scalar)."""
        return math.prod(self._entry(name)["shape"])

    def section_spans(self, name: str) -> dict[str, tuple[int, int]]:
        """{section: (file offset, size in bytes)} of a tensor's sections."""
        return {k: (s["offset"], s["size"]) for k, s in self._entry(name)["sections"].items()}

    def span(self, name: str) -> tuple[int, int]:
        """(start, end) byte range of the file holding all of a tensor's sections.

        The writer stores a tensor's sections contiguously (only alignment padding between
        them), so a loader can copy ``[start, end)`` at once and address each section at
        ``offset - start``. Empty tensors give an empty span.
        """
        spans = [(o, o + s) for o, s in self.section_spans(name).values() if s]
        if not spans:
            return (0, 0)
        return (min(a for a, _ in spans), max(b for _, b in spans))

    def buffer(self) -> memoryview:
        """Read-only view of the whole file, memory-mapped (for bulk copies of spans).

        Unlike :meth:`record`, the mapping is exposed: if another process truncates the file
        while it is mapped, touching the lost pages raises SIGBUS. Check :meth:`check_size`
        before a bulk copy, or prefer :meth:`read_span`.
        """
        self._open_check()
        if self._mm is None:
            self._mm = mmap.mmap(self._f.fileno(), 0, access=mmap.ACCESS_READ)
        self.check_size()
        return memoryview(self._mm)

    def _open_check(self) -> None:
        if self._f is None:
            raise ValueError(f"{self.path.name} is closed")

    def check_size(self) -> None:
        """Raise CorruptDataError if the file no longer has the size it had when opened."""
        self._open_check()
        now = os.fstat(self._f.fileno()).st_size
        if now != self.file_size:
            raise CorruptDataError(f"{self.path.name}: the file changed size from {self.file_size} to "
                                   f"{now} bytes while open (truncated or rewritten in place)")

    def read_span(self, start: int, end: int, into: "SpanBuffer | None" = None) -> np.ndarray:
        """A uint8 array with bytes [start, end) of the file, read with pread: a new array, or
        with ``into`` a view of that thread's reused buffer (overwritten by its next read).

        Raises CorruptDataError when the file has been truncated meanwhile (a short read).
        """
        buf = self._span_buffer(start, end, into)
        if not _io.pread_into(self._f.fileno(), buf, start):
            raise self._short_read(start, end)
        return buf

    def _read_checked(self, start: int, end: int, into, sections) -> tuple[np.ndarray, list[int]]:
        """:meth:`read_span` of [start, end) and the CRC-32 of each of ``sections`` (header
        entries inside the span) from the same pass (``native.pread_crc``)."""
        buf = self._span_buffer(start, end, into)
        sections = list(sections)
        # an empty section's offset may lie anywhere (the writer leaves it where the file was)
        got = native.pread_crc(self._f.fileno(), buf, start, [s["offset"] - start if s["size"] else 0
                                                              for s in sections], [s["size"] for s in sections])
        if got is None:
            raise self._short_read(start, end)
        return buf, got

    def _span_buffer(self, start: int, end: int, into) -> np.ndarray:
        self._open_check()
        return np.empty(end - start, dtype=np.uint8) if into is None else into.take(end - start)

    def _short_read(self, start: int, end: int) -> CorruptDataError:
        return CorruptDataError(f"{self.path.name}: short read of bytes [{start}, {end}): the file "
                                f"was truncated while open (had {self.file_size} bytes)")

    # -- data ----------------------------------------------------------------------------------
    def record(self, name: str, verify: bool = True, copy: bool = True, into: "SpanBuffer | None" = None):
        """The EncodedTensor of ``name``.

        copy=True (default): sections are read-only views of one new buffer holding the
        tensor's byte span, read with one pread, so a file truncated meanwhile is a
        CorruptDataError, never SIGBUS. copy=False: zero-copy views of the memory map, after
        checking the file still has its size (measured 2x faster with the crc32s on a 53 MB
        tensor, benchmarks/experiments/hostile_bounds.py); a truncation *while the views are in use* can
        still raise SIGBUS, so use it only to copy the bytes at once (the GPU loader does).
        into: with copy=True, read into this :class:`SpanBuffer` instead of a new buffer (no
        fresh pages per tensor); the record is then valid only until the buffer's next read.
        verify: check each section's crc32: with copy=True and the C extension computed by
        ``native.pread_crc`` as each 256 KiB piece of the span lands (in cache), else over the
        compressed bytes in one call of ``native.crc32_many``.
        Raises ChecksumError naming the tensor and section, CorruptDataError when the file was
        truncated while open, KeyError for an unknown name.
        """
        from ..codecs.base import EncodedTensor

        self._open_check()
        e = self._entry(name)
        got = None
        if copy:
            start, end = self.span(name)
            if verify and native.has_pread_crc():  # checksummed piece by piece as the bytes land
                buf, got = self._read_checked(start, end, into, e["sections"].values())
            else:
                buf = self.read_span(start, end, into)
        else:
            start, buf = 0, np.frombuffer(self.buffer(), dtype=np.uint8)
        buf.flags.writeable = False
        # byte slices viewed as their dtypes (np.frombuffer per section cost ~4x a slice's view)
        raw = [buf[s["offset"] - start:s["offset"] - start + s["size"]] if s["size"] else _EMPTY
               for s in e["sections"].values()]
        sections = {sname: r.view(spec.SECTION_NP[s["dtype"]])
                    for (sname, s), r in zip(e["sections"].items(), raw)}
        if verify:
            got = native.crc32_many(raw) if got is None else got
            for (sname, s), crc in zip(e["sections"].items(), got):
                if crc != s["crc32"]:
                    raise ChecksumError(f"tensor '{name}': section '{sname}' checksum mismatch (corrupt data)")
        return EncodedTensor(e["codec"], e["dtype"], tuple(e["shape"]), e.get("params", {}), sections,
                             dict(e.get("info", {})))

    def get_numpy(self, name: str, verify: bool = True, out: np.ndarray | None = None,
                  into: "SpanBuffer | None" = None) -> np.ndarray:
        """Decode ``name`` on the CPU to a new numpy array of its dtype and shape (BF16 as uint16).

        verify: check the section checksums and the crc32 of the decoded bytes (the float
        codec's C decode computes it chunk by chunk as it writes them).
        out: optional destination (a view of a torch tensor, pinned memory, an np.memmap; what
        ``codecs.check_out`` accepts): decoded straight into it and returned as a view of it.
        into: a :class:`SpanBuffer` the compressed bytes are read into (one per thread, reused
        from tensor to tensor); the result never shares memory with it.
        Raises a WcodecError subclass naming the tensor on corrupt data (``out`` may then be
        partly written), InvalidInputError for an ``out`` of the wrong dtype, shape or layout.
        """
        from ..codecs import decode_tensor

        rec = self.record(name, verify=verify, into=into)
        # verify: the decoded bytes' CRC-32 from the decode pass itself (float codec, C extension)
        out, crc = decode_tensor(rec, name, out=out, checksum=True) if verify else (decode_tensor(rec, name, out=out), None)
        if into is not None and into.holds(out):  # a codec that hands back its section: own it
            out = out.copy()
        if out.shape != rec.shape or out.dtype.itemsize != spec.TENSOR_ITEMSIZE[rec.dtype]:
            raise CorruptDataError(f"tensor '{name}': decoded {out.dtype}{list(out.shape)}, "
                                   f"expected {rec.dtype}{list(rec.shape)}")
        if verify and crc != self._entry(name)["crc32"]:
            raise ChecksumError(f"tensor '{name}': checksum of the decoded tensor does not match")
        return out

    def verify(self, name: str) -> None:
        """Full check of one tensor: section checksums, decode, decoded checksum."""
        self.get_numpy(name, verify=True)

    def close(self) -> None:
        """Close the file; arrays handed out stay valid (a mapping from :meth:`buffer` stays
        alive until its views are freed)."""
        self._mm = None
        if self._f is not None:
            self._f.close()
            self._f = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
