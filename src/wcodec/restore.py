"""Safetensors files back from a .wcodec checkpoint, byte for byte when the checkpoint was
encoded from safetensors files: the original header bytes (key order, metadata, padding) and
any data bytes no tensor covers are stored in the container's metadata (key ``wcodec_source``,
docs/FORMAT.md "Source layout"), the tensors' bytes come from the decoder. Checkpoints without
that key (older versions, torch sources) decode through :func:`wcodec.format.sources.write_safetensors`
(tensors exact, header ours).
"""

from __future__ import annotations

import base64
import hashlib
import os
import shutil
import struct
from pathlib import Path
from typing import Iterator

import numpy as np

from .errors import CorruptDataError, FormatError
from .format import _io, spec
from .format.encode import imap_in_threads
from .format.sources import INDEX_NAMES, LAYOUT_KEY, _st_entry
from .loading import cpu_decoder

__all__ = ["layout_of", "user_metadata", "file_bytes", "write_file", "decode_file", "decode_folder", "sha256_of"]


def user_metadata(meta: dict) -> dict:
    """The metadata without wcodec's source layout (what the caller saved, plus wcodec_mode)."""
    return {k: v for k, v in meta.items() if k != LAYOUT_KEY}


def layout_of(reader) -> dict | None:
    """The source layout stored in a checkpoint's metadata, or None when there is none.
    Raises CorruptDataError when it is present but malformed."""
    text = reader.metadata().get(LAYOUT_KEY)
    if text is None:
        return None
    lay = _io.loads(text, f"metadata '{LAYOUT_KEY}'")
    ok = isinstance(lay, dict) and isinstance(lay.get("safetensors"), dict) and isinstance(lay.get("files"), dict) \
        and all(isinstance(k, str) and isinstance(v, dict) and isinstance(v.get("header"), str)
                and isinstance(v.get("gaps"), list) for k, v in lay["safetensors"].items()) \
        and all(isinstance(k, str) and isinstance(v, str) for k, v in lay["files"].items())
    if not ok:
        raise CorruptDataError(f"metadata '{LAYOUT_KEY}': not a source layout")
    for name in list(lay["safetensors"]) + list(lay["files"]):
        if name.startswith(("/", "\\")) or ".." in Path(name).parts or "\\" in name:
            raise CorruptDataError(f"metadata '{LAYOUT_KEY}': file name {name!r} leaves the folder")
    return lay


def file_bytes(reader, fname: str, one: dict) -> Iterator[bytes]:
    """The bytes of the original safetensors file ``fname`` in order: size, header, then
    tensors (decoded one at a time) and kept gap bytes by offset. Raises FormatError when the
    checkpoint's tensors do not fit the stored header (names, byte sizes)."""
    raw = one["header"].encode("utf-8")
    header = _io.loads(raw, f"{fname}: stored safetensors header", FormatError)
    if not isinstance(header, dict):
        raise FormatError(f"{fname}: stored safetensors header is not an object")
    header.pop("__metadata__", None)
    pieces = []
    for name, e in header.items():
        a, _, dtype, shape, dt, numel = _st_entry(fname, name, e, 1 << 62)
        if name not in reader:
            raise FormatError(f"{fname}: tensor '{name}' of the stored header is not in the checkpoint")
        st = reader.entry(reader.alias_of(name) or name)
        nbytes = int(np.prod(st["shape"], dtype=np.int64)) * spec.TENSOR_ITEMSIZE[st["dtype"]]
        if nbytes != numel * dt.itemsize:
            raise FormatError(f"{fname}: tensor '{name}' holds {nbytes} bytes, the stored header {numel * dt.itemsize}")
        pieces.append((a, name))
    for off, b64 in one["gaps"]:
        if type(off) is not int or not isinstance(b64, str):
            raise CorruptDataError(f"{fname}: malformed gap in the stored layout")
        pieces.append((off, base64.b64decode(b64, validate=True)))
    yield struct.pack("<Q", len(raw)) + raw
    pieces.sort(key=lambda p: p[0])
    # tensors decoded in threads a few ahead of the writer, in file order (memory: a few tensors)
    decoded = imap_in_threads(cpu_decoder(reader), [what for _, what in pieces if not isinstance(what, bytes)])
    pos = 0
    try:
        for off, what in pieces:
            if off != pos:
                raise CorruptDataError(f"{fname}: the stored layout leaves bytes {pos}..{off} uncovered")
            data = what if isinstance(what, bytes) else _bytes_of(next(decoded))
            pos += len(data)
            yield data
    finally:
        decoded.close()


def _bytes_of(arr: np.ndarray) -> memoryview:
    """A decoded tensor's bytes (C order) as a flat byte view, no copy."""
    return memoryview(np.ascontiguousarray(arr).reshape(-1).view(np.uint8))


def write_file(path, chunks) -> Path:
    """Write byte chunks to ``path`` atomically (temporary file in its folder, then rename)."""
    path = Path(path)
    _io.clean_stale_temps(path.parent, path.name)
    tmp = _io.temp_path(path)
    try:
        with open(tmp, "wb") as f:
            for c in chunks:
                f.write(c)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
    return path


def sha256_of(chunks) -> str:
    h = hashlib.sha256()
    for c in chunks:
        h.update(c)
    return h.hexdigest()


def _generic(reader, dst, progress=None) -> Path:
    from .format.sources import write_safetensors
    names = reader.keys()
    specs = [(n, reader.entry(n)["dtype"], tuple(reader.entry(n)["shape"])) for n in names]
    decoded = imap_in_threads(cpu_decoder(reader), names)  # in threads, a few ahead, in spec order
    try:
        return write_safetensors(dst, specs, lambda name: next(decoded), user_metadata(reader.metadata()), progress)
    finally:
        decoded.close()


def decode_file(reader, dst, progress=None) -> Path:
    """One safetensors file from an open checkpoint: the original file's bytes when the
    checkpoint came from one safetensors file, else every tensor under our header."""
    lay = layout_of(reader)
    if lay is not None and len(lay["safetensors"]) == 1:
        (fname, one), = lay["safetensors"].items()
        return write_file(dst, _counted(file_bytes(reader, fname, one), progress))
    return _generic(reader, dst, progress)


def _counted(chunks, progress):
    for c in chunks:
        if progress is not None:
            progress.update(len(c))
        yield c


def decode_folder(reader, src_folder: Path | None, dst: Path, progress=None) -> list[Path]:
    """A model folder from an open checkpoint: each original safetensors file, the original
    index and config.json (when stored), and the other files of ``src_folder`` (tokenizer,
    sub-folders) copied; without a stored layout, ``model.safetensors`` holding every tensor.
    ``dst`` must exist. Returns the written paths."""
    lay = layout_of(reader)
    out = []
    if lay is None:
        out.append(_generic(reader, dst / "model.safetensors", progress))
        kept = {}
    else:
        for fname, one in lay["safetensors"].items():
            (dst / fname).parent.mkdir(parents=True, exist_ok=True)
            out.append(write_file(dst / fname, _counted(file_bytes(reader, fname, one), progress)))
        kept = lay["files"]
        for fname, text in kept.items():
            out.append(write_file(dst / fname, [text.encode("utf-8")]))
    if src_folder is not None:
        for p in sorted(src_folder.rglob("*")):
            rel = p.relative_to(src_folder)
            if any(part.startswith(".") for part in rel.parts) or not p.is_file() or rel.as_posix() in kept \
                    or p.name.endswith((".wcodec", spec.INDEX_SUFFIX)) or p.name in INDEX_NAMES \
                    or not _io.is_inside(src_folder, p):
                continue
            (dst / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(p, dst / rel)
            out.append(dst / rel)
    return out
