"""Compressed MoE experts multiplied in one launch (issue 28, must-have 2).

``stack_experts`` puts E experts' [N, K] weights in the fixed layout (``fixed.FixedWeight``, one
window ``base`` each) into one set of device tensors: the rows of expert e are rows e*N .. e*N+N-1
of the stack, the escape lists one CSR over all E*N rows. ``grouped_linear`` then computes, for
the tokens routed to each expert, ``x[token] @ W_e.T`` for all experts in one Triton launch
(``fixed_grouped_mm_kernel``: program (N tile, block of BM routed slots, expert); W tiles decoded
in registers as in ``fixed_kernels.fixed_mm_kernel``, the x rows gathered by token index; for a
decode step's few slots ``fixed_grouped_gemv_kernel``: program (N tile, slot), CUDA-core FMAs).
Routing is given as transformers' MoE blocks use it, sorted by expert: ``order`` holds the token
of each routed slot, expert e owning slots offsets[e] .. offsets[e+1]-1 (``route`` builds both
from top-k expert ids); the caller weights the rows and adds them back (``index_add_``).
On the CPU (no Triton) each expert is decoded and multiplied with torch ops, the same function.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ..errors import InvalidInputError
from . import fixed as fx


@dataclass
class FixedExperts:
    """E experts' [N, K] bf16 weights in the fixed layout, stacked on one device.

    lo: int64 [E*N, kpad/8]; nib: int32 [E*N, kpad/8]; eptr: int32 [E*N+1] (CSR over the stacked
    rows); ecol, eval: int32 [escapes]; erow: int64 [escapes] (stacked row); bases: int32 [E];
    weights: the FixedWeights stacked (views kept for the CPU path and ``decode``)."""

    lo: torch.Tensor
    nib: torch.Tensor
    eptr: torch.Tensor
    ecol: torch.Tensor
    eval: torch.Tensor
    erow: torch.Tensor
    bases: torch.Tensor
    weights: list
    E: int
    N: int
    K: int

    @property
    def device(self) -> torch.device:
        return self.lo.device

    @property
    def kpad(self) -> int:
        return 8 * self.lo.shape[1]


def stack_experts(weights) -> FixedExperts:
    """A list of E FixedWeights of one shape [N, K], on one device -> FixedExperts (copies; the
    inputs are not modified). Raises InvalidInputError for an empty list or mixed shapes/devices."""
    weights = list(weights)
    if not weights:
        raise InvalidInputError("stack_experts: the expert list is empty")
    N, K, dev = weights[0].N, weights[0].K, weights[0].device
    for i, w in enumerate(weights):
        if (w.N, w.K) != (N, K) or w.device != dev:
            raise InvalidInputError(f"stack_experts: expert {i} is [{w.N}, {w.K}] on {w.device}, "
                                    f"expert 0 is [{N}, {K}] on {dev}")
    counts = torch.tensor([0] + [w.ecol.numel() for w in weights], device=dev).cumsum(0)
    eptr = torch.cat([w.eptr[:-1] + counts[i].to(torch.int32) for i, w in enumerate(weights)]
                     + [counts[-1:].to(torch.int32)])
    erow = torch.cat([w.erow + i * N for i, w in enumerate(weights)])
    return FixedExperts(torch.cat([w.lo for w in weights]), torch.cat([w.nib for w in weights]), eptr,
                        torch.cat([w.ecol for w in weights]), torch.cat([w.eval for w in weights]), erow,
                        torch.tensor([w.base for w in weights], dtype=torch.int32, device=dev), weights,
                        len(weights), N, K)


def decode_experts(experts: FixedExperts, out: torch.Tensor | None = None) -> torch.Tensor:
    """All E experts, bit-exact: [E, N, K] bfloat16 on their device, in one launch on CUDA (or the
    Triton interpreter with WCODEC_FIXED_TRITON=1; each expert at its own window), else each
    expert by the host decoder. out: a contiguous [E, N, kpad] bfloat16 buffer to decode into
    (e.g. a scratch reused call after call; the result is then a view of it), or None. Raises
    InvalidInputError for an ``out`` of another shape, dtype or device."""
    E, N, K = experts.E, experts.N, experts.K
    shape = (E, N, experts.kpad)
    if out is None:
        out = torch.empty(shape, dtype=torch.bfloat16, device=experts.device)
    elif tuple(out.shape) != shape or out.dtype != torch.bfloat16 or not out.is_contiguous() \
            or out.device != experts.device:
        raise InvalidInputError(f"decode_experts: out must be a contiguous bfloat16 {shape} tensor on "
                                f"{experts.device}, got {out.dtype} {tuple(out.shape)} on {out.device}")
    if not fx._use_triton(experts.lo) or E * N * K == 0 or experts.kpad > fx.PATCH_MAX_COLS:
        for e, w in enumerate(experts.weights):
            out[e, :, :K] = fx.decode(w)
    else:
        fx.decode_launch(out, experts, 0, 0, N, groups=E, group_rows=N, bases=experts.bases,
                         patch=experts.ecol.numel() > 0)
    return out[:, :, :K]


def route(expert_ids: torch.Tensor, n_experts: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """expert_ids [T, k] (top-k experts of each token) -> (order, offsets, choice): the token of
    each routed slot sorted by expert (tokens ascending within an expert; each token at most
    once per expert, as top-k ids are distinct), int64 [T*k]; offsets int64 [E+1]
    (expert e owns slots offsets[e]..offsets[e+1]-1); choice int64 [T*k], the column of
    expert_ids each slot came from (to pick its routing weight). Raises InvalidInputError for
    ids outside [0, n_experts)."""
    if expert_ids.dim() != 2:
        raise InvalidInputError(f"route: expert_ids must be [tokens, top_k], got {tuple(expert_ids.shape)}")
    flat = expert_ids.reshape(-1).to(torch.int64)
    if flat.numel() and (int(flat.min()) < 0 or int(flat.max()) >= n_experts):
        raise InvalidInputError(f"route: expert_ids must lie in [0, {n_experts})")
    k = expert_ids.shape[1]
    slot = torch.sort(flat * flat.numel() + torch.arange(flat.numel(), device=flat.device)).values \
        % max(1, flat.numel())
    offsets = torch.zeros(n_experts + 1, dtype=torch.int64, device=flat.device)
    offsets[1:] = torch.bincount(flat, minlength=n_experts).cumsum(0)
    return slot // k, offsets, slot % k


#: up to this many routed slots, one GEMV program per slot (CUDA-core FMAs, as fixed.GEMV_MAX_M:
#: a decode step of 1-2 tokens, top-2) rather than the tiled kernel, which pads each expert's
#: slots to 16 rows. H100, Mixtral-shaped experts block, 1 token (2 slots): 238.7 us per forward
#: against the tiled kernel's 358.6 and bf16 grouped_mm's 379.8 (benchmarks/moe_kernels.py)
GEMV_MAX_SLOTS = 4
#: (rows of W, groups of 8 columns) per program of the GEMV: H100, Mixtral-shaped, 1 token, us
#: per experts forward 4x64 236.1, 8x32 238.7, 16x32 241.6, 4x128 242.9, 8x64 260.1
GEMV_TILE = (4, 64)
#: launches of the tiled kernel, (BM, BN, BI, num_warps, num_stages, PREFETCH, SWAP): TILE for
#: up to PREFILL_SLOTS routed slots per expert on average (decode steps of a batch), PREFILL_TILE
#: above (a prompt: ~128 slots per expert at 512 tokens, Mixtral's top-2 of 8, all in one row
#: block, so each W tile is decoded once). H100, Mixtral-shaped experts block, 512 tokens, us per
#: forward (tools/prefill_chunks.py, 2026-11-26): 64x64x16 w4 3011-3037 (the former rule),
#: 128x64x16 w8 2882, + prefetch 2718-2724, 128x64x16 w4 + prefetch + swap 2628; 256-row blocks
#: 3259-7445, 128x128 tiles 3065-3690 (bf16 grouped_mm 1447-1462)
TILE = (16, 64, 16, 4, 3, False, False)
PREFILL_TILE = (128, 64, 16, 4, 3, True, True)
PREFILL_SLOTS = 64
#: above this many routed slots per expert on average (a long prompt: the tiled kernel decodes
#: each W tile once per block of 128 slots), bf16 x on CUDA takes all experts decoded into a bf16
#: scratch in one launch (``decode_experts``; transient: the dense experts' size) and
#: ``torch._grouped_mm``. H100, Mixtral-shaped experts block, us per forward (tools/prefill_chunks.py,
#: 2026-11-26): 512 tokens (128 slots per expert) tiled 2585, decode + grouped_mm 3156; 2048 tokens
#: (512 per expert) 8877 against 4660 (bf16 grouped_mm 3136); 192 sits between the two, where
#: the tiled kernel's cost (~linear in blocks per expert) meets the decode's
DECODE_SLOTS = 192


def grouped_linear(x: torch.Tensor, experts: FixedExperts, order: torch.Tensor, offsets: torch.Tensor) -> torch.Tensor:
    """y[s] = x[order[s]] @ W_e.T for every routed slot s of expert e (offsets[e] <= s < offsets[e+1]).

    x: [T, K] bfloat16/float16/float32 on the experts' device; order: int [S] token indices in
    [0, T); offsets: int [E+1], non-decreasing from 0 to S. Returns [S, N] in x's dtype,
    accumulated in float32. On CUDA (or the Triton interpreter with WCODEC_FIXED_TRITON=1) one
    launch covers all experts, no host synchronisation (the grid is sized by S): a GEMV per slot
    for S <= GEMV_MAX_SLOTS, else tensor-core tiles per expert; above DECODE_SLOTS slots per
    expert (bf16 x on an sm_90+ GPU) all experts are decoded into a bf16 scratch of the dense
    experts' size, freed on return, and multiplied by ``torch._grouped_mm``; elsewhere each
    expert is decoded and multiplied with torch ops. Raises InvalidInputError for shapes that
    do not fit (indices themselves are not checked on the GPU path: that would synchronise)."""
    if x.dim() != 2 or x.shape[1] != experts.K:
        raise InvalidInputError(f"grouped_linear: x must be [tokens, {experts.K}], got {tuple(x.shape)}")
    if order.dim() != 1 or offsets.shape != (experts.E + 1,):
        raise InvalidInputError(f"grouped_linear: order must be 1-D and offsets [{experts.E + 1}], got "
                                f"{tuple(order.shape)} and {tuple(offsets.shape)}")
    S, N = order.numel(), experts.N
    if S > DECODE_SLOTS * experts.E and N and _grouped_mm_ready(x, experts):
        w = decode_experts(experts)
        return torch._grouped_mm(x[order], w.transpose(-2, -1), offs=offsets[1:].to(torch.int32))
    y = torch.empty((S, N), dtype=x.dtype, device=x.device)
    if S == 0 or N == 0:
        return y
    if not fx._use_triton(experts.lo):
        offs = offsets.tolist()
        for e, w in enumerate(experts.weights):
            if offs[e + 1] > offs[e]:
                y[offs[e]:offs[e + 1]] = torch.nn.functional.linear(x[order[offs[e]:offs[e + 1]]], fx.decode(w).to(x.dtype))
        return y
    from .fixed_kernels import fixed_grouped_gemv_kernel, fixed_grouped_mm_kernel
    if x.stride(-1) != 1:
        x = x.contiguous()
    if S <= GEMV_MAX_SLOTS:  # a decode step: each slot's expert read once, no row padding
        BN, BI = (8, 4) if fx._interpreting() else GEMV_TILE
        x64 = fx._x64(x)
        fixed_grouped_gemv_kernel[(fx._cdiv(N, BN), S)](
            x, x if x64 is None else x64, order, offsets, experts.lo, experts.nib, experts.eptr, experts.ecol,
            experts.eval, experts.bases, y, x.shape[0], N, experts.K, experts.lo.shape[1], experts.E, x.stride(0),
            y.stride(0), BN=BN, BI=BI, EB=32, EP=fx._pow2(experts.E), X64=x64 is not None, num_warps=4)
        return y
    BM, BN, BI, warps, stages, prefetch, swap = TILE if S <= PREFILL_SLOTS * experts.E else PREFILL_TILE
    if fx._interpreting():  # small tiles, the same code paths (prefetch, swap)
        BM, BN, BI = 16, 16, 2
    grid = (fx._cdiv(S, BM), fx._cdiv(N, BN), experts.E)
    fixed_grouped_mm_kernel[grid](x, order, offsets, experts.lo, experts.nib, experts.eptr, experts.ecol,
                                  experts.eval, experts.bases, y, N, experts.K, experts.lo.shape[1], x.stride(0),
                                  y.stride(0), BM=BM, BN=BN, BI=BI, EB=32, DOT=fx._dot_kind(x.dtype),
                                  PREFETCH=prefetch, SWAP=swap, num_warps=warps, num_stages=stages)
    return y


def _grouped_mm_ready(x: torch.Tensor, experts: FixedExperts) -> bool:
    """Whether ``torch._grouped_mm`` takes x and the decoded experts: bf16 on an sm_90+ GPU (its
    CUTLASS kernels), rows of 16-byte multiples, a torch that has it."""
    return (x.is_cuda and x.dtype == torch.bfloat16 and hasattr(torch, "_grouped_mm")
            and torch.cuda.get_device_capability(x.device)[0] >= 9 and experts.K % 8 == 0 and experts.N % 8 == 0)


__all__ = ["FixedExperts", "stack_experts", "decode_experts", "route", "grouped_linear"]
