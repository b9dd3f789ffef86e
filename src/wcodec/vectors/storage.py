"""Save and load a CompressedIndex in the .wcodec container (``wcodec.save_file`` / ``safe_open``).

Tensors: ``vectors.anchors`` F16 [m, d]; rANS planes of the assignments and residual codes
(``vectors.assignments.<i>.{freqs,states,offsets,words}``, ``vectors.codes.<s>.*``, stored as
coded: the container keeps these uint16/uint32 arrays raw); with residual codes also the
rANS planes ``vectors.rotation.0.*`` (int8 [r, d] as bytes) and ``vectors.codebooks.0.*``
(int8 [256, r]), ``vectors.rotation_scale`` F32 [r], ``vectors.codebook_scale`` F32 [r], and with
stored norms ``vectors.norms.0.*`` (uint8 [N]) and ``vectors.norm_range`` F32 [2]. Metadata key
``wcodec.vectors``: JSON with the format version, N, d, m, r, sub_sizes, plane parameters,
energy, iterations and the config. Version 1 files (raw int8 [d, d] / [256, d] tables
``vectors.rotation`` and ``vectors.codebooks``, no norms) still load.
"""

from __future__ import annotations

import json

import numpy as np

from ..errors import CorruptDataError, FormatError
from ..format import _io
from . import coding
from .residual import ResidualCodebooks

META_KEY = "wcodec.vectors"
VERSION = 2
READABLE = (1, 2)
P = "vectors."


def save_index(index, path, metadata: dict | None = None) -> None:
    """Write ``index`` to ``path`` (.wcodec). metadata: extra str -> str entries. Raises OSError."""
    import wcodec

    coded = index.coded()
    tensors = {P + "anchors": index.anchors.astype(np.float16)}
    a_sec, a_params = coding.plane_sections(coded["assignments"], P + "assignments")
    c_sec, c_params = coding.plane_sections(coded["codes"], P + "codes")
    tensors.update(a_sec)
    tensors.update(c_sec)
    n_sec, n_params = coding.plane_sections(coded["norms"], P + "norms")
    tensors.update(n_sec)
    if index.norm_range is not None:
        tensors[P + "norm_range"] = np.asarray(index.norm_range, dtype=np.float32)
    books = index.books
    t_params = {}
    if books is not None:
        for name, planes in books.planes().items():
            sec, t_params[name] = coding.plane_sections(planes, P + name)
            tensors.update(sec)
        tensors.update({P + "rotation_scale": books.rotation_scale, P + "codebook_scale": books.codebook_scale})
    info = {k: v for k, v in index.info.items() if k in ("backend", "seconds", "merges", "splits", "config")}
    meta = {
        "version": VERSION, "n": index.n_vectors, "d": index.dim, "m": index.m,
        "energy": index.energy, "iterations": index.iterations,
        "source_itemsize": index.source_itemsize,
        "sub_sizes": None if books is None else [int(s) for s in books.sub_sizes],
        "r": None if books is None else books.rank,
        "assignment_planes": a_params, "code_planes": c_params, "norm_planes": n_params,
        "table_planes": t_params, "info": info,
    }
    all_meta = {str(k): str(v) for k, v in (metadata or {}).items()}
    all_meta[META_KEY] = json.dumps(meta)
    wcodec.save_file({k: np.ascontiguousarray(v) for k, v in tensors.items()}, path, metadata=all_meta)


def read_index(path) -> dict:
    """The fields of a CompressedIndex written by :func:`save_index`, as keyword arguments of
    ``CompressedIndex`` (``wcodec.vectors.index.load_index`` builds it).

    Raises FormatError (not a vectors index), CorruptDataError (inconsistent shapes, bad planes,
    more vectors than the planes' bytes can hold: :data:`VECTORS_PER_BYTE`), and what
    ``wcodec.safe_open`` raises for a bad container.
    """
    import wcodec

    with wcodec.safe_open(path, framework="np") as f:
        raw = f.metadata().get(META_KEY)
        if raw is None:
            raise FormatError(f"{path}: not a vectors index (no '{META_KEY}' metadata)")
        meta = check_meta(_io.loads(raw, f"{path}: '{META_KEY}' metadata"), path)
        n, d, m = meta["n"], meta["d"], meta["m"]
        tensors = {k: f.get_tensor(k) for k in f.keys() if k.startswith(P)}
    anchors = _need(tensors, P + "anchors", (m, d)).astype(np.float32)
    a_planes = coding.planes_from_sections(meta["assignment_planes"], tensors, P + "assignments")
    _check_count(a_planes, n, "assignments", path)
    labels = coding.join_assignment_planes(coding.decode_planes(a_planes, n, "vectors assignments"))
    if labels.size != n or (n and (labels.min() < 0 or labels.max() >= m)):
        raise CorruptDataError(f"{path}: assignments out of range [0, {m})")
    books = codes = None
    if meta.get("sub_sizes"):
        sizes = np.array(meta["sub_sizes"], dtype=np.int64)
        r = int(meta.get("r") or d)
        if sizes.sum() != r or (sizes < 1).any() or not 1 <= r <= d:
            raise CorruptDataError(f"{path}: subspace sizes {sizes.tolist()} do not cover r={r} (d={d})")
        if meta["version"] == 1:
            rot_q, cb_q = _need(tensors, P + "rotation", (d, d)), _need(tensors, P + "codebooks", (256, d))
        else:
            rot_q = _table(meta, tensors, "rotation", (r, d))
            cb_q = _table(meta, tensors, "codebooks", (256, r))
        books = ResidualCodebooks(rot_q, _need(tensors, P + "rotation_scale", (r,)), cb_q,
                                  _need(tensors, P + "codebook_scale", (r,)), sizes)
        c_planes = coding.planes_from_sections(meta.get("code_planes") or [], tensors, P + "codes")
        _check_count(c_planes, n, "codes", path)
        if len(c_planes) != sizes.size:
            raise CorruptDataError(f"{path}: {len(c_planes)} code planes for {sizes.size} subspaces")
        codes = np.stack(coding.decode_planes(c_planes, n, "vectors codes"), axis=1)
    norm_codes = norm_range = None
    if meta.get("norm_planes"):
        n_planes = coding.planes_from_sections(meta["norm_planes"], tensors, P + "norms")
        _check_count(n_planes, n, "norms", path)
        if len(n_planes) != 1:
            raise CorruptDataError(f"{path}: {len(n_planes)} norm planes, expected 1")
        norm_codes = coding.decode_planes(n_planes, n, "vectors norms")[0]
        norm_range = _need(tensors, P + "norm_range", (2,))
    return dict(anchors=anchors, assignments=labels, energy=float(meta["energy"]), iterations=int(meta["iterations"]),
                books=books, codes=codes, norm_codes=norm_codes, norm_range=norm_range,
                source_itemsize=int(meta.get("source_itemsize", 4)), info=dict(meta.get("info", {})))


#: the most vectors one stored byte of an assignment, code or norm plane may hold: a constant
#: plane costs 132 bytes per chunk of 32 x 1024 symbols (248 per byte, the writer's densest), so
#: an index claiming more (20M vectors in 22 KB) is refused before anything is sized from N
VECTORS_PER_BYTE = 256


def _check_count(planes: list, n: int, what: str, path) -> None:
    """Every plane of ``what`` holds n symbols in at least n / VECTORS_PER_BYTE stored bytes."""
    for i, plane in enumerate(planes):
        if plane.n_symbols != n or n > VECTORS_PER_BYTE * plane.nbytes:
            raise CorruptDataError(f"{path}: {what} plane {i} holds {plane.n_symbols} symbols in "
                                   f"{plane.nbytes} bytes, the index claims {n} vectors "
                                   f"(at most {VECTORS_PER_BYTE} per stored byte)")


#: bounds of the metadata integers (checked before any array is sized from them)
MAX_N, MAX_D, MAX_M = 1 << 40, 1 << 20, 1 << 32


def check_meta(meta, path) -> dict:
    """Schema check of the ``wcodec.vectors`` metadata; returns it. Raises FormatError (not an
    index of a known version) or CorruptDataError naming the field."""
    def bad(msg):
        raise CorruptDataError(f"{path}: '{META_KEY}' metadata: {msg}"[:400])

    def need_int(key, lo, hi, optional=False):
        v = meta.get(key)
        if optional and key not in meta:
            return
        if type(v) is not int or not lo <= v <= hi:
            bad(f"'{key}' must be an integer in [{lo}, {hi}], got {v!r}")

    if not isinstance(meta, dict):
        bad("not an object")
    if type(meta.get("version")) is not int or meta["version"] not in READABLE:
        raise FormatError(f"{path}: vectors index version {meta.get('version')!r} unknown (reader: {VERSION})"[:300])
    need_int("n", 0, MAX_N)
    need_int("d", 1, MAX_D)
    need_int("m", 1, MAX_M)
    need_int("iterations", 0, 1 << 62)
    need_int("source_itemsize", 1, 8, optional=True)
    if meta.get("r") is not None:  # None without residual codes
        need_int("r", 1, meta["d"])
    if type(meta.get("energy")) not in (int, float):
        bad(f"'energy' must be a number, got {meta.get('energy')!r}")
    sizes = meta.get("sub_sizes")
    if sizes is not None and not (isinstance(sizes, list) and len(sizes) <= meta["d"]
                                  and all(type(s) is int and 1 <= s <= meta["d"] for s in sizes)):
        bad(f"'sub_sizes' must be a list of at most d integers in [1, d], got {sizes!r}")
    for key in ("assignment_planes", "code_planes", "norm_planes"):
        v = meta.get(key, [] if key != "assignment_planes" else None)
        if v is None and key != "assignment_planes":
            continue
        if not isinstance(v, list) or not all(isinstance(p, dict) for p in v):
            bad(f"'{key}' must be a list of objects")
    if len(meta["assignment_planes"]) > 4:
        bad("more than 4 assignment byte planes")
    tp = meta.get("table_planes", {})
    if not isinstance(tp, dict) or not isinstance(meta.get("info", {}), dict):
        bad("'table_planes' and 'info' must be objects")
    for name, planes in tp.items():
        if not isinstance(planes, list) or not all(isinstance(p, dict) for p in planes):
            bad(f"'table_planes' '{name}' must be a list of objects")
    return meta


def _table(meta: dict, tensors: dict, name: str, shape: tuple) -> np.ndarray:
    """Decode the rANS-coded int8 table ``name`` of the given shape."""
    try:
        params = meta["table_planes"][name]
    except (KeyError, TypeError):
        raise CorruptDataError(f"vectors index: no planes for table '{name}'") from None
    planes = coding.planes_from_sections(params, tensors, P + name)
    if len(planes) != 1:
        raise CorruptDataError(f"vectors index: table '{name}' has {len(planes)} planes, expected 1")
    return coding.decode_planes(planes, int(np.prod(shape)), f"vectors {name}")[0].view(np.int8).reshape(shape)


def _need(tensors: dict, name: str, shape: tuple) -> np.ndarray:
    arr = tensors.get(name)
    if arr is None or tuple(arr.shape) != shape:
        got = None if arr is None else list(arr.shape)
        raise CorruptDataError(f"vectors index: tensor '{name}' must have shape {list(shape)}, got {got}")
    return arr
