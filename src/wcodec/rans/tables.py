"""Frequency tables of the rANS coder: normalisation and the packed decode lookup table.

Shared by the reference and the fast coders (``wcodec.native``), so all see the same tables.
Normalisation is an encoder choice (the decoder only reads the stored frequencies), but it is
deterministic so that golden bytes stay stable.
"""

from __future__ import annotations

import numpy as np

from .. import native
from ..errors import CorruptDataError

ALPHABET = 256
PROB_BITS_ALLOWED = (11, 12)


def normalize_freqs(counts: np.ndarray, prob_bits: int) -> np.ndarray:
    """Scale symbol counts to frequencies that sum to exactly ``2**prob_bits``.

    counts: [256] integer symbol counts. Returns [256] uint16 frequencies; every symbol with a
    non-zero count gets a frequency >= 1 (so it stays codable), absent symbols get 0. With no
    symbols at all, symbol 0 gets the whole range (a valid table that codes nothing).
    """
    counts = np.asarray(counts, dtype=np.int64)
    if counts.shape != (ALPHABET,):
        raise ValueError(f"counts must have shape (256,), got {counts.shape}")
    return normalize_many(counts[None, :], prob_bits)[0]


def normalize_many(counts: np.ndarray, prob_bits: int) -> np.ndarray:
    """:func:`normalize_freqs` of every row: [T, 256] counts -> [T, 256] uint16 frequencies."""
    counts = np.ascontiguousarray(counts, dtype=np.int64)
    if counts.ndim != 2 or counts.shape[1] != ALPHABET:
        raise ValueError(f"counts must have shape (T, 256), got {counts.shape}")
    return native.normalize_rows(counts, prob_bits)


def cumulative(freqs: np.ndarray) -> np.ndarray:
    """Exclusive prefix sums of one table: [256] frequencies -> [256] uint32 cumulative starts."""
    freqs = np.asarray(freqs, dtype=np.uint32)
    cums = np.zeros(ALPHABET, dtype=np.uint32)
    cums[1:] = np.cumsum(freqs[:-1], dtype=np.uint32)
    return cums


def check_tables(freqs: np.ndarray, prob_bits: int, where: str = "rANS stream") -> np.ndarray:
    """Validate stored tables: [n_tables * 256] uint16, each summing to ``2**prob_bits``.

    Returns the tables as [n_tables, 256] uint16. Raises CorruptDataError naming ``where``.
    """
    if prob_bits not in PROB_BITS_ALLOWED:
        raise CorruptDataError(f"{where}: prob_bits {prob_bits} not in {PROB_BITS_ALLOWED}")
    freqs = np.asarray(freqs)
    if freqs.dtype != np.uint16 or freqs.ndim != 1 or freqs.size % ALPHABET:
        raise CorruptDataError(f"{where}: frequency tables must be uint16[n*256]")
    tables = freqs.reshape(-1, ALPHABET)
    check_table_sums(tables, prob_bits, where)
    return tables


def check_table_sums(tables: np.ndarray, prob_bits: int, where: str = "rANS stream") -> None:
    """Each row of ``tables`` ([n_tables, k] uint16, k <= 256: the stored entries; absent
    symbols count 0) sums to ``2**prob_bits``. Raises CorruptDataError naming ``where``."""
    if prob_bits not in PROB_BITS_ALLOWED:
        raise CorruptDataError(f"{where}: prob_bits {prob_bits} not in {PROB_BITS_ALLOWED}")
    sums = tables.sum(axis=1, dtype=np.int64)
    if (sums != (1 << prob_bits)).any():
        bad = int(np.argmax(sums != (1 << prob_bits)))
        raise CorruptDataError(
            f"{where}: frequency table {bad} sums to {int(sums[bad])}, expected {1 << prob_bits}"
        )


def decode_lookup(freqs: np.ndarray, prob_bits: int) -> np.ndarray:
    """The packed decode lookup table of one frequency table ([256] frequencies).

    Returns [2**prob_bits] uint32: see ``wcodec.native.lookup_table``. Raises CorruptDataError if
    the table does not sum to ``2**prob_bits``.
    """
    try:
        return native.lookup_table(freqs, prob_bits)
    except ValueError as e:
        raise CorruptDataError(str(e)) from None


def coded_cost_bits(counts: np.ndarray, freqs: np.ndarray, prob_bits: int) -> float:
    """Ideal coded size in bits of symbols with these counts under these frequencies.

    counts, freqs: [..., 256]. Symbols with count > 0 must have freq > 0.
    """
    counts = np.asarray(counts, dtype=np.float64)
    freqs = np.asarray(freqs, dtype=np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        bits = np.where(counts > 0, counts * (prob_bits - np.log2(np.maximum(freqs, 1))), 0.0)
    return float(bits.sum())


class ChunkGeometry:
    """Chunk layout shared by the byte and the joint (16-bit) planes: ``n_symbols`` coded by
    32 interleaved lanes in chunks of ``chunk_steps`` steps, one frequency table per
    ``chunks_per_table`` chunks (fields of the dataclasses that inherit this)."""

    LANES = 32

    @property
    def chunk_size(self) -> int:
        return self.LANES * self.chunk_steps

    @property
    def n_chunks(self) -> int:
        return -(-self.n_symbols // self.chunk_size)

    @property
    def n_tables(self) -> int:
        return -(-max(self.n_chunks, 1) // self.chunks_per_table)


def reference_chunks(symbols: np.ndarray, chunk_size: int, n_chunks: int, encode_chunk, state_dtype):
    """(states, offsets, words) of the pure-Python reference coders, chunk by chunk:
    ``encode_chunk(c, chunk_symbols)`` gives one chunk's (states, words) lists."""
    states, offsets, words = [], [0], []
    for c in range(n_chunks):
        st, ws = encode_chunk(c, symbols[c * chunk_size:(c + 1) * chunk_size])
        states += st
        words += ws
        offsets.append(len(words))
    return (np.array(states, dtype=state_dtype), np.array(offsets, dtype=np.uint32),
            np.array(words, dtype=np.uint16))

