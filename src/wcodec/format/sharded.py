"""Checkpoints of several .wcodec shards: the index file, a size-capped writer, one reader.

A sharded checkpoint is a folder holding ``model-00001-of-0000N.wcodec`` files and
``model.wcodec.index.json`` mapping each tensor name to its shard (the convention of
``model.safetensors.index.json``). A checkpoint small enough for one shard is a single
``model.wcodec`` without an index.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from ..errors import CorruptDataError, FormatError
from . import spec
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

    def add_record(self, name: str, record, crc: int, info: dict | None = None) -> None:
        if name in self._where:
            raise ValueError(f"tensor name {name!r} used twice")
        w = self.shards[-1] if self.shards else self._new_shard()
        if w.tensors and w.data_size + record.nbytes > self.max_shard_size:
            w = self._new_shard()
        w.add_record(name, record, crc, info)
        self._where[name] = w

    def add_alias(self, name: str, target: str) -> None:
        if name in self._where or target not in self._where:
            raise ValueError(f"alias {name!r}: name used twice or unknown target {target!r}")
        self._where[target].add_alias(name, target)
        self._where[name] = self._where[target]

    def commit(self) -> list[Path]:
        """Finish every shard, then write the index (if more than one shard). Returns the paths."""
        if not self.shards:
            self._new_shard()
        n = len(self.shards)
        names = ([f"{self.basename}.wcodec"] if n == 1 else
                 [f"{self.basename}-{i + 1:05d}-of-{n:05d}.wcodec" for i in range(n)])
        try:
            for w, fname in zip(self.shards, names):
                self.paths.append(w.commit(self.folder / fname))
            if n > 1:
                index = {"metadata": {"format": "wcodec", "format_version": str(spec.FORMAT_VERSION),
                                      "total_size": str(sum(p.stat().st_size for p in self.paths))},
                         "weight_map": {k: names[self.shards.index(w)] for k, w in self._where.items()}}
                path = self.folder / f"{self.basename}{spec.INDEX_SUFFIX}"
                tmp = path.with_name(f".{path.name}.tmp")
                tmp.write_text(json.dumps(index, indent=2) + "\n", encoding="utf-8")
                os.replace(tmp, path)
                self.paths.append(path)
        except BaseException:
            self.abort()
            raise
        return self.paths

    def abort(self) -> None:
        """Remove every temporary shard and every shard already renamed by this writer."""
        for w in self.shards:
            if not w._done:
                w.abort()
        for p in self.paths:
            p.unlink(missing_ok=True)

    def __enter__(self):
        return self

    def __exit__(self, exc_type, exc, tb):
        if exc_type is None:
            if not self.paths:
                self.commit()
        else:
            self.abort()


def find_checkpoint(path) -> tuple[Path, dict | None]:
    """Resolve a file, an index file or a folder to (file or index path, parsed index or None).

    Raises FileNotFoundError when a folder holds no .wcodec checkpoint, FormatError on a bad index.
    """
    p = Path(path)
    if p.is_dir():
        idx = sorted(p.glob(f"*{spec.INDEX_SUFFIX}"))
        files = sorted(p.glob("*.wcodec"))
        if idx:
            p = idx[0]
        elif len(files) == 1:
            return files[0], None
        else:
            raise FileNotFoundError(f"{path}: no *{spec.INDEX_SUFFIX} and not exactly one .wcodec file")
    if not p.name.endswith(".json"):
        return p, None
    try:
        index = json.loads(p.read_text(encoding="utf-8"))
        wm = index["weight_map"]
        ok = isinstance(wm, dict) and all(isinstance(v, str) and v == Path(v).name and v.endswith(".wcodec")
                                          for v in wm.values())
    except (ValueError, KeyError, TypeError, UnicodeDecodeError) as e:
        raise FormatError(f"{p.name}: not a wcodec index ({e})") from None
    if not ok:
        raise FormatError(f"{p.name}: weight_map must map names to .wcodec files in the same folder")
    return p, index


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
            r = self._readers[fname] = Reader(self.path.parent / fname)
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
            self._readers[files[0]] = Reader(self.path.parent / files[0])
        return self._readers[files[0]].metadata()

    def __getattr__(self, attr):
        # per-tensor methods delegate to the shard holding the tensor
        if attr in ("record", "entry", "span", "section_spans", "alias_of", "get_numpy", "verify"):
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
