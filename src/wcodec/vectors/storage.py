"""Save and load a CompressedIndex in the .wcodec container (``wcodec.save_file`` / ``safe_open``).

Tensors: ``vectors.anchors`` F16 [m, d]; rANS planes of the assignments and residual codes
(``vectors.assignments.<i>.{freqs,states,offsets,words}``, ``vectors.codes.<s>.*``, stored as
coded: the container keeps these uint16/uint32 arrays raw); with residual codes also
``vectors.rotation`` I8 [d, d], ``vectors.rotation_scale`` F32 [d], ``vectors.codebooks`` I8
[256, d], ``vectors.codebook_scale`` F32 [d]. Metadata key ``wcodec.vectors``: JSON with the
format version, N, d, m, sub_sizes, plane parameters, energy, iterations and the config.
"""

from __future__ import annotations

import json

import numpy as np

from ..errors import CorruptDataError, FormatError
from . import coding
from .residual import ResidualCodebooks

META_KEY = "wcodec.vectors"
VERSION = 1
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
    books = index.books
    if books is not None:
        tensors.update({P + "rotation": books.rotation_q, P + "rotation_scale": books.rotation_scale,
                        P + "codebooks": books.codebooks_q, P + "codebook_scale": books.codebook_scale})
    info = {k: v for k, v in index.info.items() if k in ("backend", "seconds", "merges", "splits", "config")}
    meta = {
        "version": VERSION, "n": index.n_vectors, "d": index.dim, "m": index.m,
        "energy": index.energy, "iterations": index.iterations,
        "source_itemsize": index.source_itemsize,
        "sub_sizes": None if books is None else [int(s) for s in books.sub_sizes],
        "assignment_planes": a_params, "code_planes": c_params, "info": info,
    }
    all_meta = {str(k): str(v) for k, v in (metadata or {}).items()}
    all_meta[META_KEY] = json.dumps(meta)
    wcodec.save_file({k: np.ascontiguousarray(v) for k, v in tensors.items()}, path, metadata=all_meta)


def load_index(path):
    """Read a CompressedIndex written by :func:`save_index`.

    Raises FormatError (not a vectors index), CorruptDataError (inconsistent shapes, bad planes),
    and what ``wcodec.safe_open`` raises for a bad container.
    """
    import wcodec

    from .index import CompressedIndex

    with wcodec.safe_open(path, framework="np") as f:
        raw = f.metadata().get(META_KEY)
        if raw is None:
            raise FormatError(f"{path}: not a vectors index (no '{META_KEY}' metadata)")
        try:
            meta = json.loads(raw)
            n, d, m = int(meta["n"]), int(meta["d"]), int(meta["m"])
        except (ValueError, KeyError, TypeError) as e:
            raise CorruptDataError(f"{path}: bad '{META_KEY}' metadata ({e})") from None
        if meta.get("version") != VERSION:
            raise FormatError(f"{path}: vectors index version {meta.get('version')} unknown (reader: {VERSION})")
        tensors = {k: f.get_tensor(k) for k in f.keys() if k.startswith(P)}
    anchors = _need(tensors, P + "anchors", (m, d)).astype(np.float32)
    a_planes = coding.planes_from_sections(meta["assignment_planes"], tensors, P + "assignments")
    labels = coding.join_assignment_planes(coding.decode_planes(a_planes, n, "vectors assignments"))
    if labels.size != n or (n and (labels.min() < 0 or labels.max() >= m)):
        raise CorruptDataError(f"{path}: assignments out of range [0, {m})")
    books = codes = None
    if meta.get("sub_sizes"):
        sizes = np.array(meta["sub_sizes"], dtype=np.int64)
        if sizes.sum() != d or (sizes < 1).any():
            raise CorruptDataError(f"{path}: subspace sizes {sizes.tolist()} do not cover d={d}")
        books = ResidualCodebooks(_need(tensors, P + "rotation", (d, d)), _need(tensors, P + "rotation_scale", (d,)),
                                  _need(tensors, P + "codebooks", (256, d)), _need(tensors, P + "codebook_scale", (d,)),
                                  sizes)
        c_planes = coding.planes_from_sections(meta["code_planes"], tensors, P + "codes")
        if len(c_planes) != sizes.size:
            raise CorruptDataError(f"{path}: {len(c_planes)} code planes for {sizes.size} subspaces")
        codes = np.stack(coding.decode_planes(c_planes, n, "vectors codes"), axis=1)
    index = CompressedIndex(anchors, labels, float(meta["energy"]), int(meta["iterations"]), books, codes,
                            int(meta.get("source_itemsize", 4)), info=dict(meta.get("info", {})))
    return index


def _need(tensors: dict, name: str, shape: tuple) -> np.ndarray:
    arr = tensors.get(name)
    if arr is None or tuple(arr.shape) != shape:
        got = None if arr is None else list(arr.shape)
        raise CorruptDataError(f"vectors index: tensor '{name}' must have shape {list(shape)}, got {got}")
    return arr
