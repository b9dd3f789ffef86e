"""Lazy, validating reader of one .wcodec file (memory-mapped; layout in docs/FORMAT.md).

Opening reads the 64-byte preamble and the JSON header only, and validates every entry against
the file size before any section is touched. A tensor's sections are read with one ``pread`` of
its byte span (not exposed as views of a memory map: a file truncated in place while mapped
kills the process with SIGBUS on the next touch of a lost page; a short read is an error
instead), so a GPU loader still uploads a tensor's span in one copy. ``record(copy=False)``
gives zero-copy views of a memory map instead (size checked first) for loaders that copy the
bytes at once. Float records decode on the CPU without a span buffer (:meth:`Reader.decode_floats`:
the C extension reads each pair of chunks' bytes just before it decodes them).
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
#: weights, and bytes of decode lookups, per call of :meth:`Reader.decode_floats` at most (one
#: tensor may exceed them): bounds what a large or hostile checkpoint holds besides its outputs
GROUP_NUMEL = 1 << 28
GROUP_TABLES = 1 << 28


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


class _ReadPlan:
    """What reading one stored tensor needs, taken from its validated header entry: the byte
    span [start, end) of its sections, and per section (in entry order) its name, numpy dtype,
    file offset, size, offset inside the span (0 for an empty one) and stored CRC-32."""

    __slots__ = ("entry", "shape", "start", "end", "names", "dtypes", "offsets", "sizes", "starts", "crcs")

    def __init__(self, e: dict):
        secs = e["sections"]
        self.entry, self.shape = e, tuple(e["shape"])
        self.names = list(secs)
        self.dtypes = [spec.SECTION_NP[s["dtype"]] for s in secs.values()]
        self.offsets = [s["offset"] for s in secs.values()]
        self.sizes = [s["size"] for s in secs.values()]
        self.crcs = [s["crc32"] for s in secs.values()]
        spans = [(o, o + n) for o, n in zip(self.offsets, self.sizes) if n]
        self.start, self.end = (min(a for a, _ in spans), max(b for _, b in spans)) if spans else (0, 0)
        # an empty section's offset may lie anywhere (the writer leaves it where the file was)
        self.starts = [o - self.start if n else 0 for o, n in zip(self.offsets, self.sizes)]


class Reader:
    """An open .wcodec file, or the bytes of one.

    Args:
        path: the file (with ``data``: only the name errors give). data: the file's bytes
            (bytes, bytearray, memoryview), read in place (never copied, held until close).
        Raises FormatError (not a .wcodec file, unknown version), CorruptDataError /
        ChecksumError (bad header, offsets, sizes; names the tensor), OSError (cannot open).
    """

    def __init__(self, path, data=None):
        self.path = Path(path)
        self._mm = None
        self._mem = None if data is None else memoryview(data).cast("B")
        f = None if data is not None else _io.open_regular(self.path, ".wcodec file")
        try:
            size = os.fstat(f.fileno()).st_size if f is not None else len(self._mem)
            pre = f.read(spec.PREAMBLE_SIZE) if f is not None else bytes(self._mem[:spec.PREAMBLE_SIZE])
            h_off, h_size, h_crc = spec.parse_preamble(pre, size)
            raw = os.pread(f.fileno(), h_size, h_off) if f is not None else bytes(self._mem[h_off:h_off + h_size])
            if len(raw) != h_size:
                raise CorruptDataError("truncated header")
            self.header = spec.parse_header(raw, h_crc)
            spec.check_versions(pre, self.header)
            spec.validate_tensors(self.header["tensors"], h_off)
        except (CorruptDataError, FormatError) as e:
            self._drop(f)
            raise type(e)(f"{self.path.name}: {e}") from None
        except BaseException:
            self._drop(f)
            raise
        self._f = f
        self._tensors = self.header["tensors"]
        self._plans: dict[str, _ReadPlan] = {}
        self.header_offset = h_off
        self.file_size = size

    def _drop(self, f) -> None:
        if f is not None:
            f.close()
        self._mem = None  # (views of it handed out keep the bytes alive)

    @property
    def _source(self):
        """What the C decoders read sections from: the file's descriptor, or its bytes."""
        return self._f.fileno() if self._f is not None else self._mem

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
        plan = self._plan(name)
        return (plan.start, plan.end)

    def buffer(self) -> memoryview:
        """Read-only view of the whole file, memory-mapped (for bulk copies of spans).

        Unlike :meth:`record`, the mapping is exposed: if another process truncates the file
        while it is mapped, touching the lost pages raises SIGBUS. Check :meth:`check_size`
        before a bulk copy, or prefer :meth:`read_span`.
        """
        self._open_check()
        if self._mem is not None:
            return self._mem.toreadonly()
        if self._mm is None:
            self._mm = mmap.mmap(self._f.fileno(), 0, access=mmap.ACCESS_READ)
        self.check_size()
        return memoryview(self._mm)

    def _open_check(self) -> None:
        if self._f is None and self._mem is None:
            raise ValueError(f"{self.path.name} is closed")

    def check_size(self) -> None:
        """Raise CorruptDataError if the file no longer has the size it had when opened."""
        self._open_check()
        if self._f is None:
            return  # bytes in memory: held, they cannot shrink
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
        if self._f is None:
            buf[:] = np.frombuffer(self._mem, dtype=np.uint8, count=end - start, offset=start)
        elif not _io.pread_into(self._f.fileno(), buf, start):
            raise self._short_read(start, end)
        return buf

    def _span_buffer(self, start: int, end: int, into) -> np.ndarray:
        self._open_check()
        return np.empty(end - start, dtype=np.uint8) if into is None else into.take(end - start)

    def _short_read(self, start: int, end: int) -> CorruptDataError:
        return CorruptDataError(f"{self.path.name}: short read of bytes [{start}, {end}): the file "
                                f"was truncated while open (had {self.file_size} bytes)")

    # -- data ----------------------------------------------------------------------------------
    def _plan(self, name: str) -> "_ReadPlan":
        """The read plan of a stored tensor, built from its (validated) header entry once per
        Reader: reading a record then costs one dict lookup instead of rebuilding the span and
        section lists on every call (MiniLM: 39 records per load)."""
        plan = self._plans.get(name)
        if plan is None:
            plan = self._plans[name] = _ReadPlan(self._entry(name))
        return plan

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
        plan = self._plan(name)
        got = None
        copy = copy and self._f is not None  # bytes in memory: views of them, they cannot change size
        if copy:
            start = plan.start
            if verify and native.has_pread_crc():  # checksummed piece by piece as the bytes land
                buf = self._span_buffer(start, plan.end, into)
                # an empty section's offset may lie anywhere (the writer leaves it where the file was)
                got = native.pread_crc(self._f.fileno(), buf, start, plan.starts, plan.sizes)
                if got is None:
                    raise self._short_read(start, plan.end)
            else:
                buf = self.read_span(start, plan.end, into)
        else:
            start, buf = 0, np.frombuffer(self.buffer(), dtype=np.uint8)
        buf.flags.writeable = False
        # byte slices viewed as their dtypes (np.frombuffer per section cost ~4x a slice's view)
        raw = [buf[a - start:a - start + n] if n else _EMPTY for a, n in zip(plan.offsets, plan.sizes)]
        if verify:
            got = native.crc32_many(raw) if got is None else got
            if got != plan.crcs:
                sname = next(k for k, c, want in zip(plan.names, got, plan.crcs) if c != want)
                raise ChecksumError(f"tensor '{name}': section '{sname}' checksum mismatch (corrupt data)")
        e = plan.entry
        return EncodedTensor(e["codec"], e["dtype"], plan.shape, e.get("params", {}),
                             {k: r.view(dt) for k, r, dt in zip(plan.names, raw, plan.dtypes)},
                             dict(e.get("info", {})))

    def file_decodable(self, name: str) -> bool:
        """Whether :meth:`decode_floats` decodes stored tensor ``name`` (a float record, the C
        extension's file decode here: ``codecs.float.reads_from_file``)."""
        from ..codecs.float import reads_from_file
        return reads_from_file(self._entry(name))

    def decode_floats(self, names: list, verify: bool = True, outs: dict | None = None) -> dict:
        """{name: decoded array (BF16 as uint16, the tensor's shape)} of stored tensors ``names``
        that :meth:`file_decodable` accepts, decoded straight from the file in C calls over the
        extension's threads (``native.decode_float_file``, one call for up to GROUP_NUMEL weights):
        each tensor's small sections read and checked as the float codec's ``parse`` checks them,
        each pair of chunks' words, tail and low bytes read just before it is decoded and
        checksummed as it lands (no copy of a whole section, no fresh pages for one). Every check
        of :meth:`get_numpy` is made (with ``verify`` the sections' and the decoded bytes'
        CRC-32s); a tensor that fails any goes through get_numpy's reference path, which raises
        the precise error. outs: {name: destination} (what ``codecs.check_out`` accepts) for
        some names; the others get new arrays. Raises as get_numpy (the first failing tensor, in
        descending size order)."""
        from ..codecs.base import DTYPES
        from ..codecs.float import LAYOUT, UINT, file_row, lookup_bytes

        outs = outs or {}
        todo = sorted(names, key=self.numel, reverse=True)  # the largest first: their pairs start first
        done, i = {}, 0
        while i < len(todo):
            group, rows, flat, numel, tables = [], [], [], 0, 0
            while i < len(todo) and (not group or (numel + self.numel(todo[i]) <= GROUP_NUMEL
                                                   and tables + lookup_bytes(self._entry(todo[i])) <= GROUP_TABLES)):
                n = todo[i]
                e, k = self._entry(n), self.numel(n)
                numel, tables = numel + k, tables + lookup_bytes(e)
                group.append(n)
                rows.append(file_row(e, k))
                out = outs.get(n)
                flat.append(np.empty(k, dtype=UINT[LAYOUT[e["dtype"]][0]]) if out is None else self._out_view(n, out))
                i += 1
            codes = native.decode_float_file(self._source, np.array(rows, dtype=np.int64), flat, verify)
            for n, code, f in zip(group, codes, flat):
                if code:  # the reference decodes it again, and raises what is wrong
                    done[n] = self._get_numpy(n, verify, outs.get(n))
                else:
                    e = self._entry(n)
                    done[n] = f.view(DTYPES[e["dtype"]]).reshape(e["shape"])
        return {n: done[n] for n in names}

    def _out_view(self, name: str, out) -> np.ndarray:
        """``out`` checked as the destination of stored tensor ``name`` (``codecs.check_out``),
        flat, as the unsigned words the decoder writes."""
        from ..codecs import check_out
        from ..codecs.base import EncodedTensor
        from ..codecs.float import LAYOUT, UINT

        e = self._entry(name)
        flat = check_out(EncodedTensor(e["codec"], e["dtype"], tuple(e["shape"]), {}, {}), out, name)
        return flat.view(UINT[LAYOUT[e["dtype"]][0]])

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
        if self.file_decodable(name):  # read piece by piece as it decodes: no span buffer
            return self.decode_floats([name], verify, None if out is None else {name: out})[name]
        return self._get_numpy(name, verify, out, into)

    def _get_numpy(self, name: str, verify: bool, out, into=None) -> np.ndarray:
        """get_numpy's reference path: the record read whole (:meth:`record`), then decoded."""
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
        self._drop(self._f)
        self._f = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
