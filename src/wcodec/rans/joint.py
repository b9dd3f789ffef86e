"""Interleaved rANS over a 16-bit alphabet (format version 2): F32's two low mantissa bytes as
one symbol. Layout and step rules are normative in docs/CODEC_LAYOUT.md ("Joint low plane").

Differences from the byte coder (``wcodec.rans``), and why:

* **64-bit states in [2**31, 2**63), 32-bit reads** (two 16-bit words of the stream, low word
  first). A 65536-symbol alphabet needs ``prob_bits`` above 16 to give rare and common symbols
  different frequencies (at 16 every present symbol of a near-uniform plane gets 1), and rANS
  needs the state's lower bound to be a multiple of ``2**prob_bits``.
* **Tables as a default frequency plus exceptions**: each table is ``d`` for every symbol except
  a sorted list of (symbol, frequency) exceptions; exceptions take the first ``X`` slots (list
  order), the other symbols follow in ascending order, ``d`` slots each. Measured on
  all-MiniLM-L6-v2's F32 embedding: its low 16 bits are uniform (15.996 bits) except 1349 rows
  (unused tokens, fp16 values) whose low 13 bits are all zero; a flat table costs a few bytes
  and a fp16 chunk's table 8 exceptions, where a full 65536-entry table would cost 64 KB each.
  Decoding needs no 2**prob_bits lookup: two binary searches over the exceptions and a division.
* ``prob_bits`` 24 (:data:`PROB_BITS`): a flat table's ``d = 2**(prob_bits-16) * (1 - spike
  mass)`` rounds to within 0.2%, and the rounding remainder (< 65536 slots) given to the
  exceptions costs < 0.4% of their mass.
* **Raw chunks** (params ``flat_raw``, written where some table is flat): a table without
  exceptions codes every symbol in exactly 16 bits, so its chunks store their symbols as their
  words and no states. Measured on all-MiniLM-L6-v2's F32 embedding: 332 of its 358 chunks are
  flat; raw they drop 85 KB of states (0.03 bits/weight over the model) and decode as a copy.

Public: :class:`JointPlane`, :func:`encode`, :func:`decode`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, NamedTuple

import numpy as np

from .. import native
from ..errors import CorruptDataError
from . import reference16
from .tables import ChunkGeometry, reference_chunks

LANES = 32
SYMBOLS = 1 << 16
PROB_BITS = 24
PROB_BITS_RANGE = (16, 28)
#: exceptions kept per table by the encoder's "top-k" candidates (besides "every present symbol")
TOP_CANDIDATES = (16, 256)
SPARSE_MAX = 4096


@dataclass(frozen=True)
class JointPlane(ChunkGeometry):
    """One rANS-coded plane of 16-bit symbols.

    Attributes:
        n_symbols, prob_bits, chunk_steps, chunks_per_table: as ``rans.RansPlane``.
        default: [n_tables] uint32, each table's frequency of the symbols it does not list.
        exc_offsets: [n_tables + 1] uint32, table t's exceptions are [exc_offsets[t], exc_offsets[t+1]).
        exc_symbols: [E] uint16, strictly increasing within a table.
        exc_freqs: [E] uint32, >= 1; with default * (65536 - E_t) they sum to 2**prob_bits.
        states: [32 * coded chunks] uint64 in [2**31, 2**63); offsets: [n_chunks + 1] uint32
        (words); words: [total] uint16.
        flat_raw: 1 where the chunks of flat tables (no exceptions) are raw (no states, their
        words are their symbols), 0 (every chunk coded; files written before it existed).
    """

    n_symbols: int
    prob_bits: int
    chunk_steps: int
    chunks_per_table: int
    default: np.ndarray
    exc_offsets: np.ndarray
    exc_symbols: np.ndarray
    exc_freqs: np.ndarray
    states: np.ndarray
    offsets: np.ndarray
    words: np.ndarray
    flat_raw: int = 0

    @property
    def nbytes(self) -> int:
        return sum(a.nbytes for a in self._arrays().values())

    def _arrays(self) -> dict:
        return {"default": self.default, "exc_offsets": self.exc_offsets, "exc_symbols": self.exc_symbols,
                "exc_freqs": self.exc_freqs, "states": self.states, "offsets": self.offsets, "words": self.words}

    def params(self) -> dict:
        p = {"n_symbols": self.n_symbols, "prob_bits": self.prob_bits, "chunk_steps": self.chunk_steps,
             "chunks_per_table": self.chunks_per_table}
        return {**p, "flat_raw": 1} if self.flat_raw else p

    def raw_chunks(self) -> np.ndarray:
        """[n_chunks] bool: the chunks stored raw (those of flat tables, under ``flat_raw``)."""
        if not self.flat_raw:
            return np.zeros(self.n_chunks, dtype=bool)
        flat = np.diff(self.exc_offsets.astype(np.int64)) == 0
        return flat[np.arange(self.n_chunks) // self.chunks_per_table]

    def state_index(self) -> np.ndarray:
        """[n_chunks] int64: each chunk's first entry in ``states``, -1 for a raw chunk."""
        coded = ~self.raw_chunks()
        idx = (np.cumsum(coded) - coded) * LANES
        return np.where(coded, idx, -1).astype(np.int64)

    def sections(self, prefix: str) -> dict:
        return {f"{prefix}.{k}": v for k, v in self._arrays().items()}

    @classmethod
    def from_sections(cls, params: dict, sections: dict, prefix: str) -> "JointPlane":
        """Rebuild a plane from stored params and sections and validate it. Raises CorruptDataError."""
        try:
            fields = {k: params[k] for k in ("n_symbols", "prob_bits", "chunk_steps", "chunks_per_table")}
            fields["flat_raw"] = params.get("flat_raw", 0)
            bad = [k for k, v in fields.items() if type(v) not in (int, np.int64)]
            if bad:
                raise TypeError(f"{bad[0]} must be an integer, got {fields[bad[0]]!r}"[:200])
            plane = cls(**{k: int(v) for k, v in fields.items()},
                        **{k: sections[f"{prefix}.{k}"] for k in ("default", "exc_offsets", "exc_symbols",
                                                                  "exc_freqs", "states", "offsets", "words")})
        except (KeyError, TypeError, ValueError, AttributeError) as e:
            raise CorruptDataError(f"joint rANS plane '{prefix}': missing or bad field {e}") from None
        plane.validate(prefix)
        return plane

    def validate(self, where: str = "joint rANS plane") -> None:
        """Check every size, table and offset before decoding. Raises CorruptDataError."""
        from . import MAX_CHUNK_STEPS, MAX_SYMBOLS_PER_BYTE, RATIO_SLACK, SYMBOLS_PER_TABLE, TABLES_FLOOR

        if not (0 <= self.n_symbols < (1 << 40)):
            raise CorruptDataError(f"{where}: n_symbols {self.n_symbols} out of range")
        if not (PROB_BITS_RANGE[0] <= self.prob_bits <= PROB_BITS_RANGE[1]):
            raise CorruptDataError(f"{where}: prob_bits {self.prob_bits} not in {list(PROB_BITS_RANGE)}")
        if not (1 <= self.chunk_steps <= MAX_CHUNK_STEPS) or not (1 <= self.chunks_per_table <= 1 << 32):
            raise CorruptDataError(f"{where}: bad chunk_steps or chunks_per_table")
        if self.flat_raw not in (0, 1):
            raise CorruptDataError(f"{where}: flat_raw must be 0 or 1, got {self.flat_raw}")
        stored = sum(int(getattr(a, "nbytes", 0)) for a in self._arrays().values())
        if self.n_symbols > MAX_SYMBOLS_PER_BYTE * stored + RATIO_SLACK:
            raise CorruptDataError(f"{where}: {self.n_symbols} symbols from {stored} stored bytes")
        T = self.n_tables
        if T > TABLES_FLOOR + self.n_symbols // SYMBOLS_PER_TABLE:
            raise CorruptDataError(f"{where}: {T} frequency tables for {self.n_symbols} symbols")
        n_chunks = self.n_chunks
        for name, dtype, size in (("default", np.uint32, T), ("exc_offsets", np.uint32, T + 1),
                                  ("exc_symbols", np.uint16, None), ("exc_freqs", np.uint32, None),
                                  ("offsets", np.uint32, n_chunks + 1), ("words", np.uint16, None)):
            arr = getattr(self, name)
            if not isinstance(arr, np.ndarray) or arr.dtype != dtype or arr.ndim != 1 or (
                    size is not None and arr.size != size):
                raise CorruptDataError(f"{where}: {name} must be {np.dtype(dtype).name}[{size}]")
        eo = self.exc_offsets.astype(np.int64)
        E = self.exc_symbols.size
        if E != self.exc_freqs.size or eo[0] != 0 or eo[-1] != E or (np.diff(eo) < 0).any():
            raise CorruptDataError(f"{where}: exception offsets do not span the {E} exceptions")
        per_table = np.diff(eo)
        if (per_table > SYMBOLS).any():
            raise CorruptDataError(f"{where}: a table lists more than 65536 exceptions")
        if E:
            if (self.exc_freqs == 0).any():
                raise CorruptDataError(f"{where}: an exception has frequency 0")
            step = np.diff(self.exc_symbols.astype(np.int64))
            starts = np.zeros(E, dtype=bool)
            starts[eo[:-1][per_table > 0]] = True
            if (step <= 0)[~starts[1:]].any():
                raise CorruptDataError(f"{where}: exception symbols not strictly increasing within a table")
            exc_sum = np.add.reduceat(self.exc_freqs.astype(np.int64), eo[:-1][per_table > 0])
        else:
            exc_sum = np.zeros(0, dtype=np.int64)
        sums = self.default.astype(np.int64) * (SYMBOLS - per_table)
        sums[per_table > 0] += exc_sum
        if (sums != (1 << self.prob_bits)).any():
            t = int(np.argmax(sums != (1 << self.prob_bits)))
            raise CorruptDataError(f"{where}: frequency table {t} sums to {int(sums[t])}, expected 2**{self.prob_bits}")
        raw = self.raw_chunks()  # needs exc_offsets checked (above)
        n_states = int((~raw).sum()) * LANES
        if not (isinstance(self.states, np.ndarray) and self.states.dtype == np.uint64 and self.states.ndim == 1
                and self.states.size == n_states):
            raise CorruptDataError(f"{where}: states must be uint64[{n_states}]")
        offs = self.offsets
        if offs[0] != 0 or int(offs[-1]) != self.words.size:
            raise CorruptDataError(f"{where}: word offsets do not span the {self.words.size} words")
        per_chunk = np.subtract(offs[1:], offs[:-1], dtype=np.int64)
        if per_chunk.size and (per_chunk.min() < 0 or per_chunk.max() > 2 * self.chunk_size):
            raise CorruptDataError(f"{where}: word offsets are not monotone or exceed a chunk")
        if raw.any():
            m = np.minimum(self.chunk_size, self.n_symbols - np.arange(n_chunks, dtype=np.int64) * self.chunk_size)
            if (per_chunk[raw] != m[raw]).any():
                c = int(np.flatnonzero(raw & (per_chunk != m))[0])
                raise CorruptDataError(f"{where}: raw chunk {c} holds {int(per_chunk[c])} words, expected {int(m[c])}")

    def tables(self) -> tuple:
        """Decoder inputs: (default uint32[T], exc_offsets, exc_symbols, exc_freqs, exc_cum
        uint32[E] (each exception's first slot), exc_rank uint32[E] (symbol minus its index in
        its table: how many non-exception symbols lie below it))."""
        eo = self.exc_offsets.astype(np.int64)
        E = self.exc_symbols.size
        cum = np.zeros(E, dtype=np.int64)
        idx = np.zeros(E, dtype=np.int64)
        if E:
            f = self.exc_freqs.astype(np.int64)
            csum = np.cumsum(f) - f
            first = np.repeat(eo[:-1], np.diff(eo))
            cum = csum - csum[first]
            idx = np.arange(E) - first
        rank = self.exc_symbols.astype(np.int64) - idx
        return (self.default, self.exc_offsets, self.exc_symbols, self.exc_freqs,
                cum.astype(np.uint32), rank.astype(np.uint32))


def _table(counts: np.ndarray, prob_bits: int, state_bits: int = 0) -> tuple[float, int, np.ndarray, np.ndarray]:
    """The cheapest default+exceptions table for [65536] int64 counts: (estimated bits with the
    table's storage, default, exception symbols uint16, exception freqs uint32). state_bits: what
    the chunks' states cost where the table is not flat (their chunks are raw where it is).

    Candidates: no exceptions (flat), the symbols counted at least as often as the k-th most
    frequent (k in TOP_CANDIDATES; ties all in, or all out where they would more than double
    k: the choice never depends on a sort's order), and every present symbol with default 0 (at
    most SPARSE_MAX). Costs in O(E) each.
    """
    n = int(counts.sum())
    M = 1 << prob_bits
    if n == 0:
        return 0.0, M >> 16, np.zeros(0, np.uint16), np.zeros(0, np.uint32)
    present = np.flatnonzero(counts)
    candidates = [np.zeros(0, np.int64)]
    ks = [k for k in TOP_CANDIDATES if k < present.size]
    if ks:
        part = np.partition(counts, [SYMBOLS - k for k in ks])  # one pass: every k-th largest count
        for k in ks:
            kth = max(int(part[SYMBOLS - k]), 1)
            exc = np.flatnonzero(counts >= kth)
            if exc.size > 2 * k:  # ties at the k-th count: keep only the counts above it
                exc = np.flatnonzero(counts > kth)
            if exc.size:
                candidates.append(exc)
    if present.size <= SPARSE_MAX:
        candidates.append(present)
    best = None
    for exc in candidates:
        E = exc.size
        ce = counts[exc]
        rest = n - int(ce.sum())
        d = 0 if rest == 0 else max(1, rest * M // n // (SYMBOLS - E)) if E else M >> 16
        budget = M - d * (SYMBOLS - E)
        if budget < E or (E == 0 and budget):
            continue
        fe = np.maximum(1, np.floor(ce * ((budget - E) / max(int(ce.sum()), 1)))).astype(np.int64)
        if E:
            fe[int(np.argmax(ce))] += budget - int(fe.sum())
        bits = (rest * (prob_bits - np.log2(d)) if rest else 0.0) + \
            float((ce * (prob_bits - np.log2(fe))).sum()) + 48 * E + 64 + (state_bits if E else 0)
        if best is None or bits < best[0] - 1e-9 * n:
            best = (bits, d, exc.astype(np.uint16), fe.astype(np.uint32))
    return best


#: a listed symbol costs its table 48 bits (u16 symbol + u32 frequency)
EXCEPTION_BITS = 48


class _Segments(NamedTuple):
    """A plane's symbol counts per table segment, as ``_segment_tables`` reads them."""

    top: np.ndarray  # [n_seg] each segment's largest symbol count
    rows: Callable  # int64 [k] segment indices -> [k, 65536] integer counts of those segments


def _segments_of(counts: np.ndarray, rows: int, cpt: int, chunk_size: int) -> _Segments:
    """The segments of ``cpt`` chunks from [n_blocks, 65536] counts (``rows`` blocks per segment)."""
    nb, full = counts.shape[0], counts.shape[0] // rows  # (np.add.reduceat on axis 0 is ~50x slower)
    acc = np.int32 if cpt * chunk_size < 1 << 31 else np.int64
    seg = counts if rows == 1 else np.concatenate(
        [counts[:full * rows].reshape(full, rows, SYMBOLS).sum(axis=1, dtype=acc),
         counts[full * rows:].sum(axis=0, dtype=acc, keepdims=True)[:1 if nb % rows else 0]])
    return _Segments(seg.max(axis=1), lambda idx: seg[idx])


def _segment_tables(segs: _Segments, cpt: int, n_chunks: int, chunk_size: int, n: int, prob_bits: int,
                    state_bits: int) -> list:
    """``_table`` of each segment of ``cpt`` chunks, where a bound says a table with exceptions
    could pay; the flat table elsewhere. The bound: listing a symbol counted c times in a segment
    of mean count mu saves at most (c ln(c/mu) - c + mu) / ln 2 bits, its storage costs
    EXCEPTION_BITS, and the states cost ``state_bits`` per chunk (raw flat chunks have none).
    Uniform planes (most of an F32 plane's chunks) so skip the search: all-MiniLM-L6-v2's
    embedding encodes ~10x faster. Only the segments whose largest count passes a screen are
    read whole (``segs.rows``): 26 of that embedding's 358.
    """
    top = segs.top.astype(np.int64)
    n_segs = top.size
    starts = np.arange(n_segs, dtype=np.int64) * cpt * chunk_size
    n_seg = np.minimum(n, starts + cpt * chunk_size) - starts
    mu = n_seg / SYMBOLS
    # the smallest count whose saving exceeds its storage, per segment (bisection: the saving
    # grows past mu, and exceeds EXCEPTION_BITS at mu + 256 + 12 sqrt(mu + 1))
    lo, hi = mu.copy(), mu + 256 + 12 * np.sqrt(mu + 1)
    for _ in range(32):  # to ~1e-5 of a count
        mid = (lo + hi) / 2
        up = _saving(mid, mu) > EXCEPTION_BITS
        hi, lo = np.where(up, mid, hi), np.where(up, lo, mid)
    some = np.flatnonzero(top >= np.ceil(hi))  # segments with a symbol worth listing (few)
    # absent symbols can pay where at most SPARSE_MAX are present: search there (such a segment's
    # top count is at least n_seg / SPARSE_MAX, so uniform segments skip the count)
    maybe = np.flatnonzero(top * SPARSE_MAX >= n_seg)
    read = np.union1d(some, maybe)
    counts = segs.rows(read) if read.size else np.zeros((0, SYMBOLS), np.int64)
    row = {int(s): k for k, s in enumerate(read)}
    gain = np.zeros(n_segs)
    sub = counts[np.searchsorted(read, some)]
    heavy_r, heavy_c = np.nonzero(sub >= np.ceil(hi[some])[:, None])
    vals = sub[heavy_r, heavy_c].astype(np.float64)
    heavy_r = some[heavy_r]
    np.add.at(gain, heavy_r, _saving(vals, mu[heavy_r]) - EXCEPTION_BITS)
    chunks = np.minimum(cpt, n_chunks - np.arange(n_segs) * cpt)
    sparse = np.zeros(n_segs, dtype=bool)
    sparse[maybe] = np.count_nonzero(counts[np.searchsorted(read, maybe)], axis=1) <= SPARSE_MAX
    M = 1 << prob_bits
    return [_table(counts[row[s]].astype(np.int64), prob_bits, state_bits * int(chunks[s]))
            if sparse[s] or gain[s] > state_bits * chunks[s] else
            (float(prob_bits - np.log2(M >> 16)) * int(n_seg[s]) + 64, M >> 16, np.zeros(0, np.uint16),
             np.zeros(0, np.uint32)) for s in range(n_segs)]


def _saving(c: np.ndarray, mu: np.ndarray) -> np.ndarray:
    """(c ln(c/mu) - c + mu) / ln 2 elementwise (c >= mu > 0): the most that listing a symbol
    counted c times (mean count mu) saves, in bits."""
    return (c * np.log(c / mu) - c + mu) / np.log(2)


def _candidate_segments(symbols: np.ndarray, candidates: list, n_chunks: int, cs: int, auto: bool,
                        use_numba: bool) -> Callable:
    """cpt -> the plane's ``_Segments`` of ``cpt`` chunks, for each cpt of ``candidates``.

    With the C extension and tables="auto" (one table and the finest segments): each finest
    segment's largest count and the plane's counts in one pass (``native.segment_tops16``), the
    whole counts of a segment only where ``_segment_tables`` asks. Else (numba, a fixed table
    count): counts per block of chunks, every candidate but one table being a multiple of it.
    The two give the same tables (tests/rans/test_joint.py).
    """
    from . import counts_block

    n = symbols.size
    finest = min(candidates)
    if auto and n_chunks and not use_numba and native.ext() is not None and finest * cs < 1 << 31:
        tops, total = native.segment_tops16(symbols, finest * cs)
        whole = _Segments(total.max(keepdims=True), lambda idx: total[None, :][np.zeros(idx.size, np.int64)])
        fine = _Segments(tops, lambda idx: native.segment_histograms16(symbols, finest * cs, idx))
        return lambda cpt: whole if cpt >= n_chunks else fine
    block = counts_block(n, cs) if n_chunks and auto else 1
    if block * cs < 1 << 31:
        counts = native.block_histograms16(symbols, block * cs, numba=use_numba)
    else:  # one table for a plane of 2**31+ symbols: int64 counts
        counts = np.bincount(symbols, minlength=SYMBOLS)[None, :]
    return lambda cpt: _segments_of(counts, -(-cpt // block), cpt, cs)


def encode(symbols: np.ndarray, chunk_steps: int | None = None, prob_bits: int = PROB_BITS,
           backend: str = "auto", flat_raw: bool = True, max_bytes: int | None = None,
           tables: str | int = "auto") -> JointPlane | None:
    """Encode [n] uint16 symbols (any shape, flattened; not modified) as a JointPlane.

    chunk_steps: None picks ``rans.auto_chunk_steps(n)``. tables: ``"auto"``: one table per
    segment of chunks, the segment length chosen among ``rans.table_candidates`` by estimated
    size (one table or the finest segments); an int >= 1 fixes chunks_per_table. flat_raw: store
    the chunks of flat tables raw (False: every chunk coded, the layout before it). max_bytes:
    return None, without coding, where the chosen tables' estimated size (coded symbols, tables,
    states) is not below it (the float codec's byte planes). backend: ``"auto"``, ``"native"``,
    ``"numba"`` or ``"reference"`` (pure Python, tiny inputs). Raises ValueError on bad arguments.
    """
    from . import BACKENDS, MAX_CHUNK_STEPS, _numba_backend, auto_chunk_steps, table_candidates

    symbols = np.ascontiguousarray(symbols, dtype=np.uint16).reshape(-1)
    n = symbols.size
    chunk_steps = auto_chunk_steps(n) if chunk_steps is None else int(chunk_steps)
    if not (1 <= chunk_steps <= MAX_CHUNK_STEPS):
        raise ValueError(f"chunk_steps must be in [1, {MAX_CHUNK_STEPS}]")
    if not (PROB_BITS_RANGE[0] <= prob_bits <= PROB_BITS_RANGE[1]):
        raise ValueError(f"prob_bits must be in {list(PROB_BITS_RANGE)}")
    if backend not in BACKENDS:
        raise ValueError(f"unknown backend {backend!r}")
    if tables != "auto" and not (isinstance(tables, (int, np.integer)) and 1 <= tables <= 1 << 32):
        raise ValueError(f"tables must be 'auto' or an int in [1, 2**32], got {tables!r}")
    use_numba = _numba_backend(backend)
    cs = LANES * chunk_steps
    n_chunks = -(-n // cs)
    # one table, or the finest segments: the byte coder's middle lengths gave the same bytes on
    # all-MiniLM-L6-v2's three joint planes (raw flat chunks make fine tables cheap) at twice the time
    candidates = sorted({table_candidates(n, cs)[0], table_candidates(n, cs)[-1]}, reverse=True) \
        if tables == "auto" else [int(tables)]
    segments = _candidate_segments(symbols, candidates, n_chunks, cs, tables == "auto", use_numba)
    state_bits = 64 * LANES if flat_raw else 0  # per chunk
    best = None
    for cpt in candidates if n_chunks else [1]:
        tabs = _segment_tables(segments(cpt), cpt, n_chunks, cs, n, prob_bits, state_bits) if n_chunks \
            else [_table(np.zeros(SYMBOLS, np.int64), prob_bits)]
        bits = sum(t[0] for t in tabs)
        if best is None or bits < best[0] - 1e-9 * max(n, 1):
            best = (bits, cpt, tabs)
    bits, cpt, tabs = best
    if max_bytes is not None and bits / 8 >= max_bytes:
        return None
    default = np.array([t[1] for t in tabs], dtype=np.uint32)
    exc_offsets = np.zeros(len(tabs) + 1, dtype=np.uint32)
    exc_offsets[1:] = np.cumsum([t[2].size for t in tabs])
    exc_symbols = np.concatenate([t[2] for t in tabs]).astype(np.uint16)
    exc_freqs = np.concatenate([t[3] for t in tabs]).astype(np.uint32)
    draft = JointPlane(n, prob_bits, chunk_steps, cpt, default, exc_offsets, exc_symbols, exc_freqs,
                       np.zeros(0, np.uint64), np.zeros(1, np.uint32), np.zeros(0, np.uint16), int(flat_raw))
    raw = draft.raw_chunks()
    flat_raw = bool(raw.any())  # written only where it changes the layout (older files stay byte-identical)
    tables = draft.tables()
    if backend == "reference":
        states, offsets, words = reference_chunks(
            symbols, cs, n_chunks, lambda c, chunk: ([], [int(v) for v in chunk]) if raw[c] else
            reference16.encode_chunk(chunk, _one_table(tables, c // cpt), prob_bits), np.uint64)
    else:
        states, offsets, words = native.encode_chunks16(symbols, cs, cpt, tables, prob_bits, raw.astype(np.uint8),
                                                        numba=use_numba)
        states = states.reshape(-1, LANES)[~raw].reshape(-1)
    return JointPlane(n, prob_bits, chunk_steps, cpt, default, exc_offsets, exc_symbols, exc_freqs,
                      states, offsets, words, int(flat_raw))


def _one_table(tables: tuple, t: int) -> tuple:
    """(default, exc_symbols, exc_freqs, exc_cum, exc_rank) of table t, as Python ints/lists."""
    default, eo, sym, freq, cum, rank = tables
    a, b = int(eo[t]), int(eo[t + 1])
    return (int(default[t]), [int(v) for v in sym[a:b]], [int(v) for v in freq[a:b]],
            [int(v) for v in cum[a:b]], [int(v) for v in rank[a:b]])


def decode(plane: JointPlane, backend: str = "auto", out: np.ndarray | None = None,
           where: str = "joint rANS plane") -> np.ndarray:
    """Decode a JointPlane. Validates it first; raises CorruptDataError naming ``where`` and the
    chunk on corrupt data, never reads or writes out of bounds.

    out: None (returns a new [n] uint16), or a writable contiguous [n] uint16 array (written) or
    [n] uint32 array whose low 16 bits are zero (the symbols are OR-ed in: the float codec
    merges this way, no second pass).
    """
    from . import BACKENDS, _numba_backend, check_status

    if backend not in BACKENDS:
        raise ValueError(f"unknown backend {backend!r}")
    plane.validate(where)
    n, cs, cpt = plane.n_symbols, plane.chunk_size, plane.chunks_per_table
    if out is None:
        out = np.zeros(n, dtype=np.uint16)
    elif out.dtype not in (np.uint16, np.uint32) or out.shape != (n,) or not out.flags.c_contiguous:
        raise ValueError("out must be contiguous uint16 or uint32 of shape (n_symbols,)")
    elif out.dtype == np.uint16:
        out[:] = 0
    tables = plane.tables()
    sidx = plane.state_index()
    if backend == "reference":
        for c in range(plane.n_chunks):
            lo, hi = int(plane.offsets[c]), int(plane.offsets[c + 1])
            m = min(n, (c + 1) * cs) - c * cs
            try:
                syms = plane.words[lo:hi] if sidx[c] < 0 else reference16.decode_chunk(
                    plane.states[sidx[c]:sidx[c] + LANES], plane.words[lo:hi], m, _one_table(tables, c // cpt),
                    plane.prob_bits)
            except CorruptDataError as e:
                raise CorruptDataError(f"{where}: chunk {c}: {e}") from None
            out[c * cs:c * cs + m] |= np.array(syms, dtype=out.dtype)
        return out
    words = plane.words if plane.words.size >= 2 else np.concatenate([plane.words, np.zeros(2, np.uint16)])
    status = native.decode_chunks16(plane.states, plane.offsets, words, n, cs, cpt, tables, plane.prob_bits,
                                    out, sidx, numba=_numba_backend(backend))
    check_status(status, where)
    return out
