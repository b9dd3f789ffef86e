"""Boundary helpers for untrusted inputs: regular files only, strict JSON, paths kept inside a
folder, unique temporary names, and removal of temporary files left by killed writers.

Why each exists (docs/FORMAT.md "Resource bounds", SECURITY.md): ``open()`` on a FIFO blocks
forever; Python's json accepts ``NaN``/``Infinity`` and recurses on nesting; index entries such
as ``../x`` or symlinks would read files outside the folder the user named; fixed temporary
names let two writers mix their output.
"""

from __future__ import annotations

import io
import json
import os
import re
import stat
import tempfile
from pathlib import Path

from ..errors import CorruptDataError, FormatError

#: largest JSON index file read (model.wcodec.index.json, model.safetensors.index.json, config)
MAX_JSON_FILE = 100 << 20


def check_regular(path, what: str = "file") -> os.stat_result:
    """os.stat ``path`` (following symlinks); raise FormatError unless it is a regular file."""
    st = os.stat(path)
    if not stat.S_ISREG(st.st_mode):
        raise FormatError(f"{path}: the {what} is not a regular file (a FIFO, device or folder)")
    return st


def open_regular(path, what: str = "file"):
    """Open a regular file for binary reading without blocking on a FIFO swapped in meanwhile.

    Returns a file object. Raises FormatError for anything but a regular file, OSError.
    """
    check_regular(path, what)
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0)
                 | getattr(os, "O_BINARY", 0))
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise FormatError(f"{path}: the {what} is not a regular file")
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def pread_into(fd: int, buf, offset: int) -> bool:
    """Fill ``buf`` (a writable uint8 numpy array) from ``fd`` at ``offset`` with pread.

    Returns False on a short read (the file is shorter than expected: truncated meanwhile).
    """
    mv, got = memoryview(buf).cast("B"), 0
    while got < len(mv):
        n = os.preadv(fd, [mv[got:got + (1 << 30)]], offset + got)
        if n <= 0:
            return False
        got += n
    return True


def write_all(f, pieces: list) -> None:
    """Write the buffers ``pieces`` (memoryviews, bytes) to ``f`` in order: one ``os.writev``
    for an unbuffered file (a tensor's sections and padding in one system call), else
    ``f.write`` each (an in-memory file). Raises OSError."""
    if not isinstance(f, io.FileIO) or not hasattr(os, "writev"):
        for p in pieces:
            f.write(p)
        return
    fd, views = f.fileno(), [memoryview(p).cast("B") for p in pieces if len(p)]
    while views:  # a writev writes at most ~2 GiB: go on from where it stopped
        n = os.writev(fd, views[:_IOV_MAX])
        while views and n >= len(views[0]):
            n -= len(views.pop(0))
        if views and n:
            views[0] = views[0][n:]


try:  # buffers per writev
    _IOV_MAX = max(16, os.sysconf("SC_IOV_MAX"))
except (AttributeError, ValueError, OSError):
    _IOV_MAX = 16


def _reject_constant(name):
    raise ValueError(f"{name} is not allowed (JSON has no NaN or Infinity)")


def _no_duplicates(pairs):
    out = dict(pairs)  # in C; the Python loop below only runs when a key repeats
    if len(out) != len(pairs):
        seen = set()
        for k, _ in pairs:
            if k in seen:
                raise ValueError(f"duplicate key {k!r}")
            seen.add(k)
    return out


def loads(raw, where: str, error=CorruptDataError):
    """Strict JSON: UTF-8, no NaN/Infinity, no duplicate keys, bounded nesting.

    raw: bytes or str. Raises ``error`` (a WcodecError class) naming ``where``: deep nesting
    that would exhaust the interpreter's recursion limit is reported instead of escaping as
    RecursionError.
    """
    try:
        text = raw.decode("utf-8") if isinstance(raw, (bytes, bytearray, memoryview)) else raw
        return json.loads(text, parse_constant=_reject_constant, object_pairs_hook=_no_duplicates)
    except RecursionError:
        raise error(f"{where}: JSON nested too deeply") from None
    except (UnicodeDecodeError, ValueError, TypeError) as e:
        raise error(f"{where}: not valid UTF-8 JSON: {e}") from None


def read_json(path, what: str = "JSON file", error=FormatError):
    """Read and strictly parse a small JSON file (a regular file of at most MAX_JSON_FILE bytes)."""
    with open_regular(path, what) as f:
        raw = f.read(MAX_JSON_FILE + 1)
    if len(raw) > MAX_JSON_FILE:
        raise error(f"{path}: {what} is larger than {MAX_JSON_FILE} bytes")
    return loads(raw, f"{Path(path).name}", error)


def inside(folder, rel: str, what: str = "file", must_exist: bool = False) -> Path:
    """``folder / rel`` after checking it is a relative path that resolves (symlinks followed)
    inside ``folder`` (and, with ``must_exist``, exists: an index naming a missing file is a
    corrupt index, not a missing input). Raises FormatError naming the entry."""
    folder = Path(folder)
    if not isinstance(rel, str) or not rel or "\x00" in rel or os.path.isabs(rel) \
            or ".." in Path(rel).parts or "\\" in rel:
        raise FormatError(f"{what} {rel!r} is not a relative path inside {folder}")
    path = folder / rel
    root = folder.resolve()
    real = path.resolve()
    if real != root and root not in real.parents:
        raise FormatError(f"{what} {rel!r} resolves to {real}, outside {root}")
    if must_exist and not path.exists():
        raise FormatError(f"{what} {rel!r} does not exist in {folder}")
    return path


def is_inside(folder, path) -> bool:
    root, real = Path(folder).resolve(), Path(path).resolve()
    return real == root or root in real.parents


# -- temporary files -------------------------------------------------------------------------------
def temp_path(dest, suffix: str = ".tmp") -> Path:
    """Create a new empty temporary file beside ``dest`` (unique name holding our pid, mode 0666
    minus the umask as a normal file would have) and return its path."""
    dest = Path(dest)
    fd, name = tempfile.mkstemp(prefix=f".{dest.name}.{os.getpid()}-", suffix=suffix, dir=dest.parent)
    os.close(fd)
    umask = os.umask(0)
    os.umask(umask)
    os.chmod(name, 0o666 & ~umask)
    return Path(name)


_TMP_RE = re.compile(r"^\.(?P<dest>.+)\.(?P<pid>\d+)-[^.]+\.tmp$")


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def clean_stale_temps(folder, stem: str = "") -> list[Path]:
    """Remove temporary files of writers that died (kill -9) in ``folder``.

    Only names of the form ``.<dest>.<pid>-<random>.tmp`` whose ``dest`` starts with ``stem``
    and whose pid is not a live process on this machine are removed, so concurrent writers keep
    theirs. Returns the removed paths.
    """
    removed = []
    try:
        entries = list(os.scandir(folder))
    except OSError:
        return removed
    for e in entries:
        m = _TMP_RE.match(e.name)
        if not m or not m["dest"].startswith(stem) or _alive(int(m["pid"])):
            continue
        try:
            os.unlink(e.path)
            removed.append(Path(e.path))
        except OSError:
            pass
    return removed
