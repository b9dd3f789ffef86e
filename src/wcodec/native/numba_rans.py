"""Interleaved rANS on the CPU with numba: parallel over chunks, bit-identical to ``reference``.

Compiled on first use (``cache=True`` keeps the machine code between runs); importing this module
compiles nothing. ``wcodec.native`` calls these where the C extension is absent. Inputs are
validated by the caller (``wcodec.rans``) before they get here, and
every loop below is bounded by array sizes, so corrupt data can make a chunk fail (a non-zero
status) but never read or write out of bounds.
"""

from __future__ import annotations

import numba as nb
import numpy as np

from ._numba import kernel

LANES = 32
STATE_LOWER = 1 << 16

from ._numba import JIT as _jit


@kernel
def block_counts(symbols, block, counts):
    """Adds to counts [n_blocks, alphabet] (zeros, any integer dtype) the symbol counts of each
    block of ``block`` symbols: the byte planes' chunks (uint8, 256) and the joint plane's blocks
    (uint16, 65536) alike."""
    n = symbols.size
    for c in nb.prange(counts.shape[0]):
        for i in range(c * block, min(n, (c + 1) * block)):
            counts[c, symbols[i]] += 1


@kernel
def encode_chunks(symbols, chunk_size, chunks_per_table, freqs, prob_bits):
    """Encode every chunk. freqs: [n_tables, 256] uint16.

    Returns (states [n_chunks * 32] uint32, offsets [n_chunks + 1] uint32, words uint16).
    """
    n = symbols.size
    n_chunks = (n + chunk_size - 1) // chunk_size
    n_tables = freqs.shape[0]
    # per (table, symbol): renormalisation bound, frequency, cumulative start, reciprocal
    bound = np.zeros((n_tables, 256), dtype=np.int64)
    fr = np.zeros((n_tables, 256), dtype=np.int64)
    cums = np.zeros((n_tables, 256), dtype=np.int64)
    inv = np.zeros((n_tables, 256), dtype=np.float64)
    for t in range(n_tables):
        acc = 0
        for s in range(256):
            f = np.int64(freqs[t, s])
            fr[t, s] = f
            bound[t, s] = f << (32 - prob_bits)  # ((L >> prob_bits) << 16) * f
            cums[t, s] = acc
            acc += f
            if f > 0:
                inv[t, s] = 1.0 / f
    states = np.empty(n_chunks * LANES, dtype=np.uint32)
    scratch = np.empty(max(n, 1), dtype=np.uint16)  # at most one word per symbol
    counts = np.zeros(n_chunks + 1, dtype=np.int64)
    for c in nb.prange(n_chunks):
        tab = c // chunks_per_table
        bnd, frq, cum, rcp = bound[tab], fr[tab], cums[tab], inv[tab]
        start = c * chunk_size
        m = min(n, start + chunk_size) - start
        x = np.full(LANES, STATE_LOWER, dtype=np.int64)
        # rANS is last-in first-out: symbols in reverse (steps in reverse, lanes in reverse).
        # Words are written backwards from the end of the chunk's scratch region, so that they
        # end up in decoder order without a reversal pass.
        w = start + m
        for i in range(m - 1, -1, -1):
            s = symbols[start + i]
            lane = i & (LANES - 1)
            xl = x[lane]
            # branchless renormalisation: the store is harmless when nothing is emitted (the slot
            # is overwritten later or lies outside the counted words)
            emit = np.int64(xl >= bnd[s])
            scratch[max(w - 1, start)] = xl & 0xFFFF
            w -= emit
            xl >>= 16 * emit
            # floor(xl / f) through a float reciprocal: exact for f <= 2**12, xl < 2**32
            q = np.int64(np.float64(xl) * rcp[s] + 6.103515625e-05)
            x[lane] = (q << prob_bits) + (xl - q * frq[s]) + cum[s]
        for lane in range(LANES):
            states[c * LANES + lane] = x[lane]
        counts[c + 1] = start + m - w
    offsets = np.empty(n_chunks + 1, dtype=np.uint32)
    acc = 0
    for c in range(n_chunks + 1):
        acc += counts[c]
        offsets[c] = acc
    words = np.empty(acc, dtype=np.uint16)
    for c in nb.prange(n_chunks):
        start = c * chunk_size
        w_end = min(n, start + chunk_size)
        k = counts[c + 1]
        o = offsets[c]
        for j in range(k):
            words[o + j] = scratch[w_end - k + j]
    return states, offsets, words


@nb.njit(**_jit)
def _decode_chunk(c, states, offsets, words, n, chunk_size, chunks_per_table, lookup, prob_bits, out,
                  out_base=0):
    """Decode chunk c into ``out`` (symbol j of the plane at ``out[j - out_base]``); returns its
    status (see decode_chunks)."""
    mask = (1 << prob_bits) - 1
    lut = lookup[c // chunks_per_table]
    start = c * chunk_size
    m = min(n, start + chunk_size) - start
    pos = np.int64(offsets[c])
    end = np.int64(offsets[c + 1])
    last = max(end - 1, 0)
    x = np.empty(LANES, dtype=np.int64)
    for lane in range(LANES):
        x[lane] = states[c * LANES + lane]
        if x[lane] < STATE_LOWER:
            return 3
    # symbol i of the chunk is lane i % 32's; in this order the reading lanes of a step take
    # consecutive words, which is the prefix count of the spec
    for i in range(m):
        lane = i & (LANES - 1)
        xl = x[lane]
        e = np.int64(lut[xl & mask])
        out[start + i - out_base] = e & 0xFF
        xl = (((e >> 8) & 0xFFF) + 1) * (xl >> prob_bits) + (e >> 20)
        # branchless renormalisation (the branch is unpredictable); the word index is clamped,
        # so corrupt data never reads out of bounds, and a wrong word count is flagged below
        need = np.int64(xl < STATE_LOWER)
        wd = np.int64(words[min(pos, last)])
        xl = (xl << (16 * need)) | (wd * need)
        pos += need
        x[lane] = xl
    if pos > end:
        return 1
    if pos < end:
        return 2
    for lane in range(LANES):
        if x[lane] != STATE_LOWER:
            return 2
    return 0


@kernel
def decode_chunks(states, offsets, words, n, chunk_size, chunks_per_table, lookup, prob_bits, out):
    """Decode every chunk into ``out`` ([n] uint8), chunks in parallel.

    lookup: [n_tables, 2**prob_bits] uint32; words must hold at least one word (the branchless
    decoder always loads one). Returns [n_chunks] int32 status: 0 ok, 1 reads past the chunk's
    words, 2 words left unread or final state wrong, 3 initial state out of range.
    """
    n_chunks = (n + chunk_size - 1) // chunk_size
    status = np.zeros(n_chunks, dtype=np.int32)
    for c in nb.prange(n_chunks):
        status[c] = _decode_chunk(c, states, offsets, words, n, chunk_size, chunks_per_table, lookup, prob_bits, out)
    return status
