"""Partial decode: the elements ``[e0, e1)`` (C order) of a record, decoding only the rANS chunks
(and int8 tile rows, codec "fixed" rows) that hold them. Used by ``safe_open(...).get_slice``;
:func:`decode_region` reads a block of a tensor (a tensor-parallel shard, as transformers asks
for one through ``get_slice``).

rANS chunks cover contiguous symbol ranges and decode independently, so an element range maps to
a chunk range. A sub-record is cut out of the record (the chunks' states, rebased word offsets
and words, the one frequency table of each table segment crossed, the matching tail bits or
tile rows) and decoded by the codec's own decoder, so the partial and full paths share every
line of decoding. Ranges over half the tensor, and codecs without a partial path (fixed16),
decode whole and slice, unless the caller asks for the range only (``whole_above=None``).
"""

from __future__ import annotations

import numpy as np

from .. import rans
from ..rans import RansPlane
from .base import DTYPES, EncodedTensor, view_2d


def sub_planes(plane: RansPlane, s0: int, s1: int):
    """Pieces of ``plane`` covering symbols ``[s0, s1)``: yields (RansPlane, first symbol) for
    each table segment crossed, each piece whole chunks with one frequency table."""
    cs, cpt = plane.chunk_size, plane.chunks_per_table
    c0, c1 = s0 // cs, -(-s1 // cs)
    tables = plane.freqs.reshape(-1, plane.alphabet_size)
    c = c0
    while c < c1:
        ce = min(c1, (c // cpt + 1) * cpt)
        lo, hi = int(plane.offsets[c]), int(plane.offsets[ce])
        n = min(ce * cs, plane.n_symbols) - c * cs
        yield RansPlane(n, plane.prob_bits, plane.chunk_steps, ce - c, plane.alphabet_size,
                        np.ascontiguousarray(tables[c // cpt]), plane.states[c * 32:ce * 32],
                        (plane.offsets[c:ce + 1] - plane.offsets[c]).astype(np.uint32),
                        plane.words[lo:hi]), c * cs
        c = ce


def decode_symbols(plane: RansPlane, s0: int, s1: int, where: str, stats: dict | None = None) -> np.ndarray:
    """Symbols ``[s0, s1)`` of a plane, decoding only the chunks holding them (their count is
    added to ``stats["decoded"]`` when given)."""
    plane.validate(where)
    pieces = [(rans.decode(p, where=where), start) for p, start in sub_planes(plane, s0, s1)]
    if stats is not None:
        _count(stats, sum(p.size for p, _ in pieces))
    if not pieces:
        return np.empty(0, np.uint8)
    whole = np.concatenate([p for p, _ in pieces])
    return whole[s0 - pieces[0][1]:s1 - pieces[0][1]]


def _float_range(rec: EncodedTensor, e0: int, e1: int, stats: dict) -> np.ndarray:
    from .float import FloatCodec, parse
    parts = parse(rec)
    W, E, M, L = parts.layout
    R, head = parts.tail_bits, parts.head
    out = []
    for piece, start in sub_planes(head, e0, e1):
        n = piece.n_symbols
        _count(stats, n)
        p = dict(rec.params, head=piece.params(), low=[{"coded": False}] * L)
        tail_bits = parts.tail[start * R // 8:(start * R + n * R + 7) // 8]  # chunks start byte-aligned
        sec = {"head.alphabet": parts.alphabet, **piece.sections("head"), "tail": tail_bits}
        for k, lname in enumerate(("low1", "low0")[:L]):
            lp = rec.params["low"][k]
            if lp.get("coded"):
                lplane = RansPlane.from_sections(lp, rec.sections, lname)
                sec[f"{lname}.raw"] = decode_symbols(lplane, start, start + n, f"{lname} plane")
            else:
                sec[f"{lname}.raw"] = rec.section(f"{lname}.raw", np.uint8, rec.numel)[start:start + n]
        sub = EncodedTensor(rec.codec, rec.dtype, (n,), p, sec)
        out.append((FloatCodec().decode(sub), start))
    whole = np.concatenate([o for o, _ in out])
    return whole[e0 - out[0][1]:e1 - out[0][1]]


def _int8_range(rec: EncodedTensor, e0: int, e1: int, stats: dict) -> np.ndarray:
    """int8 / int8-quant: decode the tile rows holding [e0, e1): in the tile-major residual plane
    a band of whole tile rows is one contiguous symbol range, and a tile is predicted only from
    its own values."""
    from . import _predict as P
    from ..errors import CorruptDataError
    from .int8 import N_PRED
    quant = rec.codec == "int8-quant"
    p = rec.params["q"] if quant else rec.params
    rows, cols, th, tw = (int(p[k]) for k in ("rows", "cols", "tile_h", "tile_w"))
    if rows < 0 or cols < 1 or rows * cols != rec.numel or th < 1 or tw < 1:
        raise CorruptDataError("int8 codec: view or tile size inconsistent with the shape")
    if "hi" in p:  # transform tiles (rare: conv kernels): the hi plane is not row-addressable
        from . import decode_tensor
        _count(stats, rec.numel)
        return decode_tensor(rec).reshape(-1)[e0:e1].copy()
    ntw, nth = -(-cols // tw), -(-rows // th)
    b0, b1 = (e0 // cols) // th, -(-(-(-e1 // cols)) // th)  # band of tile rows
    rr0, rr1 = b0 * th, min(b1 * th, rows)
    if p["all_none"]:
        modes = np.zeros((b1 - b0) * ntw, np.uint8)
    else:
        modes = rec.section("modes", np.uint8, nth * ntw)[b0 * ntw:b1 * ntw]
        if modes.size and int(modes.max()) >= N_PRED:  # no hi plane: no transform tiles
            raise CorruptDataError("int8 codec: unknown prediction mode")
    plane = RansPlane.from_sections(p["res"], rec.sections, "res")
    if plane.n_symbols != rec.numel:
        raise CorruptDataError("int8 codec: residual plane size does not match the tensor")
    res = decode_symbols(plane, rr0 * cols, rr1 * cols, "residual plane")
    _count(stats, (rr1 - rr0) * cols)
    k = rr1 - rr0
    q = P.reconstruct(res, k, cols, th, tw, modes, bool(p["signed"]), size=k * cols).reshape(-1)
    if quant:
        from .quant import checked_scales, dequantize
        scales = checked_scales(rec, rows)[rr0:rr1]  # all rows, as the full decode checks
        q = dequantize(q.view(np.int8), scales, k, rec.dtype)
    return q[e0 - rr0 * cols:e1 - rr0 * cols]


def decode_range(rec: EncodedTensor, e0: int, e1: int, name: str = "", stats: dict | None = None,
                 whole_above: float | None = 0.5) -> np.ndarray:
    """Elements ``[e0, e1)`` of the record's tensor in C order, as a flat numpy array of its
    dtype (BF16 / FP8 as unsigned bits). Makes the full decode's checks (params schema, the
    codec's record checks, finite scales) and raises what it raises: a CorruptDataError naming
    tensor ``name``. ValueError for a range outside the tensor.

    whole_above: a range over this fraction of the tensor decodes the whole tensor (one parallel
    decode of all chunks) and slices; None: never (only the chunks holding the range, as a rank
    of a tensor-parallel load must). stats: a dict whose ``"decoded"`` entry is increased by the
    number of elements the codec decoded (whole chunks / tile rows, the whole tensor when it
    decoded whole; a raw record's range, copied)."""
    from . import check_record_params, decode_tensor, named_errors
    if not (0 <= e0 <= e1 <= rec.numel):
        raise ValueError(f"tensor '{name}': element range [{e0}, {e1}) outside a tensor of {rec.numel}")
    with named_errors(name):
        check_record_params(rec)
        return _range(rec, e0, e1, name, decode_tensor, {} if stats is None else stats, whole_above)


def _count(stats: dict, n: int) -> None:
    stats["decoded"] = stats.get("decoded", 0) + int(n)


def _range(rec: EncodedTensor, e0: int, e1: int, name: str, decode_tensor, stats: dict,
           whole_above: float | None) -> np.ndarray:
    dt = DTYPES[rec.dtype]
    if e0 == e1:
        return np.empty(0, dt)
    if rec.codec == "raw":
        size = np.dtype(dt).itemsize
        _count(stats, e1 - e0)
        return rec.section("data", np.uint8, rec.numel * size)[e0 * size:e1 * size].view(dt).copy()
    partial = rec.codec in ("float", "fp8", "int8", "int8-quant", "fixed")
    if not partial or whole_above is not None and e1 - e0 > whole_above * rec.numel:
        # most of the tensor (one parallel decode of all chunks is faster), or no partial path
        _count(stats, rec.numel)
        return decode_tensor(rec, name).reshape(-1)[e0:e1].copy()
    if rec.codec == "float":
        return _float_range(rec, e0, e1, stats).view(dt)
    if rec.codec == "fp8":
        from .fp8 import parse
        return decode_symbols(parse(rec), e0, e1, "fp8 data plane", stats).copy()
    if rec.codec == "fixed":
        return _fixed_range(rec, e0, e1, stats)
    return np.ascontiguousarray(_int8_range(rec, e0, e1, stats)).view(dt)


def _fixed_range(rec: EncodedTensor, e0: int, e1: int, stats: dict) -> np.ndarray:
    """codec "fixed": the rows holding [e0, e1), cut from the record (:mod:`.fixed_slice`) and decoded."""
    from .fixed import decode_bits
    from .fixed_slice import slice_sections
    rows, cols = view_2d(tuple(rec.shape))
    r0, r1 = e0 // cols, -(-e1 // cols)
    params, sections = slice_sections(rec.params, rec.sections, rows, cols, r0, r1, 0, cols)
    _count(stats, (r1 - r0) * cols)
    return decode_bits(params, sections, r1 - r0, cols)[e0 - r0 * cols:e1 - r0 * cols]


def decode_region(rec: EncodedTensor, region, name: str = "", stats: dict | None = None) -> np.ndarray:
    """The block ``region`` (``[(start, stop)]``, one pair per dim) of the record's tensor: a
    numpy array of its dtype (BF16 / FP8 as unsigned bits) and the region's shape. What it
    decodes: codec "fixed", the block's own bytes (:func:`.fixed_slice.slice_record`; a 3-D block
    cut along its last dim: the rows of dim 0 it touches); other codecs, the rANS chunks (int8:
    tile rows) holding the region's rows of dim 0, all columns of those rows: a chunk is a run of
    elements in C order, so a column range touches every chunk of its rows (``stats``: see
    :func:`decode_range`). Raises InvalidInputError for a region that does not fit the tensor,
    else what :func:`decode_range` raises."""
    from . import check_record_params, named_errors
    from .fixed_slice import region_block, slice_record
    stats = {} if stats is None else stats
    shape = tuple(rec.shape)
    region = [(int(a), int(b)) for a, b in region]
    with named_errors(name):
        block = region_block(shape, region)
        sizes = tuple(b - a for a, b in region)
        if 0 in sizes:
            return np.empty(sizes, DTYPES[rec.dtype])
        if rec.codec == "fixed" and block is not None:
            from .fixed import decode_bits
            check_record_params(rec)
            cut = slice_record(rec, region)
            _count(stats, cut.numel)
            return decode_bits(cut.params, cut.sections, *view_2d(cut.shape)).reshape(cut.shape)
    if not shape:
        return decode_range(rec, 0, rec.numel, name, stats, None).reshape(())
    (r0, r1), inner = region[0], int(np.prod(shape[1:], dtype=np.int64))
    flat = decode_range(rec, r0 * inner, r1 * inner, name, stats, None)
    rest = tuple(slice(a, b) for a, b in region[1:])
    return np.ascontiguousarray(flat.reshape((r1 - r0,) + shape[1:])[(slice(None),) + rest])
