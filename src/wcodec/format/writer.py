"""Streaming, atomic writer of one .wcodec file (layout in docs/FORMAT.md).

Sections are written as soon as a tensor is encoded; only the JSON index stays in memory. The
file is built under a temporary name in the destination folder and renamed over the destination
by :meth:`Writer.commit`, so an interrupted write never leaves a partial ``.wcodec`` behind.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import numpy as np

from .. import native
from ..errors import CorruptDataError, NotFoundError, UnsupportedError
from . import _io, spec


def _jsonable(x):
    """Codec params/info may hold numpy scalars; the header holds plain JSON values."""
    if isinstance(x, dict):
        return {str(k): _jsonable(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_jsonable(v) for v in x]
    if isinstance(x, np.generic):
        x = x.item()
    if isinstance(x, float) and not np.isfinite(x):
        return str(x)  # JSON has no inf/nan (e.g. the SNR of an exactly quantized tensor)
    if isinstance(x, np.ndarray):
        return _jsonable(x.tolist())
    return x


def prepare_sections(record) -> dict:
    """{section: (dtype name, its little-endian C-order bytes as a uint8 array, crc32)} of an
    EncodedTensor: the per-section work of :meth:`Writer.add_record` that needs no file, so that
    ``encode_into`` runs it on its worker threads. Checksums the encoder computed as it wrote
    the sections (``record.section_crcs``, bytes in memory order: little-endian hosts) are
    taken as they are, the others computed in one call of ``native.crc32_many``.
    Raises ValueError for a section dtype the format does not allow."""
    out = {}
    for sname, arr in record.sections.items():
        arr = np.asarray(arr)
        dt = spec.section_dtype_name(arr)
        out[sname] = (dt, np.ascontiguousarray(arr.reshape(-1), dtype=arr.dtype.newbyteorder("<")).view(np.uint8))
    known = getattr(record, "section_crcs", None) if sys.byteorder == "little" else None
    known = known or {}
    todo = [k for k in out if k not in known]
    crcs = {**known, **dict(zip(todo, native.crc32_many([out[k][1] for k in todo])))}
    return {k: (dt, data, crcs[k]) for k, (dt, data) in out.items()}


_ZEROS = memoryview(bytes(spec.ALIGN))


class _Pieces:
    """The in-memory file of ``Writer(None)``: what is written is kept (buffers, not copies) and
    joined once by :meth:`getvalue` (a BytesIO's growth copied the file over and over: 11.9
    against 1.4 ms for MiniLM's 28 MB). Written front to back; a ``seek(0)`` then rewrites the
    first piece (the preamble, whose size it keeps)."""

    def __init__(self):
        self.pieces, self._front = [], False

    def write(self, b) -> int:
        if self._front:
            if len(b) != len(self.pieces[0]):
                raise ValueError("only the first piece can be rewritten, at its size")
            self.pieces[0], self._front = b, False
        else:
            self.pieces.append(b)
        return len(b)

    def seek(self, pos: int) -> None:
        if pos != 0:
            raise ValueError("an in-memory .wcodec file is rewritten at its start only")
        self._front = True

    def getvalue(self) -> bytes:
        return b"".join(self.pieces)

    def close(self) -> None:
        self.pieces = []


def check_name(name: str) -> None:
    """Tensor names may not hold NUL bytes (C readers truncate them). Raises UnsupportedError."""
    if "\x00" in name:
        raise UnsupportedError(f"tensor name {name!r} holds a NUL byte")


class Writer:
    """Write EncodedTensor records to ``path`` one by one; memory holds only the header index.

    Use as a context manager: the file appears at ``path`` on a clean exit (:meth:`commit`) and
    the temporary file is removed on an exception (:meth:`abort`).

    Args:
        path: destination file (conventionally ``*.wcodec``); its folder must exist. None: the
            file is built in memory, its bytes in :attr:`data` after the commit (``wcodec.save``).
        metadata: str -> str model metadata stored in the header (e.g. ``{"format": "pt"}``).
        durable: fsync before the rename (default); False for a file read back and removed at
            once, where waiting for the disk buys nothing.
    Raises:
        NotFoundError: (a FileNotFoundError) the folder does not exist.
        OSError: the temporary file cannot be created or written.
        TypeError: metadata is not a str -> str mapping.
    """

    def __init__(self, path, metadata: dict | None = None, durable: bool = True):
        self.path = None if path is None else Path(path)
        self.durable = bool(durable)
        meta = dict(metadata or {})
        if not all(isinstance(k, str) and isinstance(v, str) for k, v in meta.items()):
            raise TypeError("metadata must map str to str (as in safetensors)")
        self.metadata = meta
        self.tensors: dict[str, dict] = {}
        self.data: bytes | None = None
        if self.path is None:  # in memory: each section copied once, into the file's bytes
            self._tmp, self._f = None, _Pieces()
        else:
            if not self.path.parent.is_dir():  # else the OSError would name our temporary file
                raise NotFoundError(self.path.parent, "folder",
                                    f"cannot write '{self.path.name}': folder '{self.path.parent}' does not exist")
            # temporary files of writers killed before commit (kill -9) are removed here; ours
            # holds our pid, so concurrent writers to the same destination keep theirs
            _io.clean_stale_temps(self.path.parent, self.path.name)
            self._tmp = _io.temp_path(self.path)
            self._f = open(self._tmp, "wb", buffering=0)  # whole sections at a time: no buffer
        self._f.write(bytes(spec.PREAMBLE_SIZE))
        self._version = 1  # raised by add() to what its records need (spec.record_version)
        self._pos = spec.PREAMBLE_SIZE
        self._done = False

    @property
    def data_size(self) -> int:
        """Bytes written so far (preamble, sections and padding)."""
        return self._pos

    def _pad(self) -> None:
        pad = spec.align_up(self._pos) - self._pos
        if pad:
            self._f.write(bytes(pad))
            self._pos += pad

    def add_record(self, name: str, record, crc: int, info: dict | None = None, prepared: dict | None = None) -> None:
        """Append a tensor: its sections (64-byte aligned, in the record's order) and index entry.

        record: an EncodedTensor. crc: zlib crc32 of the decoded tensor's little-endian C-order
        bytes. info: report statistics stored with the entry (default ``record.info``).
        prepared: :func:`prepare_sections` of ``record`` when already computed (on another
        thread), else it is computed here.
        Raises ValueError on a duplicate name or a section of a dtype the format does not allow.
        """
        if self._done:
            raise ValueError("writer is closed")
        if not isinstance(name, str) or not name or name in self.tensors:
            raise ValueError(f"tensor name {name!r} is empty or used twice")
        check_name(name)
        if record.dtype not in spec.TENSOR_ITEMSIZE:
            raise UnsupportedError(f"tensor '{name}': dtype {record.dtype!r} is not supported")
        if len(record.shape) > spec.MAX_NDIM:
            raise UnsupportedError(f"tensor '{name}': {len(record.shape)} dimensions; the format allows "
                                   f"at most {spec.MAX_NDIM} (the reader would refuse the file)")

        def bad(msg):
            raise UnsupportedError(f"tensor '{name}': cannot be stored readably: {msg}")

        if prepared is None:
            prepared = prepare_sections(record)
        if list(prepared) != list(record.sections):
            raise ValueError(f"tensor '{name}': prepared sections {list(prepared)} are not the record's")
        try:
            spec.check_sections(record.codec, {k: dt for k, (dt, _, _) in prepared.items()})
        except CorruptDataError as e:
            bad(str(e))
        params = _jsonable(record.params)
        spec.check_plausible(record.codec, record.dtype, tuple(int(d) for d in record.shape),
                             params, sum(int(data.nbytes) for _, data, _ in prepared.values()), bad)
        sections, pieces = {}, []  # the tensor's padding and sections, written in one call
        for sname, (dt, data, sec_crc) in prepared.items():
            pad = spec.align_up(self._pos) - self._pos
            if pad:
                pieces.append(_ZEROS[:pad])
                self._pos += pad
            pieces.append(memoryview(data))
            sections[sname] = {"dtype": dt, "offset": self._pos, "size": int(data.nbytes), "crc32": int(sec_crc)}
            self._pos += int(data.nbytes)
        _io.write_all(self._f, pieces)
        self._version = max(self._version, spec.record_version(record.codec, record.params))
        entry = {"dtype": record.dtype, "shape": [int(d) for d in record.shape], "codec": record.codec,
                 "params": params, "sections": sections, "crc32": int(crc)}
        info = record.info if info is None else info
        if info:
            entry["info"] = _jsonable(info)
        self.tensors[name] = entry

    def add_alias(self, name: str, target: str) -> None:
        """Store ``name`` as another name of the already added tensor ``target`` (tied weights)."""
        if not isinstance(name, str) or not name or name in self.tensors:
            raise ValueError(f"tensor name {name!r} is empty or used twice")
        check_name(name)
        t = self.tensors.get(target)
        if t is None or "alias_of" in t:
            raise ValueError(f"alias target {target!r} is not a stored tensor of this file")
        self.tensors[name] = {"alias_of": target}

    def header_bytes(self) -> bytes:
        header = {"format": "wcodec", "format_version": self._version,
                  "metadata": self.metadata, "tensors": self.tensors}
        return json.dumps(header, separators=(",", ":"), ensure_ascii=False, allow_nan=False).encode("utf-8")

    def commit(self, path=None) -> Path | None:
        """Write the header and preamble, fsync (when durable), and rename onto ``path`` (default:
        self.path). In memory: the bytes to :attr:`data`; returns None."""
        if self._done:
            raise ValueError("writer is closed")
        try:
            raw = self.header_bytes()
            if len(raw) > spec.MAX_HEADER_SIZE:
                raise ValueError(f"header of {len(raw)} bytes exceeds {spec.MAX_HEADER_SIZE}")
            self._pad()
            h_off = self._pos
            self._f.write(raw)
            self._f.seek(0)
            self._f.write(spec.pack_preamble(h_off, len(raw), spec.crc32(raw), self._version))
            if self._tmp is None:
                self.data, self._done = self._f.getvalue(), True
                return None
            self._f.flush()
            if self.durable:
                os.fsync(self._f.fileno())
            self._f.close()
            dest = Path(path) if path is not None else self.path
            os.replace(self._tmp, dest)
            self.path = dest
        except BaseException:
            self.abort()
            raise
        self._done = True
        return self.path

    def abort(self) -> None:
        """Discard everything written; the destination is left untouched."""
        self._done = True
        try:
            self._f.close()
        finally:
            try:
                if self._tmp is not None:
                    os.unlink(self._tmp)
            except FileNotFoundError:
                pass

    def __enter__(self):
        return self

    def __exit__(self, exc_type, exc, tb):
        if self._done:
            return
        if exc_type is None:
            self.commit()
        else:
            self.abort()
