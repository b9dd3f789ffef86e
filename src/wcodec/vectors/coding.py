"""Entropy coding of assignments and residual codes with the interleaved rANS coder.

Every byte column is its own plane (one frequency table each): assignments [N] < 2**32 are
split into little-endian byte planes (1 plane for m <= 256, 2 for m <= 65536), residual codes
[N, M] into M planes, one per subspace.
"""

from __future__ import annotations

import numpy as np

from .. import rans
from ..errors import CorruptDataError


def assignment_planes(assignments: np.ndarray, m: int) -> list[np.ndarray]:
    """[N] ints in [0, m) -> list of uint8 [N] byte planes (low byte first)."""
    n_bytes = max(1, (max(int(m) - 1, 0).bit_length() + 7) // 8)
    a = np.asarray(assignments, dtype=np.uint32)
    return [((a >> (8 * i)) & 0xFF).astype(np.uint8) for i in range(n_bytes)]


def join_assignment_planes(planes: list[np.ndarray]) -> np.ndarray:
    out = np.zeros(planes[0].size if planes else 0, dtype=np.int64)
    for i, p in enumerate(planes):
        out |= p.astype(np.int64) << (8 * i)
    return out


def encode_planes(planes: list[np.ndarray]) -> list:
    """uint8 planes -> list of RansPlane."""
    return [rans.encode(np.ascontiguousarray(p, dtype=np.uint8)) for p in planes]


def decode_planes(coded: list, n: int, where: str) -> list[np.ndarray]:
    """list of RansPlane -> uint8 [n] planes; raises CorruptDataError on a size mismatch."""
    out = []
    for i, plane in enumerate(coded):
        if plane.n_symbols != n:
            raise CorruptDataError(f"{where}: plane {i} holds {plane.n_symbols} symbols, expected {n}")
        out.append(rans.decode(plane, where=f"{where} plane {i}"))
    return out


def coded_nbytes(coded: list) -> int:
    return sum(p.nbytes for p in coded)


def plane_sections(coded: list, prefix: str) -> tuple[dict, list]:
    """Named arrays and JSON params of coded planes, for the container."""
    sections, params = {}, []
    for i, plane in enumerate(coded):
        sections.update(plane.sections(f"{prefix}.{i}"))
        params.append(plane.params())
    return sections, params


def planes_from_sections(params: list, tensors: dict, prefix: str) -> list:
    return [rans.RansPlane.from_sections(p, tensors, f"{prefix}.{i}") for i, p in enumerate(params)]
