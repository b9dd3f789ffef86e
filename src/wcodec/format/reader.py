"""Lazy, validating reader of one .wcodec file (memory-mapped; layout in docs/FORMAT.md).

Opening reads the 64-byte preamble and the JSON header only, and validates every entry against
the file size before any section is touched. Sections come back as read-only, zero-copy numpy
views of the mapping, so a GPU loader can upload a tensor's byte span in one copy.
"""

from __future__ import annotations

import mmap
import os
from pathlib import Path

import numpy as np

from ..errors import ChecksumError, CorruptDataError, FormatError
from . import spec


class Reader:
    """An open .wcodec file.

    Args:
        path: the file. Raises FormatError (not a .wcodec file, unknown version),
            CorruptDataError / ChecksumError (bad header, offsets, sizes; names the tensor),
            OSError (cannot open).
    """

    def __init__(self, path):
        self.path = Path(path)
        with open(self.path, "rb") as f:
            size = os.fstat(f.fileno()).st_size
            h_off, h_size, h_crc = spec.parse_preamble(f.read(spec.PREAMBLE_SIZE), size)
            f.seek(h_off)
            raw = f.read(h_size)
            if len(raw) != h_size:
                raise CorruptDataError(f"{self.path.name}: truncated header")
            self._mm = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
        if len(self._mm) != size:
            raise CorruptDataError(f"{self.path.name}: file changed size while opening")
        try:
            self.header = spec.parse_header(raw, h_crc)
            spec.validate_tensors(self.header["tensors"], h_off)
        except (CorruptDataError, FormatError) as e:
            raise type(e)(f"{self.path.name}: {e}") from None
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
        """Read-only view of the whole mapped file (for bulk copies of spans)."""
        return memoryview(self._mm)

    # -- data ----------------------------------------------------------------------------------
    def record(self, name: str, verify: bool = True):
        """The EncodedTensor of ``name`` with sections as zero-copy read-only views of the file.

        verify: check each section's crc32 (reads the compressed bytes once; about 4 GB/s).
        Raises ChecksumError naming the tensor and section, KeyError for an unknown name.
        """
        from ..codecs.base import EncodedTensor

        if self._mm is None:
            raise ValueError(f"{self.path.name} is closed")
        e = self._entry(name)
        sections = {}
        for sname, s in e["sections"].items():
            dt = np.dtype(spec.SECTION_DTYPES[s["dtype"]])
            arr = np.frombuffer(self._mm, dtype=dt, count=s["size"] // dt.itemsize, offset=s["offset"])
            if verify and spec.crc32(arr) != s["crc32"]:
                raise ChecksumError(f"tensor '{name}': section '{sname}' checksum mismatch (corrupt data)")
            sections[sname] = arr
        return EncodedTensor(e["codec"], e["dtype"], tuple(e["shape"]), e.get("params", {}), sections,
                             dict(e.get("info", {})))

    def get_numpy(self, name: str, verify: bool = True) -> np.ndarray:
        """Decode ``name`` on the CPU to a new numpy array of its dtype and shape (BF16 as uint16).

        verify: check the section checksums and the crc32 of the decoded bytes.
        Raises a WcodecError subclass naming the tensor on corrupt data.
        """
        from ..codecs import decode_tensor

        rec = self.record(name, verify=verify)
        out = decode_tensor(rec, name)
        if out.shape != rec.shape or out.dtype.itemsize != spec.TENSOR_ITEMSIZE[rec.dtype]:
            raise CorruptDataError(f"tensor '{name}': decoded {out.dtype}{list(out.shape)}, "
                                   f"expected {rec.dtype}{list(rec.shape)}")
        if verify and spec.crc32(out) != self._entry(name)["crc32"]:
            raise ChecksumError(f"tensor '{name}': checksum of the decoded tensor does not match")
        return out

    def verify(self, name: str) -> None:
        """Full check of one tensor: section checksums, decode, decoded checksum."""
        self.get_numpy(name, verify=True)

    def close(self) -> None:
        """Forget the mapping; views handed out keep it alive until they are freed."""
        self._mm = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
