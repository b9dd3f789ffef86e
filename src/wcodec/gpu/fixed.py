"""The fixed-rate layout on a torch device: encode (transcode), decode, and matmuls that decode
in registers (Triton kernels in :mod:`wcodec.gpu.fixed_kernels`, the Gluon mma kernel in
:mod:`wcodec.gpu.fixed_mma` for 3-32 rows of bf16 activations, on sm_90 the register-A wgmma
kernel in :mod:`wcodec.gpu.fixed_ra` before it for 17-32 rows, the warp-specialised kernel in
:mod:`wcodec.gpu.fixed_ws` for 33-128 rows and the Hopper wgmma kernel in
:mod:`wcodec.gpu.fixed_wgmma` as its fallback; torch ops on the CPU). Tile configs come from
the files shipped per GPU architecture (:mod:`wcodec.gpu.shipped`), else from Triton's autotuner.

``FixedWeight`` holds one [N, K] bf16 weight in codec "fixed" (``wcodec.codecs.fixed``) as
device tensors. ``encode_weight`` builds it from a bf16 tensor with torch ops on the tensor's own
device (a rANS file decoded on the GPU is transcoded there, no host round trip); its output is
bit-identical to the numpy encoder of the codec. ``linear`` computes ``x @ W.T (+ bias)``;
``grad_input`` computes ``g @ W``; ``decode`` gives W back bit-exact.
"""

from __future__ import annotations

import os
import warnings
from dataclasses import dataclass

import numpy as np
import torch

from ..codecs.fixed import ESCAPE_D, choose_base, decode_bits, nibble_order, padded_cols
from .._torch_tensors import linear_as_parameter
from ..errors import InvalidInputError, UnsupportedError

#: kernel by activation rows M (measured on the H100, benchmarks/fused_matmul.py and
#: benchmarks/serving_kernels.py): CUDA-core FMAs up to GEMV_MAX_M; the tiled fused tensor-core
#: GEMM below LARGE_M; from LARGE_M on, W is decoded once into a scratch and multiplied by cuBLAS
#: (on sm_90, up to WS_MAX_M rows the warp-specialised kernel first, the wgmma kernel its fallback).
#: H200, 2026-11-26, tools/tune_kernels.py over six Llama shapes, time / cuBLAS: at M = 64 the
#: wide tiled kernel 1.81-2.06x (1024x4096: 1.83x, the mma kernel 1.48x), the mma kernel
#: 2.16-2.56x, decode + cuBLAS 2.18-2.82x; at M = 128 decode + cuBLAS 1.74-2.84x, the wide
#: kernel 2.25-3.47x; at M = 256 1.67-2.31x against 3.06-4.22x
GEMV_MAX_M = 4
LARGE_M = 65
#: with the mma kernel (fixed_mma, M <= MMA_MAX_M, bf16 x): CUDA-core FMAs up to this M only
#: (H100, M = 2: the GEMV 6-18 % faster on 5 of 7 Llama shapes; M = 4: the mma kernel 4-25 % on 7 of 7)
MMA_GEMV_MAX_M = 2
#: bf16 x of MMA_GEMV_MAX_M < M <= MMA_MAX_M rows runs the mma kernel (before LARGE_M's rule).
#: H100, 2026-11-26: at M = 32 it takes 1.09-1.29x cuBLAS where the tiled kernel took 1.18-1.78x;
#: at 64-128 rows (blocks of 64 and 128) 2.1-4.1x, behind the tiled kernel
MMA_MAX_M = 32
#: bf16 x of WIDE_MIN_M < M <= WIDE_MAX_M rows that reaches the Triton tiled kernel runs it with
#: all rows in one block (kinds "mm_wide64" .. "mm_wide256", _wide_rows): each W tile is decoded
#: once per program, not once per 64 rows
WIDE_MIN_M = 32
WIDE_MAX_M = 256
#: bf16 x of WGMMA_MIN_M < M <= WGMMA_MAX_M rows on an sm_90 GPU runs the Hopper wgmma kernel
#: (fixed_wgmma: W tiles decoded once into shared memory, multiplied asynchronously), before
#: the rules of LARGE_M and of the wide tiled kernel. H100, 2026-11-26 (byte-permute decode,
#: tools/tune_kernels.py --paths mma,wgmma; benchmarks/serving_kernels.py), time / cuBLAS at
#: M = 128 on 4096x4096, 11008x4096, 4096x11008, 14336x4096: wgmma 2.32 / 2.29 / 1.96 / 1.91x,
#: decode + cuBLAS 2.28 / 2.44 / 2.43 / 2.57x; at M = 64 wgmma 1.60 / 1.77 / 1.51 / 1.57x against
#: the wide tiled kernel's 1.69 / 1.44 / 1.52 / 1.51x (so 33-64 rows stay there). The H200 of the
#: last round (before the byte permute) measured wgmma at 128 rows 2.52-3.52x, behind decode +
#: cuBLAS there: routed by the H100, the issue's target
WGMMA_MIN_M = 64
WGMMA_MAX_M = 128
#: ... for weights whose escapes are at most this fraction of their values: the wgmma kernel adds
#: escapes on the CUDA cores after its main loop, per row and x row. H100, M = 128, Student-t
#: weights (0.2 % escapes): 3.48-3.82x cuBLAS against Gaussian's (0.03 %) 1.93-2.37x; by the
#: linear growth between the two, it falls behind decode + cuBLAS from 0.05-0.1 % escapes
WGMMA_MAX_ESCAPES = 5e-4
#: bf16 x of WS_MIN_M < M <= WS_MAX_M rows on an sm_90 GPU runs the warp-specialised kernel
#: (fixed_ws: decoder warps fill shared buffers, a consumer warpgroup multiplies them by wgmma,
#: all rows of x in one block), before the wgmma kernel (its fallback) and LARGE_M's rule; above
#: WS_ANY_MAX_M rows only for weights of at most WGMMA_MAX_ESCAPES escapes (its escapes are
#: added after the main loop). H100, 2026-11-26 (benchmarks/experiments/ws_kernel.py; 4096x4096,
#: 11008x4096, 4096x11008, 14336x4096), time / cuBLAS against the route before it: M = 64 1.44 /
#: 1.55 / 1.26 / 1.39x (wide tiled kernel 1.70 / 1.45 / 1.54 / 1.51x), M = 128 1.90 / 2.07 / 1.74
#: / 1.81x (wgmma 2.35 / 2.31 / 2.04 / 1.92x); Student-t at M = 64 2.35 / 2.68x (3.52 / 2.97x),
#: at 128 3.74 / 4.04x against decode + cuBLAS's 2.42 / 2.55x; M = 32 ties the mma kernel
#: (1.26 / 1.30 / 1.08 / 1.18x against 1.51 / 1.30 / 1.09 / 1.12x), which keeps it; M = 256
#: 2.6-3.3x against decode + cuBLAS's 1.9-2.4x
WS_MIN_M = 32
WS_MAX_M = 128
WS_ANY_MAX_M = 64
#: WCODEC_WS=0 keeps those rows off the warp-specialised kernel (for comparisons)
WS_ENABLED = os.environ.get("WCODEC_WS", "1") != "0"
#: bf16 x of RA_MIN_M < M <= RA_MAX_M rows on an sm_90 GPU (K and x's row stride multiples of 16,
#: x 4-byte aligned) runs the register-A wgmma kernel (fixed_ra: each warpgroup decodes its 64
#: rows of W straight into wgmma's A registers, x's tile in shared memory), before the mma
#: kernel (its fallback). H200, 2026-12-01 (benchmarks/serving_kernels.py, M = 32), time / cuBLAS
#: on 4096x4096, 11008x4096, 4096x11008, 14336x4096: 1.10 / 1.33 / 1.17 / 1.29x against the mma
#: kernel's 1.38 / 1.85 / 1.38 / 1.55x; Student-t 1.45 / 1.74 / 1.69 / 1.73x against 1.50 / 2.01 /
#: 1.83 / 1.80x. At 16 rows it lost on Student-t weights, at 64 it tied the warp-specialised
#: kernel, at 128-256 it lost to it and to decode + cuBLAS (x's tile is copied per W tile:
#: benchmarks/HISTORY.md "kern7")
RA_MIN_M = 16
RA_MAX_M = 32
#: WCODEC_RA=0 keeps those rows off the register-A kernel (for comparisons)
RA_ENABLED = os.environ.get("WCODEC_RA", "1") != "0"
#: the row-block heights of x the mma kernel is built for (see _mma_rows)
MMA_BLOCK_ROWS = (16, 32, 64, 128)
#: WCODEC_MMA=0 keeps bf16 activations on the Triton kernel (for comparisons)
MMA_ENABLED = os.environ.get("WCODEC_MMA", "1") != "0"
KINDS = ("gemv", "mm", "decode")


@dataclass
class FixedWeight:
    """An [N, K] bf16 weight in the fixed layout on one device (see codecs/fixed.py).

    lo: int64 [N, kpad/8] (low bytes); nib: int32 [N, kpad/8] (nibbles); eptr: int32 [N+1];
    ecol: int32 [E]; eval: int32 [E] (bf16 bits); erow: int64 [E] (row of each escape).
    """

    lo: torch.Tensor
    nib: torch.Tensor
    eptr: torch.Tensor
    ecol: torch.Tensor
    eval: torch.Tensor
    erow: torch.Tensor
    base: int
    N: int
    K: int

    @property
    def kpad(self) -> int:
        return padded_cols(self.K)

    @property
    def device(self) -> torch.device:
        return self.lo.device

    @property
    def nbytes(self) -> int:
        """Bytes held on the device (the escape rows are index helpers, not counted)."""
        return sum(t.numel() * t.element_size() for t in (self.lo, self.nib, self.eptr))\
            + self.ecol.numel() * (2 if self.K <= 0x10000 else 4) + self.eval.numel() * 2

    @property
    def bits_per_weight(self) -> float:
        return 8.0 * self.nbytes / max(1, self.N * self.K)

    def tensors(self) -> dict:
        return {k: getattr(self, k) for k in ("lo", "nib", "eptr", "ecol", "eval", "erow")}


def _bits(w: torch.Tensor) -> torch.Tensor:
    return w.contiguous().view(torch.int16).to(torch.int32) & 0xFFFF


#: elements per row block of the device encoder: bounds its temporaries (~20 bytes each)
ENCODE_BLOCK = 1 << 22


def encode_weight(w: torch.Tensor) -> FixedWeight:
    """w: [N, K] bfloat16 on any device -> FixedWeight on that device (w is not modified).

    On CUDA the Triton kernels of :mod:`wcodec.gpu.fixed_encode` encode (no transient beyond
    the outputs); on the CPU the codec's C encoder (``codecs.fixed.encode_bits``: 4096x4096
    Student-t bf16 on the 2-vCPU VM 21-24 MB/s with the torch ops below, ~400 MB/s); elsewhere
    (or without triton, or without the C extension) torch ops work in row blocks of about
    ENCODE_BLOCK weights, so the transient memory stays ~80 MB whatever the layer (an lm_head
    included). Raises UnsupportedError for other dtypes or ranks.
    """
    if w.dtype != torch.bfloat16 or w.dim() != 2:
        raise UnsupportedError(f"the fixed layout takes a 2-D bfloat16 weight, got {w.dtype} {tuple(w.shape)}")
    N, K = w.shape
    encode = _triton_encoder() if _use_triton(w) and N * K else None
    if encode is not None:
        lo, nib, eptr, ecol, ev, er, base = encode(w, choose_base)
        return FixedWeight(_words(lo, torch.int64), _words(nib, torch.int32), eptr, ecol, ev, er, base, N, K)
    if w.device.type == "cpu" and N * K and _native_available():
        from ..codecs.fixed import check_record, encode_bits
        bits = w.detach().contiguous().view(torch.int16).numpy().view(np.uint16).reshape(-1)
        params, sections = encode_bits(bits, N, K)
        return _checked_weight(check_record(params, sections, N, K), N, K, w.device)
    kpad = padded_cols(K)
    dev = w.device
    rows = max(1, ENCODE_BLOCK // max(1, kpad))
    counts = torch.zeros(128, dtype=torch.int64, device=dev)
    for r0 in range(0, N, rows):
        counts += torch.bincount(((_bits(w[r0:r0 + rows]) >> 8) & 0x7F).reshape(-1), minlength=128)
    base = choose_base(counts.cpu().numpy())
    lo = torch.empty((N, kpad), dtype=torch.uint8, device=dev)
    nib = torch.empty((N, kpad // 2), dtype=torch.uint8, device=dev)
    order = torch.from_numpy(nibble_order(kpad)).to(dev)
    valid = torch.arange(kpad, device=dev) < K
    er = [torch.zeros(0, dtype=torch.int64, device=dev)]
    ec = [torch.zeros(0, dtype=torch.int64, device=dev)]
    ev = [torch.zeros(0, dtype=torch.int32, device=dev)]
    for r0 in range(0, N, rows):
        v = torch.zeros((min(rows, N - r0), kpad), dtype=torch.int32, device=dev)
        v[:, :K] = _bits(w[r0:r0 + rows])
        d = ((v >> 8) & 0x7F) - base
        esc = ((d < 0) | (d > 6)) & valid
        d = torch.where(esc, ESCAPE_D, torch.where(valid, d, 0))
        code = (torch.where(valid, (v >> 15) & 1, 0) << 3) | d
        packed = code[:, order].reshape(v.shape[0], kpad // 2, 2)
        nib[r0:r0 + rows] = (packed[:, :, 0] | (packed[:, :, 1] << 4)).to(torch.uint8)
        lo[r0:r0 + rows] = (v & 0xFF).to(torch.uint8)
        r, col = torch.nonzero(esc, as_tuple=True)
        er.append(r + r0)
        ec.append(col)
        ev.append(v[r, col])
        del v, d, esc, code, packed
    er, ec, ev = torch.cat(er), torch.cat(ec), torch.cat(ev)
    eptr = torch.zeros(N + 1, dtype=torch.int32, device=dev)
    eptr[1:] = torch.cumsum(torch.bincount(er, minlength=N), 0)
    return FixedWeight(_words(lo, torch.int64), _words(nib, torch.int32), eptr, ec.to(torch.int32), ev, er,
                       base, N, K)


def _native_available() -> bool:
    from .. import native
    return native.available()


def _triton_encoder():
    try:
        from .fixed_encode import encode
    except ImportError:  # no triton: the torch ops
        return None
    return encode


def _words(b: torch.Tensor, dtype) -> torch.Tensor:
    """[N, n] uint8 -> [N, kpad/8] words of ``dtype`` (an empty row view cannot be reinterpreted)."""
    n = b.shape[0]
    if b.numel() == 0:
        return torch.zeros((n, 0), dtype=dtype, device=b.device)
    return b.contiguous().view(dtype).reshape(n, -1)


def _align16(n: int) -> int:
    return _cdiv(n, 16) * 16


def _packed_offsets(n: int, k: int) -> tuple[int, int, int]:
    """Byte offsets of nib, eptr and the escape lists in a packed weight (see :func:`pack`)."""
    kpad = padded_cols(k)
    nib = _align16(n * kpad)
    eptr = nib + _align16(n * kpad // 2)
    esc = eptr + _align16(4 * (n + 1))
    return nib, eptr, esc


def pack(fw: FixedWeight) -> torch.Tensor:
    """fw's tensors in one uint8 tensor on fw's device: lo, nib, eptr at 16-byte aligned offsets,
    then ecol, eval (int32 each) and erow (int64) for the E escapes, 16 bytes per escape. One
    tensor per layer is one graph input for torch.compile instead of six (each input costs
    ~1.5 us of host time per call of a compiled model, benchmarks/experiments/compile_inputs.py; 225 layers
    in a 7B Llama)."""
    out = torch.zeros(packed_size(fw.N, fw.K, fw.ecol.numel()), dtype=torch.uint8, device=fw.device)
    pack_parts(out, (fw.lo, fw.nib, fw.eptr, fw.ecol, fw.eval, fw.erow), fw.N, fw.K)
    return out


def packed_size(n: int, k: int, escapes: int) -> int:
    """Bytes of a :func:`pack` ed [n, k] weight with ``escapes`` escapes."""
    return _packed_offsets(n, k)[2] + 16 * escapes


def pack_parts(out: torch.Tensor, parts: tuple, n: int, k: int) -> list:
    """Place one [n, k] weight's parts into ``out`` (uint8 [packed_size], zeros where the layout
    pads) in :func:`pack`'s layout. parts: (lo, nib, eptr, ecol, eval, erow) as their bytes in
    FixedWeight's dtypes (lo u8/int64 words, nib u8/int32 words, eptr/ecol/eval int32, erow
    int64), each a torch tensor (copied now) or a numpy array (e.g. a read-only view of the
    file): those come back as (array, destination slice of out) pairs, for
    :func:`wcodec.gpu.loader.upload` to copy in one pipelined pass."""
    nib, eptr, esc = _packed_offsets(n, k)
    e = (out.numel() - esc) // 16
    host = []
    for off, t in zip((0, nib, eptr, esc, esc + 4 * e, esc + 8 * e), parts):
        if isinstance(t, np.ndarray):
            if t.size:
                host.append((t, out[off:off + t.nbytes]))
        elif t.numel():  # an empty tensor may have any strides (numpy gives 0 for an empty section)
            t = t.contiguous().reshape(-1).view(torch.uint8)
            out[off:off + t.numel()].copy_(t)
    return host


def unpack(packed: torch.Tensor, base: int, n: int, k: int) -> FixedWeight:
    """The FixedWeight of a :func:`pack` ed tensor, as views of it (no copy). Raises ValueError
    when its size does not fit an [n, k] weight."""
    nib, eptr, esc = _packed_offsets(n, k)
    e, rest = divmod(packed.numel() - esc, 16)
    if packed.dtype != torch.uint8 or packed.dim() != 1 or e < 0 or rest:
        raise ValueError(f"a packed [{n}, {k}] fixed weight takes {esc} + 16 * escapes bytes of uint8, "
                         f"got {packed.dtype} {tuple(packed.shape)}")
    kpad = padded_cols(k)
    g = kpad // 8
    view = lambda off, size, dtype: packed[off:off + size].view(dtype)  # noqa: E731
    return FixedWeight(view(0, n * kpad, torch.int64).view(n, g), view(nib, n * kpad // 2, torch.int32).view(n, g),
                       view(eptr, 4 * (n + 1), torch.int32), view(esc, 4 * e, torch.int32),
                       view(esc + 4 * e, 4 * e, torch.int32), view(esc + 8 * e, 8 * e, torch.int64), base, n, k)


def _section_tensor(a: np.ndarray, device) -> torch.Tensor:
    """A record's section (numpy, possibly a read-only view of the file) as a tensor on ``device``.
    It is copied on the host for a CPU weight (which must not keep the mapping); to another device
    it is uploaded straight from the view (a host copy of the experts' sections cost 1.2 s of a
    6 s MoE load on the H200). numpy's empty arrays come with stride 0, which the packed buffer
    cannot take."""
    if not a.size:
        return torch.empty(a.shape, dtype=torch.from_numpy(np.require(a, requirements="W")).dtype, device=device)
    if torch.device(device).type == "cpu" or a.flags.writeable or not a.flags.c_contiguous:
        return torch.from_numpy(np.require(a, requirements=("C", "W"))).to(device)
    with warnings.catch_warnings():  # read only here, then copied by the upload
        warnings.simplefilter("ignore", UserWarning)
        return torch.from_numpy(a).to(device)


def _checked_weight(c, N: int, K: int, device) -> FixedWeight:
    """The FixedWeight on ``device`` of a record checked by ``codecs.fixed.check_record`` (or
    codecs.fixed16's, whose planes are the same). Off the CPU the sections go up in one
    :func:`wcodec.gpu.loader.upload` (pinned staging, host copies on threads)."""
    arrays = (c.lo.reshape(N, c.kpad), c.nib.reshape(N, c.kpad // 2), c.ptr.astype(np.int32), c.col.astype(np.int32),
              c.val.astype(np.int32), c.erow)
    if torch.device(device).type == "cpu":
        t = [_section_tensor(a, device) for a in arrays]
    else:
        from .loader import upload

        t = [torch.empty(a.shape, dtype=_TORCH_DTYPES[a.dtype], device=device) for a in arrays]
        upload([(a, d) for a, d in zip(arrays, t) if a.size], device)
    return FixedWeight(_words(t[0], torch.int64), _words(t[1], torch.int32), *t[2:], c.base, N, K)


_TORCH_DTYPES = {np.dtype(np.uint8): torch.uint8, np.dtype(np.int32): torch.int32, np.dtype(np.int64): torch.int64}


def from_sections(params: dict, sections: dict, shape: tuple, device, name: str = "") -> FixedWeight:
    """A FixedWeight from a codec "fixed" record's params and numpy sections, validated by the
    codec's one check (``codecs.fixed.check_record``: a canonical record or CorruptDataError
    naming tensor ``name`` and the field) before anything reaches the device."""
    from ..codecs.fixed import check_record, view_2d
    from ..errors import WcodecError
    N, K = view_2d(tuple(shape))
    try:
        c = check_record(params, sections, N, K)
    except WcodecError as e:
        raise type(e)(f"tensor '{name}': {e}" if name else str(e)) from None
    if N == 0 and len(shape) == 2:  # the record's view has 0 columns too: keep K = shape[1]
        return encode_weight(torch.zeros(tuple(shape), dtype=torch.bfloat16, device=device))
    return _checked_weight(c, N, K, device)


def to_sections(fw: FixedWeight) -> tuple[dict, dict]:
    """(params, numpy sections) of codec "fixed" for ``fw`` (for saving a transcoded weight)."""
    col_bits = 16 if fw.K <= 0x10000 else 32
    cpu = lambda t: t.detach().cpu().numpy()  # noqa: E731
    sections = {"lo": cpu(fw.lo).view(np.uint8).reshape(-1), "nib": cpu(fw.nib).view(np.uint8).reshape(-1),
                "esc.ptr": cpu(fw.eptr).astype(np.uint32),
                "esc.col": cpu(fw.ecol).astype(np.uint16 if col_bits == 16 else np.uint32),
                "esc.val": cpu(fw.eval).astype(np.uint16)}
    params = {"base": fw.base, "kpad": fw.kpad, "n_escapes": int(fw.ecol.numel()), "col_bits": col_bits}
    return params, sections


def _use_triton(t: torch.Tensor) -> bool:
    return t.is_cuda or os.environ.get("TRITON_INTERPRET") == "1" and os.environ.get("WCODEC_FIXED_TRITON") == "1"


def _decode_host(fw: FixedWeight) -> torch.Tensor:
    """Decode with the codec's host decoder (the C extension's, numpy without it; no Triton):
    [N, K] bfloat16 on fw's device."""
    params, sections = to_sections(fw)
    bits = decode_bits(params, sections, fw.N, fw.K).view(np.int16).reshape(fw.N, fw.K)
    return torch.from_numpy(bits).view(torch.bfloat16).to(fw.device)


#: rows up to this width have their escapes written by the decode kernel itself (``PATCH``: each
#: program scans its rows' escapes); longer rows (3-D records stored as one row per expert) by a
#: second launch
PATCH_MAX_COLS = 1 << 16


def decode(fw: FixedWeight) -> torch.Tensor:
    """The weight, bit-exact: [N, K] bfloat16 on fw's device."""
    if not _use_triton(fw.lo) or fw.N * fw.K == 0:
        return _decode_host(fw)
    from .fixed_kernels import fixed_escape_patch_kernel
    out = torch.empty((fw.N, fw.kpad), dtype=torch.bfloat16, device=fw.device)
    E = fw.ecol.numel()
    patch = 0 < E and fw.kpad <= PATCH_MAX_COLS  # escapes written by the decode's own programs
    decode_launch(out, fw, fw.base, 0, fw.N, patch=patch)
    if E and not patch:  # long rows (a 3-D record's): one launch, no index tensors built per call
        fixed_escape_patch_kernel[(_cdiv(E, 1024),)](fw.erow, fw.ecol, fw.eval, out.view(torch.int16), E, fw.kpad,
                                                     BLOCK=1024, num_warps=4)
    return out if fw.K == fw.kpad else out[:, :fw.K].contiguous()


def decode_rows(fw: FixedWeight, row0: int, rows: int, out: torch.Tensor | None = None) -> torch.Tensor:
    """Rows row0 .. row0+rows-1 of W, bit-exact: a [rows, K] bfloat16 view of ``out`` (a
    contiguous bfloat16 buffer of at least rows * kpad elements on fw's device, e.g. a scratch
    reused chunk after chunk; None: a new one); rows are kpad elements apart. Raises
    InvalidInputError (a ValueError) for a range outside [0, N) or an ``out`` that does not fit."""
    if not (0 <= row0 and 0 <= rows and row0 + rows <= fw.N):
        raise InvalidInputError(f"rows {row0} .. {row0 + rows} are not within the weight's {fw.N}")
    if out is None:
        out = torch.empty(rows * fw.kpad, dtype=torch.bfloat16, device=fw.device)
    if out.dtype != torch.bfloat16 or not out.is_contiguous() or out.numel() < rows * fw.kpad \
            or out.device != fw.device:
        raise InvalidInputError(f"out must be a contiguous bfloat16 buffer of >= {rows * fw.kpad} elements on {fw.device}, "
                         f"got {out.dtype} {tuple(out.shape)} on {out.device}")
    w = out.reshape(-1)[:rows * fw.kpad].view(rows, fw.kpad)
    if not _use_triton(fw.lo) or rows * fw.K == 0 or fw.kpad > PATCH_MAX_COLS:
        w[:, :fw.K] = decode(fw)[row0:row0 + rows]  # the host decoder, or rows too long to patch per tile
    else:
        decode_launch(w, fw, fw.base, row0, rows, patch=fw.ecol.numel() > 0)
    return w[:, :fw.K]


def decode_launch(out: torch.Tensor, fw, base: int, row0: int, rows: int, groups: int = 1, group_rows: int = 0,
                  bases: torch.Tensor | None = None, patch: bool = True) -> None:
    """One launch of ``fixed_kernels.fixed_decode_kernel``: rows ``g * group_rows + row0 ..
    + rows - 1`` of ``fw``'s layout (a FixedWeight, or anything with its lo, nib, eptr, ecol,
    eval, erow, kpad: the stacked experts) for each group g < ``groups`` into out[g * rows + r,
    :kpad] (contiguous bf16), window ``base`` or bases[g] (int32 [groups]); ``patch``: the
    escapes written by the same programs (rows of at most PATCH_MAX_COLS columns)."""
    from .fixed_kernels import fixed_decode_kernel
    G = fw.kpad // 8
    # H100, 11008x4096: tiles of 16 x 512 columns move 2.77 TB/s (read + written), 16 x 256 2.70
    BN, BI = (16, 64) if not _interpreting() else (16, 32)
    fixed_decode_kernel[(_cdiv(G, BI), _cdiv(rows, BN), groups)](
        fw.lo, fw.nib, out, G, base, fw.eptr, fw.ecol, fw.eval, fw.erow, fw.eptr if bases is None else bases,
        row0, rows, group_rows, BN=BN, BI=BI, PATCH=patch, BASES=bases is not None, num_warps=4)


def embedding(idx: torch.Tensor, fw: FixedWeight) -> torch.Tensor:
    """Rows ``idx`` of W, bit-exact (an embedding lookup): idx [...] int32/int64 on fw's device ->
    [..., K] bfloat16. On CUDA only the selected rows are decoded (``fixed_rows_kernel``);
    elsewhere W is decoded and indexed. Raises IndexError for an index outside [0, N) on the host
    path; on CUDA such an index gives a row of zeros (no out-of-bounds read, no device sync).
    """
    if not _use_triton(fw.lo) or idx.numel() == 0 or fw.K == 0:
        return torch.nn.functional.embedding(idx, decode(fw))
    from .fixed_kernels import fixed_rows_kernel
    flat = idx.reshape(-1)
    out = torch.empty((flat.numel(), fw.K), dtype=torch.bfloat16, device=fw.device)
    BI = 4 if _interpreting() else 64
    fixed_rows_kernel[(flat.numel(), _cdiv(fw.kpad // 8, BI))](
        flat, fw.lo, fw.nib, fw.eptr, fw.ecol, fw.eval, out, fw.N, fw.K, fw.kpad // 8, fw.base,
        BI=BI, EB=16, num_warps=4)
    return out.reshape(*idx.shape, fw.K)


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


def _interpreting() -> bool:
    return os.environ.get("TRITON_INTERPRET") == "1"


def _bucket(m: int) -> int:
    """Autotuning key of the activation rows: 1, 2, 4, 16, 64, 256, 1024, 4096+."""
    for b in (1, 2, 4, 16, 64, 256, 1024):
        if m <= b:
            return b
    return 4096


def _configs(kind: str) -> list:
    import triton
    C = lambda num_warps, num_stages, **kw: triton.Config(kw, num_warps=num_warps, num_stages=num_stages)  # noqa: E731
    if kind == "gemv":
        return [C(4, 3, BN=8, BI=32), C(4, 3, BN=16, BI=16), C(4, 3, BN=16, BI=32), C(8, 3, BN=16, BI=64),
                C(4, 3, BN=32, BI=16), C(8, 3, BN=32, BI=32), C(4, 4, BN=8, BI=64), C(8, 2, BN=64, BI=16),
                C(2, 3, BN=8, BI=16), C(4, 2, BN=4, BI=64), C(4, 5, BN=8, BI=32), C(8, 4, BN=16, BI=128),
                C(4, 4, BN=4, BI=128), C(2, 4, BN=4, BI=64), C(8, 5, BN=32, BI=16)]
    if kind == "mm_small":
        # no 2-warp tile (it won Triton's tuning of 11008x4096 at 44.0-44.5 us where the 4-warp
        # 16x32 tile runs 40.0: benchmarks/RESULTS.md, 2026-11-23) and no BN = 128 (a quarter of
        # the programs split_k plans for, which counts 16x32 tiles)
        return [C(4, 3, BM=16, BN=32, BI=16), C(4, 3, BM=16, BN=64, BI=16), C(4, 3, BM=16, BN=32, BI=32),
                C(4, 4, BM=16, BN=64, BI=8), C(4, 3, BM=16, BN=16, BI=32), C(4, 4, BM=16, BN=16, BI=64)]
    if kind == "mm_mid":
        return [C(4, 3, BM=64, BN=64, BI=16), C(4, 3, BM=64, BN=128, BI=8), C(8, 3, BM=64, BN=128, BI=16),
                C(4, 4, BM=64, BN=64, BI=8), C(8, 3, BM=128, BN=64, BI=16),
                C(4, 3, BM=32, BN=64, BI=16, SWAP=1), C(4, 3, BM=64, BN=64, BI=16, SWAP=1),
                C(8, 3, BM=64, BN=128, BI=8, SWAP=1), C(4, 4, BM=128, BN=64, BI=8, SWAP=1),
                C(8, 3, BM=128, BN=128, BI=8, SWAP=1)]
    if kind == "mm_large":
        return [C(8, 3, BM=128, BN=128, BI=8), C(8, 4, BM=128, BN=128, BI=8), C(8, 3, BM=128, BN=256, BI=8),
                C(8, 3, BM=128, BN=128, BI=16), C(8, 3, BM=256, BN=128, BI=8), C(4, 4, BM=64, BN=128, BI=8),
                C(8, 3, BM=128, BN=128, BI=8, SWAP=1), C(8, 3, BM=256, BN=128, BI=8, SWAP=1),
                C(4, 3, BM=128, BN=64, BI=8, SWAP=1), C(8, 4, BM=64, BN=128, BI=16, SWAP=1)]
    if kind.startswith("mm_wide"):  # all rows of x in one block: each W tile decoded once per program
        # (num_warps, num_stages, BN, BI, SWAP): the tiles ptxas builds for sm_90 without spilling
        # (Triton 3.9, cuobjdump: BN = 256 spills everywhere, BN = 128 at BM = 64 and 256 rows)
        bm = int(kind[7:])
        tiles = {64: [(8, 3, 64, 8, 0), (8, 3, 64, 16, 0), (8, 4, 64, 8, 0), (8, 3, 32, 16, 0), (4, 3, 64, 8, 0),
                      (4, 3, 32, 16, 0), (4, 4, 64, 8, 0), (8, 3, 64, 8, 1)],
                 128: [(8, 3, 64, 8, 0), (8, 3, 128, 8, 0), (8, 3, 64, 16, 0), (8, 4, 64, 8, 0), (8, 2, 128, 8, 0),
                       (8, 3, 32, 16, 0), (8, 4, 128, 4, 0), (4, 3, 32, 16, 0), (8, 3, 64, 8, 1), (8, 3, 128, 8, 1),
                       (8, 2, 128, 8, 1), (8, 3, 64, 16, 1)],
                 256: [(8, 3, 32, 16, 0), (8, 2, 32, 16, 0), (8, 4, 64, 4, 0), (8, 3, 64, 8, 1), (8, 2, 64, 8, 1)]}[bm]
        return [C(nw, ns, BM=bm, BN=bn, BI=bi, SWAP=sw) for nw, ns, bn, bi, sw in tiles]
    return [C(8, 3, BM=128, BN=64, BI=16), C(8, 3, BM=128, BN=32, BI=16), C(4, 3, BM=64, BN=64, BI=16),
            C(8, 4, BM=128, BN=64, BI=8), C(8, 3, BM=128, BN=128, BI=8), C(4, 3, BM=64, BN=32, BI=32)]


_TUNED: dict = {}


def _kernel(kind: str):
    """The kernel for ``kind``: autotuned over :func:`_configs` on a GPU (key: N, K and the M
    bucket), the plain kernel with small fixed tiles under the Triton interpreter. The tuning
    results are kept in Triton's cache directory (its key: Triton, the GPU architecture, the
    kernel's source, the shape key, the config list), so a later process skips the timing runs
    and their 256 MB L2-flush buffer at its first calls."""
    if kind.startswith(("mma", "wgmma", "ws", "ra")):  # "mma16" .. "mma128", "wgmma64" .., "ws32" .., "ra16" ..
        if kind not in _TUNED:  # (never interpreted)
            import triton
            if kind.startswith("mma"):
                from .fixed_mma import configs, fixed_mma_kernel as fn
            elif kind.startswith("ws"):
                from .fixed_ws import configs, fixed_ws_kernel as fn
            elif kind.startswith("ra"):
                from .fixed_ra import configs, fixed_ra_kernel as fn
            else:
                from .fixed_wgmma import configs, fixed_wgmma_kernel as fn
            _TUNED[kind] = triton.autotune(configs=configs(int(kind.lstrip("wgmasr"))), key=["N", "K", "MB", "SPLIT"],
                                           cache_results=True)(fn)
        return _TUNED[kind], {}
    from . import fixed_kernels as fk
    base = {"gemv": fk.fixed_gemv_kernel, "grad": fk.fixed_grad_input_kernel}.get(kind, fk.fixed_mm_kernel)
    if _interpreting():
        small = {"gemv": dict(BN=8, BI=4), "grad": dict(BM=16, BN=16, BI=2), "mm_small": dict(BM=16, BN=16, BI=2)}
        if kind.startswith("mm_wide"):  # its own block height: all rows of x
            return base, dict(BM=int(kind[7:]), BN=16, BI=2)
        return base, small.get(kind, dict(BM=16, BN=16, BI=2, SWAP=1))  # above 16 rows: the swapped dot
    if kind not in _TUNED:
        import triton
        _TUNED[kind] = triton.autotune(configs=_configs(kind), key=["N", "K", "MB", "SPLIT"], cache_results=True)(base)
    return _TUNED[kind], {}


_BEST: dict = {}


def _launch(kind: str, grid, key: tuple, *args, record: "Recording | None" = None, subs: tuple = (),
            **kwargs) -> None:
    """Launch kernel ``kind``. On a GPU the autotuner runs once per ``key`` (its own key: N, K,
    M bucket and dtypes); later calls launch the kernel with the chosen config directly, which
    saves the autotuner's host time (~30 us a call, measured in eager generation on the H100).
    With ``record`` (a Recording), a launch with the chosen config is recorded for replay
    (:mod:`wcodec.gpu.replay`, the per-call tensors ``subs``): the Launch, or None where it
    cannot be, is appended."""
    kern, cfg = _kernel(kind)
    if cfg:  # the interpreter's fixed tiles
        kern[grid](*args, **kwargs, **cfg)
        return
    best = _BEST.get((kind, key))
    if best is None:
        best = _shipped_config(kind, key, kern.fn, args[0].device)
        if best is None:
            _tuning_notice(kind, key)
            kern[grid](*args, **kwargs)
            _BEST[(kind, key)] = kern.best_config
            return
        _run(kern.fn, grid, args, {**kwargs, **best.all_kwargs()}, record, subs)
        _BEST[(kind, key)] = best  # after the launch: a config that fails to compile is not kept
        return
    _run(kern.fn, grid, args, {**kwargs, **best.all_kwargs()}, record, subs)


_ARCH: dict = {}


def _arch(device) -> str:
    """"sm90" for a GPU of compute capability 9.0: the name of its shipped configs file."""
    i = _cuda_index(device)
    if i not in _ARCH:
        major, minor = torch.cuda.get_device_capability(i)
        _ARCH[i] = f"sm{major}{minor}"
    return _ARCH[i]


def _shipped_entry(kind: str, n: int, k: int, mb: int, device) -> dict | None:
    """The shipped configs' entry (:mod:`wcodec.gpu.shipped`) for kernel ``kind`` at M bucket
    ``mb`` on an [n, k] weight, or None (no file for this GPU, no shape near enough, no GPU)."""
    if device.type != "cuda":
        return None
    from . import shipped
    return shipped.lookup(_arch(device), kind, mb, n, k)


def _shipped_config(kind: str, key: tuple, fn, device):
    """The shipped tile config for ``kind`` at autotuning key (N, K, M bucket, ...) as a
    triton.Config, or None (then the autotuner runs)."""
    from . import shipped
    e = _shipped_entry(kind, key[0], key[1], key[2], device)
    if e is None or not shipped.usable(e, fn.arg_names):
        return None
    import triton
    c = e["config"]
    return triton.Config(dict(c["kwargs"]), num_warps=c["num_warps"], num_stages=c["num_stages"],
                         maxnreg=c.get("maxnreg"))


def _shipped_split(kind: str, n: int, k: int, mb: int, device) -> int | None:
    """K slices the shipped configs timed fastest for this kernel, bucket and nearest shape, or None."""
    e = _shipped_entry(kind, n, k, mb, device)
    return int(e["split"]) if e is not None and 1 <= int(e.get("split", 0)) <= 64 else None


_NOTICED: set = set()


def _tuning_notice(kind: str, key: tuple) -> None:
    """One line on stderr, once per process, when a kernel autotunes for want of a shipped config."""
    if not _NOTICED:
        import sys
        print(f"wcodec: no shipped kernel config for {kind} at N={key[0]} K={key[1]} M bucket {key[2]}: "
              "autotuning, or reading an earlier tuning from Triton's cache (once per shape and bucket; "
              "tools/tune_kernels.py writes configs for a GPU)", file=sys.stderr)
    _NOTICED.add((kind, key))


def tuned_configs() -> dict:
    """{kernel kind: {key: config}} launched so far in this process, shipped or autotuned (for reports)."""
    out: dict = {}
    for (kind, key), cfg in _BEST.items():
        out.setdefault(kind, {})[str(key)] = str(cfg)
    return out


def _dot_kind(dtype) -> int:
    """tl.dot operands: 0 bf16 (bf16 activations), 1 fp32/tf32 (others, and under Triton 3.9's
    interpreter, whose bf16 tl.dot returns garbage even for plain bf16 loads)."""
    return 0 if dtype == torch.bfloat16 and not _interpreting() else 1


def _escape_deltas(fw: FixedWeight) -> torch.Tensor:
    v = fw.eval & 0xFFFF
    dec = (v & 0x80FF) | ((fw.base + 7) << 8)
    return (v << 16).view(torch.float32) - (dec << 16).view(torch.float32)


def _x64(x2: torch.Tensor):
    """x as int64 words (4 bf16 each) when the GEMV can read it so, else None."""
    ok = (x2.dtype == torch.bfloat16 and x2.shape[1] % 8 == 0 and x2.stride(1) == 1
          and x2.stride(0) % 4 == 0 and x2.data_ptr() % 8 == 0)
    if not ok:
        return None
    return x2.view(torch.int64) if x2.is_contiguous() else \
        torch.as_strided(x2, (x2.shape[0], x2.shape[1]), (x2.stride(0), 1)).view(torch.int64)


_MMA_OK: dict = {}


def _mma_ready(x: torch.Tensor) -> bool:
    """Whether :func:`linear` of x may run the Gluon mma kernel (:mod:`wcodec.gpu.fixed_mma`):
    bf16 x on an NVIDIA GPU of compute capability >= 8.0, a Triton with the Gluon API it uses,
    not WCODEC_MMA=0, and no failure of that kernel earlier in this process."""
    if not (MMA_ENABLED and x.is_cuda and x.dtype == torch.bfloat16) or _interpreting():
        return False
    i = _cuda_index(x.device)
    if i not in _MMA_OK:
        _MMA_OK[i] = torch.version.cuda is not None and torch.cuda.get_device_capability(i) >= (8, 0) \
            and _gluon_available()
    return _MMA_OK[i]


def _runs_mma(x2: torch.Tensor) -> bool:
    """Whether :func:`linear` runs the mma kernel for the tensor-core path of x2 [M, K]."""
    return x2.shape[0] <= MMA_MAX_M and _mma_ready(x2)


def _mma_rows(m: int) -> int:
    """The mma kernel's row block for m rows of x: the smallest of MMA_BLOCK_ROWS holding them,
    else the tallest (its W tiles are then decoded once per block)."""
    return next((b for b in MMA_BLOCK_ROWS if m <= b), MMA_BLOCK_ROWS[-1])


def _mma_kind(m: int) -> str:
    """The mma kernel's autotuned kind for m rows of x (its configs: fixed_mma.configs)."""
    return f"mma{_mma_rows(m)}"


_WGMMA_OK: dict = {}


def _wgmma_ready(x: torch.Tensor) -> bool:
    """Whether :func:`linear` of x may run the Hopper wgmma kernel (:mod:`wcodec.gpu.fixed_wgmma`):
    bf16 x on a GPU of compute capability 9.x, a Triton whose Gluon has the Hopper ops, not
    WCODEC_MMA=0, and no failure of that kernel earlier in this process."""
    if not (MMA_ENABLED and x.is_cuda and x.dtype == torch.bfloat16) or _interpreting():
        return False
    i = _cuda_index(x.device)
    if i not in _WGMMA_OK:
        _WGMMA_OK[i] = torch.version.cuda is not None and torch.cuda.get_device_capability(i)[0] == 9 \
            and _gluon_available(hopper=True)
    return _WGMMA_OK[i]


def _runs_wgmma(x2: torch.Tensor) -> bool:
    """Whether :func:`linear` runs the wgmma kernel for the tensor-core path of x2 [M, K]."""
    return WGMMA_MIN_M < x2.shape[0] <= WGMMA_MAX_M and _wgmma_ready(x2)


_WS_OK: dict = {}


def _ws_ready(x: torch.Tensor) -> bool:
    """Whether :func:`linear` of x may run the warp-specialised kernel (:mod:`wcodec.gpu.fixed_ws`):
    as :func:`_wgmma_ready`, plus a Gluon with ``warp_specialize`` and mbarriers, and no failure
    of that kernel earlier in this process, not WCODEC_WS=0."""
    return _hopper_ready(x, WS_ENABLED, _WS_OK, ws=True)


def _hopper_ready(x: torch.Tensor, enabled: bool, ok: dict, **features) -> bool:
    """_wgmma_ready(x), ``enabled``, and (cached per device in ``ok``, which a failure sets to
    False) a Gluon with the Hopper ops and ``features`` (see _gluon_available)."""
    if not (enabled and _wgmma_ready(x)):
        return False
    i = _cuda_index(x.device)
    if i not in ok:
        ok[i] = _gluon_available(hopper=True, **features)
    return ok[i]


def _runs_ws(x2: torch.Tensor) -> bool:
    """Whether :func:`linear` runs the warp-specialised kernel for the tensor-core path of x2 [M, K]
    (rows of x 16-element aligned: see _ws_fits)."""
    return WS_MIN_M < x2.shape[0] <= WS_MAX_M and _ws_fits(x2) and x2.stride(0) % 16 == 0 and _ws_ready(x2)


_RA_OK: dict = {}


def _ra_ready(x: torch.Tensor) -> bool:
    """Whether :func:`linear` of x may run the register-A kernel (:mod:`wcodec.gpu.fixed_ra`): as
    :func:`_wgmma_ready`, plus a Gluon with explicit linear layouts, not WCODEC_RA=0, and no
    failure of that kernel earlier in this process."""
    return _hopper_ready(x, RA_ENABLED, _RA_OK, linear_layouts=True)


def _runs_ra(x2: torch.Tensor) -> bool:
    """Whether :func:`linear` runs the register-A kernel for x2 [M, K]: RA_MIN_M < M <= RA_MAX_M,
    K and the row stride multiples of 16 (see _ws_fits) and x 4-byte aligned (its copies are
    4-byte cp.async of column pairs)."""
    return RA_MIN_M < x2.shape[0] <= RA_MAX_M and _ws_fits(x2) and x2.stride(0) % 16 == 0 \
        and x2.data_ptr() % 4 == 0 and _ra_ready(x2)


def _ws_fits(x: torch.Tensor) -> bool:
    """K a multiple of 16: the kernel copies x's tiles by cp.async, 16 bytes a copy where Triton
    knows K and x's row stride are multiples of 16 (it specialises on that), else 2 bytes, which
    cp.async cannot do (compile error, seen with K = 4104)."""
    return x.shape[-1] % 16 == 0


def _gluon_available(hopper: bool = False, ws: bool = False, linear_layouts: bool = False) -> bool:
    try:
        import inspect

        from triton.experimental import gluon
        from triton.experimental.gluon import language as gl
        from triton.experimental.gluon.language.nvidia import ampere
        if hopper:
            from triton.experimental.gluon.language.nvidia import hopper as h
            return all(hasattr(h, f) for f in ("warpgroup_mma", "warpgroup_mma_wait", "fence_async_shared")) \
                and (not ws or hasattr(gl, "warp_specialize") and hasattr(h, "mbarrier")) \
                and (not linear_layouts or hasattr(gl, "DistributedLinearLayout") and hasattr(gluon, "constexpr_function"))
        return hasattr(ampere, "mma_v2") and "assert_trivial" in inspect.signature(gl.convert_layout).parameters
    except Exception:  # no Gluon, or one without a piece the kernel uses: the Triton kernel runs
        return False


def _mma_failed(err: Exception, family: str = "mma") -> None:
    """The Gluon kernel ``family`` ("mma", "wgmma", "ws", "ra") failed at its first launch: warn
    once, use the next kernel (ra: the mma kernel; ws: the wgmma kernel or the Triton kernel; the
    others: the Triton kernel)."""
    import warnings
    ok = {"mma": _MMA_OK, "wgmma": _WGMMA_OK, "ws": _WS_OK, "ra": _RA_OK}[family]
    for i in list(ok) or [torch.cuda.current_device()]:
        ok[i] = False
    warnings.warn(f"wcodec: the fused {family} kernel failed on this GPU/Triton ({type(err).__name__}: "
                  f"{str(err)[:300]}); using another kernel instead", RuntimeWarning, stacklevel=3)


def pick_kind(M: int, x: torch.Tensor | None = None, fw: FixedWeight | None = None) -> str:
    """The kernel :func:`linear` runs for M activation rows of ``x`` on weight ``fw`` (see
    GEMV_MAX_M, MMA_GEMV_MAX_M, MMA_MAX_M, LARGE_M, WS_MAX_M, WS_ANY_MAX_M, WGMMA_MAX_M and
    WGMMA_MAX_ESCAPES; which tensor-core kernel serves "mm" is chosen in :func:`linear`:
    RA_MAX_M); without x, as for activations that cannot take the mma kernels; without
    fw, as for a weight of few escapes. This is the one place that routes by M."""
    mma = x is not None and _mma_ready(x)
    if M <= (MMA_GEMV_MAX_M if mma else GEMV_MAX_M):
        return "gemv"
    wgmma = x is not None and WGMMA_MIN_M < M <= WGMMA_MAX_M and _wgmma_ready(x) \
        and (fw is None or fw.ecol.numel() <= WGMMA_MAX_ESCAPES * fw.N * fw.K)
    ws = x is not None and WS_MIN_M < M <= WS_MAX_M and _ws_fits(x) and _ws_ready(x) \
        and (M <= WS_ANY_MAX_M or fw is None or fw.ecol.numel() <= WGMMA_MAX_ESCAPES * fw.N * fw.K)
    return "mm" if M < LARGE_M or (mma and M <= MMA_MAX_M) or ws or wgmma else "decode"


def linear(x: torch.Tensor, fw: FixedWeight, bias: torch.Tensor | None = None,
           kind: str | None = None, record: "Recording | None" = None, split: int | None = None) -> torch.Tensor:
    """``x @ W.T (+ bias)``. x: [..., K] bfloat16/float16/float32 on fw's device; bias: [N] or None.

    Returns [..., N] in x's dtype, accumulated in float32. On CUDA (or the Triton interpreter
    with WCODEC_FIXED_TRITON=1) the weight is decoded in registers inside the matmul: CUDA-core
    FMAs for M <= GEMV_MAX_M rows of x (MMA_GEMV_MAX_M where the mma kernel runs), tensor cores
    above (for bf16 x of up to MMA_MAX_M rows on a GPU of compute capability >= 8.0, the Gluon
    kernel of :mod:`wcodec.gpu.fixed_mma`; it warns once and gives way to the Triton kernel if
    it fails to compile; bf16 x of WIDE_MIN_M < M <= WIDE_MAX_M rows that reaches the Triton
    kernel takes all its rows in one block; on sm_90, bf16 x of RA_MIN_M < M <= RA_MAX_M rows
    with K and the row stride multiples of 16 the register-A kernel of :mod:`wcodec.gpu.fixed_ra`
    first (the mma kernel its fallback), bf16 x of WS_MIN_M < M <= WS_MAX_M rows
    with K a multiple of 16 the warp-specialised kernel of :mod:`wcodec.gpu.fixed_ws`, else of
    WGMMA_MIN_M < M <= WGMMA_MAX_M rows the wgmma kernel of :mod:`wcodec.gpu.fixed_wgmma`),
    decode + cuBLAS from LARGE_M rows (``kind``
    forces one of KINDS); tile configs come from the files shipped for the GPU's architecture
    (:mod:`wcodec.gpu.shipped`), else Triton autotunes once per shape and M bucket;
    elsewhere W is decoded with torch ops and multiplied by ``F.linear``. Raises ValueError when
    x's last dimension is not K, for an unknown ``kind`` or a ``split`` outside [1, 64].

    ``record``: a :class:`Recording` that receives a :class:`wcodec.gpu.replay.Launch` of each
    kernel launch with per-call tensors (x2, x2 as int64 words, bias or y, y, the split-K scratch
    or y), or None where a launch cannot be replayed; nothing when no tuned fused launch ran
    (see :class:`LinearReplays`). ``split``: K slices of the tiled kernel (default
    :func:`split_k`); the sum's order, so the output's last bits, depend on it.
    """
    if x.shape[-1] != fw.K:
        raise ValueError(f"x has {x.shape[-1]} features, the weight takes {fw.K}")
    lead = x.shape[:-1]
    x2 = x.reshape(lead.numel(), fw.K)
    M = x2.shape[0]
    triton = _use_triton(fw.lo) and M > 0 and fw.N > 0
    kind = kind or pick_kind(M, x2, fw)
    if kind not in KINDS:
        raise ValueError(f"kind must be one of {KINDS}, got {kind!r}")
    if split is not None and (not isinstance(split, int) or not 1 <= split <= 64):
        raise ValueError(f"split must be an int in [1, 64], got {split!r}")
    if not triton or kind == "decode":
        w = (decode(fw) if triton else _decode_host(fw)).to(x.dtype)
        return linear_as_parameter(x, w, None if bias is None else bias.to(x.dtype))
    if x2.stride(-1) != 1:
        x2 = x2.contiguous()
    if record is not None and x2.data_ptr() != x.data_ptr():
        record.append(None)  # a copy of x: a replay with x in its place would read other memory
        record = None
    y = torch.empty((M, fw.N), dtype=x.dtype, device=x.device)
    G = fw.kpad // 8
    b = bias if bias is not None else y
    args = (fw.lo, fw.nib, fw.eptr, fw.ecol, fw.eval, b, y, M, fw.N, fw.K, G, x2.stride(0), y.stride(0),
            fw.base, _bucket(M))
    key = (fw.N, fw.K, _bucket(M), x.dtype, b.dtype)
    if kind == "gemv":
        BM = min(4, _pow2(M))
        x64 = _x64(x2)
        grid = lambda meta: (_cdiv(fw.N, meta["BN"]), _cdiv(M, BM))  # noqa: E731
        xw = x64 if x64 is not None else x2
        _launch("gemv", grid, key, x2, xw, *args, BM=BM, EB=32, HAS_BIAS=bias is not None, X64=x64 is not None,
                record=record, subs=(x2, xw, b, y, y))
    elif not (_runs_ra(x2) and _linear_mma(x2, fw, args, key, b, y, split, record, "ra")
              or _runs_mma(x2) and _linear_mma(x2, fw, args, key, b, y, split, record)
              or _runs_ws(x2) and _linear_mma(x2, fw, args, key, b, y, split, record, "ws")
              or _runs_wgmma(x2) and _linear_mma(x2, fw, args, key, b, y, split, record, "wgmma")):
        _linear_tiled(x2, fw, args, key, b, y, split, record)
    return y.reshape(*lead, fw.N)


def _wide_rows(x2: torch.Tensor) -> int:
    """The row block of the wide tiled kernel for x2 (all of its rows: WIDE_MIN_M < M <=
    WIDE_MAX_M, bf16), else 0 (the tiled kernel's other kinds)."""
    M = x2.shape[0]
    return max(64, _pow2(M)) if x2.dtype == torch.bfloat16 and WIDE_MIN_M < M <= WIDE_MAX_M else 0


def _linear_tiled(x2, fw: FixedWeight, args: tuple, key: tuple, b, y, split, record) -> None:
    """y = x2 @ W.T (+ bias) by the Triton tiled kernel and, for split > 1, the split-K sum."""
    M = x2.shape[0]
    wide = _wide_rows(x2)
    if wide:  # tuned per power of two of M (its block height), not per _bucket
        kind = f"mm_wide{wide}"
        key = key[:2] + (_pow2(M),) + key[3:]
    else:
        kind = "mm_small" if M <= 16 else "mm_mid" if M <= 128 else "mm_large"
    if split is None:
        split = _shipped_split(kind, fw.N, fw.K, key[2], x2.device) or split_k(M, fw.N, fw.K, x2.device, wide=wide)
    ws = torch.empty((split, M, fw.N), dtype=torch.float32, device=x2.device) if split > 1 else y
    grid = lambda meta: (_cdiv(M, meta["BM"]) * _cdiv(fw.N, meta["BN"]), split)  # noqa: E731
    recorded = len(record) if record is not None else 0
    _launch(kind, grid, key + (split,), x2, *args[:7], ws, *args[7:], EB=32, GROUP_M=8, HAS_BIAS=b is not y,
            DOT=_dot_kind(x2.dtype), SPLIT=split, record=record, subs=(x2, x2, b, y, ws))
    if split > 1:
        _reduce(ws, b, y, split, b is not y, record, recorded)


def _linear_mma(x2, fw: FixedWeight, args: tuple, key: tuple, b, y, split, record, family: str = "mma") -> bool:
    """y = x2 @ W.T (+ bias) by the Gluon kernel ``family`` ("mma"; "wgmma": the Hopper wgmma
    kernel; "ws": the warp-specialised one; "ra": the register-A one) and, for split > 1, the
    split-K sum; False (nothing launched) when the kernel fails at its first launch (see
    _mma_failed)."""
    M = x2.shape[0]
    wgmma = family != "mma"
    kind = {"mma": _mma_kind(M), "wgmma": f"wgmma{max(64, _pow2(M))}", "ws": f"ws{max(32, _pow2(M))}",
            "ra": f"ra{max(16, _pow2(M))}"}[family]
    mb = _pow2(M) if M <= 256 else _bucket(M)  # tuned per power of two: 32 and 64 rows take other tiles
    if split is None:
        split = _shipped_split(kind, fw.N, fw.K, mb, x2.device) \
            or split_k(M, fw.N, fw.K, x2.device, mma=not wgmma, wide=64 if family == "wgmma" else 0,
                       ws=family == "ws", ra=family == "ra")
    ws = torch.empty((split, M, fw.N), dtype=torch.float32, device=x2.device) if split > 1 else y
    grid = lambda meta: (_cdiv(M, meta["BM"]) * _cdiv(fw.N, meta["BN"]), split)  # noqa: E731
    recorded = len(record) if record is not None else 0
    key = key[:2] + (mb,) + key[3:] + (split,)
    try:
        _launch(kind, grid, key, x2, *args[:5], fw.erow, b, y, ws, *args[7:-1], mb, split,
                **({} if wgmma else {"EB": 32}), HAS_BIAS=b is not y, record=record, subs=(x2, x2, b, y, ws))
    except Exception as err:
        if (kind, key) in _BEST:
            raise  # it ran before: not a compile failure
        _mma_failed(err, family)
        return False
    if split > 1:
        _reduce(ws, b, y, split, b is not y, record, recorded)
    return True


def _reduce(ws, b, y, split: int, has_bias: bool, record, recorded: int) -> None:
    """y = ws[0] + ... + ws[split-1] (+ bias), recorded after the tiled launch when that was."""
    from .fixed_kernels import splitk_reduce_kernel
    M, N = y.shape
    if record is not None and len(record) == recorded:
        record = None  # the tiled launch was not recorded (it tuned): nor is its sum
    if record is not None:
        record.scratch = tuple(ws.shape)
    _run(splitk_reduce_kernel, (_cdiv(M * N, REDUCE_BLOCK),), (ws, b, y, M, N, y.stride(0)),
         dict(SPLIT=split, HAS_BIAS=has_bias, BLOCK=REDUCE_BLOCK, num_warps=4), record, (None, None, b, y, ws))


#: elements of y per program of the split-K sum
REDUCE_BLOCK = 1024
#: the most K slices of the tiled kernel (split_k)
MAX_SPLIT = 8
#: fewest columns of W in one K slice (Triton kernel, mma kernel)
MIN_SPLIT_COLS = 1024
MMA_MIN_SPLIT_COLS = 512


def split_k(M: int, N: int, K: int, device, mma: bool = False, wide: int = 0, ws: bool = False,
            ra: bool = False) -> int:
    """K slices for the tiled kernels (``SPLIT``): with few output tiles (e.g. M = 16 on a
    4096-row weight: 128 tiles of 16x32 for 132 SMs) each program streams a long row of W and
    the GPU waits on memory latency; slicing K doubles the programs until there are two per SM
    (Triton kernel, tiles of 16x32 or 64x64) or 1.5 per SM (``mma``: the Gluon kernel, tiles of
    16x64), keeping at least MIN_SPLIT_COLS (MMA_MIN_SPLIT_COLS) columns per slice. H100, M = 16,
    4096x4096: 22.5 us unsliced, 18.7 us in 4 slices; 4096x11008: 52.8 -> 40.4 us. Eight per SM
    was tried at M <= 16: 2 % faster on a 7B layer, 13 % slower on 4096x14336. The mma kernel's
    rule picked the fastest split of 1, 2, 4, 8 on all 9 weights of benchmarks/experiments/mma_kernel.py
    --sweep at M = 16 (benchmarks/RESULTS.md)."""
    sms = _sm_count(device)
    if ws:  # the warp-specialised kernel: tiles of 64 rows of W, one program an SM (registers)
        return _ws_split(N, K, sms)
    if ra:  # the register-A kernel: tiles of 64 rows of W, two programs an SM (H200, M = 32: the
        return _ws_split(N, K, 2 * sms)  # fastest of 1, 2, 4, 8 on 4096x4096, 4096x11008, 14336x4096)
    if mma:
        tiles, programs, cols = _cdiv(N, 64) * _cdiv(M, _mma_rows(M)), 3 * sms // 2, MMA_MIN_SPLIT_COLS
    elif wide:  # one row block of ``wide`` rows: tiles of 64 rows of W
        tiles, programs, cols = _cdiv(N, 64) * _cdiv(M, wide), 2 * sms, MIN_SPLIT_COLS
    else:
        bm, bn = (16, 32) if M <= 16 else (64, 64)  # the tiles the autotuner mostly picks
        tiles, programs, cols = _cdiv(M, bm) * _cdiv(N, bn), 2 * sms, MIN_SPLIT_COLS
    s = 1
    while s < MAX_SPLIT and tiles * s < programs and K // (2 * s) >= cols:
        s *= 2
    return s


def _ws_split(N: int, K: int, sms: int) -> int:
    """K slices for the warp-specialised kernel (one program an SM, tiles of 64 rows of W): the
    count of 1, 2, 4, 8 (at least MMA_MIN_SPLIT_COLS columns a slice) with the least modelled
    time, waves x (columns a slice + MMA_MIN_SPLIT_COLS for a program's fixed cost: pipeline fill,
    epilogue, its share of the split-K sum). H100, 2026-11-26, M = 32-128: it picks the fastest
    of 1, 2, 4 as measured in all 12 cells (2 on 4096x4096, 11008x4096, 4096x11008; 1 on 14336x4096)."""
    tiles = _cdiv(N, 64)
    cost = {s: _cdiv(tiles * s, sms) * (K / s + MMA_MIN_SPLIT_COLS)
            for s in (1, 2, 4, 8) if s == 1 or K // s >= MMA_MIN_SPLIT_COLS}
    return min(cost, key=lambda s: (cost[s], s))


_SMS: dict = {}


def _cuda_index(device) -> int:
    return device.index if device.index is not None else torch.cuda.current_device()


def _sm_count(device) -> int:
    if device.type != "cuda":
        return 132  # the Triton interpreter: an H100's count, so tests cover the sliced path
    i = _cuda_index(device)
    if i not in _SMS:
        _SMS[i] = torch.cuda.get_device_properties(i).multi_processor_count
    return _SMS[i]


def _run(kernel, grid, args: tuple, kwargs: dict, record, subs: tuple) -> None:
    """``kernel[grid](*args, **kwargs)``, recorded for replay into ``record`` (a Recording, or None)."""
    if record is None or _interpreting():
        kernel[grid](*args, **kwargs)
    else:
        from .replay import record as rec
        record.append(rec(kernel, grid, args, kwargs, subs))


class Recording(list):
    """The launches one :func:`linear` call recorded for replay, in order (None where one cannot
    be replayed), and ``scratch``: the shape of the fp32 split-K scratch each replay allocates
    (None: the launches take y in its place)."""

    scratch: tuple | None = None


class LinearReplays:
    """:func:`linear` of one weight for eager inference, replaying recorded launches
    (:mod:`wcodec.gpu.replay`): the host time of a layer drops from 67-105 to 20-30 us (H100 host).

    A launch is recorded on the second call of a key (the first tunes; with a shipped config,
    on the first) and replayed from the next. Key: x's shape, strides, dtype, device and pointer alignment, the bias's alignment,
    the current CUDA device, the weight's N and base; the weight's packed tensor must be the same
    object as when recorded (else the entries are dropped: its contents may change in place,
    as ``load_state_dict`` does, but not its size). Pickles and deep-copies as an empty cache.
    """

    MAX_ENTRIES = 64

    def __init__(self):
        self.entries: dict = {}
        self.packed: torch.Tensor | None = None

    def __reduce__(self):
        return (LinearReplays, ())

    def __call__(self, x: torch.Tensor, bias: torch.Tensor | None, packed: torch.Tensor, n: int, base: int,
                 make_fw) -> torch.Tensor:
        """``linear(x, make_fw(), bias)`` for the weight held in ``packed`` (:func:`pack`; its
        identity is checked), ``n`` output features and window ``base``."""
        if packed is not self.packed:
            self.entries.clear()
            self.packed = packed
        if not x.is_cuda or (bias is not None and bias.dtype != x.dtype):
            return linear(x, make_fw(), bias)
        key = (x.shape, x.stride(), x.dtype, x.device, x.data_ptr() & 127,
               None if bias is None else bias.data_ptr() & 127, torch.cuda.current_device(), n, base)
        rec = self.entries.get(key)
        if rec and all(launch.ready() for launch in rec):
            y = torch.empty((*x.shape[:-1], n), dtype=x.dtype, device=x.device)
            ws = y if rec.scratch is None else torch.empty(rec.scratch, dtype=torch.float32, device=x.device)
            subs = (x, x, y if bias is None else bias, y, ws)
            for launch in rec:
                launch(subs)
            return y
        if rec is not None:
            return linear(x, make_fw(), bias)
        rec = Recording()
        y = linear(x, make_fw(), bias, record=rec)
        if rec:
            if len(self.entries) >= self.MAX_ENTRIES:
                self.entries.clear()
            self.entries[key] = rec if all(rec) else False
        return y


def _pow2(m: int) -> int:
    return 1 << max(0, (m - 1).bit_length())


def grad_input(g: torch.Tensor, fw: FixedWeight) -> torch.Tensor:
    """``g @ W``: g [..., N] -> [..., K] in g's dtype (the input gradient of :func:`linear`)."""
    lead = g.shape[:-1]
    g2 = g.reshape(lead.numel(), fw.N)
    M = g2.shape[0]
    if not _use_triton(fw.lo) or M == 0 or fw.K == 0:
        return (g2 @ _decode_host(fw).to(g.dtype)).reshape(*lead, fw.K)
    if M >= LARGE_M:  # compute-bound: decode once, cuBLAS (see LARGE_M)
        return (g2 @ decode(fw).to(g.dtype)).reshape(*lead, fw.K)
    if g2.stride(-1) != 1:
        g2 = g2.contiguous()
    G = fw.kpad // 8
    escapes = fw.ecol.numel() > 0
    gx = torch.empty((M, fw.K), dtype=torch.float32 if escapes else g.dtype, device=g.device)
    grid = lambda meta: (_cdiv(M, meta["BM"]), _cdiv(G, meta["BI"]))  # noqa: E731
    _launch("grad", grid, (fw.N, fw.K, _bucket(M), g.dtype, gx.dtype), g2, fw.lo, fw.nib, gx, M, fw.N, fw.K, G,
            g2.stride(0), gx.stride(0), fw.base, _bucket(M), DOT=_dot_kind(g.dtype))
    if escapes:  # gx[:, col] += g[:, row] * (value - placeholder)
        gx.index_add_(1, fw.ecol.to(torch.int64), g2[:, fw.erow].float() * _escape_deltas(fw))
        gx = gx.to(g.dtype)
    return gx.reshape(*lead, fw.K)


__all__ = ["FixedWeight", "encode_weight", "from_sections", "to_sections", "pack", "unpack", "decode", "decode_rows",
           "decode_launch", "linear", "grad_input", "pick_kind", "split_k", "tuned_configs", "Recording", "LinearReplays",
           "KINDS", "GEMV_MAX_M", "LARGE_M", "WS_MIN_M", "WS_MAX_M", "WS_ANY_MAX_M", "RA_MIN_M", "RA_MAX_M"]
