"""Frequency normalisation in numba (the encoder normalises one table per segment candidate,
thousands per checkpoint; in Python this was a fifth of the encode time)."""

from __future__ import annotations

import numba as nb
import numpy as np

from ._numba import JIT


@nb.njit(**JIT)
def normalize_rows(counts, prob_bits):
    """[T, 256] int64 counts -> [T, 256] uint16 frequencies summing to 2**prob_bits per row.

    Floor of the scaled count, at least 1 for a present symbol; rounding room goes to the most
    frequent symbol (least relative change); an overshoot from the at-least-1 bumps is taken
    back one unit at a time from the largest frequencies (ties: lower symbol first), repeatedly.
    An empty row gives symbol 0 the whole range.
    """
    total_prob = 1 << prob_bits
    out = np.zeros(counts.shape, dtype=np.uint16)
    freqs = np.zeros(256, dtype=np.int64)
    for r in range(counts.shape[0]):
        total = 0
        best = 0
        for s in range(256):
            total += counts[r, s]
            if counts[r, s] > counts[r, best]:
                best = s
        freqs[:] = 0
        if total == 0:
            freqs[0] = total_prob
        else:
            acc = 0
            for s in range(256):
                if counts[r, s] > 0:
                    freqs[s] = max(1, (counts[r, s] * total_prob) // total)
                    acc += freqs[s]
            diff = total_prob - acc
            if diff > 0:
                freqs[best] += diff
            while diff < 0:
                order = np.argsort(-freqs, kind="mergesort")  # stable: ties by symbol
                for s in order:
                    if diff == 0 or freqs[s] <= 1:
                        break
                    freqs[s] -= 1
                    diff += 1
        for s in range(256):
            out[r, s] = freqs[s]
    return out
