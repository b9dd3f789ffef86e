"""Compressed MoE experts multiplied in one launch (issue 28, must-have 2).

E experts' [N, K] weights in the fixed layout (``fixed.FixedWeight``, one window ``base`` each)
are read through an offset table (``FixedExperts``): per expert, where its low bytes, nibbles,
escape CSR and escape lists start in five flat device tensors. Two layouts give such a table:
``stack_experts`` copies E FixedWeights into one stack (expert e's rows at e*N .., one CSR over
all rows), and ``packed_experts`` reads, without a copy, a compressed experts module's packed
buffer (``wcodec.torch.experts``: each expert ``fixed.pack`` ed, expert e at bytes
offsets[e] ..). ``grouped_linear`` then computes, for the tokens routed to each expert,
``x[token] @ W_e.T`` for all experts in one Triton launch (``fixed_grouped_mm_kernel``: program
(block of BM routed slots, N tile, expert); W tiles decoded in registers as in
``fixed_kernels.fixed_mm_kernel``, the x rows gathered by token index; for a decode step's few
slots ``fixed_grouped_gemv_kernel``: program (N tile, slot), CUDA-core FMAs). Routing is given
as transformers' MoE blocks use it, sorted by expert: ``order`` holds the token of each routed
slot, expert e owning slots offsets[e] .. offsets[e+1]-1 (``route`` builds both from top-k
expert ids with checks, ``sort_routes`` without a host synchronisation); the caller weights the
rows and sums them per token. On the CPU (no Triton) each expert is decoded and multiplied
with torch ops, the same function.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ..errors import InvalidInputError
from . import fixed as fx

#: columns of FixedExperts.table: the element offset of expert e in lo (int64 words), nib, eptr,
#: ecol and eval (int32 each)
TABLE_COLS = ("lo", "nib", "eptr", "ecol", "eval")


@dataclass
class FixedExperts:
    """E experts' [N, K] bf16 weights in the fixed layout on one device, read through an offset
    table (no copy of a packed buffer needed).

    lo: int64 words, nib, eptr, ecol, eval: int32 (flat or 2-D; the kernels use their base
    pointers); table: int64 [E, 5], expert e's first element in each of them (TABLE_COLS): its
    rows are lo[table[e,0] + r*kpad/8 ..], its CSR eptr[table[e,2] .. + N] indexes
    ecol/eval from table[e,3] / table[e,4]; bases: int32 or int64 [E] (each expert's window);
    weights: the E FixedWeights as views (CPU path, per-expert decode); stacked: lo, nib, eptr
    are one stack (``stack_experts``; erow: int64 stacked row of each escape), so the experts
    decode in one launch."""

    lo: torch.Tensor
    nib: torch.Tensor
    eptr: torch.Tensor
    ecol: torch.Tensor
    eval: torch.Tensor
    erow: torch.Tensor | None
    bases: torch.Tensor
    weights: list
    E: int
    N: int
    K: int
    table: torch.Tensor | None = None
    stacked: bool = True

    @property
    def device(self) -> torch.device:
        return self.lo.device

    @property
    def kpad(self) -> int:
        return fx.padded_cols(self.K)

    @property
    def aligned(self) -> bool:
        """Every expert's lo and nib start at a 16-byte multiple (the kernels then load their
        words as vectors): always in packed buffers, in a stack when N*kpad/8 is a multiple of 4."""
        return not self.stacked or self.N * (self.kpad // 8) % 4 == 0


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
    E, g = len(weights), fx.padded_cols(K) // 8
    rows = [e * N for e in range(E)]  # the stack's CSR holds global escape indices: lists from 0
    table = torch.tensor([[r * g, r * g, r, 0, 0] for r in rows], dtype=torch.int64).reshape(E, 5).to(dev)
    return FixedExperts(torch.cat([w.lo for w in weights]), torch.cat([w.nib for w in weights]), eptr,
                        torch.cat([w.ecol for w in weights]), torch.cat([w.eval for w in weights]), erow,
                        torch.tensor([w.base for w in weights], dtype=torch.int32, device=dev), weights,
                        E, N, K, table, True)


def packed_experts(packed: torch.Tensor, offsets, bases, n: int, k: int, table: torch.Tensor | None = None,
                   bases_t: torch.Tensor | None = None) -> FixedExperts:
    """E experts each ``fixed.pack`` ed into one uint8 buffer (expert e at bytes offsets[e] ..
    offsets[e+1]-1; offsets: E+1 host ints, multiples of 16; bases: E host ints) -> FixedExperts
    whose tensors are views of ``packed`` (no copy). table / bases_t: the device offset table and
    int64 [E] bases when the caller keeps them (else built here: one host-to-device copy each).
    Raises InvalidInputError when the offsets do not describe [n, k] packed weights in the buffer."""
    offsets, bases = [int(o) for o in offsets], [int(b) for b in bases]
    E = len(offsets) - 1
    nib, eptr, esc = fx._packed_offsets(n, k)
    if (E < 1 or len(bases) != E or packed.dtype != torch.uint8 or packed.dim() != 1 or offsets[0] < 0
            or offsets[-1] > packed.numel() or packed.numel() % 16
            or any(o % 16 or b - o < esc or (b - o - esc) % 16 for o, b in zip(offsets, offsets[1:]))):
        raise InvalidInputError(f"packed_experts: offsets {offsets[:4]}.. do not split a uint8 buffer of "
                                f"{packed.numel()} bytes into {E} packed [{n}, {k}] weights")
    weights = [fx.unpack(packed[o:b], base, n, k) for o, b, base in zip(offsets, offsets[1:], bases)]
    if table is None:
        rows = []
        for o, b in zip(offsets, offsets[1:]):
            ne = (b - o - esc) // 16
            rows.append([o // 8, (o + nib) // 4, (o + eptr) // 4, (o + esc) // 4, (o + esc) // 4 + ne])
        table = torch.tensor(rows, dtype=torch.int64).to(packed.device)
    if bases_t is None:
        bases_t = torch.tensor(bases, dtype=torch.int64).to(packed.device)
    words = packed.view(torch.int32)
    return FixedExperts(packed.view(torch.int64), words, words, words, words, None, bases_t, weights, E, n, k,
                        table, False)


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
    elif experts.stacked:
        fx.decode_launch(out, experts, 0, 0, N, groups=E, group_rows=N, bases=experts.bases,
                         patch=experts.ecol.numel() > 0)
    else:  # separately packed experts: a launch each (a long prompt's path: E launches are noise)
        for e, w in enumerate(experts.weights):
            fx.decode_launch(out[e], w, w.base, 0, N, patch=w.ecol.numel() > 0)
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


def sort_routes(expert_ids: torch.Tensor, n_experts: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """expert_ids [T, k] -> (perm, ids, offsets) as transformers' grouped_mm experts sort them,
    with no host synchronisation (CUDA graphs, torch.compile): perm int64 [T*k], the flat
    (token * k + choice) index of each routed slot, sorted by expert; ids [T*k] the slots' expert
    ids (sorted); offsets int64 [E+1], expert e owning slots offsets[e] .. offsets[e+1]-1. Ids
    outside [0, n_experts) (expert-parallel sentinels: n_experts and above) sort past
    offsets[E] and belong to no expert; they are not checked (that would synchronise)."""
    ids, perm = torch.sort(expert_ids.reshape(-1))
    bounds = torch.arange(n_experts + 1, device=ids.device, dtype=ids.dtype)
    return perm, ids, torch.searchsorted(ids, bounds)


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
    G = experts.kpad // 8
    ex = (experts.lo, experts.nib, experts.eptr, experts.ecol, experts.eval, experts.table, experts.bases)
    if S <= GEMV_MAX_SLOTS:  # a decode step: each slot's expert read once, no row padding
        BN, BI = (8, 4) if fx._interpreting() else GEMV_TILE
        x64 = fx._x64(x)
        fixed_grouped_gemv_kernel[(fx._cdiv(N, BN), S)](
            x, x if x64 is None else x64, order, offsets, *ex, y, x.shape[0], N, experts.K, G, experts.E, x.stride(0),
            y.stride(0), BN=BN, BI=BI, EB=32, EP=fx._pow2(experts.E), X64=x64 is not None, ALIGNED=experts.aligned,
            num_warps=4)
        return y
    BM, BN, BI, warps, stages, prefetch, swap = TILE if S <= PREFILL_SLOTS * experts.E else PREFILL_TILE
    if fx._interpreting():  # small tiles, the same code paths (prefetch, swap)
        BM, BN, BI = 16, 16, 2
    grid = (fx._cdiv(S, BM), fx._cdiv(N, BN), experts.E)
    fixed_grouped_mm_kernel[grid](x, order, offsets, *ex, y, N, experts.K, G, x.stride(0), y.stride(0), BM=BM, BN=BN,
                                  BI=BI, EB=32, DOT=fx._dot_kind(x.dtype), PREFETCH=prefetch, SWAP=swap,
                                  ALIGNED=experts.aligned, num_warps=warps, num_stages=stages)
    return y


def _grouped_mm_ready(x: torch.Tensor, experts: FixedExperts) -> bool:
    """Whether ``torch._grouped_mm`` takes x and the decoded experts: bf16 on an sm_90+ GPU (its
    CUTLASS kernels), rows of 16-byte multiples, a torch that has it."""
    return (x.is_cuda and x.dtype == torch.bfloat16 and hasattr(torch, "_grouped_mm")
            and torch.cuda.get_device_capability(x.device)[0] >= 9 and experts.K % 8 == 0 and experts.N % 8 == 0)


__all__ = ["FixedExperts", "TABLE_COLS", "stack_experts", "packed_experts", "decode_experts", "route", "sort_routes",
           "grouped_linear"]
