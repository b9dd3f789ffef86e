"""The fp16 fixed-rate layout (codec "fixed16", ``wcodec.codecs.fixed16``) on a torch device:
encode, decode, and a matmul that decodes in registers for few activation rows.

``Fixed16Weight`` holds one [N, K] fp16 weight: the planes it shares with codec "fixed" (low
bytes, nibbles, escape lists) as a :class:`wcodec.gpu.fixed.FixedWeight`, plus the 2-bit ``m2``
plane. ``linear`` computes ``x @ W.T (+ bias)``: for M <= GEMV_MAX_M rows of x the fused GEMV
of :mod:`wcodec.gpu.fixed16_kernels` (CUDA-core FMAs, W decoded in registers), above that W is
decoded once into a scratch by the decode kernel and multiplied by cuBLAS; on the CPU W is
decoded by the codec's decoder (the C extension's, numpy without it) and multiplied by ``F.linear``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from .._torch_tensors import linear_as_parameter
from ..codecs import fixed16 as codec
from ..codecs.fixed import padded_cols
from ..errors import UnsupportedError
from . import fixed as fx

#: activation rows up to which the fused GEMV runs (as the bf16 layout's GEMV_MAX_M); from
#: GEMV_MAX_M + 1 on, decode + cuBLAS (no fused tensor-core kernel for this layout yet)
GEMV_MAX_M = 4
KINDS = ("gemv", "decode")


@dataclass
class Fixed16Weight:
    """An [N, K] fp16 weight in the fixed16 layout on one device.

    planes: the codec "fixed" planes (lo int64 [N, kpad/8], nib int32 [N, kpad/8], eptr int32
    [N+1], ecol / eval int32 [E], erow int64 [E]; eval holds fp16 bits, ``planes.base`` this
    layout's window base 0..23); m2: int32 [N, kpad/16] (one word per 16 columns).
    """

    planes: fx.FixedWeight
    m2: torch.Tensor

    N = property(lambda self: self.planes.N)
    K = property(lambda self: self.planes.K)
    base = property(lambda self: self.planes.base)
    kpad = property(lambda self: self.planes.kpad)
    device = property(lambda self: self.planes.device)

    @property
    def nbytes(self) -> int:
        """Bytes held on the device (the escape rows are index helpers, not counted)."""
        return self.planes.nbytes + self.m2.numel() * 4

    @property
    def bits_per_weight(self) -> float:
        return 8.0 * self.nbytes / max(1, self.N * self.K)


def _mapped(bits: torch.Tensor) -> torch.Tensor:
    """fp16 bits (int32, 0..0xFFFF) -> codec "fixed" words with the fp16 exponent in its window
    field (exponents 30-31 as 127): as ``codecs.fixed16._as_fixed_bits``."""
    e = (bits >> 10) & 0x1F
    return (bits & 0x80FF) | (torch.where(e < 30, e, 127) << 8)


def _pack_m2(bits: torch.Tensor, kpad: int) -> torch.Tensor:
    """fp16 bits int32 [N, K] -> the m2 plane as int32 words [N, kpad/16] (codecs.fixed16.pack_m2)."""
    n, k = bits.shape
    m = torch.zeros((n, kpad), dtype=torch.int32, device=bits.device)
    m[:, :k] = (bits >> 8) & 3
    f = m.reshape(n, kpad // 16, 4, 4)
    b = f[:, :, 0] | (f[:, :, 1] << 2) | (f[:, :, 2] << 4) | (f[:, :, 3] << 6)
    return fx._words(b.to(torch.uint8).reshape(n, kpad // 4), torch.int32)


def encode_weight(w: torch.Tensor, max_bits: float = codec.MAX_BITS_PER_WEIGHT) -> Fixed16Weight:
    """w: [N, K] float16 on any device -> Fixed16Weight on that device (w is not modified),
    bit-identical to the codec's numpy encoder. The shared planes come from the bf16 layout's
    device encoder (:func:`wcodec.gpu.fixed.encode_weight`) run on words that carry the fp16
    exponent in its window field. Raises UnsupportedError for another dtype or rank, or when
    the record would take >= ``max_bits`` bits per weight (the caller keeps W dense)."""
    if w.dtype != torch.float16 or w.dim() != 2:
        raise UnsupportedError(f"the fixed16 layout takes a 2-D float16 weight, got {w.dtype} {tuple(w.shape)}")
    N, K = w.shape
    if w.device.type == "cpu" and N * K and fx._native_available():  # the codec's C encoder (4096x4096:
        bits = w.detach().contiguous().view(torch.int16).numpy().view(np.uint16).reshape(-1)  # 50 -> ~390 MB/s)
        params, sections = codec.encode_bits(bits, N, K, max_bits=max_bits)
        return from_sections(params, sections, (N, K), w.device)
    bits = w.detach().contiguous().view(torch.int16).to(torch.int32) & 0xFFFF
    planes = fx.encode_weight(_mapped(bits).to(torch.int16).view(torch.bfloat16))
    E = planes.ecol.numel()
    cost = codec.record_bits(N, K, E) / max(1, N * K)
    if cost >= max_bits:
        raise UnsupportedError(f"the fixed16 layout would not save: {cost:.2f} bits/weight ({E} escapes of "
                               f"{N * K}), the limit is {max_bits}")
    planes.eval = bits[planes.erow, planes.ecol.to(torch.int64)]  # the values, not the mapped words
    return Fixed16Weight(planes, _pack_m2(bits, padded_cols(K)))


def from_sections(params: dict, sections: dict, shape: tuple, device, name: str = "") -> Fixed16Weight:
    """A Fixed16Weight from a codec "fixed16" record, validated by ``codecs.fixed16.check_record``
    (CorruptDataError naming tensor ``name`` and the field) before anything reaches the device."""
    from ..codecs.base import view_2d
    from ..errors import WcodecError

    N, K = view_2d(tuple(shape))
    try:
        c = codec.check_record(params, sections, N, K)
    except WcodecError as e:
        raise type(e)(f"tensor '{name}': {e}" if name else str(e)) from None
    if N == 0 and len(shape) == 2:
        return encode_weight(torch.zeros(tuple(shape), dtype=torch.float16, device=device), max_bits=float("inf"))
    return Fixed16Weight(fx._checked_weight(c, N, K, device),
                         fx._words(fx._section_tensor(c.m2, device).reshape(N, c.kpad // 4), torch.int32))


def to_sections(fw: Fixed16Weight) -> tuple[dict, dict]:
    """(params, numpy sections) of codec "fixed16" for ``fw`` (for saving a kept weight)."""
    params, sections = fx.to_sections(fw.planes)
    sections["m2"] = fw.m2.detach().cpu().numpy().view(np.uint8).reshape(-1)
    return params, sections


def _m2_bytes(n: int, k: int) -> int:
    return fx._align16(n * padded_cols(k) // 4)


def pack(fw: Fixed16Weight) -> torch.Tensor:
    """fw in one uint8 tensor on its device: the m2 plane (16-byte aligned), then
    ``wcodec.gpu.fixed.pack`` of the shared planes."""
    off, p = _m2_bytes(fw.N, fw.K), fw.planes
    out = torch.zeros(off + fx.packed_size(fw.N, fw.K, p.ecol.numel()), dtype=torch.uint8, device=fw.device)
    if fw.m2.numel():
        out[:fw.m2.numel() * 4] = fw.m2.contiguous().reshape(-1).view(torch.uint8)
    fx.pack_parts(out[off:], (p.lo, p.nib, p.eptr, p.ecol, p.eval, p.erow), fw.N, fw.K)
    return out


def unpack(packed: torch.Tensor, base: int, n: int, k: int) -> Fixed16Weight:
    """The Fixed16Weight of a :func:`pack` ed tensor, as views of it (no copy). Raises
    ValueError when its size does not fit an [n, k] weight."""
    off = _m2_bytes(n, k)
    if packed.dtype != torch.uint8 or packed.dim() != 1 or packed.numel() < off:
        raise ValueError(f"a packed [{n}, {k}] fixed16 weight starts with {off} bytes of m2, got "
                         f"{packed.dtype} {tuple(packed.shape)}")
    g2 = padded_cols(k) // 16
    m2 = packed[:n * g2 * 4].view(torch.int32).view(n, g2)
    return Fixed16Weight(fx.unpack(packed[off:], base, n, k), m2)


def packed_offset(n: int, k: int) -> int:
    """Where the shared planes start in a packed weight (after the m2 plane)."""
    return _m2_bytes(n, k)


def _decode_host(fw: Fixed16Weight) -> torch.Tensor:
    params, sections = to_sections(fw)
    bits = codec.decode_bits(params, sections, fw.N, fw.K).view(np.int16).reshape(fw.N, fw.K)
    return torch.from_numpy(bits).view(torch.float16).to(fw.device)


def decode(fw: Fixed16Weight) -> torch.Tensor:
    """The weight, bit-exact: [N, K] float16 on fw's device (decode kernel + escape patch on
    CUDA or the Triton interpreter with WCODEC_FIXED_TRITON=1; the codec's host decoder elsewhere)."""
    p = fw.planes
    if not fx._use_triton(p.lo) or fw.N * fw.K == 0:
        return _decode_host(fw)
    from .fixed16_kernels import fixed16_decode_kernel
    from .fixed_kernels import fixed_escape_patch_kernel

    G = fw.kpad // 8
    out = torch.empty((fw.N, fw.kpad), dtype=torch.float16, device=fw.device)
    BN, BI = (16, 32) if fx._interpreting() else (16, 64)
    fixed16_decode_kernel[(fx._cdiv(fw.N, BN), fx._cdiv(G, BI))](p.lo, p.nib, fw.m2, out, fw.N, G, fw.base,
                                                                 BN=BN, BI=BI, num_warps=4)
    E = p.ecol.numel()
    if E:
        fixed_escape_patch_kernel[(fx._cdiv(E, 1024),)](p.erow, p.ecol, p.eval, out.view(torch.int16), E, fw.kpad,
                                                        BLOCK=1024, num_warps=4)
    return out if fw.K == fw.kpad else out[:, :fw.K].contiguous()


def _gemv_configs() -> list:
    import triton
    C = lambda w, s, **kw: triton.Config(kw, num_warps=w, num_stages=s)  # noqa: E731
    return [C(4, 3, BN=8, BI=32), C(4, 3, BN=16, BI=16), C(4, 3, BN=16, BI=32), C(8, 3, BN=16, BI=64),
            C(4, 3, BN=32, BI=16), C(8, 3, BN=32, BI=32), C(4, 4, BN=8, BI=64), C(2, 3, BN=8, BI=16),
            C(4, 2, BN=4, BI=64), C(4, 4, BN=4, BI=128)]


_GEMV: list = []


def _gemv_kernel():
    """The GEMV: autotuned on a GPU (key N, K, M bucket), fixed small tiles under the interpreter."""
    from .fixed16_kernels import fixed16_gemv_kernel

    if fx._interpreting():
        return fixed16_gemv_kernel, dict(BN=8, BI=4)
    if not _GEMV:
        import triton
        _GEMV.append(triton.autotune(configs=_gemv_configs(), key=["N", "K", "MB"], cache_results=True)(
            fixed16_gemv_kernel))
    return _GEMV[0], {}


def pick_kind(M: int) -> str:
    """The kernel :func:`linear` runs for M activation rows."""
    return "gemv" if M <= GEMV_MAX_M else "decode"


def linear(x: torch.Tensor, fw: Fixed16Weight, bias: torch.Tensor | None = None,
           kind: str | None = None) -> torch.Tensor:
    """``x @ W.T (+ bias)``. x: [..., K] float16/bfloat16/float32 on fw's device; bias: [N] or None.

    Returns [..., N] in x's dtype. The GEMV (M <= GEMV_MAX_M rows, CUDA or the Triton interpreter
    with WCODEC_FIXED_TRITON=1) accumulates in float32; ``decode`` (``kind`` forces one of
    KINDS) multiplies the decoded weight by ``F.linear`` in x's dtype, as nn.Linear does.
    Raises ValueError when x's last dimension is not K or for an unknown ``kind``."""
    if x.shape[-1] != fw.K:
        raise ValueError(f"x has {x.shape[-1]} features, the weight takes {fw.K}")
    lead = x.shape[:-1]
    x2 = x.reshape(lead.numel(), fw.K)
    M = x2.shape[0]
    kind = kind or pick_kind(M)
    if kind not in KINDS:
        raise ValueError(f"kind must be one of {KINDS}, got {kind!r}")
    triton = fx._use_triton(fw.planes.lo) and M > 0 and fw.N > 0
    if not triton or kind == "decode":
        w = decode(fw).to(x.dtype)
        return linear_as_parameter(x, w, None if bias is None else bias.to(x.dtype))
    if x2.stride(-1) != 1:
        x2 = x2.contiguous()
    p = fw.planes
    y = torch.empty((M, fw.N), dtype=x.dtype, device=x.device)
    b = bias if bias is not None else y
    BM = min(4, fx._pow2(M))
    kern, cfg = _gemv_kernel()
    grid = lambda meta: (fx._cdiv(fw.N, meta["BN"]), fx._cdiv(M, BM))  # noqa: E731
    args = (x2, p.lo, p.nib, fw.m2, p.eptr, p.ecol, p.eval, b, y, M, fw.N, fw.K, fw.kpad // 8, x2.stride(0),
            y.stride(0), fw.base, fx._bucket(M))
    kw = dict(BM=BM, EB=32, HAS_BIAS=bias is not None)
    key = (fw.N, fw.K, fx._bucket(M), x.dtype, b.dtype, bias is not None)
    best = _BEST.get(key)
    if cfg:  # the interpreter's fixed tiles
        kern[grid](*args, **kw, **cfg)
    elif best is None:  # tunes once per key; later calls skip the autotuner's host time
        kern[grid](*args, **kw)
        _BEST[key] = kern.best_config
    else:
        kern.fn[grid](*args, **kw, **best.all_kwargs())
    return y.reshape(*lead, fw.N)


#: the GEMV's tuned config per (N, K, M bucket, x dtype, bias dtype, has bias)
_BEST: dict = {}


def grad_input(g: torch.Tensor, fw: Fixed16Weight) -> torch.Tensor:
    """``g @ W``: g [..., N] -> [..., K] in g's dtype (the input gradient of :func:`linear`)."""
    return g @ decode(fw).to(g.dtype)


__all__ = ["Fixed16Weight", "encode_weight", "from_sections", "to_sections", "pack", "unpack", "decode", "linear",
           "grad_input", "pick_kind", "GEMV_MAX_M", "KINDS"]
