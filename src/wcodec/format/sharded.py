"""Checkpoints of several .wcodec shards: the index file, a size-capped writer, one reader.

A sharded checkpoint is a folder holding ``model-00001-of-0000N.wcodec`` files and
``model.wcodec.index.json`` mapping each tensor name to its shard (the convention of
``model.safetensors.index.json``). A checkpoint small enough for one shard is a single
``model.wcodec`` without an index.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

from ..errors import CorruptDataError, FormatError
from . import _io, spec
from .reader import Reader
from .writer import Writer

DEFAULT_MAX_SHARD_SIZE = 5 << 30


class ShardedWriter:
    """Stream records into shards of at most ``max_shard_size`` bytes each (one tensor may exceed).

    Same interface as :class:`Writer` (add_record, add_alias, commit, abort, context manager).
    Shards stay open until :meth:`commit` so that an alias lands in its target's shard; they are
    then renamed to their final names and the index is written last, atomically.

    Args:
        folder: output folder (created if missing).
        max_shard_size: bytes per shard before a new one starts.
        metadata: str -> str, stored in every shard's header.
        basename: shard file stem (``model``).
    """

    def __init__(self, folder, max_shard_size: int = DEFAULT_MAX_SHARD_SIZE, metadata: dict | None = None,
                 basename: str = "model"):
        self.folder = Path(folder)
        self.folder.mkdir(parents=True, exist_ok=True)
        _io.clean_stale_temps(self.folder, basename)
        self.max_shard_size = int(max_shard_size)
        self.metadata = dict(metadata or {})
        self.basename = basename
        self.shards: list[Writer] = []
        self._where: dict[str, Writer] = {}
        self.paths: list[Path] = []

    def _new_shard(self) -> Writer:
        w = Writer(self.folder / f"{self.basename}-{len(self.shards):05d}.wcodec", self.metadata)
        self.shards.append(w)
        return w

    def add_record(self, name: str, record, crc: int, info: dict | None = None, prepared: dict | None = None) -> None:
        if name in self._where:
            raise ValueError(f"tensor name {name!r} used twice")
        w = self.shards[-1] if self.shards else self._new_shard()
        if w.tensors and w.data_size + record.nbytes > self.max_shard_size:
            w = self._new_shard()
        w.add_record(name, record, crc, info, prepared)
        self._where[name] = w

    def add_alias(self, name: str, target: str) -> None:
        if name in self._where or target not in self._where:
            raise ValueError(f"alias {name!r}: name used twice or unknown target {target!r}")
        self._where[target].add_alias(name, target)
        self._where[name] = self._where[target]

    def commit(self) -> list[Path]:
        """Finish every shard, then write the index (if more than one shard). Returns the paths.

        Order, so that a reader never silently sees a mix of checkpoints or a partial one: the
        previous index of this basename is removed first; shards are renamed to their final
        ``-0000i-of-0000N`` names (numbered shards without an index are refused by
        :func:`find_checkpoint`); the index is renamed into place last; then files of an older
        checkpoint with this basename (other shards, a single ``model.wcodec``) are removed.
        """
        if not self.shards:
            self._new_shard()
        n = len(self.shards)
        names = ([f"{self.basename}.wcodec"] if n == 1 else
                 [f"{self.basename}-{i + 1:05d}-of-{n:05d}.wcodec" for i in range(n)])
        index_path = self.folder / f"{self.basename}{spec.INDEX_SUFFIX}"
        try:
            index_path.unlink(missing_ok=True)
            for w, fname in zip(self.shards, names):
                self.paths.append(w.commit(self.folder / fname))
            if n > 1:
                index = {"metadata": {"format": "wcodec", "format_version": str(max(w._version for w in self.shards)),
                                      "total_size": str(sum(p.stat().st_size for p in self.paths))},
                         "weight_map": {k: names[self.shards.index(w)] for k, w in self._where.items()}}
                tmp = _io.temp_path(index_path)
                try:
                    with open(tmp, "w", encoding="utf-8") as f:
                        f.write(json.dumps(index, indent=2) + "\n")
                        f.flush()
                        os.fsync(f.fileno())
                    os.replace(tmp, index_path)
                finally:
                    tmp.unlink(missing_ok=True)
                self.paths.append(index_path)
        except BaseException:
            self.abort()
            raise
        self._remove_stale(set(names))
        return self.paths

    def _remove_stale(self, keep: set) -> None:
        """Remove shards and single files of an older checkpoint of this basename."""
        for p in self.folder.glob(f"{self.basename}*.wcodec"):
            m = _SHARD_RE.match(p.name)
            old = (m and m["stem"] == self.basename) or p.name == f"{self.basename}.wcodec"
            if old and p.name not in keep:
                try:
                    p.unlink()
                except OSError:
                    pass

    def abort(self) -> None:
        """Remove every temporary shard and every shard already renamed by this writer.

        Never raises for a file it cannot close or remove (e.g. a full disk failing the close):
        it goes on with the others, so no temporary shard is left behind.
        """
        for w in self.shards:
            if not w._done:
                try:
                    w.abort()
                except OSError:
                    pass
        for p in self.paths:
            try:
                p.unlink(missing_ok=True)
            except OSError:
                pass

    def __enter__(self):
        return self

    def __exit__(self, exc_type, exc, tb):
        if exc_type is None:
            if not self.paths:
                self.commit()
        else:
            self.abort()


#: shard file names written by ShardedWriter: <stem>-00001-of-00003.wcodec
_SHARD_RE = re.compile(r"^(?P<stem>.+)-\d{5}-of-\d{5}\.wcodec$")


def parse_index(raw, where: str) -> dict:
    """Schema check of a wcodec index: {"metadata": {str: str}?, "weight_map": {name: shard}}.

    weight_map must be a non-empty object without duplicate keys whose values are ``.wcodec``
    file names (no folders: shards sit beside the index). Raises FormatError.
    """
    index = _io.loads(raw, where, FormatError)
    if not isinstance(index, dict):
        raise FormatError(f"{where}: not a wcodec index (not a JSON object)")
    wm, meta = index.get("weight_map"), index.get("metadata", {})
    if not isinstance(wm, dict) or not wm:
        raise FormatError(f"{where}: weight_map must be a non-empty object")
    if not isinstance(meta, dict):
        raise FormatError(f"{where}: metadata must be an object")
    for k, v in wm.items():
        if not k or "\x00" in k or not isinstance(v, str) or not v.endswith(".wcodec") \
                or v != Path(v).name or v in (".", "..") or "\x00" in v or "\\" in v:
            raise FormatError(f"{where}: weight_map[{k!r}] = {v!r}: must name a .wcodec file in the same folder"[:300])
    return index


def find_checkpoint(path) -> tuple[Path, dict | None]:
    """Resolve a file, an index file or a folder to (file or index path, parsed index or None).

    A folder must hold one ``*.wcodec.index.json`` or exactly one ``.wcodec`` file that is not
    a numbered shard (shards without their index are an interrupted or partial write). Files
    found in a folder must resolve inside it (symlinks out are refused). Raises
    FileNotFoundError when a folder holds no .wcodec checkpoint, FormatError on a bad index,
    an incomplete checkpoint or a file that is not a regular file.
    """
    p = Path(path)
    if p.is_dir():
        idx = sorted(p.glob(f"*{spec.INDEX_SUFFIX}"))
        files = sorted(p.glob("*.wcodec"))
        if len(idx) > 1:
            raise FormatError(f"{path}: several *{spec.INDEX_SUFFIX} files: {[i.name for i in idx]}")
        if idx:
            p = _io.inside(p, idx[0].name, "index file")
        elif len(files) == 1 and not _SHARD_RE.match(files[0].name):
            return _io.inside(p, files[0].name, "checkpoint file"), None
        elif any(_SHARD_RE.match(f.name) for f in files):
            raise FormatError(f"{path}: holds numbered shards but no *{spec.INDEX_SUFFIX}: an incomplete "
                              f"(interrupted) sharded checkpoint")
        else:
            raise FileNotFoundError(f"{path}: no *{spec.INDEX_SUFFIX} and not exactly one .wcodec file")
    if not p.name.endswith(".json"):
        return p, None
    with _io.open_regular(p, "index file") as f:
        raw = f.read(_io.MAX_JSON_FILE + 1)
    if len(raw) > _io.MAX_JSON_FILE:
        raise FormatError(f"{p.name}: index larger than {_io.MAX_JSON_FILE} bytes")
    return p, parse_index(raw, p.name)


class CheckpointReader:
    """One interface over a .wcodec file, a sharded folder, or its index file.

    Shards open lazily. Methods mirror :class:`Reader` (keys, metadata, record, entry, span,
    alias_of, get_numpy, verify) and :meth:`reader` returns the shard holding a tensor.
    """

    def __init__(self, path):
        p, self.index = find_checkpoint(path)
        self.path = p
        self._readers: dict[str, Reader] = {}
        if self.index is None:
            self._readers[p.name] = Reader(p)
            self._map = dict.fromkeys(self._readers[p.name].keys(), p.name)
        else:
            self._map = dict(self.index["weight_map"])

    def reader(self, name: str) -> Reader:
        """The shard Reader holding ``name``; raises KeyError, or CorruptDataError if the shard lacks it."""
        try:
            fname = self._map[name]
        except KeyError:
            raise KeyError(f"no tensor named {name!r} in {self.path.name}") from None
        r = self._readers.get(fname)
        if r is None:
            r = self._readers[fname] = Reader(_io.inside(self.path.parent, fname, "shard", must_exist=True))
        if name not in r:
            raise CorruptDataError(f"tensor '{name}': the index names shard {fname}, which does not hold it")
        return r

    def shard_files(self) -> list[str]:
        return sorted(set(self._map.values()))

    def keys(self) -> list[str]:
        return list(self._map)

    def __contains__(self, name) -> bool:
        return name in self._map

    def metadata(self) -> dict[str, str]:
        files = self.shard_files()
        if not files:
            return {}
        if files[0] not in self._readers:
            self._readers[files[0]] = Reader(_io.inside(self.path.parent, files[0], "shard", must_exist=True))
        return self._readers[files[0]].metadata()

    def __getattr__(self, attr):
        # per-tensor methods delegate to the shard holding the tensor
        if attr in ("record", "entry", "numel", "span", "section_spans", "alias_of", "get_numpy", "verify"):
            return lambda name, *a, **k: getattr(self.reader(name), attr)(name, *a, **k)
        raise AttributeError(attr)

    def close(self) -> None:
        for r in self._readers.values():
            r.close()
        self._readers.clear()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
