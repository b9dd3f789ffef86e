"""Encode a stream of tensors into a writer: thread pool over tensors, bounded memory, aliases.

At most ``workers + 1`` tensors, or more while their input bytes stay within
:data:`WINDOW_BYTES`, are in flight (being encoded or waiting to be written), so memory stays
bounded by the largest tensors and the window, never the whole checkpoint. Records are written in
input order, so the output is deterministic whatever the number of workers.
"""

from __future__ import annotations

import os
import threading
import warnings
from collections import deque
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Iterable

import numpy as np

from . import spec
from .writer import prepare_sections

#: codec ids whose decoded tensor differs from the input: the writer decodes them to checksum
LOSSY_CODECS = frozenset({"int8-quant"})


@dataclass
class Item:
    """One tensor to encode.

    name: tensor name. array: C-contiguous little-endian numpy array (BF16 as uint16), never
    modified. dtype: safetensors dtype name. ident: identity of the memory holding it (equal
    idents = the same tensor under two names, stored once) or None.
    """

    name: str
    array: np.ndarray
    dtype: str
    ident: tuple | None = None


#: input bytes that may be in flight beyond ``workers + 1`` tensors: tensors behind a large one
#: keep the other workers busy while it encodes, their records waiting for it to be written.
#: MiniLM bf16 on 2 cores (its 23 MB token embedding ahead of 38 small tensors), save_file
#: 55-60 ms with the count bound alone, 43 ms with this window; the kernels alone 29.5 ms
#: (benchmarks/HISTORY.md, session 17)
WINDOW_BYTES = 256 << 20


def default_workers() -> int:
    """Threads for encoding: numba kernels release the GIL, but only thread-safe numba layers
    (omp, tbb) may be entered from several threads; the workqueue layer aborts the process.
    The C kernels (wcodec.native) are thread-safe, and then numba is not imported."""
    from .. import native

    if native.available():
        return max(1, min(4, os.cpu_count() or 1))
    try:
        from numba.np.ufunc import omppool  # noqa: F401
    except ImportError:
        try:
            from numba.np.ufunc import tbbpool  # noqa: F401
        except ImportError:
            return 1
    return max(1, min(4, os.cpu_count() or 1))


def has_nonfinite(array: np.ndarray, dtype: str) -> bool:
    """Whether a float tensor (BF16 as uint16 bits) holds NaN or +-inf."""
    if dtype == "BF16":
        return bool(np.any((np.asarray(array).view(np.uint16) & 0x7F80) == 0x7F80))
    if dtype in ("F16", "F32", "F64"):
        return not bool(np.all(np.isfinite(array)))
    return False


def _encode_one(item: Item, mode: str, codec: str | None = None, options: dict | None = None,
                low_joint: bool = False):
    from ..codecs import choose_codec, decode_tensor, encode_tensor

    if mode == "int8" and choose_codec(item.dtype, tuple(item.array.shape), mode) == "int8-quant" \
            and has_nonfinite(item.array, item.dtype):
        # quantization needs finite weights: keep this tensor bit-exact instead of failing the
        # whole checkpoint (the info table then shows codec "float" for it)
        warnings.warn(f"tensor '{item.name}': holds NaN or inf; stored lossless instead of int8", stacklevel=2)
        mode = "lossless"
    if low_joint and item.dtype == "F32" and choose_codec(item.dtype, tuple(item.array.shape), mode) == "float":
        options = {**(options or {}), "low_joint": True}  # the float codec's format-version-2 plane
    rec = encode_tensor(item.array, item.dtype, mode, item.name, prefer=codec, **(options or {}))
    if rec.codec in LOSSY_CODECS:
        crc = spec.crc32(decode_tensor(rec, item.name))
    elif rec.source_crc is not None:  # the float codec checksums its input while splitting it
        crc = rec.source_crc
    else:
        crc = spec.crc32(item.array)
    return rec, crc, prepare_sections(rec)  # the sections' bytes and checksums, here on the worker


def _check_input_name(name) -> None:
    """An input tensor's name must be storable: a non-empty str. Raises InvalidInputError (a
    WcodecError and a ValueError) before anything of the tensor is encoded."""
    from ..errors import InvalidInputError
    if not isinstance(name, str) or not name:
        raise InvalidInputError(f"input tensor name {name!r}: a .wcodec file cannot store an empty or "
                                "non-string tensor name (rename it in the input)")


def encode_into(sink, items: Iterable[Item], mode: str = "lossless", workers: int | None = None,
                progress=None, codec: str | None = None, plan: dict | None = None,
                low_joint: bool = False) -> dict:
    """Encode ``items`` in order into ``sink`` (a Writer or ShardedWriter).

    mode: "lossless", "int8" or a lossy mode string. workers: encoding threads (None:
    :func:`default_workers`). progress: a tqdm-like object updated with decoded bytes, or None.
    codec: a codec id of ``wcodec.codecs.PREFERABLE`` (``"fixed"``) used for the tensors it can
    take. plan: {name: (mode string, encode_tensor options)} overriding ``mode`` per tensor
    (e.g. :func:`wcodec.codecs.lossy.allocate_fisher`'s ``"lossy:qp=N"`` + ``row_weight``).
    low_joint: F32 tensors the float codec stores also try the joint low plane (format version 2,
    kept where smaller; ``wcodec.codecs.float``).
    Returns totals {"tensors", "aliases", "raw_bytes", "coded_bytes"}. Exceptions propagate
    after cancelling pending work (the caller aborts the sink).
    """
    workers = default_workers() if workers is None else max(1, int(workers))
    seen: dict[tuple, str] = {}
    totals = {"tensors": 0, "aliases": 0, "raw_bytes": 0, "coded_bytes": 0}
    pending: deque = deque()
    in_flight = 0  # input bytes of the pending tensors

    def flush_one():
        nonlocal in_flight
        name, fut, nbytes = pending.popleft()
        in_flight -= nbytes
        rec, crc, prepared = fut.result()
        sink.add_record(name, rec, crc, prepared=prepared)
        totals["tensors"] += 1
        totals["raw_bytes"] += nbytes
        totals["coded_bytes"] += rec.nbytes
        if progress is not None:
            progress.update(nbytes)

    # numba parallel kernels entered from the main thread were measured 5-10x slower here (about
    # 0.35 s per small tensor, omp layer): with numba, pool threads even for workers=1; the C
    # kernels encode one worker's tensors on the calling thread (a pool thread's hand-offs cost
    # ~0.15 ms of CPU per tensor: 6 of MiniLM's 35 ms, issue 30)
    from .. import native

    ex = _Inline() if workers == 1 and native.available() else ThreadPoolExecutor(workers)
    interrupted = False
    try:
        for item in items:
            _check_input_name(item.name)
            key = item.ident if item.ident is not None and item.array.size else None
            if key is not None and key in seen:
                while pending:  # the target must be in the sink before its alias
                    flush_one()
                sink.add_alias(item.name, seen[key])
                totals["aliases"] += 1
                continue
            if key is not None:
                seen[key] = item.name
            m, opts = (plan or {}).get(item.name, (mode, None))
            nbytes = int(item.array.nbytes)
            pending.append((item.name, ex.submit(_encode_one, item, m, codec, opts, low_joint), nbytes))
            in_flight += nbytes
            while len(pending) > workers and in_flight > WINDOW_BYTES:
                flush_one()
        while pending:
            flush_one()
    except KeyboardInterrupt:
        interrupted = True
        raise
    finally:
        for _, fut, _ in pending:
            fut.cancel()
        # Ctrl-C: return now (the caller removes its files); a running encode (seconds for a
        # large lossy tensor) finishes in its thread, its result unused
        ex.shutdown(wait=not interrupted)
    return totals


class _Inline:
    """The part of ThreadPoolExecutor that :func:`encode_into` uses, running each call at submit
    on the calling thread (an exception is raised at its result, as a pool's; Ctrl-C at once)."""

    def submit(self, fn, *args) -> Future:
        fut = Future()
        try:
            fut.set_result(fn(*args))
        except Exception as e:  # noqa: BLE001 - re-raised by fut.result(), in write order
            fut.set_exception(e)
        return fut

    def shutdown(self, wait: bool = True) -> None:
        pass


def map_in_threads(fn, names: list, workers: int | None = None, cost=None) -> dict:
    """{name: fn(name)} computed in ``workers`` threads (order kept); the first error raised by
    ``fn`` is raised here, after the threads stop taking names. Decoding this way overlaps tensors
    and avoids the slow main-thread numba launches noted in :func:`encode_into`. ``cost`` (name ->
    a number, e.g. elements): the costliest names start first (longest processing time first: the
    largest tensor gets the native helper threads while they are free, the small ones fill the
    end; MiniLM on 2 cores decodes 4 % faster, benchmarks/RESULTS.md). Plain threads taking the
    next name from a shared counter: a ThreadPoolExecutor cost 17 us per name (671 us for
    MiniLM's 39 tensors on 2 workers, against 175 us here). One name or one worker with the C
    kernels runs on the calling thread: a thread's start and join cost ~0.07 ms on an idle 2-vCPU
    VM and ~1.6 ms with its other core busy, more than a small tensor's decode
    (``safe_open(...).get_tensor`` decodes one name per call; benchmarks/HISTORY.md, session 15)."""
    from .. import native

    workers = default_workers() if workers is None else max(1, int(workers))
    order = sorted(names, key=cost, reverse=True) if cost is not None else list(names)
    if (workers == 1 or len(order) == 1) and native.available():
        done = {n: fn(n) for n in order}
        return {n: done[n] for n in names}
    results, errors = [None] * len(order), []
    taken = iter(range(len(order)))
    lock = threading.Lock()

    def work():
        while not errors:
            with lock:
                i = next(taken, None)
            if i is None:
                return
            try:
                results[i] = fn(order[i])
            except BaseException as e:  # noqa: B036 - re-raised in the caller
                errors.append(e)

    threads = [threading.Thread(target=work, name=f"wcodec-{k}", daemon=True)
               for k in range(min(workers, len(order)))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]
    done = dict(zip(order, results))
    return {n: done[n] for n in names}


def imap_in_threads(fn, names: list, workers: int | None = None):
    """``fn(name)`` for each of ``names``, yielded in order, computed in ``workers`` threads at
    most ``workers + 1`` names ahead of the consumer (memory holds that many results, never all
    of them): for writers that stream decoded tensors into a file in a fixed order. The first
    error of ``fn`` is raised at its name's turn; closing the generator early cancels what has
    not started (running calls finish in their threads)."""
    workers = default_workers() if workers is None else max(1, int(workers))
    ex = ThreadPoolExecutor(workers)
    pending: deque = deque()
    todo = iter(names)
    try:
        for name in todo:
            pending.append(ex.submit(fn, name))
            if len(pending) > workers:
                yield pending.popleft().result()
        while pending:
            yield pending.popleft().result()
    finally:
        for fut in pending:
            fut.cancel()
        ex.shutdown(wait=False)
