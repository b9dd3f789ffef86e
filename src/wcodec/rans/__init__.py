"""Interleaved rANS over a byte alphabet, laid out for GPU decoding (see ``reference`` for the spec).

A symbol plane (``uint8[n]``) is cut into chunks of ``32 * chunk_steps`` symbols. Each chunk is
coded by 32 interleaved 32-bit states sharing one stream of 16-bit words, so chunks decode
independently and in parallel (one GPU warp, or one CPU thread, per chunk). Chunks are grouped
into table segments of ``chunks_per_table`` chunks that share one frequency table, which lets
tensors whose statistics drift (embeddings) use several tables.

Public entry points: :func:`encode` and :func:`decode` (the C extension where built, else numba:
see ``wcodec.native``; ``backend="reference"`` for the pure-Python specification), and
:class:`RansPlane`, the coded plane. ``rans.joint`` is the 16-bit-symbol coder of format version 2
(F32's low 16 bits as one plane; imported on use).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from .. import native
from ..errors import CorruptDataError
from . import reference
from .tables import (
    ALPHABET,
    ChunkGeometry,
    PROB_BITS_ALLOWED,
    check_table_sums,
    coded_cost_bits,
    decode_lookup,
    normalize_freqs,
    normalize_many,
    reference_chunks,
)

LANES = reference.LANES
STATE_LOWER = reference.STATE_LOWER
DEFAULT_PROB_BITS = 12
DEFAULT_CHUNK_STEPS = 1024
#: planes of at least this many symbols use shorter chunks, so that one such tensor decoded
#: alone fills a GPU; smaller ones keep the long chunks, whose 32 states cost half as much per
#: weight (all-MiniLM-L6-v2 bf16: 10.567 vs ~10.60 bits/weight)
LARGE_PLANE = 1 << 24
#: (planes below this many symbols, steps per chunk) for planes >= LARGE_PLANE, then
#: SHORT_CHUNK_STEPS. The GPU decoder runs one chunk per warp, its steps one after another, so
#: a layer decoded alone takes ~waves x steps x ~0.4 us (H200, benchmarks/RESULTS.md): a
#: 4096x4096 layer (2^24) with 256 steps is 2048 chunks, 16 warps per SM, 77 us; with 128 steps
#: 4096 chunks, 48 us, for +0.1 bit/weight. 11008x4096 keeps 256: 5504 chunks already fill one
#: wave; 192/224 (two waves) measured slower, 128 only 3% faster for +0.1 bit/weight.
SHORT_CHUNK_RULE = ((1 << 25, 128),)
SHORT_CHUNK_STEPS = 256


def auto_chunk_steps(n_symbols: int) -> int:
    """The default steps per chunk for a plane of ``n_symbols`` symbols."""
    if n_symbols < LARGE_PLANE:
        return DEFAULT_CHUNK_STEPS
    return next((s for lim, s in SHORT_CHUNK_RULE if n_symbols < lim), SHORT_CHUNK_STEPS)


MAX_CHUNK_STEPS = 1 << 16
#: candidate table segment lengths in symbols tried by ``tables="auto"`` (besides one table)
SEGMENT_CANDIDATES = (1 << 20, 1 << 18, 1 << 16, 1 << 15)
#: planes of >= LARGE_PLANE symbols use segments of at least this length: the GPU decoder holds
#: a 16 KB lookup table per frequency table, and finer segments on LLM-sized layers cost more
#: device memory (measured: +0.63 GB on a 7B model kept compressed) than the bits they save
#: (0.01 bits/weight on a synthetic 4096x4096 layer)
LARGE_SEGMENT_MIN = 1 << 20
#: decoders build a 2**prob_bits-entry uint32 lookup (16 KB) per frequency table, while a stored
#: table may cost one byte: a plane may hold at most TABLES_FLOOR + n_symbols // SYMBOLS_PER_TABLE
#: tables, so the lookups take <= 16 MB + 16 bytes per symbol (the encoder's "auto" segments hold
#: >= 32768 symbols; an 8.8 MB file with one table per 32-symbol chunk once needed 2.2 GB)
TABLES_FLOOR = 1024
SYMBOLS_PER_TABLE = 1024
MAX_CHUNKS_PER_TABLE = 1 << 32
#: a plane may not claim more than this many symbols per stored byte (+ RATIO_SLACK): a constant
#: plane costs 132 bytes per chunk of 32 x chunk_steps symbols (248 per byte at the default
#: 1024 steps), so this bounds what a small file can make a decoder allocate (docs/FORMAT.md)
MAX_SYMBOLS_PER_BYTE = 1024
RATIO_SLACK = 1 << 20

__all__ = ["RansPlane", "encode", "decode", "normalize_freqs", "decode_lookup", "pack_freqs",
           "unpack_freqs", "auto_chunk_steps", "LANES"]


_U16, _U32 = np.dtype(np.uint16), np.dtype(np.uint32)  # dtype objects compare faster than types


@dataclass(frozen=True)
class RansPlane(ChunkGeometry):
    """One rANS-coded symbol plane.

    Attributes:
        n_symbols: number of symbols coded.
        prob_bits: frequency precision; each table sums to ``2**prob_bits`` (11 or 12).
        chunk_steps: decode steps per chunk; a chunk holds ``32 * chunk_steps`` symbols.
        chunks_per_table: consecutive chunks sharing one frequency table.
        alphabet_size: symbols are < alphabet_size (1..256); tables store only these entries.
        freqs: [n_tables * alphabet_size] uint16, the normalised frequency tables.
        states: [n_chunks * 32] uint32, the decoder's initial states (encoder's final ones).
        offsets: [n_chunks + 1] uint32, start of each chunk's words in ``words``.
        words: [total] uint16, the renormalisation words of all chunks, chunk after chunk.
    """

    n_symbols: int
    prob_bits: int
    chunk_steps: int
    chunks_per_table: int
    alphabet_size: int
    freqs: np.ndarray
    states: np.ndarray
    offsets: np.ndarray
    words: np.ndarray
    #: CRC-32 of the words' bytes where the C encoder computed it as it wrote them, else None
    words_crc: int | None = field(default=None, compare=False, repr=False)

    @property
    def nbytes(self) -> int:
        """Stored size in bytes of all arrays."""
        return sum(a.nbytes for a in (self.freqs, self.states, self.offsets, self.words))

    def params(self) -> dict:
        return {
            "n_symbols": self.n_symbols,
            "prob_bits": self.prob_bits,
            "chunk_steps": self.chunk_steps,
            "chunks_per_table": self.chunks_per_table,
            "alphabet_size": self.alphabet_size,
        }

    def sections(self, prefix: str) -> dict:
        """The stored arrays. Frequency tables are packed (:func:`pack_freqs`): most
        frequencies are below 255, so one byte each halves the cost of per-segment tables."""
        small, big = pack_freqs(self.freqs)
        return {
            f"{prefix}.freqs": small,
            f"{prefix}.freqs_big": big,
            f"{prefix}.states": self.states,
            f"{prefix}.offsets": self.offsets,
            f"{prefix}.words": self.words,
        }

    def section_crcs(self, prefix: str) -> dict:
        """{section name: CRC-32} of the :meth:`sections` whose checksum the encoder computed."""
        return {} if self.words_crc is None else {f"{prefix}.words": self.words_crc}

    @classmethod
    def from_sections(cls, params: dict, sections: dict, prefix: str) -> "RansPlane":
        """Rebuild a plane from stored params and sections; validates everything (see validate)."""
        try:
            fields = {k: params[k] for k in ("n_symbols", "prob_bits", "chunk_steps", "chunks_per_table",
                                             "alphabet_size")}
            bad = [k for k, v in fields.items() if type(v) not in (int, np.int64)]
            if bad:
                raise TypeError(f"{bad[0]} must be an integer, got {fields[bad[0]]!r}"[:200])
            plane = cls(
                **{k: int(v) for k, v in fields.items()},
                freqs=unpack_freqs(sections[f"{prefix}.freqs"], sections[f"{prefix}.freqs_big"], prefix),
                states=sections[f"{prefix}.states"],
                offsets=sections[f"{prefix}.offsets"],
                words=sections[f"{prefix}.words"],
            )
        except (KeyError, TypeError, ValueError, AttributeError) as e:
            raise CorruptDataError(f"rANS plane '{prefix}': missing or bad field {e}") from None
        plane.validate(prefix)
        return plane

    def full_tables(self) -> np.ndarray:
        """The frequency tables widened to [n_tables, 256] uint16 (absent symbols 0)."""
        if self.freqs.dtype != np.uint16:
            raise CorruptDataError(f"{where}: frequency tables must be uint16")
        full = np.zeros((self.freqs.size // self.alphabet_size, ALPHABET), dtype=np.uint16)
        full[:, :self.alphabet_size] = self.freqs.reshape(-1, self.alphabet_size)
        return full.reshape(-1)

    def bounds_error(self) -> str | None:
        """What breaks the decoders' allocation bounds (symbols per stored byte, tables per
        symbol), or None: the only checks of ``validate`` an encoder's own plane can fail."""
        stored = sum(int(getattr(a, "nbytes", 0)) for a in (self.freqs, self.states, self.offsets, self.words))
        if self.n_symbols > MAX_SYMBOLS_PER_BYTE * stored + RATIO_SLACK:
            return (f"{self.n_symbols} symbols from {stored} stored bytes exceed the "
                    f"bound of {MAX_SYMBOLS_PER_BYTE} symbols per byte")
        if self.n_tables > TABLES_FLOOR + self.n_symbols // SYMBOLS_PER_TABLE:
            return (f"{self.n_tables} frequency tables for {self.n_symbols} symbols "
                    f"exceed the bound {TABLES_FLOOR} + n_symbols / {SYMBOLS_PER_TABLE}")
        return None

    def validate(self, where: str = "rANS plane") -> None:
        """Check every size and offset before decoding. Raises CorruptDataError."""
        if not (0 <= self.n_symbols < (1 << 40)):
            raise CorruptDataError(f"{where}: n_symbols {self.n_symbols} out of range")
        if not (1 <= self.chunk_steps <= MAX_CHUNK_STEPS) or not (1 <= self.chunks_per_table <= MAX_CHUNKS_PER_TABLE):
            raise CorruptDataError(f"{where}: bad chunk_steps or chunks_per_table")
        bad = self.bounds_error()
        if bad:
            raise CorruptDataError(f"{where}: {bad}")
        if not (1 <= self.alphabet_size <= ALPHABET):
            raise CorruptDataError(f"{where}: alphabet_size {self.alphabet_size} not in [1, 256]")
        if not isinstance(self.freqs, np.ndarray) or self.freqs.size != self.n_tables * self.alphabet_size:
            raise CorruptDataError(f"{where}: frequency tables must be uint16[{self.n_tables} * {self.alphabet_size}]")
        if self.freqs.dtype != _U16:  # as full_tables, which the sums no longer need
            raise CorruptDataError(f"{where}: frequency tables must be uint16")
        # the stored [n_tables, alphabet_size] entries: the widened tables' sums, without widening
        check_table_sums(self.freqs.reshape(-1, self.alphabet_size), self.prob_bits, where)
        n_chunks = self.n_chunks
        for name, arr, dtype, size in (
            ("states", self.states, _U32, n_chunks * LANES),
            ("offsets", self.offsets, _U32, n_chunks + 1),
            ("words", self.words, _U16, None),
        ):
            if arr.dtype != dtype or arr.ndim != 1 or (size is not None and arr.size != size):
                raise CorruptDataError(f"{where}: {name} must be {dtype.name}[{size}], got {arr.dtype}{list(arr.shape)}")
        offs = self.offsets
        if offs[0] != 0 or int(offs[-1]) != self.words.size:
            raise CorruptDataError(f"{where}: word offsets do not span the {self.words.size} words")
        per_chunk = np.subtract(offs[1:], offs[:-1], dtype=np.int64)  # one call: astype + diff cost 3 us
        # one min and one max: the same checks as any(< 0) and any(> chunk_size)
        if per_chunk.size and (per_chunk.min() < 0 or per_chunk.max() > self.chunk_size):
            raise CorruptDataError(f"{where}: word offsets are not monotone or exceed a chunk")


def pack_freqs(freqs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Frequency tables [k] uint16 -> (small [k] uint8, big uint16[]): each frequency below 255
    is its own byte; 255 marks one taken, in order, from ``big``."""
    freqs = np.asarray(freqs, dtype=np.uint16)
    escaped = freqs >= 255
    small = np.where(escaped, 255, freqs).astype(np.uint8)
    return small, freqs[escaped].astype(np.uint16)


def unpack_freqs(small: np.ndarray, big: np.ndarray, where: str = "rANS plane") -> np.ndarray:
    """Inverse of :func:`pack_freqs`. Raises CorruptDataError if the two sections disagree."""
    if not (isinstance(small, np.ndarray) and small.dtype == np.uint8 and small.ndim == 1
            and isinstance(big, np.ndarray) and big.dtype == np.uint16 and big.ndim == 1):
        raise CorruptDataError(f"{where}: frequency sections must be uint8[k] and uint16[m]")
    escaped = small == 255
    n_escaped = int(np.count_nonzero(escaped))
    if n_escaped != big.size:
        raise CorruptDataError(f"{where}: {n_escaped} escaped frequencies but {big.size} stored")
    freqs = small.astype(np.uint16)
    if n_escaped:
        freqs[escaped] = big
    return freqs


BACKENDS = ("auto", "native", "numba", "reference")


def _numba_backend(backend: str) -> bool:
    """True when the numba kernels must run; ``native`` without the extension is an error."""
    if backend == "native" and not native.available():
        raise ValueError("backend 'native': the C extension wcodec._cext is not available")
    return backend == "numba"


def _table_bits(freqs: np.ndarray) -> int:
    """Stored size in bits of packed tables (see pack_freqs)."""
    return 8 * freqs.size + 16 * int(np.count_nonzero(freqs >= 255))


def table_candidates(n_symbols: int, chunk_size: int) -> list[int]:
    """The chunks_per_table that ``tables="auto"`` tries, largest (one table) first."""
    n_chunks = -(-n_symbols // chunk_size)
    candidates = {n_chunks}
    for seg in SEGMENT_CANDIDATES:
        if n_symbols >= LARGE_PLANE and seg < LARGE_SEGMENT_MIN:
            continue
        candidates.add(max(1, min(n_chunks, seg // chunk_size)))
    return sorted(candidates, reverse=True)


def counts_block(n_symbols: int, chunk_size: int) -> int:
    """Chunks per block of the coarsest symbol counts that still decide ``tables="auto"``
    exactly: every candidate but one table for the whole plane is a multiple of it (else 1)."""
    candidates = table_candidates(n_symbols, chunk_size)
    finer = candidates[1:]
    if not finer:
        return max(candidates[0], 1)
    block = min(finer)
    return block if all(c % block == 0 for c in finer) else 1


def _choose_tables(counts: np.ndarray, chunk_size: int, prob_bits: int, numba: bool = False,
                   block: int = 1) -> int:
    """Pick chunks_per_table minimising coded size + table storage. counts: [n_blocks, 256]
    symbol counts per block of ``block`` chunks (``counts_block``; 1: per chunk).

    Candidates from one table down to the finest segment; a finer one must save more than 1e-9
    bits per symbol (so the C extension's costs, summed in another order, pick the same).
    """
    if counts.shape[0] == 0:
        return 1
    n_symbols = int(counts.sum())
    candidates = table_candidates(n_symbols, chunk_size)
    in_blocks = [-(-c // block) for c in candidates]
    if not numba and native.available():
        return candidates[native.choose_tables(counts, in_blocks, prob_bits)]
    present = np.flatnonzero(counts.any(axis=0))
    alphabet_size = int(present[-1]) + 1 if present.size else 1
    best = None
    for cpt, rows in zip(candidates, in_blocks):
        groups = np.add.reduceat(counts, np.arange(0, counts.shape[0], rows), axis=0)
        freqs = normalize_many(groups, prob_bits)
        cost = coded_cost_bits(groups, freqs, prob_bits) + _table_bits(freqs[:, :alphabet_size])
        if best is None or cost < best[0] - 1e-9 * n_symbols:
            best = (cost, cpt)
    return best[1]


def encode(
    symbols: np.ndarray,
    prob_bits: int = DEFAULT_PROB_BITS,
    chunk_steps: int | None = None,
    tables: str | int = "auto",
    backend: str = "auto",
    block_counts: np.ndarray | None = None,
) -> RansPlane:
    """Encode a symbol plane with interleaved rANS.

    symbols: [n] uint8 (any shape is flattened). prob_bits: 11 or 12. chunk_steps: steps per chunk
    (chunk = 32 * chunk_steps symbols); None picks ``auto_chunk_steps(n)``. tables: ``"auto"`` picks the number of chunks sharing a
    frequency table by measured cost (one table, or one per 64K-1M symbols); an int fixes
    chunks_per_table. backend: ``"auto"`` (native where built, else numba), ``"native"``, ``"numba"``
    or ``"reference"`` (pure Python, tiny inputs only). block_counts: optional [n_blocks, 256]
    int64 symbol counts per block of ``counts_block(n, 32 * chunk_steps)`` chunks, when the caller
    has them already (the float encoder); the plane is the same as without them.
    The input is not modified. Returns a RansPlane.
    """
    symbols = np.ascontiguousarray(symbols, dtype=np.uint8).reshape(-1)
    if chunk_steps is None:
        chunk_steps = auto_chunk_steps(symbols.size)
    if prob_bits not in PROB_BITS_ALLOWED:
        raise ValueError(f"prob_bits must be one of {PROB_BITS_ALLOWED}")
    if not (1 <= chunk_steps <= MAX_CHUNK_STEPS):
        raise ValueError(f"chunk_steps must be in [1, {MAX_CHUNK_STEPS}]")
    chunk_size = LANES * chunk_steps
    n = symbols.size
    n_chunks = -(-n // chunk_size)
    if backend not in BACKENDS:
        raise ValueError(f"unknown backend {backend!r}")
    use_numba = _numba_backend(backend)
    if tables != "auto" and int(tables) < 1:
        raise ValueError("tables must be 'auto' or a positive number of chunks per table")
    block = counts_block(n, chunk_size) if block_counts is not None else 1
    if block_counts is not None and not (
            tables == "auto" or int(tables) % block == 0 or int(tables) >= n_chunks) or backend == "reference":
        block_counts, block = None, 1
    if block_counts is not None:
        counts = np.ascontiguousarray(block_counts, dtype=np.int64)
        if counts.shape != (-(-n_chunks // block), ALPHABET) or int(counts.sum()) != n:
            raise ValueError("block_counts do not match the symbols")
    elif backend == "reference":
        counts = np.stack([np.bincount(symbols[c * chunk_size:(c + 1) * chunk_size], minlength=256)
                           for c in range(n_chunks)]) if n_chunks else np.zeros((0, 256), np.int64)
    else:
        counts = native.chunk_histograms(symbols, chunk_size, numba=use_numba)
    cpt = (_choose_tables(counts, chunk_size, prob_bits, use_numba or backend == "reference", block)
           if tables == "auto" else int(tables))
    groups = (np.add.reduceat(counts, np.arange(0, counts.shape[0], -(-cpt // block)), axis=0) if n_chunks
              else np.zeros((1, ALPHABET), dtype=np.int64))
    freqs = normalize_many(groups, prob_bits)
    if backend == "reference":
        states, offsets, words = reference_chunks(
            symbols, chunk_size, n_chunks, lambda c, chunk: reference.encode_chunk(chunk, freqs[c // cpt], prob_bits),
            np.uint32)
        words_crc = None
    else:
        states, offsets, words, words_crc = native.encode_chunks(symbols, chunk_size, cpt, freqs, prob_bits,
                                                                 numba=use_numba, checksum=True)
    alphabet_size = int(np.flatnonzero(freqs.any(axis=0))[-1]) + 1
    compact = np.ascontiguousarray(freqs[:, :alphabet_size]).reshape(-1)
    plane = RansPlane(n, prob_bits, chunk_steps, cpt, alphabet_size, compact, states, offsets, words, words_crc)
    # never produce a plane the decoders refuse (the rest of validate holds by construction;
    # tests validate encoder output in full)
    bad = plane.bounds_error()
    if bad:
        raise ValueError(f"encoded plane: {bad}: use fewer tables (a larger 'tables') or a smaller chunk_steps")
    return plane


_STATUS = {1: "reads past the end of its words", 2: "does not end in the initial state",
           3: "has an initial state out of range", 4: "decodes a symbol outside the alphabet"}


def kernel_inputs(plane: RansPlane) -> tuple[np.ndarray, np.ndarray]:
    """(lookup [n_tables, 2**prob_bits] uint32, words) for the numba decoders of a validated
    plane; words holds at least one word, since the branchless decoder always loads one."""
    return native.plane_inputs(plane)


def check_status(status: np.ndarray, where: str) -> None:
    """Raise CorruptDataError naming the first failed chunk of a numba decoder's status array."""
    if status.size and status.any():
        c = int(np.argmax(status != 0))
        raise CorruptDataError(f"{where}: chunk {c} {_STATUS.get(int(status[c]), 'is corrupt')}")


def decode(plane: RansPlane, backend: str = "auto", out: np.ndarray | None = None,
           where: str = "rANS plane") -> np.ndarray:
    """Decode a RansPlane to [n_symbols] uint8 (written into ``out`` if given).

    Validates the plane first; raises CorruptDataError (naming ``where`` and the chunk) on corrupt
    data. Never reads or writes out of bounds. backend: as :func:`encode`. ``out`` may be any
    writable contiguous uint8 array of n_symbols (a view of a torch tensor, pinned memory, an
    mmap): the native decoder writes into it directly.
    """
    if backend not in BACKENDS:
        raise ValueError(f"unknown backend {backend!r}")
    plane.validate(where)
    n = plane.n_symbols
    if out is None:
        out = np.empty(n, dtype=np.uint8)
    elif out.dtype != np.uint8 or out.shape != (n,):
        raise ValueError("out must be uint8 of shape (n_symbols,)")
    cs, cpt = plane.chunk_size, plane.chunks_per_table
    if backend == "reference":
        tables = plane.full_tables().reshape(-1, ALPHABET)
        for c in range(plane.n_chunks):
            lo, hi = int(plane.offsets[c]), int(plane.offsets[c + 1])
            m = min(n, (c + 1) * cs) - c * cs
            try:
                out[c * cs:c * cs + m] = reference.decode_chunk(
                    plane.states[c * LANES:(c + 1) * LANES], plane.words[lo:hi], m, tables[c // cpt], plane.prob_bits)
            except CorruptDataError as e:
                raise CorruptDataError(f"{where}: chunk {c}: {e}") from None
        return out
    lookup, words = kernel_inputs(plane)
    status = native.decode_chunks(plane.states, plane.offsets, words, n, cs, cpt, lookup,
                                  plane.prob_bits, out, numba=_numba_backend(backend))
    check_status(status, where)
    return out
