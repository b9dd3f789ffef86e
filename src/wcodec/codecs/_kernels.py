"""numba kernels shared by the codecs: histograms, symbol mapping, bit packing, plane merge.

Compiled on first use and cached on disk; every loop is bounded by its array sizes.
"""

from __future__ import annotations

import numba as nb
import numpy as np

_jit = dict(nogil=True, cache=True)


@nb.njit(parallel=True, **_jit)
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


@nb.njit(parallel=True, **_jit)
def split_float(bits, shift, mask, symbol_of, tail_shift, tail_mask, sign_shift, tail_bits, low_planes):
    """Split float bit patterns into head symbols, packed tail bits and low byte planes.

    bits: [n] uint16/uint32. Head value ``(b >> shift) & mask`` maps through ``symbol_of``; the tail
    is ``sign << (tail_bits - 1) | (b >> tail_shift) & tail_mask``, packed LSB-first at
    ``tail_bits`` bits per value. Returns (head [n] uint8, tail uint8[ceil(n*tail_bits/8)],
    low [low_planes, n] uint8 with low[0] = bits 15..8, low[1] = bits 7..0).
    """
    n = bits.size
    head = np.empty(n, dtype=np.uint8)
    tail = np.zeros((n * tail_bits + 7) // 8, dtype=np.uint8)
    low = np.empty((low_planes, n), dtype=np.uint8)
    # Blocks of 8 values start on a byte boundary of the tail, so blocks pack independently.
    n_blocks = (n + 7) // 8
    for blk in nb.prange(n_blocks):
        acc = np.uint64(0)
        nacc = 0
        out = blk * tail_bits
        for i in range(blk * 8, min(n, blk * 8 + 8)):
            b = np.int64(bits[i])
            head[i] = symbol_of[(b >> shift) & mask]
            t = ((b >> sign_shift) << (tail_bits - 1)) | ((b >> tail_shift) & tail_mask)
            acc |= np.uint64(t) << np.uint64(nacc)
            nacc += tail_bits
            while nacc >= 8:
                tail[out] = acc & np.uint64(0xFF)
                out += 1
                acc >>= np.uint64(8)
                nacc -= 8
            if low_planes == 2:
                low[0, i] = (b >> 8) & 0xFF
                low[1, i] = b & 0xFF
        if nacc > 0:
            tail[out] = acc & np.uint64(0xFF)
    return head, tail, low


@nb.njit(parallel=True, **_jit)
def merge_float(head, alphabet, head_shift, tail, tail_bits, tail_shift, sign_shift, low, out):
    """Inverse of split_float: writes the bit patterns into ``out`` ([n] uint16/uint32)."""
    n = out.size
    low_planes = low.shape[0]
    tmask = (1 << (tail_bits - 1)) - 1
    n_blocks = (n + 7) // 8
    for blk in nb.prange(n_blocks):
        pos = blk * tail_bits
        acc = np.uint64(0)
        nacc = 0
        for i in range(blk * 8, min(n, blk * 8 + 8)):
            while nacc < tail_bits:
                acc |= np.uint64(tail[pos]) << np.uint64(nacc)
                pos += 1
                nacc += 8
            t = np.int64(acc & np.uint64((1 << tail_bits) - 1))
            acc >>= np.uint64(tail_bits)
            nacc -= tail_bits
            b = (np.int64(alphabet[head[i]]) << head_shift) | ((t >> (tail_bits - 1)) << sign_shift) \
                | ((t & tmask) << tail_shift)
            if low_planes == 2:
                b |= (np.int64(low[0, i]) << 8) | np.int64(low[1, i])
            out[i] = b
    return out
