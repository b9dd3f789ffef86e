"""Interleaved rANS over 16-bit symbols with numba (the joint low plane of format version 2):
bit-identical to ``wcodec.rans.reference16``, whose docstring states the rules.

Tables arrive as ``wcodec.rans.joint.JointPlane.tables()``: default [T] uint32, exc_offsets
[T + 1], exc_symbols uint16, exc_freqs / exc_cum / exc_rank uint32. Inputs are validated by the
caller; every loop is bounded by array sizes, so corrupt data gives a non-zero status, never an
out-of-bounds access. Raw chunks (a flat table's chunks under ``flat_raw``) hold their symbols as
their words and no states.
"""

from __future__ import annotations

import numba as nb
import numpy as np

from ._numba import JIT as _jit
from ._numba import kernel

LANES = 32
STATE_LOWER = np.int64(1) << 31


@nb.njit(**_jit)
def _last_le(arr, a, b, v):
    """Index in [a, b) of the last entry <= v of the non-decreasing arr[a:b], or a - 1."""
    lo, hi = a, b
    while lo < hi:
        mid = (lo + hi) >> 1
        if np.int64(arr[mid]) <= v:
            lo = mid + 1
        else:
            hi = mid
    return lo - 1


@nb.njit(**_jit)
def _chunk(c, n, chunk_size, chunks_per_table, default, eo, prob_bits):
    """Chunk c's table and span: (a, b) its table's exception range, d the default frequency, X the
    cumulative start of the default-coded symbols, start and m the chunk's first symbol and length."""
    t = c // chunks_per_table
    a, b = np.int64(eo[t]), np.int64(eo[t + 1])
    d = np.int64(default[t])
    X = (np.int64(1) << prob_bits) - d * (65536 - (b - a))
    start = c * chunk_size
    return a, b, d, X, start, min(n, start + chunk_size) - start


@kernel
def encode_chunks16(symbols, chunk_size, chunks_per_table, default, eo, esym, efreq, ecum, prob_bits, raw):
    """Encode every chunk: (states [n_chunks * 32] uint64, offsets [n_chunks + 1] uint32, words
    uint16); chunks with ``raw[c]`` are copied (their states are zero)."""
    n = symbols.size
    n_chunks = (n + chunk_size - 1) // chunk_size
    states = np.empty(n_chunks * LANES, dtype=np.uint64)
    scratch = np.empty(max(2 * n, 2), dtype=np.uint16)
    counts = np.zeros(n_chunks + 1, dtype=np.int64)
    for c in nb.prange(n_chunks):
        a, b, d, X, start, m = _chunk(c, n, chunk_size, chunks_per_table, default, eo, prob_bits)
        w = 2 * (start + m)
        if raw[c]:
            for i in range(m):
                scratch[w - m + i] = symbols[start + i]
            for lane in range(LANES):
                states[c * LANES + lane] = 0
            counts[c + 1] = m
            continue
        x = np.full(LANES, STATE_LOWER, dtype=np.int64)
        for i in range(m - 1, -1, -1):
            s = np.int64(symbols[start + i])
            j = _last_le(esym, a, b, s)
            if j >= a and np.int64(esym[j]) == s:
                f, cu = np.int64(efreq[j]), np.int64(ecum[j])
            else:
                f, cu = d, X + d * (s - (j + 1 - a))
            lane = i & (LANES - 1)
            xl = x[lane]
            if (xl >> (63 - prob_bits)) >= f:  # xl >= f << (63 - prob_bits), which overflows int64 at f = 2**prob_bits
                scratch[w - 1] = (xl >> 16) & 0xFFFF
                scratch[w - 2] = xl & 0xFFFF
                w -= 2
                xl >>= 32
            x[lane] = ((xl // f) << prob_bits) + (xl % f) + cu
        for lane in range(LANES):
            states[c * LANES + lane] = x[lane]
        counts[c + 1] = 2 * (start + m) - w
    offsets = np.empty(n_chunks + 1, dtype=np.uint32)
    acc = 0
    for c in range(n_chunks + 1):
        acc += counts[c]
        offsets[c] = acc
    words = np.empty(acc, dtype=np.uint16)
    for c in nb.prange(n_chunks):
        w_end = 2 * min(n, c * chunk_size + chunk_size)
        k = counts[c + 1]
        o = offsets[c]
        for j in range(k):
            words[o + j] = scratch[w_end - k + j]
    return states, offsets, words


@kernel
def decode_chunks16(states, offsets, words, n, chunk_size, chunks_per_table, default, eo, esym, efreq, ecum,
                    erank, prob_bits, out, sidx):
    """Decode every chunk, OR-ing symbol i into out[i] ([n] uint16 or uint32, zero low 16 bits);
    sidx [n_chunks] int64: each chunk's first state, -1 for a raw chunk. Returns [n_chunks] int32
    status as ``numba_rans.decode_chunks``."""
    n_chunks = (n + chunk_size - 1) // chunk_size
    status = np.zeros(n_chunks, dtype=np.int32)
    mask = (np.int64(1) << prob_bits) - 1
    for c in nb.prange(n_chunks):
        a, b, d, X, start, m = _chunk(c, n, chunk_size, chunks_per_table, default, eo, prob_bits)
        pos = np.int64(offsets[c])
        end = np.int64(offsets[c + 1])
        last = max(np.int64(words.size) - 2, 0)
        if sidx[c] < 0:  # raw: its words are its symbols
            if end - pos != m:
                status[c] = 2 if end - pos > m else 1
                continue
            for i in range(m):
                out[start + i] |= words[pos + i]
            continue
        if sidx[c] + LANES > states.size:
            status[c] = 3
            continue
        x = np.empty(LANES, dtype=np.int64)
        bad = 0
        for lane in range(LANES):
            x[lane] = np.int64(states[sidx[c] + lane])
            if x[lane] < STATE_LOWER:
                bad = 3
        if bad:
            status[c] = bad
            continue
        for i in range(m):
            lane = i & (LANES - 1)
            xl = x[lane]
            slot = xl & mask
            if slot < X:
                j = _last_le(ecum, a, b, slot)
                s, f, cu = np.int64(esym[j]), np.int64(efreq[j]), np.int64(ecum[j])
            else:
                k = (slot - X) // d
                s = k + (_last_le(erank, a, b, k) + 1 - a)
                f, cu = d, X + d * k
            out[start + i] |= s
            xl = f * (xl >> prob_bits) + slot - cu
            if xl < STATE_LOWER:
                p = min(pos, last)  # clamped: a wrong word count is flagged below
                xl = (xl << 32) | np.int64(words[p]) | (np.int64(words[p + 1]) << 16)
                pos += 2
            x[lane] = xl
        if pos > end:
            status[c] = 1
        elif pos < end:
            status[c] = 2
        else:
            for lane in range(LANES):
                if x[lane] != STATE_LOWER:
                    status[c] = 2
    return status
