"""Lossless int8 codec with 2-D tiles and intra prediction (the seeds' video-codec pipeline).

The tensor is viewed as [rows, cols] (rows = dim 0), cut into tiles; each tile is predicted by
one mode of NONE, LEFT, TOP, AVG ((left+top)>>1) and PLANAR (left+top-topleft), and the residuals
modulo 256 are coded with one rANS plane. Each tile's mode is chosen by its actual coded cost
under the tensor's frequency table (a few rounds: choose modes, re-estimate the table), and the
whole tensor falls back to NONE when prediction does not beat it: on decorrelated weight matrices
prediction adds bits, on smooth tensors (position embeddings, some conv kernels) it saves them.
Used for I8/U8 tensors and, through ``int8-quant``, for quantized float weights.

Transform modes DCT and ADST (ids 5, 6; :mod:`wcodec.codecs.transform`) code a tile made of
whole 8x8 blocks as reversible integer 8x8 DCT-II / DST-VII coefficients instead of prediction
residuals: each coefficient's low byte goes into the residual plane, its high part into a second
rANS plane ``hi`` (present only when some tile uses a transform). They are evaluated per tile by
coded cost beside the prediction modes where they were measured to pay: tensors of 3 or more
dimensions (conv kernels; ``transforms="auto"``), or every tensor with ``transforms=True``
(benchmarks/experiments/transform_modes.py; on linear matrices and embeddings they never win).
"""

from __future__ import annotations

import numpy as np

from .. import rans
from ..errors import CorruptDataError
from . import _predict as P
from .transform import hi_offsets, tile_sizes
from .base import DTYPES, Codec, EncodedTensor, register, view_2d
from ..rans.tables import normalize_freqs

MODE_NAMES = ("NONE", "LEFT", "TOP", "AVG", "PLANAR", "DCT", "ADST")
N_MODES = len(MODE_NAMES)
N_PRED = 5  # modes 0..4 are intra prediction (codecs._predict), 5..6 transforms (codecs._transform)
DEFAULT_TILE = 32
MODE_ROUNDS = 3


def _cost_lut(counts: np.ndarray) -> np.ndarray:
    freqs = normalize_freqs(counts, 12).astype(np.float64)
    # Symbols the table lacks would need a table change: price them above any present symbol.
    return np.where(freqs > 0, 12 - np.log2(np.maximum(freqs, 1)), 14.0)


def planes(x: np.ndarray, th: int, tw: int, modes: np.ndarray) -> tuple:
    """The residual plane ([rows*cols] uint8) and the hi plane (uint8, empty without transform
    tiles) of ``x`` ([rows, cols] int16) under per-tile ``modes``."""
    has_tr = bool(modes.size) and int(modes.max()) >= N_PRED
    pmodes = np.where(modes >= N_PRED, 0, modes).astype(np.uint8) if has_tr else modes
    res = P.residuals(x, th, tw, pmodes, size=x.size)
    if not has_tr:
        return res, np.zeros(0, dtype=np.uint8)
    from . import _transform as TR

    off, n_hi = hi_offsets(x.shape[0], x.shape[1], th, tw, modes)
    hi = np.empty(n_hi, dtype=np.uint8)
    if TR.coefficients(x, th, tw, modes, off, res, hi, size=n_hi):
        raise ValueError("int8 codec: transform coefficients out of range (values beyond 8 bits?)")
    return res, hi


def choose_modes(x: np.ndarray, th: int, tw: int, transforms: bool = False, init: str = "none") -> np.ndarray:
    """Per-tile modes minimising coded cost under the tensor's table(s). x: [rows, cols] int16.

    transforms: also evaluate the DCT / ADST modes. init: the table the first round prices
    symbols with: "none" (the NONE plane's) or "mix" (the sum of the planes of every mode used
    on every tile). Under the NONE table small residuals look expensive on smooth tensors and
    the rounds can stay at NONE (a cosine basis: 7.7 bits/weight instead of 5); "mix" avoids that
    local minimum.
    """
    n_tiles = ((x.shape[0] + th - 1) // th) * ((x.shape[1] + tw - 1) // tw)
    modes = np.zeros(n_tiles, dtype=np.uint8)
    counts = np.bincount(P.residuals(x, th, tw, modes, size=x.size), minlength=256)
    # before any tile uses a transform: high parts priced as if 0 were nearly certain
    hi_cost = np.full(256, 8.0)
    hi_cost[0] = 0.05
    if init == "mix":
        uniform = [np.full(n_tiles, m, np.uint8) for m in range(1, N_MODES if transforms else N_PRED)]
        for m in uniform:
            res, hi = planes(x, th, tw, _where_ok(x, th, tw, m))
            counts += np.bincount(res, minlength=256)
            if hi.size:
                hi_cost = _cost_lut(np.bincount(hi, minlength=256))
    if transforms:
        from . import _transform as TR
    for _ in range(MODE_ROUNDS):
        cost = P.mode_costs(x, th, tw, _cost_lut(counts), size=5 * x.size)
        if transforms:
            cost = np.hstack([cost, TR.tile_costs(x, th, tw, _cost_lut(counts), hi_cost, size=2 * x.size)])
        new = np.argmin(cost, axis=1).astype(np.uint8)
        if np.array_equal(new, modes):
            break
        modes = new
        res, hi = planes(x, th, tw, modes)
        counts = np.bincount(res, minlength=256)
        if hi.size:
            hi_cost = _cost_lut(np.bincount(hi, minlength=256))
    return modes


def _where_ok(x: np.ndarray, th: int, tw: int, modes: np.ndarray) -> np.ndarray:
    """``modes`` with transform modes on tiles that are not whole 8x8 blocks set to NONE."""
    hs, ws = tile_sizes(x.shape[0], x.shape[1], th, tw)
    return np.where((modes >= N_PRED) & ((hs % 8 != 0) | (ws % 8 != 0)), 0, modes).astype(np.uint8)


class Int8Codec(Codec):
    id = "int8"

    def encode(self, array: np.ndarray, dtype: str, prob_bits: int = rans.DEFAULT_PROB_BITS,
               chunk_steps: int | None = None, tile: int = DEFAULT_TILE,
               predict: bool = True, tables: str | int = "auto", transforms: bool | str = "auto",
               **options) -> EncodedTensor:
        """array: int8 or uint8 tensor of any shape (not modified). transforms: evaluate the DCT /
        ADST tile modes: True, False, or "auto" (tensors of 3+ dimensions, where they paid)."""
        if dtype not in ("I8", "U8"):
            raise ValueError(f"int8 codec takes I8/U8, got {dtype}")
        signed = dtype == "I8"
        rows, cols = view_2d(array.shape)
        x = np.ascontiguousarray(array).reshape(rows, cols).astype(np.int16)
        th = tw = int(tile)
        n_tiles = ((rows + th - 1) // th) * ((cols + tw - 1) // tw)
        none = np.zeros(n_tiles, dtype=np.uint8)
        best = self._pack(dtype, array.shape, x, th, tw, none, prob_bits, chunk_steps, tables, signed)
        modes = none
        if predict and x.size:
            modes = choose_modes(x, th, tw)
            if modes.any():
                cand = self._pack(dtype, array.shape, x, th, tw, modes, prob_bits, chunk_steps, tables, signed)
                # The chosen modes must pay for themselves, mode bytes included; else NONE.
                if cand.nbytes < best.nbytes:
                    best = cand
            if transforms is True or (transforms == "auto" and np.ndim(array) >= 3):
                # the mixed first table (choose_modes): transform coefficients are small symbols
                tmodes = choose_modes(x, th, tw, transforms=True, init="mix")
                if tmodes.any() and not np.array_equal(tmodes, modes):
                    cand = self._pack(dtype, array.shape, x, th, tw, tmodes, prob_bits, chunk_steps, tables, signed)
                    if cand.nbytes < best.nbytes:
                        best = cand
        return best

    def _pack(self, dtype, shape, x, th, tw, modes, prob_bits, chunk_steps, tables, signed):
        res, hi = planes(x, th, tw, modes)
        plane = rans.encode(res, prob_bits, chunk_steps, tables)
        all_none = not modes.any()
        params = {"rows": x.shape[0], "cols": x.shape[1], "tile_h": th, "tile_w": tw,
                  "signed": signed, "all_none": all_none, "res": plane.params()}
        sections = plane.sections("res")
        if hi.size:
            hplane = rans.encode(hi, prob_bits, chunk_steps, tables)
            params["hi"] = hplane.params()
            sections.update(hplane.sections("hi"))
        if not all_none:
            sections["modes"] = modes
        used = np.bincount(modes, minlength=len(MODE_NAMES))
        info = {"modes": {MODE_NAMES[m]: int(used[m]) for m in range(len(MODE_NAMES)) if used[m]}}
        return EncodedTensor(self.id, dtype, tuple(shape), params, sections, info=info)

    def decode(self, record: EncodedTensor, out: np.ndarray | None = None) -> np.ndarray:
        """out: see Codec.decode (written by the rANS decoder or the inverse prediction)."""
        dst = None if out is None else out.view(np.uint8)
        return decode_int8(record, record.params, out=dst).view(DTYPES[record.dtype]).reshape(record.shape)


def decode_int8(record: EncodedTensor, p: dict, out: np.ndarray | None = None) -> np.ndarray:
    """Decode the int8 layout described by params ``p`` from ``record``'s sections.

    Returns [rows * cols] uint8 (two's-complement bytes for signed data), written into ``out``
    (writable C-contiguous uint8 [rows * cols]) when given: by the rANS decoder when there is
    nothing to predict and tile-major order is row-major (one tile
    column or one row), else by the inverse prediction from a
    residual plane of rows * cols bytes (the rANS output in tile-major order).
    """
    rows, cols, th, tw = (int(p[k]) for k in ("rows", "cols", "tile_h", "tile_w"))
    if rows < 0 or cols < 0 or rows * cols != record.numel or th < 1 or tw < 1:
        raise CorruptDataError("int8 codec: view or tile size inconsistent with the shape")
    n_tiles = ((rows + th - 1) // th) * ((cols + tw - 1) // tw)
    if p["all_none"]:
        modes = np.zeros(n_tiles, dtype=np.uint8)
    else:
        modes = record.section("modes", np.uint8, n_tiles)
        if n_tiles and int(modes.max()) >= len(MODE_NAMES):
            raise CorruptDataError("int8 codec: unknown prediction mode")
    has_tr = bool(n_tiles) and int(modes.max()) >= N_PRED
    if has_tr != ("hi" in p):
        raise CorruptDataError("int8 codec: transform modes and the hi plane must come together")
    plane = rans.RansPlane.from_sections(p["res"], record.sections, "res")
    if plane.n_symbols != rows * cols:
        raise CorruptDataError(f"int8 codec: residual plane has {plane.n_symbols} symbols, tensor {rows * cols}")
    if has_tr:
        hi_off, n_hi = hi_offsets(rows, cols, th, tw, modes)
        hplane = rans.RansPlane.from_sections(p["hi"], record.sections, "hi")
        if hplane.n_symbols != n_hi:
            raise CorruptDataError(f"int8 codec: hi plane has {hplane.n_symbols} symbols, transform tiles {n_hi}")
    if p["all_none"] and (cols <= tw or rows == 1):
        # nothing to predict, and one tile column or one row: tile-major order is row-major
        return rans.decode(plane, out=out, where="residual plane")
    res = rans.decode(plane, where="residual plane")
    pmodes = np.where(modes >= N_PRED, 0, modes).astype(np.uint8) if has_tr else modes
    out = P.reconstruct(res, rows, cols, th, tw, pmodes, bool(p["signed"]), size=rows * cols,
                        out=None if out is None else out.reshape(rows, cols)).reshape(rows, cols)
    if has_tr:
        from . import _transform as TR

        hi = rans.decode(hplane, where="hi plane")
        if TR.inverse(res, hi, hi_off, rows, cols, th, tw, modes, out, size=n_hi):
            raise CorruptDataError(f"int8 codec: transform high parts outside [{TR.HI_MIN}, {TR.HI_MAX}]")
    return out.reshape(-1)


register(Int8Codec())
