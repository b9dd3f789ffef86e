"""numba kernels shared by the codecs: histograms, symbol mapping, bit packing, plane merge.

Compiled on first use and cached on disk; every loop is bounded by its array sizes.
"""

from __future__ import annotations

import numba as nb
import numpy as np

from .._numba import kernel

from .._numba import JIT as _jit


@kernel
def head_histogram(bits, shift, mask):
    """Histogram of ``(bits >> shift) & mask`` over [n] uint16/uint32 -> [mask + 1] int64."""
    n = bits.size
    n_parts = 8
    part = (n + n_parts - 1) // n_parts
    hist = np.zeros((n_parts, mask + 1), dtype=np.int64)
    for p in nb.prange(n_parts):
        for i in range(p * part, min(n, (p + 1) * part)):
            hist[p, (np.int64(bits[i]) >> shift) & mask] += 1
    return hist.sum(axis=0)


@kernel
def split_float(bits, shift, mask, symbol_of, tail_shift, tail_mask, sign_shift, tail_bits, low_planes):
    """Split float bit patterns into head symbols, packed tail bits and low byte planes.

    bits: [n] uint16/uint32. Head value ``(b >> shift) & mask`` maps through ``symbol_of``; the tail
    is ``sign << (tail_bits - 1) | (b >> tail_shift) & tail_mask``, packed LSB-first at
    ``tail_bits`` bits per value. Returns (head [n] uint8, tail uint8[ceil(n*tail_bits/8)],
    low [low_planes, n] uint8 with low[0] = bits 15..8, low[1] = bits 7..0).
    """
    n = bits.size
    head = np.empty(n, dtype=np.uint8)
    n_tail = (n * tail_bits + 7) // 8
    tail = np.zeros(n_tail, dtype=np.uint8)
    low = np.empty((low_planes, n), dtype=np.uint8)
    # A block of 8 values fills exactly tail_bits bytes, so blocks pack independently; the block's
    # fields are gathered in a 128-bit pair of words (tail_bits <= 11 -> at most 88 bits).
    n_blocks = (n + 7) // 8
    for blk in nb.prange(n_blocks):
        lo = np.uint64(0)
        hi = np.uint64(0)
        for k in range(min(8, n - blk * 8)):
            b = np.int64(bits[blk * 8 + k])
            head[blk * 8 + k] = symbol_of[(b >> shift) & mask]
            t = np.uint64(((b >> sign_shift) << (tail_bits - 1)) | ((b >> tail_shift) & tail_mask))
            pos = k * tail_bits
            if pos < 64:
                lo |= t << np.uint64(pos)
                if pos + tail_bits > 64:
                    hi |= t >> np.uint64(64 - pos)
            else:
                hi |= t << np.uint64(pos - 64)
            if low_planes == 2:
                low[0, blk * 8 + k] = (b >> 8) & 0xFF
                low[1, blk * 8 + k] = b & 0xFF
        base = blk * tail_bits
        for q in range(min(tail_bits, n_tail - base)):
            if q < 8:
                tail[base + q] = (lo >> np.uint64(8 * q)) & np.uint64(0xFF)
            else:
                tail[base + q] = (hi >> np.uint64(8 * (q - 8))) & np.uint64(0xFF)
    return head, tail, low


@kernel
def merge_float(head, alphabet, head_shift, tail, tail_bits, tail_shift, sign_shift, low, out):
    """Inverse of split_float: writes the bit patterns into ``out`` ([n] uint16/uint32)."""
    n = out.size
    n_tail = tail.size
    low_planes = low.shape[0]
    tmask = np.uint64((1 << (tail_bits - 1)) - 1)
    fmask = np.uint64((1 << tail_bits) - 1)
    n_blocks = (n + 7) // 8
    for blk in nb.prange(n_blocks):
        base = blk * tail_bits
        lo = np.uint64(0)
        hi = np.uint64(0)
        for q in range(min(tail_bits, n_tail - base)):
            v = np.uint64(tail[base + q])
            if q < 8:
                lo |= v << np.uint64(8 * q)
            else:
                hi |= v << np.uint64(8 * (q - 8))
        for k in range(min(8, n - blk * 8)):
            pos = k * tail_bits
            if pos < 64:
                t = lo >> np.uint64(pos)
                if pos + tail_bits > 64:
                    t |= hi << np.uint64(64 - pos)
            else:
                t = hi >> np.uint64(pos - 64)
            t &= fmask
            i = blk * 8 + k
            b = (np.uint64(alphabet[head[i]]) << np.uint64(head_shift)) \
                | ((t >> np.uint64(tail_bits - 1)) << np.uint64(sign_shift)) \
                | ((t & tmask) << np.uint64(tail_shift))
            if low_planes == 2:
                b |= (np.uint64(low[0, i]) << np.uint64(8)) | np.uint64(low[1, i])
            out[i] = b
    return out
