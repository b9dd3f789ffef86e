"""The CPU kernels of the float codec and the rANS coder: the C extension, or numba without it.

This package is the lowest layer: ``wcodec.rans``, ``wcodec.codecs`` and ``wcodec.format`` call it,
and it imports nothing of wcodec's above it (inputs arrive validated; bad ones raise ValueError).
Modules: this one dispatches; ``numba_rans``, ``numba_rans16`` (the joint low plane of format
version 2), ``numba_normalize`` and ``numba_float`` are the numba twins of the C functions; ``_numba`` compiles them (parallel and serial).

``wcodec._cext`` (src/wcodec/csrc/wcodec_cext.c, built by ``pip install`` where a C compiler is
present) runs the hot loops with SIMD chosen at run time (AVX-512, AVX2, or portable scalar C)
and its own threads, with the GIL released; nothing compiles when it is used. Without it (no
compiler at install time, or ``WCODEC_NATIVE=0``) the same functions run the numba kernels of
``numba_rans`` and ``numba_float`` here, which compile on first use (one line on
stderr says so) and are cached on disk. Both produce the same bits (tests/rans/test_native.py).

Environment: ``WCODEC_NATIVE=0`` forces numba; ``WCODEC_ISA=scalar|avx2|avx512`` caps the
instruction set; ``WCODEC_THREADS=N`` sets the threads of one call (default: the usable cores).
All threads of concurrent calls together stay within that number plus the calling threads.
"""

from __future__ import annotations

import contextlib
import os
import threading

import numpy as np

#: inputs smaller than this (elements) run on the calling thread only (same as numba's twins)
PARALLEL_MIN = 1 << 18

_ext = None
_loaded = False
_load_lock = threading.Lock()


def _usable_cores() -> int:
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return max(1, os.cpu_count() or 1)


def ext():
    """The loaded ``wcodec._cext`` module, or None (not built, or WCODEC_NATIVE=0)."""
    if not _loaded:
        with _load_lock:  # encode's pool threads ask at once: none may see None mid-load
            _load()
    return _ext


def _load():
    global _ext, _loaded
    if not _loaded:
        if os.environ.get("WCODEC_NATIVE", "1").strip().lower() not in ("0", "no", "false", "off"):
            try:
                from .. import _cext
            except ImportError:
                _cext = None
            if _cext is not None:
                isa = os.environ.get("WCODEC_ISA", "").strip().lower()
                if isa:
                    supported = _cext.supported_isas()
                    _cext.set_isa(isa if isa in supported else supported[-1])
                threads = os.environ.get("WCODEC_THREADS", "")
                _cext.set_threads(int(threads) if threads.isdigit() and int(threads) > 0 else _usable_cores())
            _ext = _cext
        _loaded = True


def available() -> bool:
    return ext() is not None


@contextlib.contextmanager
def disabled():
    """Run the numba kernels inside this block (tests compare the two paths; not thread-safe)."""
    global _ext
    ext()
    saved, _ext = _ext, None
    try:
        yield
    finally:
        _ext = saved


def path() -> str:
    """Which kernels run: ``native-avx512``, ``native-avx2``, ``native-scalar`` or ``numba``."""
    e = ext()
    return f"native-{e.isa()}" if e is not None else "numba"


def threads() -> int:
    """Threads one call may use (native), or numba's thread count."""
    e = ext()
    if e is not None:
        return e.threads()
    import numba

    return numba.get_num_threads()


def set_threads(n: int) -> None:
    """Threads one native call may use (also the process-wide budget of extra threads)."""
    e = ext()
    if e is not None:
        e.set_threads(int(n))


def _threads_for(size: int) -> int:
    return 0 if size >= PARALLEL_MIN else 1  # 0: the default thread count


# ---- checksums -----------------------------------------------------------------------------

def crc32(data, value: int = 0) -> int:
    """``zlib.crc32(data, value)`` of a C-contiguous buffer (bytes, memoryview, numpy array: its
    raw bytes), as an int in [0, 2**32). The C extension computes it with carry-less multiplies,
    large buffers in pieces on its threads with the GIL released (measured 4x zlib's speed on
    one thread of the 2-vCPU VM); without it, zlib. Raises BufferError / TypeError for a
    non-contiguous or non-buffer object."""
    e = ext()
    if e is None:
        import zlib
        return zlib.crc32(data, value) & 0xFFFFFFFF
    return e.crc32(data, value)


def crc32_many(buffers) -> list[int]:
    """``[crc32(b) for b in buffers]`` in one call (one release of the GIL; the pieces of all
    buffers shared by the C extension's threads)."""
    e = ext()
    if e is None:
        import zlib
        return [zlib.crc32(b) & 0xFFFFFFFF for b in buffers]
    return e.crc32_many(buffers)



def pread_crc(fd: int, buf: np.ndarray, offset: int, starts, sizes) -> list[int] | None:
    """Fill ``buf`` (a writable C-contiguous uint8 array) with the file's bytes from ``offset``
    with pread and return the CRC-32 of each section ``buf[starts[k]:starts[k] + sizes[k]]``,
    computed 256 KiB piece by piece as the bytes arrive (in cache) rather than in a second pass
    over memory, a span of 4 MiB or more in pieces on the extension's threads (those the budget
    has free); None when the file ended early. C extension only (see :func:`has_pread_crc`).
    Raises OSError, ValueError for a section outside ``buf``."""
    return ext().pread_crc(fd, buf, offset, starts, sizes, _threads_for(getattr(buf, "nbytes", 0)))


def has_pread_crc() -> bool:
    """Whether :func:`pread_crc` runs here (the C extension, on a system with pread)."""
    e = ext()
    return e is not None and hasattr(e, "pread_crc")


# ---- rANS ----------------------------------------------------------------------------------

def chunk_histograms(symbols: np.ndarray, chunk_size: int, numba: bool = False) -> np.ndarray:
    """symbols: [n] uint8 -> [n_chunks, 256] int64 symbol counts per chunk."""
    return _block_counts(symbols, chunk_size, 256, np.int64, "chunk_histograms", numba)


def _block_counts(symbols: np.ndarray, block: int, alphabet: int, dtype, c_name: str, numba: bool) -> np.ndarray:
    """[n_blocks, alphabet] ``dtype`` symbol counts per block of ``block`` symbols: the C entry
    point ``c_name``, or numba's block_counts."""
    e = None if numba else ext()
    counts = (np.zeros if e is None else np.empty)((-(-symbols.size // block), alphabet), dtype=dtype)
    if e is None:
        from . import numba_rans
        numba_rans.block_counts(symbols, block, counts, size=symbols.size)
    else:
        getattr(e, c_name)(symbols, block, counts, _threads_for(symbols.size))
    return counts


def normalize_rows(counts: np.ndarray, prob_bits: int, numba: bool = False) -> np.ndarray:
    """[T, 256] int64 counts -> [T, 256] uint16 frequencies (see ``numba_normalize``)."""
    e = None if numba else ext()
    if e is None:
        from .numba_normalize import normalize_rows as nb_normalize
        return nb_normalize(counts, prob_bits)
    out = np.empty(counts.shape, dtype=np.uint16)
    e.normalize_rows(np.ascontiguousarray(counts, dtype=np.int64), prob_bits, out)
    return out


def choose_tables(counts: np.ndarray, candidates: list, prob_bits: int) -> int:
    """Index of the cheapest chunks_per_table in ``candidates`` for [n_chunks, 256] int64 chunk
    counts (C only: ``rans._choose_tables`` is the numpy twin)."""
    return ext().choose_tables(np.ascontiguousarray(counts, dtype=np.int64),
                               np.asarray(candidates, dtype=np.int64), prob_bits)


def encode_chunks(symbols: np.ndarray, chunk_size: int, chunks_per_table: int, freqs: np.ndarray,
                  prob_bits: int, numba: bool = False, checksum: bool = False) -> tuple:
    """rANS-encode every chunk: (states [n_chunks*32] uint32, offsets [n_chunks+1] uint32,
    words uint16), as ``numba_rans.encode_chunks``. freqs: [n_tables, 256] uint16.
    checksum: also return, fourth, the CRC-32 of the words' bytes, computed by the C extension
    chunk by chunk as it gathers them (None on the numba path)."""
    e = None if numba else ext()
    n = symbols.size
    if e is None:
        from . import numba_rans
        parts = numba_rans.encode_chunks(symbols, chunk_size, chunks_per_table, freqs, prob_bits, size=n)
        return (*parts, None) if checksum else parts
    n_chunks = -(-n // chunk_size)
    states = np.empty(n_chunks * 32, dtype=np.uint32)
    counts = np.empty(n_chunks, dtype=np.int64)
    scratch = np.empty(max(n, 1), dtype=np.uint16)
    got = e.encode_chunks(symbols, chunk_size, chunks_per_table, np.ascontiguousarray(freqs, dtype=np.uint16),
                          prob_bits, states, counts, scratch, _threads_for(n), checksum)
    total, crc = got if checksum else (got, None)
    offsets = np.zeros(n_chunks + 1, dtype=np.uint32)
    np.cumsum(counts, out=offsets[1:], dtype=np.uint32)
    # shrink the scratch to the words in place (realloc: mremap or a split heap block, no copy)
    # rather than copying them out of it: a copy into fresh pages cost ~1 ms of MiniLM's bf16
    # encode. No view of scratch exists (the C call released its buffer), hence refcheck=False.
    scratch.resize(max(total, 0), refcheck=False)
    return (states, offsets, scratch, crc) if checksum else (states, offsets, scratch)


def lookup_table(freqs: np.ndarray, prob_bits: int) -> np.ndarray:
    """The packed decode lookup table of one frequency table, in numpy.

    freqs: [256] frequencies. Returns [2**prob_bits] uint32; entry ``slot`` packs ``symbol |
    (freq - 1) << 8 | (slot - cum) << 20`` so that one load gives everything a decode step needs
    (``x = freq * (x >> prob_bits) + (slot - cum)``). Fits 32 bits for prob_bits <= 12. Raises
    ValueError if the table does not sum to ``2**prob_bits`` (``rans.decode_lookup`` says
    CorruptDataError).
    """
    freqs = np.asarray(freqs, dtype=np.int64)
    total_prob = 1 << prob_bits
    symbols = np.repeat(np.arange(256, dtype=np.int64), freqs)
    if symbols.size != total_prob:
        raise ValueError(f"frequency table sums to {symbols.size}, expected {total_prob}")
    cums = np.concatenate(([0], np.cumsum(freqs)[:-1]))
    slots = np.arange(total_prob, dtype=np.int64)
    packed = symbols | ((freqs[symbols] - 1) << 8) | ((slots - cums[symbols]) << 20)
    return packed.astype(np.uint32)


def decode_lookups(tables: np.ndarray, prob_bits: int) -> np.ndarray:
    """Validated frequency tables [T, 256] uint16 -> [T, 2**prob_bits] uint32 packed lookup
    tables, ``lookup_table`` of each row."""
    e = ext()
    if e is None:
        return np.stack([lookup_table(t, prob_bits) for t in tables])
    out = np.empty((tables.shape[0], 1 << prob_bits), dtype=np.uint32)
    e.decode_lookup(np.ascontiguousarray(tables, dtype=np.uint16), prob_bits, out)
    return out


def plane_inputs(plane) -> tuple[np.ndarray, np.ndarray]:
    """(lookup [n_tables, 2**prob_bits] uint32, words) for the decoders of a validated
    ``rans.RansPlane``; words holds at least one word, since the branchless decoder always
    loads one."""
    lookup = decode_lookups(plane.full_tables().reshape(-1, 256), plane.prob_bits)
    words = plane.words if plane.words.size else np.zeros(1, dtype=np.uint16)
    return lookup, words


def decode_chunks(states, offsets, words, n, chunk_size, chunks_per_table, lookup, prob_bits,
                  out, numba: bool = False) -> np.ndarray:
    """Decode every chunk into ``out`` ([n] uint8, any writable contiguous buffer); returns the
    [n_chunks] int32 status of ``numba_rans.decode_chunks``. Inputs as ``plane_inputs``."""
    e = None if numba else ext()
    n_chunks = -(-n // chunk_size)
    if e is None:
        from . import numba_rans
        return numba_rans.decode_chunks(states, offsets, words, n, chunk_size, chunks_per_table, lookup,
                                 prob_bits, out, size=n if n_chunks > 1 else 0)
    status = np.empty(n_chunks, dtype=np.int32)
    e.decode_chunks(states, offsets, words, n, chunk_size, chunks_per_table, lookup, prob_bits, out,
                    status, _threads_for(n))
    return status


# ---- float codec ---------------------------------------------------------------------------

def head_histogram(bits: np.ndarray, shift: int, mask: int, numba: bool = False) -> np.ndarray:
    """Histogram of ``(bits >> shift) & mask`` over [n] uint16/uint32 -> [mask + 1] int64."""
    e = None if numba else ext()
    if e is None:
        from . import numba_float
        return numba_float.head_histogram(bits, shift, mask, size=bits.size)
    hist = np.zeros(mask + 1, dtype=np.int64)
    e.head_histogram(bits, shift, mask, hist, _threads_for(bits.size))
    return hist


def block_head_histograms(bits: np.ndarray, shift: int, mask: int, block: int) -> np.ndarray:
    """[n_blocks, mask + 1] uint32: the histogram of ``(bits >> shift) & mask`` over each block of
    ``block`` values of [n] uint16/uint32 bits (C only; ``head_histogram`` per block)."""
    n_blocks = -(-bits.size // block)
    out = np.empty((n_blocks, mask + 1), dtype=np.uint32)
    ext().block_head_histograms(bits, shift, mask, block, out, _threads_for(bits.size))
    return out


def split_float(bits, shift, mask, symbol_of, tail_shift, tail_mask, sign_shift, tail_bits, low_planes,
                numba: bool = False, window: int = -1, checksum: bool = False):
    """(head [n] uint8, tail uint8[ceil(n*tail_bits/8)], low [low_planes, n] uint8): see
    ``numba_float.split_float``. window: head values window..window+255 are looked up in
    SIMD registers, the others one by one (-1: all one by one); the result is the same.
    checksum: also return, fourth, the CRC-32s (ints) of ``bits``', the tail's, low[0]'s and
    low[1]'s bytes (0 for absent low planes): the C extension computes them piece by piece right
    after splitting each piece (still in cache); None on the numba path."""
    e = None if numba else ext()
    n = bits.size
    if e is None:
        from . import numba_float
        parts = numba_float.split_float(bits, shift, mask, symbol_of, tail_shift, tail_mask, sign_shift,
                                        tail_bits, low_planes, size=n)
        return (*parts, None) if checksum else parts
    head = np.empty(n, dtype=np.uint8)
    tail = np.empty((n * tail_bits + 7) // 8, dtype=np.uint8)
    low = np.empty((low_planes, n), dtype=np.uint8)
    crc = e.split_float(bits, shift, mask, np.ascontiguousarray(symbol_of, dtype=np.uint8), tail_shift, tail_mask,
                        sign_shift, tail_bits, low_planes, head, tail, low, _threads_for(n), window, checksum)
    return (head, tail, low, crc) if checksum else (head, tail, low)


def fuses_low_planes(head, coded) -> bool:
    """True when ``decode_merge_float`` decodes these coded low planes (RansPlane or None each)
    chunk by chunk inside the merge (the C extension, chunks as long as the head plane's)."""
    return available() and all(pl is None or pl.chunk_size == head.chunk_size for pl in coded)


def fuses_joint(head, joint) -> bool:
    """True when ``decode_merge_float`` decodes this validated joint low plane (format version 2,
    ``rans.joint.JointPlane``) chunk by chunk inside the merge: the C extension, the plane in
    the head plane's chunks (what the float encoder writes)."""
    return available() and joint.chunk_size == head.chunk_size and joint.n_symbols == head.n_symbols


def decode_merge_float(states, offsets, words, chunk_size, chunks_per_table, lookup, prob_bits,
                       placed, tail, tail_bits, tail_shift, sign_shift, low, out, numba: bool = False,
                       coded=(), checksum: bool = False, joint=None) -> tuple:
    """Fused rANS decode of the head plane + float merge into ``out`` ([n] uint16/uint32, any
    writable contiguous buffer). Returns (the [n_chunks] int32 status of
    ``numba_float.decode_merge_float``, the [2, n_chunks] statuses of the coded low planes or
    None). low: the low byte planes, () or (low1, low0), [n] uint8 each (read in place: raw
    sections straight from the file), None where ``coded`` holds that plane as a validated
    RansPlane instead (see ``fuses_low_planes``: decoded chunk by chunk, never whole).
    checksum: also return, third, the CRC-32 of ``out``'s bytes (an int; meaningful only when
    every status is 0): the C extension computes it chunk by chunk right after writing each
    chunk (still in cache), else None.
    joint: a validated ``rans.joint.JointPlane`` that :func:`fuses_joint` accepts (F32 ``out``,
    no ``low``, ``tail_shift`` 16): each of its chunks OR-ed into ``out`` right after that
    chunk's merge, so one pass writes the tensor and the checksum covers the low bits; its
    [n_chunks] int32 status then comes back in place of the low planes' (0 where fine)."""
    e = None if numba else ext()
    n = out.size
    n_chunks = -(-n // chunk_size)
    coded = list(coded) + [None] * (len(low) - len(coded))
    if e is None:
        if any(pl is not None for pl in coded) or joint is not None:
            raise ValueError("coded low planes need the C extension (see fuses_low_planes, fuses_joint)")
        from . import numba_float
        low = np.stack(low) if len(low) else np.empty((0, n), dtype=np.uint8)
        status = numba_float.decode_merge_float(states, offsets, words, chunk_size, chunks_per_table, lookup,
                                                prob_bits, placed, tail, tail_bits, tail_shift, sign_shift, low,
                                                out, size=n if n_chunks > 1 else 0)
        return (status, None, None) if checksum else (status, None)
    job = float_job(states, offsets, words, chunk_size, chunks_per_table, lookup, prob_bits, placed, tail,
                    tail_bits, tail_shift, sign_shift, low, out, coded)
    if joint is None:
        crc = e.decode_merge_float(*job[:17], _threads_for(n), *job[17:], checksum)
        return (job[16], job[19], crc) if checksum else (job[16], job[19])
    jstatus = np.zeros(joint.n_chunks, dtype=np.int32)  # 0 for a chunk whose merge failed first
    words16 = joint.words if joint.words.size >= 2 else np.concatenate([joint.words, np.zeros(2, np.uint16)])
    jargs = (joint.states, joint.offsets, words16, joint.chunks_per_table, *joint.tables(), joint.prob_bits,
             jstatus, joint.state_index())
    crc = e.decode_merge_float(*job[:17], _threads_for(n), *job[17:], checksum, jargs)
    return (job[16], jstatus, crc) if checksum else (job[16], jstatus)


def float_job(states, offsets, words, chunk_size, chunks_per_table, lookup, prob_bits, placed, tail, tail_bits,
              tail_shift, sign_shift, low, out, coded=()) -> tuple:
    """The C arguments of one fused float decode (:func:`decode_merge_float`'s): (states,
    offsets, words, n, chunk_size, chunks_per_table, lookup, prob_bits, placed, tail, tail_bits,
    tail_shift, sign_shift, low1, low0, out, status [n_chunks] int32, coded low1, coded low0,
    low status [2, n_chunks] int32 or None); ``coded`` as in decode_merge_float."""
    n = out.size
    n_chunks = -(-n // chunk_size)
    coded = list(coded) + [None] * (len(low) - len(coded))
    status = np.empty(n_chunks, dtype=np.int32)
    low1, low0 = low if len(low) else (None, None)
    args = [None, None, None]
    if any(pl is not None for pl in coded):
        for k, pl in enumerate(coded):
            if pl is not None:
                lk, wk = plane_inputs(pl)
                args[k] = (pl.states, pl.offsets, wk, lk, pl.chunks_per_table, pl.prob_bits)
        args[2] = np.zeros((2, n_chunks), dtype=np.int32)
    return (states, offsets, words, n, chunk_size, chunks_per_table, lookup, prob_bits, placed, tail,
            tail_bits, tail_shift, sign_shift, low1, low0, out, status, *args)


def has_file_decode(cols: int) -> bool:
    """Whether :func:`decode_float_file` runs here (the C extension, on a system with pread)
    with rows of ``cols`` columns (the caller's layout must be the extension's)."""
    e = ext()
    return e is not None and getattr(e, "FLOAT_FILE_COLS", None) == cols and os.name == "posix"


def decode_float_file(fd: int, rows: np.ndarray, outs: list, verify: bool = True) -> list[int]:
    """Decode float records straight from the open file ``fd`` (C extension only:
    :func:`has_file_decode`), all in one call over the extension's threads: rows [k, FF_COLS]
    int64, one per tensor (``wcodec.codecs.float.file_rows``: params, section offsets, sizes and
    CRC-32s from the validated header), outs: k writable buffers of the tensors' bytes. Each
    tensor's small sections are read and checked as ``codecs.float.parse`` checks them, then
    every tensor's chunk pairs decode, each pair's words, tail and low bytes read just before it
    (into a buffer of its own, checksummed while in cache: no copy of a whole section, no fresh
    pages, no SIGBUS). Returns a code per tensor: 0, decoded into its out buffer with every check
    passed (with ``verify`` every section's and the decoded bytes' CRC-32s); another code, left to
    the reference decoder (which raises the precise error; ``out`` may be partly written).
    Raises ValueError for rows and buffers that do not fit, MemoryError."""
    return ext().decode_float_file(fd, rows, outs, 0, verify)


# ---- joint low plane (16-bit symbols, format version 2) ------------------------------------

def block_histograms16(symbols: np.ndarray, block: int, numba: bool = False) -> np.ndarray:
    """symbols: [n] uint16 -> [n_blocks, 65536] int32 counts per block of ``block`` (< 2**31) symbols."""
    return _block_counts(symbols, block, 65536, np.int32, "block_histograms16", numba)


def segment_tops16(symbols: np.ndarray, seg: int) -> tuple[np.ndarray, np.ndarray]:
    """C extension only. symbols: [n] uint16 -> (tops [n_seg] int32: each segment of ``seg``
    (< 2**31) symbols' largest symbol count, total [65536] int64: the plane's symbol counts)."""
    n_seg = -(-symbols.size // seg)
    threads = _threads_for(symbols.size)
    parts = max(1, min(n_seg, threads or ext().threads()))  # a part per thread, each with its own counts
    tops = np.empty(n_seg, dtype=np.int32)
    partial = np.zeros((parts, 65536), dtype=np.int64)
    ext().segment_tops16(symbols, seg, tops, partial, np.empty((parts, 65536), np.uint32), threads)
    return tops, partial.sum(axis=0)


def segment_histograms16(symbols: np.ndarray, seg: int, which: np.ndarray) -> np.ndarray:
    """C extension only. [k, 65536] int32 symbol counts of segments ``which`` (int64 [k], each in
    [0, n_seg)) of ``seg`` symbols: ``block_histograms16(symbols, seg)[which]`` without the rest."""
    which = np.ascontiguousarray(which, dtype=np.int64)
    counts = np.empty((which.size, 65536), dtype=np.int32)
    ext().segment_histograms16(symbols, seg, which, counts, _threads_for(int(which.size) * seg))
    return counts


def encode_chunks16(symbols, chunk_size, chunks_per_table, tables, prob_bits, raw, numba: bool = False):
    """rANS-encode [n] uint16 symbols in chunks: (states [n_chunks*32] uint64, offsets
    [n_chunks+1] uint32, words uint16). tables: ``rans.joint.JointPlane.tables()``; raw
    [n_chunks] uint8: chunks stored as their symbols (their 32 states are written as zeros)."""
    default, eo, esym, efreq, ecum, _ = tables
    e = None if numba else ext()
    n = symbols.size
    if e is None:
        from . import numba_rans16
        return numba_rans16.encode_chunks16(symbols, chunk_size, chunks_per_table, default, eo, esym, efreq, ecum,
                                            prob_bits, raw, size=n)
    n_chunks = -(-n // chunk_size)
    states = np.empty(n_chunks * 32, dtype=np.uint64)
    counts = np.empty(n_chunks, dtype=np.int64)
    scratch = np.empty(max(2 * n, 2), dtype=np.uint16)
    total = e.encode_chunks16(symbols, chunk_size, chunks_per_table, default, eo, esym, efreq, ecum, prob_bits,
                              states, counts, scratch, raw, _threads_for(n))
    offsets = np.zeros(n_chunks + 1, dtype=np.uint32)
    np.cumsum(counts, out=offsets[1:], dtype=np.uint32)
    scratch.resize(max(total, 0), refcheck=False)  # in place, as encode_chunks: no copy into fresh pages
    return states, offsets, scratch


def decode_chunks16(states, offsets, words, n, chunk_size, chunks_per_table, tables, prob_bits, out, state_index,
                    numba: bool = False) -> np.ndarray:
    """Decode a validated joint plane, OR-ing symbol i into ``out[i]`` ([n] uint16/uint32 with
    zero low 16 bits); returns the [n_chunks] int32 status. words: >= 2 entries; state_index
    [n_chunks] int64: each chunk's first state, -1 for a raw chunk."""
    e = None if numba else ext()
    n_chunks = -(-n // chunk_size)
    if e is None:
        from . import numba_rans16
        return numba_rans16.decode_chunks16(states, offsets, words, n, chunk_size, chunks_per_table, *tables,
                                            prob_bits, out, state_index, size=n if n_chunks > 1 else 0)
    status = np.empty(n_chunks, dtype=np.int32)
    e.decode_chunks16(states, offsets, words, n, chunk_size, chunks_per_table, *tables, prob_bits, out, status,
                      state_index, _threads_for(n))
    return status


# ---- fixed codec ---------------------------------------------------------------------------

def fixed_encode(bits: np.ndarray, rows: int, cols: int, kpad: int, base: int, fp16: bool = False):
    """The sections of codec "fixed" (layout: ``wcodec.codecs.fixed``) of bf16 bits uint16
    [rows*cols] with window start ``base``: (lo uint8 [rows*kpad], nib uint8 [rows*kpad/2],
    esc.ptr uint32 [rows+1], esc.col uint16 (cols <= 65536) or uint32 [E], esc.val uint16 [E]);
    with ``fp16``, of codec "fixed16" on fp16 bits (``wcodec.codecs.fixed16``: the window over the
    exponent), its m2 plane uint8 [rows*kpad/4] last. Computed by the C extension on its threads;
    None without it (then the numpy encoder runs)."""
    e = ext()
    if e is None:
        return None
    bits = np.ascontiguousarray(bits, dtype=np.uint16).reshape(-1)
    threads = _threads_for(bits.size)
    lo = np.empty(rows * kpad, np.uint8)
    nib = np.empty(rows * kpad // 2, np.uint8)
    counts = np.empty(rows, np.uint32)
    m2 = np.empty(rows * kpad // 4, np.uint8) if fp16 else None
    e.fixed_encode_planes(bits, rows, cols, kpad, base, lo, nib, counts, threads, m2)
    ptr = np.zeros(rows + 1, np.uint32)
    np.cumsum(counts, out=ptr[1:])
    n = int(ptr[-1])
    col = np.empty(n, np.uint16 if cols <= 0x10000 else np.uint32)
    val = np.empty(n, np.uint16)
    if n:
        e.fixed_encode_escapes(bits, rows, cols, base, ptr, col, val, threads, fp16)
    return (lo, nib, ptr, col, val) + ((m2,) if fp16 else ())


def fixed_decode(lo, nib, ptr, col, val, rows: int, cols: int, kpad: int, base: int, out: np.ndarray,
                 m2=None) -> bool:
    """bf16 bits uint16 [rows*cols] of a codec "fixed" record that ``check_record`` accepted (fp16
    bits of a "fixed16" one with its ``m2`` plane uint8 [rows*kpad/4]), written into ``out``
    (writable C-contiguous uint16 [rows*cols]) by the C extension on its threads; False without
    it (nothing written). ValueError for a record it cannot decode inside its buffers (an
    escape's row pointer or column out of range)."""
    e = ext()
    if e is None:
        return False
    c = np.ascontiguousarray
    e.fixed_decode(c(lo), c(nib), c(ptr), c(col), c(val), rows, cols, kpad, base, out, _threads_for(rows * cols),
                   None if m2 is None else c(m2))
    return True
