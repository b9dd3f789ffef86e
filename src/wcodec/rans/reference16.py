"""Interleaved rANS over 16-bit symbols, pure Python: the specification of the joint low plane
(format version 2) in code. Tiny inputs only; ``wcodec.native`` must produce and read these bits.

Layout as ``reference`` (symbol i of a chunk is lane i % 32's, decoded at step i // 32; reading
lanes of a step take the stream's words in lane order), except:

* states are 64-bit, in ``[2**31, 2**63)``; a lane whose state drops below ``2**31`` after a
  step reads **two** words ``lo, hi`` and sets ``x = (x << 32) | lo | hi << 16``;
* a table is ``(d, exceptions)``: the listed symbols (ascending) hold the first slots, each its
  own frequency; every other symbol has frequency ``d`` and its slots follow in ascending symbol
  order. For slot ``s``: if ``s < X`` (X = the exceptions' total) the symbol is the exception
  whose range holds it; else ``k = (s - X) // d`` is the rank of the symbol among the unlisted
  ones, and the symbol is ``k`` plus the number of exceptions ``i`` (0-based in the table) with
  ``symbol_i - i <= k``.

Raw chunks (params ``flat_raw``: a flat table's chunks) are not coded here: their words are
their symbols and they have no states (``rans.joint`` handles them).
"""

from __future__ import annotations

from bisect import bisect_right

from ..errors import CorruptDataError

LANES = 32
STATE_LOWER = 1 << 31


def symbol_range(table, s: int) -> tuple[int, int]:
    """(frequency, first slot) of symbol s in table (default, syms, freqs, cums, ranks)."""
    d, syms, freqs, cums, _ = table
    i = bisect_right(syms, s) - 1  # the last exception <= s
    if i >= 0 and syms[i] == s:
        return freqs[i], cums[i]
    below = i + 1  # exceptions below s
    X = sum(freqs)
    return d, X + d * (s - below)


def slot_symbol(table, slot: int) -> tuple[int, int, int]:
    """(symbol, frequency, first slot) of the symbol whose range holds ``slot``."""
    d, syms, freqs, cums, ranks = table
    X = sum(freqs)
    if slot < X:
        i = bisect_right(cums, slot) - 1
        return syms[i], freqs[i], cums[i]
    k = (slot - X) // d
    return k + bisect_right(ranks, k), d, X + d * k


def encode_chunk(symbols, table, prob_bits: int):
    """Encode one chunk of 16-bit symbols. Returns (32 states, words in decoder read order)."""
    n = len(symbols)
    x = [STATE_LOWER] * LANES
    emitted = []
    for t in reversed(range(-(-n // LANES))):
        for lane in reversed(range(LANES)):
            i = t * LANES + lane
            if i >= n:
                continue
            f, c = symbol_range(table, int(symbols[i]))
            if f == 0:
                raise ValueError(f"symbol {int(symbols[i])} has zero frequency")
            if x[lane] >= f << (63 - prob_bits):
                emitted += [(x[lane] >> 16) & 0xFFFF, x[lane] & 0xFFFF]  # reversed below: lo, hi
                x[lane] >>= 32
            x[lane] = ((x[lane] // f) << prob_bits) + (x[lane] % f) + c
    emitted.reverse()
    return x, emitted


def decode_chunk(states, words, n: int, table, prob_bits: int):
    """Decode ``n`` symbols of one chunk. Raises CorruptDataError as ``reference.decode_chunk``."""
    mask = (1 << prob_bits) - 1
    x = [int(s) for s in states]
    if any(not (STATE_LOWER <= v < (1 << 63)) for v in x):
        raise CorruptDataError("rANS chunk: initial state out of range")
    out, pos = [], 0
    for t in range(-(-n // LANES)):
        for lane in range(LANES):
            if t * LANES + lane >= n:
                continue
            slot = x[lane] & mask
            s, f, c = slot_symbol(table, slot)
            x[lane] = f * (x[lane] >> prob_bits) + slot - c
            if x[lane] < STATE_LOWER:
                if pos + 2 > len(words):
                    raise CorruptDataError("rANS chunk: reads past the end of its words")
                x[lane] = (x[lane] << 32) | int(words[pos]) | int(words[pos + 1]) << 16
                pos += 2
            out.append(s)
    if pos != len(words) or any(v != STATE_LOWER for v in x):
        raise CorruptDataError("rANS chunk: does not end in the initial state (corrupt data)")
    return out
