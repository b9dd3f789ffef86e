"""Compiled kernels shipped per Triton version and GPU architecture, so that the first process on a
fresh machine loads the fused kernels instead of compiling them (issue 28: a 7B-shaped model's
load-time warm-up compiled for 18-19 s on an empty Triton cache, 0.4 s on a warm one).

A pack (``packs/triton-<version>-<arch>.tar.xz``, e.g. ``triton-3.6.0-sm90.tar.xz``) holds entries
of Triton's own on-disk cache: per compiled kernel, the directory named by Triton's cache key
(a SHA-256 over Triton's sources, the kernel's source and its dependencies, the argument
specialisation, the compile options and the backend, ptxas version and GPU target included) with
the kernel's metadata (``<name>.json``) and binary (``<name>.cubin``). :func:`install` writes the
entries the cache lacks through Triton's cache manager (``triton.runtime.cache``: the directory of
``TRITON_CACHE_DIR`` or any cache manager configured), so Triton itself decides whether an entry
applies: a kernel is loaded only where Triton computes the same key, and anything else (another
ptxas, an edited kernel, a weight shape whose specialisation the pack lacks) compiles as without a
pack. ``tools/build_kernel_pack.py`` writes a pack on the GPU from the warm-up of every shape in
the shipped configurations (:mod:`wcodec.gpu.shipped`) and the GPU decoders; the manifest records
:func:`sources_hash` of the kernel sources it was built from, and a pack whose hash differs from
the installed sources is not installed (its keys could not match).

Not in a pack: Triton's launchers (a C stub per kernel signature, compiled with the host's C
compiler and keyed without the Python version, so not shippable across Pythons): a fresh
machine still compiles those, ~0.3 s each, five for a Llama model's linears.

Measured (H200, Triton 3.6.0, 2026-12-03, ``tools/device_kernel_pack.sh``): the pack holds 122
kernels in 843 KB; the warm-up of a Llama-2-7B layer's three linear shapes and a 32000x4096
lm_head on an empty cache takes 2.6 s with it (15.4 s without, 0.3 s warm), of 13B shapes that
the pack was not built from 3.0 s (13.8 s); a 16-layer 7B-shaped model's first serving process
(``benchmarks/serve.py --cold``) loads in 7.9 s (warm-up 4.3 s) where it took 21.8 s (18.0 s).

The pack is an accelerator, never a dependency: a missing, stale or unreadable pack leaves the
kernels to Triton's compiler (the last with one warning). ``WCODEC_KERNEL_PACK=0`` turns packs off.
"""

from __future__ import annotations

import base64
import hashlib
import io
import json
import lzma
import os
import re
import tarfile
import time
import warnings
from pathlib import Path

#: where packs ship, inside the package
DIR = Path(__file__).resolve().parent / "packs"
#: the folder whose kernel modules :func:`sources_hash` covers, and the configurations beside it
GPU_DIR = Path(__file__).resolve().parent
#: a module holds Triton kernels when a line of its source starts with one of these decorators
KERNEL_MARKER = re.compile(rb"^@(triton|gluon)\.(jit|autotune)\b", re.MULTILINE)
#: the members a pack may hold (besides the manifest): <cache key>/<kernel name>.(json|cubin)
MEMBER = re.compile(r"^([0-9a-f]{64})/([A-Za-z_][A-Za-z0-9_]{0,200})\.(json|cubin)$")
#: the largest member read (bytes); a larger one marks the pack as foreign
MAX_MEMBER = 64 << 20
MANIFEST = "manifest.json"
FORMAT = 1

_DONE: dict = {}


def enabled() -> bool:
    return os.environ.get("WCODEC_KERNEL_PACK", "1") != "0"


def sources_hash(root: Path = GPU_DIR) -> str:
    """SHA-256 (hex) over the kernel modules of ``root`` (``*.py`` files with a KERNEL_MARKER
    decorator) and its shipped configurations (``configs/*.json``), by relative
    name and bytes, in name order. An edit to any of them changes Triton's keys of some kernels
    (its key covers a kernel's source, its line number and the constants it reads), so a pack
    built from other sources is stale."""
    h = hashlib.sha256()
    modules = [(p, p.read_bytes()) for p in sorted(root.glob("*.py"))]
    files = [(p, data) for p, data in modules if KERNEL_MARKER.search(data)]
    files += [(p, p.read_bytes()) for p in sorted((root / "configs").glob("*.json"))]
    for p, data in files:
        h.update(f"{p.relative_to(root).as_posix()}\0{len(data)}\0".encode())
        h.update(data)
    return h.hexdigest()


def pack_name(triton_version: str, arch: str) -> str:
    """The file name of the pack for ``triton_version`` (e.g. "3.6.0") and ``arch`` (e.g. "sm90")."""
    return f"triton-{triton_version}-{arch}.tar.xz"


def build(cache_dir, out, *, triton_version: str, arch: str, device: str = "") -> dict:
    """Write the pack ``out`` (a .tar.xz, atomically) from Triton cache directory ``cache_dir``:
    every complete entry (a ``__grp__<name>.json`` whose metadata and cubin are present) under its
    cache key (:func:`cache_key`), its metadata and cubin only (the intermediate IR is not needed
    to launch). Returns the manifest: {"format", "triton", "arch", "device", "sources": :func:`sources_hash`, "built" (UTC date),
    "kernels": entries, "names": {kernel name: entries}}. Raises ValueError when the cache holds
    no complete entry."""
    cache_dir, out = Path(cache_dir), Path(out)
    entries = []
    for grp in sorted(cache_dir.glob("*/__grp__*.json")):
        key, name = cache_key(grp.parent.name), grp.name[len("__grp__"):-len(".json")]
        if key is None:
            continue
        files = {f"{name}.json": grp.parent / f"{name}.json", f"{name}.cubin": grp.parent / f"{name}.cubin"}
        if all(p.is_file() for p in files.values()) and all(MEMBER.match(f"{key}/{f}") for f in files):
            entries.append((key, name, files))
    if not entries:
        raise ValueError(f"no compiled kernel (a __grp__ entry with its .json and .cubin) in {cache_dir}")
    names: dict = {}
    for _, name, _ in entries:
        names[name] = names.get(name, 0) + 1
    manifest = {"format": FORMAT, "triton": triton_version, "arch": arch, "device": device,
                "sources": sources_hash(), "built": time.strftime("%Y-%m-%d", time.gmtime()),
                "kernels": len(entries), "names": dict(sorted(names.items()))}
    tmp = out.with_name(out.name + ".tmp")
    with tarfile.open(tmp, "w:xz", preset=9) as tar:
        _add(tar, MANIFEST, json.dumps(manifest, indent=1).encode())
        for key, _, files in entries:
            for fname, path in files.items():
                _add(tar, f"{key}/{fname}", path.read_bytes())
    os.replace(tmp, out)
    return manifest


def cache_key(dirname: str) -> str | None:
    """The cache key (64 hex digits, what Triton passes to ``get_cache_manager``) of a Triton
    cache directory's name: the key itself (older Triton) or its unpadded base32 (Triton 3.6 and 3.9
    name them so), None for any other name."""
    if re.fullmatch(r"[0-9a-f]{64}", dirname):
        return dirname
    if re.fullmatch(r"[A-Z2-7]{52}", dirname):
        raw = base64.b32decode(dirname + "====")
        return raw.hex() if len(raw) == 32 else None
    return None


def _add(tar: tarfile.TarFile, name: str, data: bytes) -> None:
    info = tarfile.TarInfo(name)
    info.size, info.mode, info.mtime = len(data), 0o644, 0  # no build time or owner: same bytes, same pack
    tar.addfile(info, io.BytesIO(data))


def read(path) -> tuple[dict, dict]:
    """(manifest, {cache key: {file name: bytes}}) of the pack at ``path``, every member checked
    (only regular files named as MEMBER, each at most MAX_MEMBER bytes, every entry with its
    metadata and cubin; nothing is extracted to disk). Raises ValueError naming the pack and the
    problem for anything else (tarfile's and lzma's errors included)."""
    path = Path(path)
    try:
        manifest, entries = None, {}
        with tarfile.open(path, "r:xz") as tar:
            for m in tar:
                if not m.isfile() or m.size > MAX_MEMBER:
                    raise ValueError(f"member {m.name!r} is not a regular file of at most {MAX_MEMBER} bytes")
                data = tar.extractfile(m).read()
                if m.name == MANIFEST:
                    manifest = json.loads(data)
                    continue
                match = MEMBER.match(m.name)
                if not match:
                    raise ValueError(f"unexpected member {m.name!r}")
                entries.setdefault(match.group(1), {})[f"{match.group(2)}.{match.group(3)}"] = data
    except (OSError, EOFError, tarfile.TarError, lzma.LZMAError, ValueError) as e:  # a foreign or damaged file
        raise ValueError(f"kernel pack {path.name}: {e}") from None
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
        raise ValueError(f"kernel pack {path.name}: no manifest of format {FORMAT}")
    for key, files in entries.items():
        stems = {f.rsplit(".", 1)[0] for f in files}
        if len(stems) != 1 or len(files) != 2:
            raise ValueError(f"kernel pack {path.name}: entry {key} is not one kernel's .json and .cubin")
    return manifest, entries


def install(device=None, pack_dir: Path | None = None) -> dict:
    """Write the shipped pack's entries for this Triton and ``device``'s architecture (default:
    the current CUDA device) into Triton's cache, those it lacks; once per process, cache
    location and pack. Returns ``{"pack": file name or None, "kernels": entries in it,
    "installed": entries written, "present": entries already cached, "ready": whether the pack's
    entries are in the cache (written now or earlier in this process), "seconds": wall time,
    "skipped": why nothing was installed, or None}``. Never raises: a pack that cannot be read
    warns once and is skipped (the kernels compile as without it). Without CUDA, triton is not
    imported."""
    t0 = time.perf_counter()
    out = {"pack": None, "kernels": 0, "installed": 0, "present": 0, "ready": False, "seconds": 0.0, "skipped": None}
    if not enabled():
        return {**out, "skipped": "WCODEC_KERNEL_PACK=0"}
    import torch

    if not torch.cuda.is_available() or torch.version.cuda is None:
        return {**out, "skipped": "no CUDA device"}
    try:
        import triton
    except Exception as e:  # no triton: nothing will compile either
        return {**out, "skipped": f"triton unavailable ({type(e).__name__})"}
    from . import fixed as fx

    name = pack_name(triton.__version__, fx._arch(torch.device("cuda") if device is None else torch.device(device)))
    path = (pack_dir or DIR) / name
    out["pack"] = name
    if not path.is_file():
        return {**out, "pack": None, "skipped": f"no pack {name} shipped"}
    memo = (str(path), os.environ.get("TRITON_CACHE_DIR"), os.environ.get("TRITON_HOME"))
    if memo in _DONE:
        prev = _DONE[memo]
        return {**prev, "installed": 0, "seconds": 0.0, "skipped": prev["skipped"] or "installed earlier in this process"}
    try:
        manifest, entries = read(path)
    except ValueError as e:
        warnings.warn(f"wcodec: {e}; the kernels compile instead", stacklevel=2)
        _DONE[memo] = {**out, "skipped": "unreadable"}
        return _DONE[memo]
    out["kernels"] = len(entries)
    if manifest.get("sources") != sources_hash():
        _DONE[memo] = {**out, "skipped": "stale: built from other kernel sources"}
        return _DONE[memo]
    try:
        out["installed"], out["present"] = install_entries(entries)
        out["ready"] = True
    except OSError as e:  # a read-only or full cache: what was written stays valid, the rest compiles
        warnings.warn(f"wcodec: kernel pack {name}: cannot write Triton's cache ({e}); the kernels compile instead",
                      stacklevel=2)
        out["skipped"] = f"cache not writable ({type(e).__name__})"
    out["seconds"] = time.perf_counter() - t0
    _DONE[memo] = out
    return out


def install_entries(entries: dict) -> tuple[int, int]:
    """Write ``entries`` ({cache key: {file name: bytes}}, as :func:`read` returns them) through
    Triton's cache manager, each entry's group file last (Triton takes an entry only once its
    group names every file); entries already cached are left as they are. Returns (written,
    already present). Raises OSError when the cache cannot be written."""
    from triton.runtime.cache import get_cache_manager

    written = present = 0
    for key, files in entries.items():
        mgr = get_cache_manager(key)
        meta = next(f for f in files if f.endswith(".json"))
        if mgr.get_group(meta) is not None:
            present += 1
            continue
        paths = {f: mgr.put(data, f, binary=not f.endswith(".json")) for f, data in files.items()}
        mgr.put_group(meta, paths)
        written += 1
    return written, present
