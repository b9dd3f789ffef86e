"""Lossless float codec (BF16, F16, F32): entropy-coded exponent, raw sign and mantissa.

Each value's bits are split into (see docs/CODEC_LAYOUT.md):

* the **head**: the exponent and the top ``head_bits`` mantissa bits, mapped through a per-tensor
  alphabet (its distinct head values, at most 256) to a byte symbol and coded with interleaved
  rANS. Conditioning the top mantissa bits on the exponent is where context modelling pays:
  on all-MiniLM-L6-v2 in bf16, exponent alone 2.614 bits + 8 raw = 10.614 bits/weight (the
  order-0 bound), exponent + 2 mantissa bits 4.548 + 6 raw = 10.548;
* the **tail**: the sign and the mantissa bits below the head, packed raw at ``tail_bits`` each;
* for F32 the two **low bytes** of the mantissa, each an rANS plane where that is smaller than
  the raw bytes (real fp32 checkpoints have tensors whose low bytes are far from uniform); or,
  format version 2 and only when asked (``low_joint=True``), the low 16 bits as one joint plane
  of 16-bit symbols (``rans.joint``) where that is smaller than the two byte planes.

``head_bits`` is chosen per tensor by measured cost. Bit-exact for every pattern: NaN payloads,
infinities, -0.0, subnormals.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from .. import native as K
from .. import rans
from ..errors import CorruptDataError
from .base import DTYPES, Codec, EncodedTensor, register

# dtype -> (total bits, exponent bits, mantissa bits, low byte planes)
LAYOUT = {"BF16": (16, 8, 7, 0), "F16": (16, 5, 10, 0), "F32": (32, 8, 23, 2)}
MAX_HEAD_BITS = 4
UINT = {16: np.uint16, 32: np.uint32}


def _entropy_bits(counts: np.ndarray) -> float:
    c = counts[counts > 0].astype(np.float64)
    return float(-(c * np.log2(c / c.sum())).sum()) if c.size else 0.0


def choose_head_bits(hist_max: np.ndarray, exp_bits: int, tail_bits0: int) -> int:
    """Pick head_bits j minimising head entropy + raw tail bits, with an alphabet <= 256.

    hist_max: histogram of the head with MAX_HEAD_BITS mantissa bits ([2**(E+3)] counts); the
    histograms of smaller j are sums over its trailing bits. The C extension runs the same rule
    where it is built (``wcodec._cext.float_head_bits``).
    """
    e = K.ext()
    if e is not None:
        return e.float_head_bits(np.ascontiguousarray(hist_max, dtype=np.int64), exp_bits, tail_bits0, MAX_HEAD_BITS)
    n = int(hist_max.sum())
    best = (np.inf, 0)
    for j in range(0, MAX_HEAD_BITS + 1):
        if tail_bits0 - j < 1:
            break
        h = hist_max.reshape(1 << (exp_bits + j), -1).sum(axis=1)
        if np.count_nonzero(h) > 256:
            break
        # stored alphabet and frequency table: 2 + 2 bytes per head value
        cost = _entropy_bits(h) + n * (tail_bits0 - j) + 32 * np.count_nonzero(h)
        if cost < best[0] - 1e-9 * n:
            best = (cost, j)
    return best[1]


def _busiest_window(alphabet: np.ndarray, counts: np.ndarray, width: int = 256) -> int:
    """The start of the ``width`` consecutive head values that hold the most weights (the SIMD
    split looks those up in registers); -1 for an empty alphabet."""
    if not alphabet.size:
        return -1
    a = alphabet.astype(np.int64)
    cum = np.concatenate(([0], np.cumsum(counts, dtype=np.int64)))
    inside = cum[np.searchsorted(a, a + width)] - cum[:-1]
    return int(a[int(np.argmax(inside))])


#: per-block head histograms are kept only where a block holds at least this many values (a
#: block's histogram has up to 4096 bins)
BLOCK_MIN = 1 << 15


def _head_histograms_per_block(bits: np.ndarray, E: int, M: int, n: int, chunk_steps) -> np.ndarray | None:
    """[n_blocks, 2**(E + MAX_HEAD_BITS)] uint32 head histograms per block of
    ``rans.counts_block`` chunks (the head plane's chunks), or None (no C extension, odd chunks)."""
    steps = rans.auto_chunk_steps(n) if chunk_steps is None else chunk_steps
    if not (K.available() and n and isinstance(steps, (int, np.integer)) and 1 <= steps <= rans.MAX_CHUNK_STEPS):
        return None
    chunk = rans.LANES * int(steps)
    block = rans.counts_block(n, chunk) * chunk
    if block < BLOCK_MIN:
        return None
    return K.block_head_histograms(bits, M - MAX_HEAD_BITS, (1 << (E + MAX_HEAD_BITS)) - 1, block)


def _symbol_counts(per_block: np.ndarray, hist_max: np.ndarray, symbol_of: np.ndarray, drop: int) -> np.ndarray:
    """[n_blocks, 256] int64 head symbol counts per block from the per-block histograms of
    ``_head_histograms_per_block`` (a bin's head value is its index >> drop)."""
    present = np.flatnonzero(hist_max).astype(np.int64)
    counts = np.empty((per_block.shape[0], 256), dtype=np.int64)
    K.ext().block_symbol_counts(per_block, per_block.shape[1], present,
                                np.ascontiguousarray(symbol_of[present >> drop]), counts)
    return counts


#: marks a head symbol outside the alphabet in the placed-value table (above any float's bits)
BAD_SYMBOL = np.uint64(1) << np.uint64(40)


def placed_heads(alphabet: np.ndarray, head_shift: int) -> np.ndarray:
    """[256] uint64: head symbol -> its head value shifted into place; BAD_SYMBOL past the alphabet."""
    placed = np.full(256, BAD_SYMBOL, dtype=np.uint64)
    placed[:alphabet.size] = alphabet.astype(np.uint64) << np.uint64(head_shift)
    return placed


class FloatParts(NamedTuple):
    """The validated pieces of a float record shared by the CPU and GPU decoders."""

    layout: tuple  # (total bits, exponent bits, mantissa bits, low byte planes)
    head_bits: int
    tail_bits: int
    alphabet: np.ndarray  # [k <= 256] uint16 head values
    head: "rans.RansPlane"
    tail: np.ndarray  # packed tail bits, uint8
    joint: object = None  # F32 format version 2: the validated rans.joint.JointPlane, or None


def parse(record: EncodedTensor) -> FloatParts:
    """Check a float record's parameters and shared sections. Raises CorruptDataError."""
    if record.dtype not in LAYOUT:
        raise CorruptDataError(f"float codec: dtype {record.dtype} not supported")
    W, E, M, L = LAYOUT[record.dtype]
    p, n = record.params, record.numel
    j, R = int(p["head_bits"]), int(p["tail_bits"])
    joint = p.get("low_joint")  # format version 2: the two low bytes as one 16-bit plane
    if joint is not None and not (L == 2 and isinstance(joint, dict) and p["low"] == []):
        raise CorruptDataError(f"float codec: a joint low plane needs F32 and no byte planes")
    if not (0 <= j <= MAX_HEAD_BITS) or R != 1 + M - 8 * L - j or len(p["low"]) != (0 if joint else L):
        raise CorruptDataError(f"float codec: inconsistent head_bits/tail_bits/low for {record.dtype}")
    alphabet = record.section("head.alphabet", np.uint16)
    if n and not (1 <= alphabet.size <= 256):
        raise CorruptDataError("float codec: head alphabet must have 1..256 entries")
    if alphabet.size and int(alphabet.max()) >= (1 << (E + j)):
        raise CorruptDataError("float codec: head alphabet value out of range")
    head = rans.RansPlane.from_sections(p["head"], record.sections, "head")
    if head.n_symbols != n:
        raise CorruptDataError(f"float codec: head plane has {head.n_symbols} symbols, tensor {n}")
    tail = record.section("tail", np.uint8, (n * R + 7) // 8)
    if joint is not None:
        from ..rans import joint as rans_joint

        joint = rans_joint.JointPlane.from_sections(joint, record.sections, "low16")
        if joint.n_symbols != n:
            raise CorruptDataError(f"float codec: joint low plane has {joint.n_symbols} symbols, tensor {n}")
    return FloatParts((W, E, M, L), j, R, alphabet, head, tail, joint)


def record_version(params: dict) -> int:
    """The container format version a float record needs: 2 with a joint low plane, else 1."""
    return 2 if "low_joint" in params else 1


class FloatCodec(Codec):
    id = "float"

    def encode(self, array: np.ndarray, dtype: str, prob_bits: int = rans.DEFAULT_PROB_BITS,
               chunk_steps: int | None = None, head_bits: int | None = None,
               tables: str | int = "auto", low_joint: bool = False, **options) -> EncodedTensor:
        """array: float tensor of ``dtype`` (BF16 as uint16 bits), any shape; not modified.

        low_joint: F32 only, opt-in (format version 2; the GPU loader decodes that plane on the
        host): also code the two low bytes as one 16-bit plane (``rans.joint``) where a byte
        plane is coded, and keep it where it is smaller than the two byte planes."""
        W, E, M, L = LAYOUT[dtype]
        bits = np.ascontiguousarray(array).reshape(-1).view(UINT[W])
        n = bits.size
        tail0 = 1 + M - 8 * L  # tail bits with head_bits = 0
        # One histogram with the most mantissa bits serves every head_bits: sum its trailing bits.
        # With the C extension it is kept per block of table segments, and also gives the head
        # symbols' counts per segment (no second histogram pass over the symbols).
        per_block, block_counts = _head_histograms_per_block(bits, E, M, n, chunk_steps), None
        if per_block is not None:
            hist_max = per_block.sum(axis=0, dtype=np.int64)
        else:
            hist_max = K.head_histogram(bits, M - MAX_HEAD_BITS, (1 << (E + MAX_HEAD_BITS)) - 1)
        j = choose_head_bits(hist_max, E, tail0) if head_bits is None else int(head_bits)
        R = tail0 - j
        shift, mask = M - j, (1 << (E + j)) - 1
        hist = hist_max.reshape(mask + 1, -1).sum(axis=1)
        alphabet = np.flatnonzero(hist).astype(np.uint16)
        if alphabet.size > 256:
            raise ValueError(f"head_bits={j} gives {alphabet.size} head values (> 256)")
        symbol_of = np.zeros(mask + 1, dtype=np.uint8)
        symbol_of[alphabet] = np.arange(alphabet.size, dtype=np.uint8)
        if per_block is not None:
            block_counts = _symbol_counts(per_block, hist_max, symbol_of, MAX_HEAD_BITS - j)
        head, tail, low, crcs = K.split_float(bits, shift, mask, symbol_of, 8 * L, (1 << (R - 1)) - 1, W - 1, R, L,
                                              window=_busiest_window(alphabet, hist[alphabet]), checksum=True)
        plane = rans.encode(head, prob_bits, chunk_steps, tables, block_counts=block_counts)
        params = {"head_bits": j, "tail_bits": R, "head": plane.params(), "low": []}
        sections = {"head.alphabet": alphabet, **plane.sections("head"), "tail": tail}
        # checksums the kernels computed as they wrote (the writer's, without another pass)
        known = {**plane.section_crcs("head"), **({"tail": crcs[1]} if crcs else {})}
        for k, name in enumerate(("low1", "low0")[:L]):
            coded = rans.encode(low[k], prob_bits, chunk_steps, tables)
            if coded.nbytes < n:
                params["low"].append({"coded": True, **coded.params()})
                sections.update(coded.sections(name))
                known.update(coded.section_crcs(name))
            else:
                params["low"].append({"coded": False})
                sections[f"{name}.raw"] = np.ascontiguousarray(low[k])
                if crcs:
                    known[f"{name}.raw"] = crcs[2 + k]
        if low_joint and L == 2 and n and any(lp["coded"] for lp in params["low"]):
            # tried only where a byte plane is coded: the 16-bit symbols pay through structure
            # that the bytes show too (MiniLM's 3 joint tensors; uniform low bits skip the search)
            from ..rans import joint as rans_joint

            v1_bytes = sum(a.nbytes for k, a in sections.items() if k.startswith(("low1.", "low0.")))
            plane = rans_joint.encode(bits.astype(np.uint16), chunk_steps, max_bytes=v1_bytes,  # the low 16 bits
                                      tables=tables)
            if plane is not None and plane.nbytes < v1_bytes:
                sections = {k: a for k, a in sections.items() if not k.startswith(("low1.", "low0."))}
                sections.update(plane.sections("low16"))
                params["low"] = []
                params["low_joint"] = plane.params()
        return EncodedTensor(self.id, dtype, tuple(array.shape), params, sections, info={"head_bits": j},
                             source_crc=crcs[0] if crcs else None,
                             section_crcs={k: c for k, c in known.items() if k in sections})

    def decode(self, record: EncodedTensor, out: np.ndarray | None = None) -> np.ndarray:
        """out: optional writable C-contiguous array of the tensor's size in bytes (a torch
        tensor's memory, pinned memory, an mmap): decoded into in place, no extra copy."""
        return self.decode_checked(record, out, checksum=False)[0]

    def decode_checked(self, record: EncodedTensor, out: np.ndarray | None = None, checksum: bool = True) -> tuple:
        """(decoded array, CRC-32 of its bytes from the C extension's decode pass or None: the
        numba path, or a joint low plane in other chunks than the head's, OR-ed in after the pass)."""
        parts = parse(record)
        W, E, M, L = parts.layout
        p, n, j, R = record.params, record.numel, parts.head_bits, parts.tail_bits
        alphabet, tail = parts.alphabet, parts.tail
        head = parts.head  # validated by parse
        if parts.joint is not None:  # merged without low bits, the plane OR-ed in
            L = 0
        names = ("low1", "low0")[:L]
        low, coded = [], [None] * L  # per low plane: its raw bytes, or its coded plane
        for k, name in enumerate(names):
            lp = p["low"][k]
            if lp.get("coded"):
                lplane = rans.RansPlane.from_sections(lp, record.sections, name)
                if lplane.n_symbols != n:
                    raise CorruptDataError(f"float codec: {name} plane has {lplane.n_symbols} symbols")
                coded[k] = lplane
                low.append(None)
            else:
                low.append(np.ascontiguousarray(record.section(f"{name}.raw", np.uint8, n)))
        if not K.fuses_low_planes(head, coded):  # decoded whole first, then merged
            for k, lplane in enumerate(coded):
                if lplane is not None:
                    low[k] = rans.decode(lplane, where=f"{names[k]} plane")
            coded = [None] * L
        if out is None:
            out = np.empty(n, dtype=UINT[W])
        else:
            if not (isinstance(out, np.ndarray) and out.flags.c_contiguous and out.flags.writeable
                    and out.nbytes == n * W // 8):
                raise ValueError(f"out must be a writable C-contiguous array of {n * W // 8} bytes")
            out = out.reshape(-1).view(UINT[W])
        lookup, words = rans.kernel_inputs(head)
        # a joint low plane in the head's chunks is OR-ed in chunk by chunk inside the merge (one
        # pass, checksummed); any other after the merge, and then no checksum of the merge
        fused = parts.joint is not None and K.fuses_joint(head, parts.joint)  # (validated by parse)
        checksum = checksum and (parts.joint is None or fused)
        status, low_status, *crc = K.decode_merge_float(head.states, head.offsets, words, head.chunk_size,
                                                        head.chunks_per_table, lookup, head.prob_bits,
                                                        placed_heads(alphabet, M - j), tail, R, 8 * parts.layout[3],
                                                        W - 1, low, out, coded=coded, checksum=checksum,
                                                        joint=parts.joint if fused else None)
        rans.check_status(status, "head plane")
        if fused:
            rans.check_status(low_status, "low16 plane")
        elif parts.joint is not None:
            from ..rans import joint as rans_joint

            rans_joint.decode(parts.joint, out=out, where="low16 plane")
        for k, lplane in enumerate(coded):
            if lplane is not None:
                rans.check_status(low_status[k], f"{names[k]} plane")
        return out.view(DTYPES[record.dtype]).reshape(record.shape), (crc[0] if crc else None)


#: a plane's params as a row of :func:`file_row` holds them (wcodec_cext.c: FF_HEAD, FF_LOW1 + 1, ...)
_PLANE = ("n_symbols", "prob_bits", "chunk_steps", "chunks_per_table", "alphabet_size")
_PLANE_SECTIONS = ("freqs", "freqs_big", "states", "offsets", "words")
#: the sections of a row, in wcodec_cext.c's FS_* order: (offset, size, crc32) each
FILE_SECTIONS = ("head.alphabet", "tail", *(f"head.{k}" for k in _PLANE_SECTIONS),
                 *(f"{lo}.{k}" for lo in ("low1", "low0") for k in ("raw", *_PLANE_SECTIONS)))
#: columns of a row: n, output bytes, E, M, L, head_bits, tail_bits, crc32, the head plane's 5
#: params, per low plane (coded, its 5 params), then the sections'
FILE_COLS = 8 + 5 + 2 * 6 + 3 * len(FILE_SECTIONS)
_NO_PLANE = (0,) * 6
_NO_SECTION = (-1, 0, 0)
_HEAD_SECTIONS = ("head.alphabet", "tail", *(f"head.{k}" for k in _PLANE_SECTIONS))
_LOW_CODED = [tuple(f"{lo}.{k}" for k in _PLANE_SECTIONS) for lo in ("low1", "low0")]
_LOW_RAW = [(f"{lo}.raw",) for lo in ("low1", "low0")]


def reads_from_file(entry: dict) -> bool:
    """Whether a validated header entry's record decodes straight from its file
    (``native.decode_float_file``, here): a float record of format version 1 (no joint low
    plane) whose coded low planes, if any, have the head's chunk length, holding exactly the
    sections its decode reads (so that every section's checksum is checked there, as
    ``Reader.record`` checks them all)."""
    if entry.get("codec") != "float" or entry.get("dtype") not in LAYOUT or not K.has_file_decode(FILE_COLS):
        return False
    p = entry.get("params", {})
    steps = p["head"]["chunk_steps"]
    if "low_joint" in p or any(lp.get("coded") and lp["chunk_steps"] != steps for lp in p["low"]):
        return False
    want = _HEAD_SECTIONS + sum((_LOW_CODED[k] if lp.get("coded") else _LOW_RAW[k] for k, lp in enumerate(p["low"])), ())
    secs = entry["sections"]
    return len(secs) == len(want) and all(k in secs for k in want)


def file_row(entry: dict, numel: int) -> list:
    """The FILE_COLS ints that ``native.decode_float_file`` reads a float record by, from its
    validated header entry (one that :func:`reads_from_file` accepts): its layout and params,
    its decoded bytes' CRC-32, and each section's (offset, size, crc32), (-1, 0, 0) if absent."""
    W, E, M, L = LAYOUT[entry["dtype"]]
    p, secs = entry["params"], entry["sections"]
    head = p["head"]
    row = [numel, W // 8, E, M, L, p["head_bits"], p["tail_bits"], entry["crc32"], *[head[k] for k in _PLANE]]
    for lp in p["low"] + [None] * (2 - L):
        row += [1, *[lp[k] for k in _PLANE]] if lp is not None and lp["coded"] else _NO_PLANE
    for name in FILE_SECTIONS:
        sec = secs.get(name)
        row += _NO_SECTION if sec is None else (sec["offset"], sec["size"], sec["crc32"])
    return row


def lookup_bytes(entry: dict) -> int:
    """Bytes of the decode lookups of a float record's coded planes (4 << prob_bits per table):
    what a decode holds besides its output."""
    planes = [entry["params"]["head"]] + [lp for lp in entry["params"]["low"] if lp.get("coded")]
    total = 0
    for pl in planes:
        chunks = -(-pl["n_symbols"] // (32 * pl["chunk_steps"]))
        total += -(-max(chunks, 1) // pl["chunks_per_table"]) * (4 << pl["prob_bits"])
    return total


register(FloatCodec())
