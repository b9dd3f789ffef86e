"""Batched GPU decode: upload a plan's bytes, build the decode tables on the device, run the
kernels of ``wcodec.gpu.kernels`` and check their per-chunk status.

``decode_records`` is the simple entry point (one batch, synchronous); ``wcodec.gpu.loader``
pipelines several batches over streams.
"""

from __future__ import annotations

import numpy as np
import torch

from ..errors import CorruptDataError
from . import layout as K
from .plan import LUT_STRIDE, TILE_BLOCK, Plan

STATUS = {K.ST_READ_PAST: "reads past the end of its words",
          K.ST_FINAL: "does not end in the initial state (words left or states wrong)",
          K.ST_INIT: "has an initial state out of range",
          K.ST_SYMBOL: "decodes a symbol outside the head alphabet"}

#: (warps per program = chunks per program, decode steps per loop iteration) of the rANS kernel,
#: by mode (measured on an H200; benchmarks/RESULTS.md)
CONFIG = {K.MODE_BYTES: (16, 4), K.MODE_F16BITS: (16, 4), K.MODE_F32BITS: (16, 4),
          K.MODE_TILED: (16, 4)}

#: inline PTX (ballot/popc prefix count, funnel shift) on the GPU; the interpreter has no asm
ASM = True
#: decode table of each program's first chunk in shared memory (needs ASM): 0 off, 1 read with
#: generic loads, 2 read with ld.shared where all of a program's chunks use it (kernels.py)
SMEM = 2
#: prefetch the word (and tail) streams into L1 ahead of use (needs ASM), by mode
PF = {K.MODE_BYTES: True, K.MODE_F16BITS: True, K.MODE_F32BITS: True, K.MODE_TILED: True}
#: register cap of the rANS kernel by mode (absent: the compiler's choice). 32 lets 4 programs of
#: 16 warps (64 warps) share an SM; the F16 loop fits without spills, the F32 one would not
MAXNREG = {K.MODE_F16BITS: 32, K.MODE_BYTES: 32}
#: two chunks per warp, decoded in one interleaved loop (kernels._step2), by mode, with its own
#: register cap. Off: measured 1.1-1.5x slower than one chunk per warp on an H200, single layers
#: and the 7B model alike; the SM is throughput-bound (L1/shared pipe), not latency-bound, once
#: it holds ~48 warps (benchmarks/RESULTS.md, third pass)
PAIR = {K.MODE_BYTES: False, K.MODE_F16BITS: False, K.MODE_F32BITS: False}
MAXNREG_PAIR = {K.MODE_F16BITS: 40, K.MODE_BYTES: 40}
#: MODE_TILED rounds to bf16 with the hardware conversion (kernels._put_values; scales are finite)
CVT = True
#: 8x8 blocks per program of the int8 transform inverse (wcodec.gpu.transform_kernels)
TRANSFORM_BLK = 64


def _pair_fits(desc: np.ndarray, W: int) -> bool:
    """Whether the PAIR kernel may run on these chunk descriptors with W warps per program: it
    addresses each program's second chain (rows pid*2W + W + w) through the first chain's
    (pid*2W + w) bases plus int32 offsets (words, tail words, output elements), which must fit
    with room for a chunk's own extent (< 2**22 symbols, words or tail words)."""
    n = desc.shape[0]
    p = -(-n // (2 * W))
    rows = (np.arange(p)[:, None] * 2 * W + np.arange(W)[None, :]).reshape(-1)
    a = desc[np.minimum(rows, n - 1)]
    b = desc[np.minimum(rows + W, n - 1)]
    d = np.abs(b[:, [K.D_WBEG, K.D_TAILW, K.D_OUT]] - a[:, [K.D_WBEG, K.D_TAILW, K.D_OUT]])
    return bool(d.size == 0 or int(d.max()) < (1 << 31) - (1 << 23))


def _interpreting() -> bool:
    import os
    return os.environ.get("TRITON_INTERPRET", "0") not in ("", "0")


def build_plan(items) -> Plan:
    """items: iterable of (name, EncodedTensor). Validates every record (CorruptDataError naming
    the tensor): the codec's params schema, as the CPU decode checks it, then the plan's checks."""
    from ..codecs import check_record_params, named_errors
    plan = Plan()
    for name, rec in items:
        with named_errors(name):
            check_record_params(rec)
        plan.add(name, rec)
    return plan.finish()


def fill_host(plan: Plan, host: np.ndarray) -> None:
    """Copy the plan's sections into ``host`` ([>= upload_nbytes] uint8, e.g. pinned memory)."""
    for off, arr in plan.sections:
        host[off:off + arr.nbytes] = arr.view(np.uint8)


def build_luts(freqs: torch.Tensor, prob_bits: torch.Tensor, vals: torch.Tensor | None = None) -> torch.Tensor:
    """Packed decode tables on the device from the stored frequencies.

    freqs: [T, 256] int (any integer dtype), prob_bits: [T], vals: [T, 256] output value of each
    symbol (default the symbol). Returns int64[T * 4096]; entry slot of table t (layout.py) =
    ``freq | (slot - cum) << 13 | vals[sym] << 32`` for slot < 2**prob_bits[t]. Indices are
    clamped, so a table that does not sum to 2**prob_bits (rejected on the host anyway) gives
    wrong symbols, never a bad access.
    """
    T = freqs.shape[0]
    dev = freqs.device
    if T == 0:
        return torch.zeros(1, dtype=torch.int64, device=dev)
    f = freqs.to(torch.int64)
    cum = torch.cumsum(f, dim=1)
    slots = torch.arange(LUT_STRIDE, device=dev, dtype=torch.int64)
    sym = torch.searchsorted(cum, slots.expand(T, LUT_STRIDE).contiguous(), right=True).clamp_(max=255)
    fr = torch.gather(f, 1, sym)
    start = torch.gather(cum, 1, sym) - fr
    v = sym if vals is None else torch.gather(vals.to(torch.int64), 1, sym)
    v = torch.where(v >= (1 << 31), v - (1 << 32), v)  # high word as a signed 32-bit value
    e = fr.clamp(0, 4096) | ((slots - start).clamp(0, 4095) << 13) | (v << 32)
    return e.reshape(-1)


def torch_dtype(name: str) -> torch.dtype:
    """safetensors dtype name -> torch dtype (see wcodec._torch_tensors.torch_dtype)."""
    from .._torch_tensors import torch_dtype as f
    return f(name)


class Prepared:
    """A plan's small device-side tables: decode lookup tables and descriptors (no data)."""

    def __init__(self, plan: Plan, device, config=None):
        nb = torch.from_numpy
        self.plan = plan
        self.cfg = {**CONFIG, **(config or {})}
        self.asm = ASM and torch.device(device).type == "cuda" and not _interpreting()
        self.lut = build_luts(nb(plan.freqs.astype(np.int32)).to(device), nb(plan.prob_bits).to(device),
                              nb(plan.vals.astype(np.int64)).to(device))
        self.desc = {k: nb(d).to(device) for k, d in plan.desc.items() if d.shape[0]}
        self.int8 = {k: (nb(td).to(device), nb(progs).to(device), progs.size,
                         nb(avg).to(device), avg.shape[0], skew)
                     for k, (td, progs, _, avg, skew) in plan.int8.items()}
        self.tiled = nb(plan.tiled).to(device)
        self.transform = None
        if plan.transform.shape[0]:
            self.transform = (nb(plan.transform).to(device), plan.transform.shape[0])
        self.status = {}  # per-launch chunk status, allocated by the first run()
        self._pair_ok = {}  # (key, W) -> _pair_fits, computed on first use



def run(prep: Prepared, buf: torch.Tensor, out: torch.Tensor) -> dict:
    """Enqueue every kernel of a prepared plan on the current stream.

    buf: uint8[plan.buf_nbytes] on the device, the first upload_nbytes holding the sections
    (fill_host layout), the rest scratch. out: uint8[>= plan.out_nbytes] (byte offsets of
    plan.outputs). Returns {mode: int32[n_chunks] status} for check() once the stream is done;
    these buffers belong to ``prep`` and are rewritten by its next run().
    """
    from . import kernels as KK
    plan = prep.plan
    if buf.numel() < plan.buf_nbytes or out.numel() < plan.out_nbytes:
        raise ValueError("device buffer or output allocation too small for the plan")
    buf16, buf32, bufF = buf.view(torch.int16), buf.view(torch.int32), buf.view(torch.float32)
    status = {}
    views = {K.MODE_BYTES: buf, K.MODE_F16BITS: out.view(torch.int16), K.MODE_F32BITS: out.view(torch.int32)}
    kinds = {K.OUT_I8: out, K.OUT_BF16: out.view(torch.int16), K.OUT_F16: out.view(torch.float16),
             K.OUT_F32: out.view(torch.float32)}
    # keys sort byte planes first: F32 low planes decode into scratch before the F32 launch
    for key, dd in prep.desc.items():
        mode, R, pb = key
        W, S = prep.cfg[mode]
        pair = bool(PAIR.get(mode)) and W > 1
        if pair:
            pk = (key, W)
            if pk not in prep._pair_ok:
                prep._pair_ok[pk] = _pair_fits(plan.desc[key], W)
            pair = prep._pair_ok[pk]
        caps = MAXNREG_PAIR if pair else MAXNREG
        n = dd.shape[0]
        st = prep.status.get(key)
        if st is None:  # reused by later runs of this plan (each run rewrites all of it)
            st = prep.status[key] = torch.empty(n, dtype=torch.int32, device=buf.device)
        KK.rans_chunks_kernel[(-(-n // (2 * W if pair else W)),)](dd, n, buf, buf16, buf32, prep.lut, prep.lut.data_ptr(),
                                             kinds[R] if mode == K.MODE_TILED else views[mode], st,
                                             prep.tiled, bufF, MODE=mode, R=R, PB=pb, W=W, S=S,
                                             NFIELDS=K.NF, ASM=prep.asm,
                                             SMEM=int(SMEM) if prep.asm and W > 1 else 0,
                                             PF=prep.asm and bool(PF.get(mode)), PAIR=pair,
                                             CVT=CVT and prep.asm, num_warps=W,
                                             **({"maxnreg": caps[mode]} if mode in caps and prep.asm else {}))
        status[key] = st
    if prep.transform is not None:  # transform tiles: inverted in place in the residual scratch
        from .transform_kernels import int8_transform_kernel
        bt, nblk = prep.transform
        int8_transform_kernel[(-(-nblk // TRANSFORM_BLK),)](bt, nblk, buf, BLK=TRANSFORM_BLK)
    for (bh, bw, kind, pred), (td, progs, n_progs, avg, n_avg, skew) in prep.int8.items():
        g = max(1, TILE_BLOCK // (bh * bw))
        KK.int8_tiles_kernel[(n_progs,)](td, progs, buf, bufF, kinds[kind], BH=bh, BW=bw, G=g,
                                         OUT=kind, PRED=pred, NTF=K.NT,
                                         num_warps=max(1, min(8, g * bh * bw // 1024)))
        if n_avg:
            KK.int8_avg_kernel[(n_avg,)](td, avg, n_avg, skew, buf, bufF, kinds[kind], BH=bh, BW=bw,
                                         OUT=kind, NTF=K.NT, ASM=prep.asm, num_warps=1)
    for src, dst, n in plan.raw:
        out[dst:dst + n].copy_(buf[src:src + n])
    return status


def check(plan: Plan, status: dict) -> None:
    """Raise CorruptDataError naming the tensor and chunk of the first failed chunk."""
    for key, st in status.items():
        s = st.cpu().numpy()
        bad = np.flatnonzero(s)
        if bad.size:
            i = int(bad[0])
            oi = int(plan.owner[key][i])
            first = int(np.flatnonzero(plan.owner[key] == oi)[0])
            what = "head plane" if key[0] in (K.MODE_F16BITS, K.MODE_F32BITS) else "residual/low byte plane"
            raise CorruptDataError(f"tensor '{plan.outputs[oi].name}': {what} chunk {i - first} "
                                   f"{STATUS.get(int(s[i]), 'is corrupt')}")


def tensor_views(plan: Plan, out: torch.Tensor) -> dict:
    """{name: tensor} views of the output allocation with each record's dtype and shape."""
    res = {}
    for o in plan.outputs:
        t = out[o.offset:o.offset + o.nbytes].view(torch_dtype(o.dtype))
        res[o.name] = t.reshape(o.shape)
    return res


def decode_records(items, device="cuda", config=None) -> dict:
    """Decode records on the GPU in one batch. items: list of (name, EncodedTensor).

    Returns {name: torch.Tensor} on ``device``, views of one allocation. Raises CorruptDataError.
    """
    plan = build_plan(items)
    dev = torch.device(device)
    host = np.zeros(plan.buf_nbytes, dtype=np.uint8)
    fill_host(plan, host)
    buf = torch.from_numpy(host).to(dev)
    out = torch.empty(max(plan.out_nbytes, 16), dtype=torch.uint8, device=dev)
    status = run(Prepared(plan, dev, config), buf, out)
    check(plan, status)
    return tensor_views(plan, out)
