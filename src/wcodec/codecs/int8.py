"""Lossless int8 codec with 2-D tiles and intra prediction (the seeds' video-codec pipeline).

The tensor is viewed as [rows, cols] (rows = dim 0), cut into tiles; each tile is predicted by
one mode of NONE, LEFT, TOP, AVG ((left+top)>>1) and PLANAR (left+top-topleft), and the residuals
modulo 256 are coded with one rANS plane. Each tile's mode is chosen by its actual coded cost
under the tensor's frequency table (a few rounds: choose modes, re-estimate the table), and the
whole tensor falls back to NONE when prediction does not beat it: on decorrelated weight matrices
prediction adds bits, on smooth tensors (position embeddings, some conv kernels) it saves them.
Used for I8/U8 tensors and, through ``int8-quant``, for quantized float weights.
"""

from __future__ import annotations

import numpy as np

from .. import rans
from ..errors import CorruptDataError
from . import _predict as P
from .base import DTYPES, Codec, EncodedTensor, register, view_2d
from ..rans.tables import normalize_freqs

MODE_NAMES = ("NONE", "LEFT", "TOP", "AVG", "PLANAR")
DEFAULT_TILE = 32
MODE_ROUNDS = 3


def _cost_lut(counts: np.ndarray) -> np.ndarray:
    freqs = normalize_freqs(counts, 12).astype(np.float64)
    # Symbols the table lacks would need a table change: price them above any present symbol.
    return np.where(freqs > 0, 12 - np.log2(np.maximum(freqs, 1)), 14.0)


def choose_modes(x: np.ndarray, th: int, tw: int) -> np.ndarray:
    """Per-tile modes minimising coded cost under the tensor's table. x: [rows, cols] int16."""
    none = np.zeros(((x.shape[0] + th - 1) // th) * ((x.shape[1] + tw - 1) // tw), dtype=np.uint8)
    modes = none
    counts = np.bincount(P.residuals(x, th, tw, none, size=x.size), minlength=256)
    for _ in range(MODE_ROUNDS):
        new = np.argmin(P.mode_costs(x, th, tw, _cost_lut(counts), size=5 * x.size), axis=1).astype(np.uint8)
        if np.array_equal(new, modes):
            break
        modes = new
        counts = np.bincount(P.residuals(x, th, tw, modes, size=x.size), minlength=256)
    return modes


class Int8Codec(Codec):
    id = "int8"

    def encode(self, array: np.ndarray, dtype: str, prob_bits: int = rans.DEFAULT_PROB_BITS,
               chunk_steps: int | None = None, tile: int = DEFAULT_TILE,
               predict: bool = True, tables: str | int = "auto", **options) -> EncodedTensor:
        """array: int8 or uint8 tensor of any shape (not modified)."""
        if dtype not in ("I8", "U8"):
            raise ValueError(f"int8 codec takes I8/U8, got {dtype}")
        signed = dtype == "I8"
        rows, cols = view_2d(array.shape)
        x = np.ascontiguousarray(array).reshape(rows, cols).astype(np.int16)
        th = tw = int(tile)
        n_tiles = ((rows + th - 1) // th) * ((cols + tw - 1) // tw)
        none = np.zeros(n_tiles, dtype=np.uint8)
        best = self._pack(dtype, array.shape, x, th, tw, none, prob_bits, chunk_steps, tables, signed)
        if predict and x.size:
            modes = choose_modes(x, th, tw)
            if modes.any():
                cand = self._pack(dtype, array.shape, x, th, tw, modes, prob_bits, chunk_steps, tables, signed)
                # The chosen modes must pay for themselves, mode bytes included; else NONE.
                if cand.nbytes < best.nbytes:
                    best = cand
        return best

    def _pack(self, dtype, shape, x, th, tw, modes, prob_bits, chunk_steps, tables, signed):
        plane = rans.encode(P.residuals(x, th, tw, modes, size=x.size), prob_bits, chunk_steps, tables)
        all_none = not modes.any()
        params = {"rows": x.shape[0], "cols": x.shape[1], "tile_h": th, "tile_w": tw,
                  "signed": signed, "all_none": all_none, "res": plane.params()}
        sections = plane.sections("res")
        if not all_none:
            sections["modes"] = modes
        used = np.bincount(modes, minlength=len(MODE_NAMES))
        info = {"modes": {MODE_NAMES[m]: int(used[m]) for m in range(len(MODE_NAMES)) if used[m]}}
        return EncodedTensor(self.id, dtype, tuple(shape), params, sections, info=info)

    def decode(self, record: EncodedTensor) -> np.ndarray:
        return decode_int8(record, record.params).view(DTYPES[record.dtype]).reshape(record.shape)


def decode_int8(record: EncodedTensor, p: dict) -> np.ndarray:
    """Decode the int8 layout described by params ``p`` from ``record``'s sections.

    Returns [rows * cols] uint8 (two's-complement bytes for signed data).
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
    plane = rans.RansPlane.from_sections(p["res"], record.sections, "res")
    if plane.n_symbols != rows * cols:
        raise CorruptDataError(f"int8 codec: residual plane has {plane.n_symbols} symbols, tensor {rows * cols}")
    res = rans.decode(plane, where="residual plane")
    if p["all_none"] and cols <= tw:
        return res  # one tile column and nothing to predict: tile-major order is row-major
    return P.reconstruct(res, rows, cols, th, tw, modes, bool(p["signed"]), size=rows * cols).reshape(-1)


register(Int8Codec())
