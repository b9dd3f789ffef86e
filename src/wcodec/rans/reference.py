"""Interleaved rANS, pure Python: the specification of the bitstream in code.

Use it on tiny inputs (it is slow); ``wcodec.native`` (C and numba) and the Triton decoder in
``wcodec.gpu`` must produce and read exactly these bits.

rANS is due to Duda (2013, "Asymmetric numeral systems: entropy coding combining speed of Huffman
coding with compression rate of arithmetic coding"). The interleaved GPU layout, 32 lanes sharing
one stream of 16-bit words with each step's reads compacted by a prefix count, follows DietGPU
(Meta, 2021).

Layout of one chunk of ``n`` symbols (``n <= 32 * chunk_steps``):

* symbol ``i`` of the chunk belongs to lane ``i % 32`` and is decoded at step ``i // 32``;
* each lane has a 32-bit state ``x`` in ``[2**16, 2**32)``; the decoder starts from the 32 stored
  states (the encoder's final states);
* decoding symbol ``s`` with frequency ``f`` and cumulative start ``c`` (table sums to
  ``2**prob_bits``): ``slot = x & (2**prob_bits - 1)``, ``s`` is the symbol whose range holds
  ``slot``, ``x = f * (x >> prob_bits) + slot - c``; then if ``x < 2**16`` the lane reads one
  16-bit word ``w`` and sets ``x = (x << 16) | w`` (at most one read per symbol);
* within a step, the lanes that read take consecutive words of the chunk's word stream in lane
  order (lane 0 first): the word index of a lane is the stream position plus the count of reading
  lanes below it;
* after the last step every state equals ``2**16`` and every word has been read, which the decoder
  checks.
"""

from __future__ import annotations

import numpy as np

from ..errors import CorruptDataError
from .tables import cumulative

LANES = 32
STATE_LOWER = 1 << 16  # L: states live in [L, 2**32)
WORD_BITS = 16


def encode_chunk(symbols, freqs, prob_bits: int):
    """Encode one chunk. symbols: sequence of ints in [0, 256); freqs: [256] table.

    Returns (states: list of 32 ints, words: list of 16-bit ints in decoder read order).
    """
    freqs = [int(f) for f in freqs]
    cums = [int(c) for c in cumulative(np.asarray(freqs))]
    n = len(symbols)
    steps = -(-n // LANES)
    x = [STATE_LOWER] * LANES
    emitted = []
    # rANS is last-in first-out: encode backwards, steps in reverse and lanes in reverse, so that
    # reversing the emitted words gives the decoder's order (steps forward, lanes ascending).
    for t in reversed(range(steps)):
        for lane in reversed(range(LANES)):
            i = t * LANES + lane
            if i >= n:
                continue
            s = int(symbols[i])
            f = freqs[s]
            if f == 0:
                raise ValueError(f"symbol {s} has zero frequency")
            x_max = f << (32 - prob_bits)  # ((L >> prob_bits) << WORD_BITS) * f
            if x[lane] >= x_max:
                emitted.append(x[lane] & 0xFFFF)
                x[lane] >>= WORD_BITS
            x[lane] = ((x[lane] // f) << prob_bits) + (x[lane] % f) + cums[s]
    emitted.reverse()
    return x, emitted


def decode_chunk(states, words, n: int, freqs, prob_bits: int):
    """Decode ``n`` symbols of one chunk from its 32 states and its words. Returns a list of ints.

    Raises CorruptDataError if the chunk reads past its words, leaves words unread, or does not
    end in the initial states.
    """
    freqs = [int(f) for f in freqs]
    cums = cumulative(np.asarray(freqs))
    # slot -> symbol, the plain (unpacked) form of the lookup table
    slot_symbol = np.repeat(np.arange(256), freqs)
    mask = (1 << prob_bits) - 1
    x = [int(s) for s in states]
    if any(not (STATE_LOWER <= v < (1 << 32)) for v in x):
        raise CorruptDataError("rANS chunk: initial state out of range")
    out = []
    pos = 0
    steps = -(-n // LANES)
    for t in range(steps):
        for lane in range(LANES):  # lane order = the prefix count over the reading lanes
            if t * LANES + lane >= n:
                continue
            slot = x[lane] & mask
            s = int(slot_symbol[slot])
            x[lane] = freqs[s] * (x[lane] >> prob_bits) + slot - int(cums[s])
            if x[lane] < STATE_LOWER:
                if pos >= len(words):
                    raise CorruptDataError("rANS chunk: reads past the end of its words")
                x[lane] = (x[lane] << WORD_BITS) | int(words[pos])
                pos += 1
            out.append(s)
    if pos != len(words) or any(v != STATE_LOWER for v in x):
        raise CorruptDataError("rANS chunk: does not end in the initial state (corrupt data)")
    return out
