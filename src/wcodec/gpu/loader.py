"""Load records onto a device: pinned host staging, asynchronous uploads overlapped with the batched
decode, section checksums verified on the host in parallel, tensors as views of one allocation.

Pipeline per batch of about ``batch_bytes`` compressed bytes: host threads copy the sections
(zero-copy mmap views from the reader) into one of two pinned staging buffers and check their
crc32 at the same time; a copy stream uploads the buffer; the compute stream waits on that copy
and runs the kernels; the staging buffer is reused once its copy has finished. So batch i+1 is
being staged while batch i uploads and batch i-1 decodes. Decoded-tensor checksums are not
recomputed on the GPU (a CRC on the GPU would cost more than the decode); the compressed
sections are checked before upload and every rANS chunk checks its own final state and word count.
"""

from __future__ import annotations

import os
import warnings
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from .. import native
from ..errors import ChecksumError

DEFAULT_BATCH_BYTES = 256 << 20
_PINNED: dict = {}  # (device index, slot) -> pinned uint8 tensor, reused across calls


def _cpu_fallback(items, device):
    import torch
    from ..codecs import decode_tensor
    from .._torch_tensors import from_numpy
    from .decode import torch_dtype
    out = {}
    for name, rec in items:
        t = from_numpy(decode_tensor(rec, name), rec.dtype)
        out[name] = t.reshape(tuple(rec.shape)).to(device) if str(device) != "cpu" else t.reshape(tuple(rec.shape))
        assert out[name].dtype == torch_dtype(rec.dtype)
    return out


#: the fixed-rate codecs, decoded by their own kernels: codec id -> module (wcodec.gpu.<module>)
FIXED = {"fixed": "fixed", "fixed16": "fixed16"}


def _load_fixed(items, dev, crcs, workers) -> dict:
    """Codec "fixed" / "fixed16" records: sections checked on the host, uploaded, decoded by
    their own kernel."""
    import importlib

    from ..errors import WcodecError
    if crcs is not None:
        with ThreadPoolExecutor(workers or min(16, os.cpu_count() or 4)) as pool:
            _check_sections(pool, items, crcs)
    from ..format.params import check_params
    out = {}
    for name, rec in items:
        try:
            check_params(rec.codec, rec.dtype, rec.shape, rec.params)
        except WcodecError as e:
            raise type(e)(f"tensor '{name}': {e}") from None
        layout = importlib.import_module(f"{__package__}.{FIXED[rec.codec]}")
        fw = layout.from_sections(rec.params, rec.sections, rec.shape, dev, name)
        out[name] = layout.decode(fw).reshape(tuple(rec.shape))
    return out


def _check_crc(name, sec, arr, want) -> None:
    if native.crc32(np.ascontiguousarray(arr).reshape(-1).view(np.uint8)) != want:  # C, ~10x zlib
        raise ChecksumError(f"tensor '{name}': section '{sec}' checksum mismatch (corrupt data)")


def _check_sections(pool, items, crcs, skip=frozenset()) -> None:
    """crc32 of every section of ``items`` named in ``crcs`` except the (name, section) pairs in
    ``skip`` (those are checked while staging), in parallel."""
    todo = [(n, s, rec.sections[s], crcs[n][s]) for n, rec in items if n in crcs
            for s in rec.sections if s in crcs[n] and (n, s) not in skip]
    list(pool.map(lambda a: _check_crc(*a), todo))


def _batches(items, batch_bytes):
    cur, size = [], 0
    for it in items:
        n = it[1].nbytes
        if cur and size + n > batch_bytes:
            yield cur
            cur, size = [], 0
        cur.append(it)
        size += n
    if cur:
        yield cur


def _pinned(torch, dev, slot, nbytes):
    key = (dev.index, slot)
    buf = _PINNED.get(key)
    if buf is None or buf.numel() < nbytes:
        buf = torch.empty(max(nbytes, 1 << 20), dtype=torch.uint8, pin_memory=True)
        _PINNED[key] = buf
    return buf


def _stage(pool, plan, host: np.ndarray, crcs, owner_names) -> None:
    """Copy sections into the pinned buffer, checking crc32 of each (parallel over sections)."""
    def one(k):
        off, arr, name, sec = plan.sections[k] + owner_names[k]
        b = arr.view(np.uint8)
        host[off:off + b.size] = b
        if crcs is not None and name in crcs and sec in crcs[name]:
            _check_crc(name, sec, b, crcs[name][sec])
    list(pool.map(one, range(len(plan.sections))))


#: bytes per staging buffer of :func:`upload`, and per host copy task
UPLOAD_STAGE_BYTES = 128 << 20
UPLOAD_PIECE_BYTES = 8 << 20
#: below this many bytes in all, plain copies (the pipeline's threads and stream cost ~1 ms)
UPLOAD_DIRECT_BYTES = 4 << 20


def upload(pairs, device=None, workers: int | None = None) -> None:
    """Copy host arrays into device memory: ``pairs`` of (numpy array, destination tensor of the
    same number of bytes, contiguous, on ``device``; read-only file views allowed as sources).

    To a CUDA device the bytes go through two pinned staging buffers: host threads copy one
    buffer's pieces in parallel while the other uploads asynchronously on a copy stream (a plain
    copy from pageable memory is one thread's memcpy through the driver's staging: ~8 GB/s on
    an H100 host, the rate of an MoE layer's expert planes). Returns when every copy is done.
    Elsewhere (CPU), or for less than UPLOAD_DIRECT_BYTES in all, each destination is copied
    into directly."""
    import torch

    pairs = [(a, d) for a, d in pairs if a.size]
    dev = torch.device(device) if device is not None else (pairs[0][1].device if pairs else torch.device("cpu"))
    views = [(np.ascontiguousarray(a).reshape(-1).view(np.uint8), d.reshape(-1).view(torch.uint8)) for a, d in pairs]
    for a, d in views:
        if a.size != d.numel():
            raise ValueError(f"upload: a {a.size}-byte source for a {d.numel()}-byte destination")
    if dev.type != "cuda" or sum(a.size for a, _ in views) < UPLOAD_DIRECT_BYTES:
        for a, d in views:
            with warnings.catch_warnings():  # read only here: copied into d
                warnings.simplefilter("ignore", UserWarning)
                d.copy_(torch.from_numpy(a))
        return
    pieces = [(a[o:o + UPLOAD_PIECE_BYTES], d[o:o + UPLOAD_PIECE_BYTES])
              for a, d in views for o in range(0, a.size, UPLOAD_PIECE_BYTES)]
    copy = torch.cuda.Stream(dev)
    copy.wait_stream(torch.cuda.current_stream(dev))  # the destinations' allocation and zeroing
    done = [None, None]
    with ThreadPoolExecutor(workers or min(16, os.cpu_count() or 4)) as pool, torch.cuda.device(dev):
        batch, size, slot = [], 0, 0
        for i, (a, d) in enumerate(pieces):
            batch.append((a, d))
            size += a.size
            if i + 1 < len(pieces) and size + pieces[i + 1][0].size <= UPLOAD_STAGE_BYTES:
                continue
            if done[slot] is not None:
                done[slot].synchronize()  # this staging buffer's previous upload has finished
            host = _pinned(torch, dev, ("upload", slot), size)
            host_np, offs = host.numpy(), np.cumsum([0] + [a.size for a, _ in batch]).tolist()

            def stage(j, host_np=host_np, offs=offs, batch=batch):
                host_np[offs[j]:offs[j + 1]] = batch[j][0]
            list(pool.map(stage, range(len(batch))))
            with torch.cuda.stream(copy):
                for j, (_, d) in enumerate(batch):
                    d.copy_(host[offs[j]:offs[j + 1]], non_blocking=True)
                done[slot] = torch.cuda.Event()
                done[slot].record(copy)
            batch, size, slot = [], 0, slot ^ 1
    copy.synchronize()


def load_records(items, device="cuda", separate: bool = False, crcs: dict | None = None,
                 batch_bytes: int = DEFAULT_BATCH_BYTES, workers: int | None = None, config=None) -> dict:
    """Decode records onto ``device``.

    items: list of (name, EncodedTensor). device: "cuda", "cuda:1", torch.device or "cpu".
    separate: False returns views of one device allocation (one cudaMalloc); True gives every
    tensor its own allocation (so single tensors can be freed). crcs: optional
    {name: {section: crc32}} checked on the host while staging (the reader's ``verify`` does the
    same, single-threaded); sections that are not uploaded (offsets, tables, alphabets) are
    checked on the host too, and the CPU fallback checks them all before decoding. Returns {name: torch.Tensor} with each record's dtype and shape.
    Falls back to the CPU decoder when the device is not CUDA, no GPU is present or triton is
    missing. Raises CorruptDataError / ChecksumError naming the tensor.
    """
    import torch
    dev = torch.device(device)
    items = list(items)
    fallback = dev.type != "cuda" or not torch.cuda.is_available()
    if not fallback:
        try:
            from . import decode as D
        except ImportError:
            fallback = True
    if not fallback and any(rec.codec in FIXED for _, rec in items):
        rest = [(n, r) for n, r in items if r.codec not in FIXED]
        out = load_records(rest, dev, separate, crcs, batch_bytes, workers, config) if rest else {}
        out.update(_load_fixed([(n, r) for n, r in items if r.codec in FIXED], dev, crcs, workers))
        return out
    if fallback:
        if crcs is not None:
            with ThreadPoolExecutor(workers or min(16, os.cpu_count() or 4)) as pool:
                _check_sections(pool, items, crcs)
        return _cpu_fallback(items, dev)
    if dev.index is None:
        dev = torch.device("cuda", torch.cuda.current_device())
    plans, batches = [], []
    for batch in _batches(items, batch_bytes):
        plans.append(D.build_plan(batch))
        batches.append(batch)
    # one output allocation: batches at 256-byte aligned bases
    bases, total = [], 0
    for p in plans:
        bases.append(total)
        total += -(-p.out_nbytes // 256) * 256
    out_all = torch.empty(max(total, 16), dtype=torch.uint8, device=dev)
    compute = torch.cuda.current_stream(dev)
    copy = torch.cuda.Stream(dev)
    pool = ThreadPoolExecutor(workers or min(16, os.cpu_count() or 4))
    statuses, done_events = [], [None, None]
    try:
        with torch.cuda.device(dev):
            for i, plan in enumerate(plans):
                slot = i % 2
                if done_events[slot] is not None:
                    done_events[slot].synchronize()  # the staging buffer's previous upload is done
                host = _pinned(torch, dev, slot, plan.buf_nbytes)
                _stage(pool, plan, host.numpy(), crcs, plan.section_owners)
                if crcs is not None:
                    _check_sections(pool, batches[i], crcs, frozenset(plan.section_owners))
                with torch.cuda.stream(copy):
                    buf = torch.empty(plan.buf_nbytes, dtype=torch.uint8, device=dev)
                    buf[:plan.upload_nbytes].copy_(host[:plan.upload_nbytes], non_blocking=True)
                    ev = torch.cuda.Event()
                    ev.record(copy)
                done_events[slot] = ev
                prep = D.Prepared(plan, dev, config)
                compute.wait_event(ev)
                buf.record_stream(compute)
                out = out_all[bases[i]:bases[i] + max(plan.out_nbytes, 16)]
                statuses.append(D.run(prep, buf, out))
                del buf
            compute.synchronize()
    finally:
        pool.shutdown(wait=True)
    result = {}
    for i, plan in enumerate(plans):
        D.check(plan, statuses[i])
        out = out_all[bases[i]:bases[i] + max(plan.out_nbytes, 16)]
        result.update(D.tensor_views(plan, out))
    if separate:
        result = {k: v.clone() for k, v in result.items()}
        del out_all
    return result
