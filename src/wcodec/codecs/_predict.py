"""The int8 codec's intra prediction: per-tile mode costs, the residual plane and its inverse.

Runs in the C extension (csrc/predict.c: nothing to compile at run time, tiles on the
extension's threads) where it is built, else the numba kernels of ``codecs._predict_numba``
(compiled on first use, announced once on stderr, cached on disk). ``codecs._predict_reference``
is the specification; all three give the same bits (tests/codecs/test_predict.py).
``WCODEC_NATIVE=0`` forces numba (see ``wcodec.native``).

Layout: x is viewed as [rows, cols] and cut into tiles of th x tw (edge tiles partial); the
residual plane is tile-major, each tile row-major; modes: one uint8 per tile (NONE, LEFT, TOP,
AVG, PLANAR). ``size`` is the work in elements: below ``native.PARALLEL_MIN`` a call runs on one
thread. ``backend``: "auto" (C if built, else numba), "native", "numba" or "reference".
"""

from __future__ import annotations

import numpy as np

from .. import native
from ._predict_reference import AVG, LEFT, N_MODES, NONE, PLANAR, TOP  # noqa: F401 (re-exported)


def _n_tiles(rows: int, cols: int, th: int, tw: int) -> int:
    return -(-rows // th) * -(-cols // tw)


def _pick(backend: str):
    """(C extension or None, fallback module) for a backend name."""
    if backend == "reference":
        from . import _predict_reference as ref
        return None, ref
    if backend not in ("auto", "native", "numba"):
        raise ValueError(f"unknown backend {backend!r}")
    e = native.ext() if backend != "numba" else None
    if e is None and backend == "native":
        raise RuntimeError("the C extension wcodec._cext is not available (not built, or WCODEC_NATIVE=0)")
    if e is not None:
        return e, None
    from . import _predict_numba
    return None, _predict_numba


def mode_costs(x: np.ndarray, th: int, tw: int, cost: np.ndarray, *, size: int,
               backend: str = "auto") -> np.ndarray:
    """Coded cost of each tile under each mode: x [rows, cols] int16 values, cost [256] float64
    bits per residual symbol -> [n_tiles, 5] float64 bits (each a row-major sequential sum)."""
    e, mod = _pick(backend)
    if e is None:
        return mod.mode_costs(x, th, tw, cost, size=size)
    rows, cols = x.shape
    out = np.empty((_n_tiles(rows, cols, th, tw), N_MODES), dtype=np.float64)
    e.predict_costs(np.ascontiguousarray(x, dtype=np.int16), rows, cols, th, tw,
                    np.ascontiguousarray(cost, dtype=np.float64), out, native._threads_for(size))
    return out


def residuals(x: np.ndarray, th: int, tw: int, modes: np.ndarray, *, size: int,
              backend: str = "auto") -> np.ndarray:
    """Residual plane for per-tile modes: x [rows, cols] int16 values, modes [n_tiles] uint8 ->
    [rows*cols] uint8 (tile-major, each tile row-major). Raises ValueError (C path) on a mode
    outside 0..4."""
    e, mod = _pick(backend)
    if e is None:
        return mod.residuals(x, th, tw, modes, size=size)
    rows, cols = x.shape
    out = np.empty(rows * cols, dtype=np.uint8)
    e.predict_residuals(np.ascontiguousarray(x, dtype=np.int16), rows, cols, th, tw,
                        np.ascontiguousarray(modes, dtype=np.uint8), out, native._threads_for(size))
    return out


def reconstruct(res: np.ndarray, rows: int, cols: int, th: int, tw: int, modes: np.ndarray,
                signed: bool, *, size: int, backend: str = "auto", out: np.ndarray | None = None) -> np.ndarray:
    """Inverse prediction: residual plane [rows*cols] uint8 -> [rows, cols] uint8, the tensor's
    bytes (two's complement where ``signed``: AVG halves signed values for I8, unsigned for U8).
    out: optional writable C-contiguous [rows, cols] uint8 array to fill (the C path writes
    straight into it; the others copy). Raises ValueError (C path) on a mode outside 0..4 (the
    codec checks modes first) or an ``out`` of another size."""
    e, mod = _pick(backend)
    if e is None:
        got = mod.reconstruct(res, rows, cols, th, tw, modes, signed, size=size)
        if out is None:
            return got
        out[...] = got
        return out
    if out is None:
        out = np.empty((rows, cols), dtype=np.uint8)
    e.predict_reconstruct(np.ascontiguousarray(res, dtype=np.uint8), rows, cols, th, tw,
                          np.ascontiguousarray(modes, dtype=np.uint8), bool(signed), out,
                          native._threads_for(size))
    return out
