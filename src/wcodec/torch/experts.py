"""MoE experts kept compressed: the 3-D expert parameters of a transformers experts module
(``MixtralExperts.gate_up_proj [E, 2I, H]`` / ``down_proj [E, H, I]``, Qwen3-MoE, DeepSeek-V3;
gpt-oss's transposed ``[E, H, 2I]`` with biases) stored per expert in the fixed-rate layout
(``wcodec.gpu.fixed``), the module's forward semantics unchanged.

Entry points: :func:`is_expert_param`, :func:`compress_expert_param` (called per parameter as a
checkpoint loads), :func:`decompress_experts`, :func:`load_compressed_experts`,
:func:`expert_linear` (the per-expert matmul), :func:`grouped_forward` (all experts per launch).

How the module keeps working: its class is swapped for a subclass (one per experts class) whose
``forward`` runs :func:`experts_forward`, the eager per-expert loop of transformers'
experts modules (routing, top-k weights, ``_apply_gate`` / activation, biases, post-expert
norm) with :func:`expert_linear` for the two matmuls; ``model.forward`` is untouched. The same
function is registered as transformers' experts implementation ``"wcodec"``
(``ALL_EXPERTS_FUNCTIONS``), where it runs dense experts modules by their own eager forward.
On the CPU the result is bit-identical to the dense module's: under the eager implementation
the weight of each routed expert is decoded and multiplied as the eager code multiplies it;
under another configured implementation (transformers' default, grouped_mm) that implementation
runs on the experts decoded for the call (a transient of the dense experts' size). On CUDA
:func:`grouped_forward` runs: transformers' grouped_mm semantics, one launch of the grouped
kernels (``wcodec.gpu.fixed_grouped``) per projection over all experts, reading the packed
buffer below through an offset table (no copy), no host synchronisation (CUDA graphs,
``torch.compile`` with the ``wcodec::grouped_fixed_linear`` custom op); with an input gradient
to compute, or ``GROUPED`` off (``WCODEC_GROUPED_EXPERTS=0``), the eager loop with the fused
kernels per routed expert (``wcodec.gpu.fixed.linear``). A module compressed with
``exact=True`` (keep_compressed="jit") takes the CPU's way on CUDA too, decoding the experts
(the GPU decode kernel) and running the dense module's own math, so outputs are bit-identical
to the dense model's on the same GPU. The input gradient flows (frozen experts).

State: a compressed parameter ``P`` (e.g. ``gate_up_proj``) becomes four buffers, so
``state_dict()`` holds, under the module's prefix:

- ``P_packed``  uint8 [bytes]: the E experts' packed fixed-rate weights
  (:func:`wcodec.gpu.fixed.pack`), expert e at bytes ``[P_offsets[e], P_offsets[e+1])``;
- ``P_offsets`` int64 [E+1];
- ``P_bases``   int64 [E]: each expert's exponent window (``FixedWeight.base``);
- ``P_shape``   int64 [3]: the dense parameter's shape. Each expert is stored as the [N, K]
  weight of ``y = x @ W.T``: ``P[e]`` itself, or ``P[e].T`` for modules with
  ``is_transposed`` (gpt-oss).

``module.P`` still reads (a 3-D tensor view in the parameter's dtype: metadata free, ``P[e]``
decodes expert e, any other op decodes all); biases stay dense Parameters.

Dtype: the fixed layout stores bfloat16. A parameter held in another floating dtype whose values
bfloat16 holds exactly (a bf16 checkpoint loaded in float32 because its config names float32,
as Ergo's does) is stored so too, its dense dtype remembered (``module._wcodec_dtypes``, followed
through ``module.to(dtype)``); such a module decodes for each call (as ``exact`` below) and
casts, so its outputs stay the dense module's bit for bit. Values bfloat16 does not hold
(true float32 weights) are refused: the caller keeps them dense. A compressed module pickles
(``torch.save(module)``, ``copy.deepcopy``): its compressed class is rebuilt on load.

Experts modules with a forward of their own (not ``use_experts_implementation`` modules:
Llama-4's ``Llama4TextExperts`` bmm over tokens sorted by expert, JetMoE's
``JetMoeParallelExperts`` ``weight [E, out, in]`` split by expert sizes, Inkling's shared experts'
bmm) are recognised structurally: a 3-D floating parameter whose first dimension equals an int
attribute of the module naming experts (``num_experts``, ``n_shared_experts``, ...), in a module
that is not one of torch's own (a Conv1d's 3-D weight is not an expert). Their parameters are
stored the same way (each ``P[e]`` as it is, [d1, d2]), and the module's class is swapped for a
subclass whose ``forward`` decodes every compressed parameter into a tensor of its own for that
call (the bit-exact dense values, on the buffers' device), runs the module's own forward on it,
and drops it: outputs are the dense module's bit for bit on every device, autograd may save the
decoded tensors for its backward, and the decoded experts live for the call only (their dense
size, once per module call).
"""

from __future__ import annotations

import os
import sys
import weakref

import torch
from torch import nn
from torch.utils._pytree import tree_map

from ..errors import UnsupportedError
from ..gpu import fixed as fx

#: buffers of one compressed parameter P: P_packed, P_offsets, P_bases, P_shape
SUFFIXES = ("packed", "offsets", "bases", "shape")


class ExpertsKeptDenseError(UnsupportedError):
    """An expert parameter cannot be kept compressed (its dtype, rank or module is not one the
    fixed layout and :func:`experts_forward` serve): the caller keeps it dense and reports why."""


def _expert_count_names(module: nn.Module, n: int) -> list[str]:
    """The int attributes of ``module`` that name experts (``num_experts``, ``n_shared_experts``,
    ``num_local_experts``...) and equal ``n``."""
    return [a for a, v in vars(module).items()
            if "expert" in a.lower() and isinstance(v, int) and not isinstance(v, bool) and v == n]


def _is_own_forward_param(module: nn.Module, attr: str) -> bool:
    """Whether ``module.<attr>`` is a 3-D floating parameter [E, ., .] of an experts module with a
    forward of its own (see the module docstring): not a transformers experts module, not one of
    torch's own modules, E equal to an int attribute of the module naming experts."""
    p = _dense_param(module, attr)
    return (p is not None and p.dim() == 3 and p.is_floating_point() and not _is_experts_module(module)
            and not type(module).__module__.startswith("torch.") and bool(_expert_count_names(module, p.shape[0])))


def _transposed(module: nn.Module) -> bool:
    """Whether the module multiplies ``x @ P[e]`` and so stores each expert as ``P[e].T`` (gpt-oss);
    modules with their own forward store ``P[e]`` as it is."""
    return _is_experts_module(module) and bool(module.is_transposed)


def _is_experts_module(module: nn.Module) -> bool:
    """A transformers experts module (decorated by ``use_experts_implementation``, whose flags
    :func:`experts_forward` follows)."""
    # has_post_expert_norm came after transformers 5.17 (absent: no such norm)
    return all(hasattr(module, a) for a in ("num_experts", "has_gate", "has_bias", "is_transposed"))


def _expert_attrs(module: nn.Module) -> tuple[str, str]:
    return ("gate_up_proj" if module.has_gate else "up_proj"), "down_proj"


def _dense_param(module: nn.Module, attr: str):
    return module._parameters.get(attr)


def is_expert_param(module: nn.Module, attr: str) -> bool:
    """Whether ``module.<attr>`` is a 3-D floating expert parameter [num_experts, ., .] of a
    transformers experts module, or of an experts module with a forward of its own (see the
    module docstring), on any device, meta included: a candidate for
    :func:`compress_expert_param` (which may still refuse its dtype)."""
    p = _dense_param(module, attr)
    if p is not None and not _is_experts_module(module):
        return _is_own_forward_param(module, attr)
    return (p is not None and attr in _expert_attrs(module)
            and p.dim() == 3 and p.is_floating_point() and p.shape[0] == module.num_experts)


def _check(module: nn.Module, attr: str, value: torch.Tensor) -> None:
    own = not _is_experts_module(module)
    p = _dense_param(module, attr)
    if own and not _is_own_forward_param(module, attr):
        raise ExpertsKeptDenseError(f"{type(module).__name__}.{attr}: not a transformers experts module "
                                    "(use_experts_implementation), nor a 3-D parameter [E, ., .] of a module "
                                    "naming E experts (its forward is unknown)")
    if not own and attr not in _expert_attrs(module):
        raise ExpertsKeptDenseError(f"{type(module).__name__}.{attr}: not an expert projection "
                                    f"(expected one of {_expert_attrs(module)})")
    if own and hasattr(p, "to_local"):  # its own forward would run on a decoded local shard: not handled
        raise ExpertsKeptDenseError(f"{type(module).__name__}.{attr}: a tensor-parallel shard of an experts module "
                                    "with a forward of its own")
    n = p.shape[0] if own else module.num_experts
    if not isinstance(value, torch.Tensor) or value.dim() != 3 or value.shape[0] != n:
        got = tuple(value.shape) if isinstance(value, torch.Tensor) else type(value).__name__
        raise ExpertsKeptDenseError(f"{type(module).__name__}.{attr}: expected a [{n}, N, K] "
                                    f"tensor, got {got}")
    if value.is_meta:
        raise ExpertsKeptDenseError(f"{type(module).__name__}.{attr}: on the meta device (no values)")
    if value.dtype != torch.bfloat16 and value.dtype not in _BITS:
        raise ExpertsKeptDenseError(f"{type(module).__name__}.{attr}: {str(value.dtype).replace('torch.', '')}; "
                                    "the fixed layout keeps bfloat16 weights only")
    held = tuple(p.to_local().shape if hasattr(p, "to_local") else p.shape) if p is not None else None
    if held is not None and held != tuple(value.shape):  # a tensor-parallel shard: its local shape
        raise ExpertsKeptDenseError(f"{type(module).__name__}.{attr}: the module holds {held}, "
                                    f"got {tuple(value.shape)}")


#: floating dtypes that hold every bfloat16 value, and the integers their bits read as
_BITS = {torch.float32: torch.int32, torch.float64: torch.int64, torch.float16: torch.int16}


def _as_bf16(module: nn.Module, attr: str, w: torch.Tensor) -> torch.Tensor:
    """``w`` in bfloat16, exactly: a bf16 ``w`` itself, another dtype's cast when it gives every
    value back bit for bit (float16 only where no value needs its extra mantissa bits); else
    ExpertsKeptDenseError."""
    if w.dtype == torch.bfloat16:
        return w
    b = w.to(torch.bfloat16)
    if not torch.equal(b.to(w.dtype).view(_BITS[w.dtype]), w.view(_BITS[w.dtype])):
        raise ExpertsKeptDenseError(f"{type(module).__name__}.{attr}: {str(w.dtype).replace('torch.', '')} values "
                                    "that bfloat16 does not hold exactly; the fixed layout keeps bfloat16 weights only")
    return b


def compress_expert_param(module: nn.Module, attr: str, value: torch.Tensor, exact: bool = False) -> None:
    """Store ``value`` (the dense [E, d1, d2] tensor transformers would assign to
    ``module.<attr>``, on the CPU or CUDA; not modified) as E fixed-rate weights on value's
    device, in place of the parameter (see the module docstring for the buffers). bfloat16, or
    another floating dtype whose values are all bfloat16 values (the module then decodes for each
    call, see the module docstring). The module's
    forward then runs :func:`experts_forward`. Transient memory: one expert's dense transpose
    (transposed modules) or bf16 cast, and the packed experts twice while they are concatenated.
    ``exact``: the module decodes its experts and multiplies as the dense module does, on CUDA
    too (see the module docstring); it applies to the whole module.

    Raises ExpertsKeptDenseError (a WcodecError) for a module that is not a transformers experts
    module, an attribute that is not its gate_up/up/down projection, a value that is not 3-D
    [num_experts, ., .], with values bfloat16 does not hold (e.g. trained fp32), on the meta
    device, or of another shape than the module's parameter; the module is then unchanged.
    """
    _check(module, attr, value)
    E, d1, d2 = value.shape
    packs, offsets, bases = [], [0], []
    with torch.no_grad():
        for e in range(E):
            w = _as_bf16(module, attr, value[e].detach())
            w = w.T if _transposed(module) else w
            fw = fx.encode_weight(w)
            packs.append(fx.pack(fw))
            offsets.append(offsets[-1] + packs[-1].numel())  # pack sizes are multiples of 16 bytes
            bases.append(fw.base)
    dev = value.device
    _install(module, attr, torch.cat(packs) if packs else torch.zeros(0, dtype=torch.uint8, device=dev),
             offsets, bases, (E, d1, d2), exact, value.dtype)


def stored_record_fits(module: nn.Module, attr: str, codec: str, dtype: str, shape) -> bool:
    """Whether :func:`load_expert_record` takes a stored record of ``codec``, ``dtype`` (the
    file's dtype string) and ``shape`` as it is for ``module.<attr>``: codec "fixed" "BF16" of
    the parameter's [E, N, K] shape, a module that is not transposed, K a multiple of 16 (each
    expert's rows are then the record's bytes). Reads only the record's header fields."""
    p = _dense_param(module, attr)
    shape = tuple(shape)
    return (codec == "fixed" and dtype == "BF16" and len(shape) == 3 and is_expert_param(module, attr)
            and not _transposed(module) and p is not None and tuple(p.shape) == shape and shape[2] % 16 == 0)


def load_expert_record(module: nn.Module, attr: str, record, device, exact: bool = False, name: str = "",
                       dtype: torch.dtype = torch.bfloat16) -> None:
    """Hold ``module.<attr>`` compressed straight from a stored codec "fixed" record of the
    whole [E, N, K] parameter (one :func:`stored_record_fits` accepts), on ``device``, never
    decoding it: the record is validated (``codecs.fixed.check_record``, CorruptDataError naming
    tensor ``name``), then each expert's low bytes and nibbles, which are rows of the record's
    planes, are copied into the packed buffer (:func:`wcodec.gpu.loader.upload`: through pinned
    staging buffers, pipelined, no other host copy) and its escapes re-indexed from the record's [E, N*K] columns to [N, K]. The buffers are those of
    :func:`compress_expert_param` (every expert with the record's window ``base``), so the module
    behaves the same; ``dtype``: the dense dtype the module holds the bf16 values in (float32
    where the load dtype is). Raises ExpertsKeptDenseError when the record does not fit."""
    import numpy as np

    from ..codecs.fixed import check_record
    from ..errors import WcodecError
    from ..gpu.loader import upload

    if not stored_record_fits(module, attr, record.codec, record.dtype, record.shape):
        raise ExpertsKeptDenseError(f"{name or attr}: the stored record is not a codec fixed [E, N, K] bfloat16 "
                                    "record of the parameter's shape with K a multiple of 16")
    E, N, K = record.shape
    try:
        c = check_record(record.params, record.sections, E, N * K)
    except WcodecError as e:
        raise type(e)(f"tensor '{name}': {e}" if name else str(e)) from None
    ptr = c.ptr.astype(np.int64)
    col = c.col.astype(np.int64)
    rows, cols = col // K, (col % K).astype(np.int32)
    vals = c.val.astype(np.int32)
    sizes = [fx.packed_size(N, K, int(ptr[e + 1] - ptr[e])) for e in range(E)]
    offsets = [0, *np.cumsum(sizes).tolist()]
    packed = torch.zeros(offsets[-1], dtype=torch.uint8, device=device)
    span, host = N * K, []
    for e in range(E):
        a, b = int(ptr[e]), int(ptr[e + 1])
        eptr = np.zeros(N + 1, dtype=np.int32)
        np.cumsum(np.bincount(rows[a:b], minlength=N), out=eptr[1:])
        parts = (c.lo[e * span:(e + 1) * span], c.nib[e * span // 2:(e + 1) * span // 2], eptr, cols[a:b],
                 vals[a:b], rows[a:b])
        host += fx.pack_parts(packed[offsets[e]:offsets[e + 1]], parts, N, K)
    upload(host, packed.device)
    _install(module, attr, packed, offsets, [c.base] * E, (E, N, K), exact, dtype)


def _install(module: nn.Module, attr: str, packed: torch.Tensor, offsets: list, bases: list, shape: tuple,
             exact: bool, dtype: torch.dtype) -> None:
    dev = packed.device
    _make_compressed(module)
    module.__dict__["_wcodec_exact"] = bool(exact)
    _set_dtype(module, attr, dtype)
    _note_planned(module, attr, module._parameters.pop(attr, None))
    module.__dict__.pop(attr, None)
    _register(module, attr, packed, torch.tensor(offsets, dtype=torch.int64, device=dev),
              torch.tensor(bases, dtype=torch.int64, device=dev), torch.tensor(shape, dtype=torch.int64, device=dev))


def _note_planned(module: nn.Module, attr: str, param) -> None:
    """Record, when ``param`` (the parameter ``attr`` a compressed module drops) is a DTensor of a
    tensor-parallel plan, its sharding as a meta DTensor (shape, mesh, placements; no data) in
    ``module._wcodec_planned``: the plan's style decides on the module's parameters whether its
    output is a partial sum to reduce (transformers 5.17's ``MoeExpertsParallel``), and
    :func:`wcodec.hf.tp.install` shows it these."""
    if param is None or "torch.distributed.tensor" not in sys.modules:  # no plan made a DTensor
        return
    from torch.distributed.tensor import DTensor

    if isinstance(param, DTensor):
        meta = torch.empty(param.to_local().shape, dtype=param.dtype, device="meta")
        module.__dict__.setdefault("_wcodec_planned", {})[attr] = DTensor.from_local(
            meta, param.device_mesh, param.placements, run_check=False, shape=param.shape, stride=param.stride())


def _set_dtype(module: nn.Module, attr: str, dtype: torch.dtype) -> None:
    """Record the dense dtype of compressed ``attr``; one other than bfloat16 makes the module
    decode for each call while it lasts (:func:`_is_exact`)."""
    module.__dict__.setdefault("_wcodec_dtypes", {})[attr] = dtype


def _is_exact(module: nn.Module) -> bool:
    """Whether ``module`` decodes and multiplies as the dense module does: exactness was asked for
    (``_wcodec_exact`` in its ``__dict__``, set by ``_install``), or a compressed parameter is
    held in a dtype other than bfloat16 (the fused kernels compute in bf16). Derived on each
    call, so a partial decompress or a ``.to(torch.bfloat16)`` that removes the cause brings the
    fused kernels back."""
    d = module.__dict__
    return bool(d.get("_wcodec_exact", False)) or any(t != torch.bfloat16 for t in d.get("_wcodec_dtypes", {}).values())


def _register(module: nn.Module, attr: str, packed, offsets, bases, shape) -> None:
    for suffix, t in zip(SUFFIXES, (packed, offsets, bases, shape)):
        module.register_buffer(f"{attr}_{suffix}", t)
    module.__dict__["_wcodec_weights"] = {}


def decodes_per_call(module: nn.Module) -> bool:
    """Whether compressed ``module`` decodes its experts for each call and multiplies as the dense
    module does (an ``exact`` module, or one with a forward of its own), rather than reading the
    fixed layout in the fused kernels on CUDA."""
    return isinstance(module, _OwnForwardMixin) or _is_exact(module)


def compressed_attrs(module: nn.Module) -> list[str]:
    """The expert parameters of ``module`` held compressed (in :func:`_expert_attrs` order; for
    a module with a forward of its own, in the order they were compressed)."""
    if isinstance(module, _OwnForwardMixin):
        b = module._buffers
        return [n[:-len("_packed")] for n in b if n.endswith("_packed")
                and all(f"{n[:-len('_packed')]}_{s}" in b for s in SUFFIXES)]
    if not _is_experts_module(module):
        return []
    return [a for a in _expert_attrs(module) if f"{a}_packed" in module._buffers]


class ExpertWeights:
    """One compressed expert parameter as per-expert FixedWeights (views of its packed buffer).

    ``transposed``: the dense parameter is [E, K, N] and the module multiplies ``x @ P[e]``
    (else [E, N, K] and ``F.linear(x, P[e])``); each FixedWeight is [N, K] either way.
    """

    def __init__(self, module: nn.Module, attr: str):
        b = module._buffers
        self.packed = b[f"{attr}_packed"]
        offsets = b[f"{attr}_offsets"].tolist()
        bases = b[f"{attr}_bases"].tolist()
        E, d1, d2 = b[f"{attr}_shape"].tolist()
        self.transposed = _transposed(module)
        self.exact = _is_exact(module)
        self.dtype = module.__dict__.get("_wcodec_dtypes", {}).get(attr, torch.bfloat16)
        self.shape = (E, d1, d2)
        n, k = (d2, d1) if self.transposed else (d1, d2)
        self.slices = [(offsets[e], offsets[e + 1] - offsets[e], bases[e], n, k) for e in range(E)]
        self.experts = [fx.unpack(self.packed[o:o + size], base, n, k) for o, size, base, n, k in self.slices]
        self.host = (offsets, bases, n, k)
        self._grouped = None

    @property
    def grouped(self):
        """All E experts for the grouped kernels (``fixed_grouped.FixedExperts``): views of the
        packed buffer through an offset table made once (no copy of the experts)."""
        if self._grouped is None:
            from ..gpu.fixed_grouped import packed_experts
            offsets, bases, n, k = self.host
            self._grouped = packed_experts(self.packed, offsets, bases, n, k)
            _GROUPED[_grouped_key(self.packed, n, k)] = self._grouped
        return self._grouped

    def dense(self, e: int) -> torch.Tensor:
        """Expert e as the module's dense parameter held it: a new contiguous [d1, d2] tensor of
        the parameter's dtype (``self.dtype``, bfloat16 unless it was held in another)."""
        w = fx.decode(self.experts[e])
        return (w.T.contiguous() if self.transposed else w).to(self.dtype)

    def dense_all(self) -> torch.Tensor:
        """All E experts as the dense parameter: a new [E, d1, d2] tensor of ``self.dtype``
        (bit-exact) on the packed buffer's device; transient beyond it: one expert's decode."""
        out = torch.empty(self.shape, dtype=self.dtype, device=self.packed.device)
        for e in range(len(self.experts)):
            out[e].copy_(self.dense(e))
        return out


def _weights(module: nn.Module, attr: str) -> ExpertWeights:
    cache = module._wcodec_weights  # an instance attribute (no __dict__ method calls: torch.compile)
    if attr not in cache or cache[attr].packed is not module._buffers[f"{attr}_packed"]:
        cache[attr] = ExpertWeights(module, attr)
    return cache[attr]


def expert_linear(x: torch.Tensor, weights: ExpertWeights, expert: int) -> torch.Tensor:
    """The expert's projection without bias: x [M, K] -> [M, N] in x's dtype, as the dense module
    computes it (``F.linear(x, P[e])``, or ``x @ P[e]`` for transposed layouts). CPU, and CUDA for
    an ``exact`` module: the expert is decoded and multiplied by that same op (bit-identical to
    the dense module). CUDA: the
    fused kernels of ``wcodec.gpu.fixed.linear`` (the input gradient through their grad_input).
    Under torch.compile: the ``wcodec::fixed_linear`` custom op (CompressedLinear's); an ``exact``
    module's decode runs outside the graph."""
    if torch.compiler.is_compiling() and not weights.exact:  # one opaque op (the host decode cannot be traced)
        from .linear import _fixed_linear
        off, size, base, n, k = weights.slices[expert]
        return _fixed_linear(x, weights.packed[off:off + size], None, base, n, k)
    fw = weights.experts[expert]
    if not x.is_cuda or weights.exact:
        w = _dense_expert(weights, expert).to(x.dtype)
        return x @ w if weights.transposed else nn.functional.linear(x, w)
    if torch.is_grad_enabled() and x.requires_grad:
        from .linear import _FixedLinearFn
        return _FixedLinearFn.apply(x, None, fw)
    return fx.linear(x, fw)


@torch.compiler.disable
def _dense_expert(weights: ExpertWeights, expert: int) -> torch.Tensor:
    return weights.dense(expert)


#: run a compressed module's CUDA forward (not ``exact``) on the grouped kernels, one launch per
#: projection (``WCODEC_GROUPED_EXPERTS=0``: the per-expert loop, e.g. to compare)
GROUPED = os.environ.get("WCODEC_GROUPED_EXPERTS", "1") != "0"


def experts_forward(self: nn.Module, hidden_states: torch.Tensor, top_k_index: torch.Tensor,
                    top_k_weights: torch.Tensor) -> torch.Tensor:
    """transformers' experts forward over compressed expert parameters.

    hidden_states: [T, H]; top_k_index: [T, k] int (expert ids, num_experts = none);
    top_k_weights: [T, k]. Returns [T, H] in hidden_states' dtype. A module with no compressed
    parameter runs its own eager forward. On the CPU (and CUDA for ``exact`` modules, or with an
    input gradient to compute) the eager loop: experts in ascending id, each on its routed
    tokens, accumulated by ``index_add_`` as the eager code does. On CUDA otherwise (and in the
    Triton interpreter with WCODEC_FIXED_TRITON=1) :func:`grouped_forward`.
    """
    if not compressed_attrs(self):
        return type(self).forward.__wrapped__(self, hidden_states, top_k_index, top_k_weights)
    if _runs_grouped(self, hidden_states):
        return grouped_forward(self, hidden_states, top_k_index, top_k_weights)
    up_attr, down_attr = _expert_attrs(self)
    final = torch.zeros_like(hidden_states)
    with torch.no_grad():
        mask = nn.functional.one_hot(top_k_index, num_classes=self.num_experts + 1).permute(2, 1, 0)
        hit = torch.greater(mask.sum(dim=(-1, -2)), 0).nonzero()
    for e in hit.reshape(-1).tolist():
        if e == self.num_experts:
            continue
        top_k_pos, token_idx = torch.where(mask[e])
        h = _project(self, up_attr, hidden_states[token_idx], e)
        h = self._apply_gate(h) if self.has_gate else self.act_fn(h)
        h = _project(self, down_attr, h, e)
        if getattr(self, "has_post_expert_norm", False):
            h = self.post_expert_norm(h)
        h = h * top_k_weights[token_idx, top_k_pos, None]
        final.index_add_(0, token_idx, h.to(final.dtype))
    return final


def _runs_grouped(module: nn.Module, x: torch.Tensor) -> bool:
    return (GROUPED and fx._use_triton(x) and not _is_exact(module)
            and len(compressed_attrs(module)) == 2 and not (torch.is_grad_enabled() and x.requires_grad))


def grouped_forward(self: nn.Module, hidden_states: torch.Tensor, top_k_index: torch.Tensor,
                    top_k_weights: torch.Tensor) -> torch.Tensor:
    """The experts forward on the grouped kernels (``wcodec.gpu.fixed_grouped``), with the
    semantics of transformers' grouped_mm experts forward: routed slots sorted by expert (no
    host synchronisation: CUDA graphs and torch.compile take it), one launch per projection
    over all experts (gathering the tokens' rows in the first), biases per slot,
    ``_apply_gate`` / activation, post-expert norm, routing weights, each token's top-k rows
    summed in their top-k order. Expert-parallel sentinel ids (>= num_experts) contribute
    zeros. Both projections compressed; no input gradient (``experts_forward`` takes the
    per-expert loop for that). Shapes as :func:`experts_forward`."""
    up_attr, down_attr = _expert_attrs(self)
    T, k = top_k_index.shape
    perm, ids, offsets = _sort_routes(top_k_index, self.num_experts)
    h = _grouped_project(self, up_attr, hidden_states, perm // k, offsets, ids)
    h = self._apply_gate(h) if self.has_gate else self.act_fn(h)
    h = _grouped_project(self, down_attr, h, torch.arange(h.shape[0], device=h.device), offsets, ids)
    if getattr(self, "has_post_expert_norm", False):
        h = self.post_expert_norm(h)
    h = h * top_k_weights.reshape(-1)[perm, None]
    if getattr(self, "_is_expert_parallel", False):
        h = h.masked_fill((ids >= self.num_experts)[:, None], 0.0)
    out = torch.empty_like(h)
    out[perm] = h  # back to (token, choice) order: a deterministic sum, as grouped_mm's
    return out.view(T, k, -1).sum(dim=1).to(hidden_states.dtype)


def _sort_routes(top_k_index: torch.Tensor, n_experts: int):
    from ..gpu.fixed_grouped import sort_routes
    return sort_routes(top_k_index, n_experts)


def _grouped_project(module: nn.Module, attr: str, x: torch.Tensor, order: torch.Tensor, offsets: torch.Tensor,
                     ids: torch.Tensor) -> torch.Tensor:
    w = _weights(module, attr)
    if torch.compiler.is_compiling():  # one opaque op (the launch decisions read host values)
        offs, bases, n, k = w.host
        g = w.grouped
        y = _grouped_fixed_linear(x, w.packed, g.table, g.bases, order, offsets, offs, bases, n, k)
    else:
        from ..gpu.fixed_grouped import grouped_linear
        y = grouped_linear(x, w.grouped, order, offsets)
    if module.has_bias:
        y = y + module._parameters[f"{attr}_bias"][ids.clamp(max=module.num_experts - 1)]
    return y


#: FixedExperts of the modules' packed buffers, for the custom op to find them again (weak: each
#: lives as long as its module's ExpertWeights)
_GROUPED: "weakref.WeakValueDictionary" = weakref.WeakValueDictionary()


def _grouped_key(packed: torch.Tensor, n: int, k: int) -> tuple:
    return packed.data_ptr(), packed.numel(), n, k


@torch.library.custom_op("wcodec::grouped_fixed_linear", mutates_args=())
def _grouped_fixed_linear(x: torch.Tensor, packed: torch.Tensor, table: torch.Tensor, bases: torch.Tensor,
                          order: torch.Tensor, offsets: torch.Tensor, host_offsets: list[int], host_bases: list[int],
                          n: int, k: int) -> torch.Tensor:
    from ..gpu.fixed_grouped import grouped_linear, packed_experts
    experts = _GROUPED.get(_grouped_key(packed, n, k))
    if experts is None:
        experts = packed_experts(packed, host_offsets, host_bases, n, k, table, bases)
    return grouped_linear(x, experts, order, offsets)


@_grouped_fixed_linear.register_fake
def _(x, packed, table, bases, order, offsets, host_offsets, host_bases, n, k):
    return x.new_empty((order.shape[0], n))


def _project(module: nn.Module, attr: str, x: torch.Tensor, e: int) -> torch.Tensor:
    if f"{attr}_packed" in module._buffers:
        y = expert_linear(x, _weights(module, attr), e)
    else:  # kept dense (e.g. the other projection was refused)
        p = getattr(module, attr)[e]
        y = x @ p if module.is_transposed else nn.functional.linear(x, p)
    return y + getattr(module, f"{attr}_bias")[e] if module.has_bias else y


class FixedExpertsTensor(torch.Tensor):
    """``module.P`` of a compressed expert parameter: a [E, d1, d2] tensor of the parameter's dtype
    (bfloat16 unless it was held in another) with no storage. dtype/device/shape are free; ``t[e]``
    decodes expert e only; any other op decodes all E experts into a new dense tensor (E*d1*d2*2
    bytes) and runs on it."""

    @staticmethod
    def __new__(cls, weights: ExpertWeights):
        t = torch.Tensor._make_wrapper_subclass(cls, weights.shape, dtype=weights.dtype,
                                                device=weights.packed.device, requires_grad=False)
        t._weights = weights
        return t

    def __init__(self, weights: ExpertWeights):
        super().__init__()

    def dense(self) -> torch.Tensor:
        return self._weights.dense_all()

    def __repr__(self, *, tensor_contents=None) -> str:
        return f"FixedExpertsTensor(shape={tuple(self.shape)}, dtype={self.dtype}, device={self.device})"

    #: transformers' initialisers skip a tensor with this flag: these are loaded weights
    _is_hf_initialized = True

    @classmethod
    def __torch_dispatch__(cls, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        _refuse_writes(cls, func, args, kwargs)
        if func is torch.ops.aten.select.int and isinstance(args[0], cls) and args[1] == 0 and not kwargs:
            e = args[2] + args[0].shape[0] if args[2] < 0 else args[2]
            return args[0]._weights.dense(e)
        dense = lambda a: a.dense() if isinstance(a, cls) else a  # noqa: E731
        return func(*tree_map(dense, args), **tree_map(dense, kwargs))

    __torch_function__ = torch._C._disabled_torch_function_impl


def _refuse_writes(cls, func, args, kwargs) -> None:
    """An in-place op on the compressed experts would change a decoded copy and be lost: refuse it."""
    for i, a in enumerate(func._schema.arguments):
        value = args[i] if i < len(args) else kwargs.get(a.name)
        if a.alias_info is not None and a.alias_info.is_write and isinstance(value, cls):
            raise UnsupportedError(f"{func.__name__} would write into compressed experts, which are read-only: "
                                   "decompress_experts(module) first")


class _CompressedExpertsMixin:
    """Placed before a transformers experts class (see :func:`_make_compressed`)."""

    def forward(self, hidden_states, top_k_index, top_k_weights):
        impl = getattr(getattr(self, "config", None), "_experts_implementation", None)
        exact = hidden_states.device.type == "cpu" or _is_exact(self)
        if (exact and impl != "wcodec" and not torch.compiler.is_compiling()
                and not _runs_grouped(self, hidden_states)):
            # the CPU path is exact to the dense model as configured: its own implementation
            # (transformers' default is grouped_mm, whose bf16 sums differ from the eager loop's)
            # over the decoded experts (FixedExpertsTensor decodes when an op reads it); "eager"
            # too, as a class may compute its own way (OpenAI Privacy Filter's loop in float32).
            # The grouped kernels where they run (CUDA, or the interpreter when asked for)
            return self._wcodec_dense_class.forward(self, hidden_states, top_k_index, top_k_weights)
        return experts_forward(self, hidden_states, top_k_index, top_k_weights)

    def __getattr__(self, name: str):
        # a compressed parameter's name reads its buffers (read from __dict__: "_buffers" itself
        # ends here before nn.Module.__init__ set it, and must fail, not recurse)
        buffers = self.__dict__.get("_buffers")
        if buffers is not None and f"{name}_packed" in buffers and f"{name}_shape" in buffers:
            return FixedExpertsTensor(_weights(self, name))
        return super().__getattr__(name)

    def __reduce_ex__(self, protocol):
        # the class is made at run time (one per experts class, not importable by name): pickled
        # as its dense class and rebuilt on load; the cache of views is remade on use
        state = {**self.__dict__, "_wcodec_weights": {}}
        return _compressed_instance, (self._wcodec_dense_class, isinstance(self, _OwnForwardMixin)), state

    def _apply(self, fn, *args, **kwargs):
        self.__dict__["_wcodec_weights"] = {}  # views of the buffers that fn replaces
        from .linear import applied_dtype

        dtypes = self.__dict__.get("_wcodec_dtypes", {})
        for attr in compressed_attrs(self):  # module.to(dtype) / .float(): the dense dtype fn gives
            d = dtypes.get(attr, torch.bfloat16)
            after = applied_dtype(fn, d)
            if after != d:
                _set_dtype(self, attr, after)
        return super()._apply(fn, *args, **kwargs)

    def _load_from_state_dict(self, state_dict, prefix, *args, **kwargs):
        self.__dict__["_wcodec_weights"] = {}
        for attr in compressed_attrs(self):  # other weights pack to other sizes: take the stored ones
            for suffix in ("packed", "offsets", "bases"):
                name = f"{attr}_{suffix}"
                new, old = state_dict.get(prefix + name), self._buffers[name]
                if new is not None and new.shape != old.shape:
                    self._buffers[name] = torch.empty(new.shape, dtype=old.dtype, device=old.device)
        super()._load_from_state_dict(state_dict, prefix, *args, **kwargs)


class _OwnForwardMixin(_CompressedExpertsMixin):
    """Placed before an experts class with a forward of its own (see the module docstring)."""

    def forward(self, *args, **kwargs):
        # the decoded experts are instance attributes for this call only (found before
        # __getattr__, so the module's own code reads them as its parameters); a re-entrant
        # call restores what its caller had
        d, attrs = self.__dict__, compressed_attrs(self)
        before = {a: d[a] for a in attrs if a in d}
        for a in attrs:
            d[a] = _decoded(self, a)
        try:
            return self._wcodec_dense_class.forward(self, *args, **kwargs)
        finally:
            for a in attrs:
                if a in before:
                    d[a] = before[a]
                else:
                    d.pop(a, None)


@torch.compiler.disable
def _decoded(module: nn.Module, attr: str) -> torch.Tensor:
    # the numpy / Triton decoders are not traced: a graph break around each decode
    return _weights(module, attr).dense_all()


_CLASSES: dict = {}


def _compressed_class(cls: type, own_forward: bool) -> type:
    """The compressed subclass of experts class ``cls`` (made once): the experts forward's, or
    for a module with a forward of its own (``own_forward``) the decoding one."""
    if cls not in _CLASSES:
        mixin = _OwnForwardMixin if own_forward else _CompressedExpertsMixin
        _CLASSES[cls] = type(f"Compressed{cls.__name__}", (mixin, cls),
                             {"__module__": __name__, "_wcodec_dense_class": cls})
    return _CLASSES[cls]


def _compressed_instance(cls: type, own_forward: bool) -> nn.Module:
    """An empty instance of ``cls``'s compressed subclass, for unpickling (``__setstate__`` fills it)."""
    compressed = _compressed_class(cls, own_forward)
    return compressed.__new__(compressed)


def _make_compressed(module: nn.Module) -> None:
    """Swap module's class for its compressed subclass (:func:`_compressed_class`)."""
    cls = type(module)
    if issubclass(cls, _CompressedExpertsMixin):
        return
    module.__class__ = _compressed_class(cls, not _is_experts_module(module))
    module.__dict__.setdefault("_wcodec_weights", {})


def decompress_experts(module: nn.Module, attrs=None) -> None:
    """Turn the compressed expert parameters ``attrs`` of ``module`` (default: all) back into
    dense nn.Parameters of their dtype (bit-exact, on the buffers' device); once none is left
    compressed, the module's class is restored. The others stay compressed (the forward reads a
    dense one as the dense module does). Does nothing to a module with none."""
    held = compressed_attrs(module)
    for attr in held if attrs is None else [a for a in attrs if a in held]:
        dense = FixedExpertsTensor(_weights(module, attr)).dense()
        for suffix in SUFFIXES:
            del module._buffers[f"{attr}_{suffix}"]
        module._parameters[attr] = nn.Parameter(dense)
        module.__dict__.get("_wcodec_dtypes", {}).pop(attr, None)
        module.__dict__.get("_wcodec_planned", {}).pop(attr, None)
        module.__dict__["_wcodec_weights"] = {}
    if compressed_attrs(module):
        return
    module.__dict__.pop("_wcodec_weights", None)
    module.__dict__.pop("_wcodec_planned", None)
    module.__dict__.pop("_wcodec_dtypes", None)
    module.__dict__.pop("_wcodec_exact", None)
    if isinstance(module, _CompressedExpertsMixin):
        module.__class__ = module._wcodec_dense_class


def load_compressed_experts(module: nn.Module, state_dict: dict, prefix: str = "") -> list[str]:
    """Make ``module`` (an experts module, dense or compressed, parameters on any device, meta
    included) hold the compressed expert parameters found in ``state_dict`` under ``prefix``
    (the keys :func:`compress_expert_param` writes), as they are (no re-encode), on the device of
    the stored tensors. Returns the attributes loaded. Raises ExpertsKeptDenseError for a stored
    shape that is not the module's parameter's."""
    loaded = []
    if _is_experts_module(module):
        attrs = _expert_attrs(module)
    else:  # a module with a forward of its own: its experts-like parameters, dense or compressed
        attrs = [a for a in module._parameters if _is_own_forward_param(module, a)] + compressed_attrs(module)
    for attr in attrs:
        keys = [f"{prefix}{attr}_{s}" for s in SUFFIXES]
        if not all(k in state_dict for k in keys):
            continue
        packed, offsets, bases, shape = (state_dict[k] for k in keys)
        p = _dense_param(module, attr)
        if p is not None and tuple(p.shape) != tuple(shape.tolist()):
            raise ExpertsKeptDenseError(f"{prefix}{attr}: stored shape {tuple(shape.tolist())}, "
                                        f"the module holds {tuple(p.shape)}")
        _make_compressed(module)
        module._parameters.pop(attr, None)
        if p is not None or attr not in module.__dict__.get("_wcodec_dtypes", {}):
            _set_dtype(module, attr, p.dtype if p is not None else torch.bfloat16)
        dev = packed.device
        _register(module, attr, packed, offsets.to(dev, torch.int64), bases.to(dev, torch.int64),
                  shape.to(dev, torch.int64))
        loaded.append(attr)
    return loaded


def register_implementation() -> None:
    """Register :func:`experts_forward` as transformers' experts implementation ``"wcodec"``
    (``model.set_experts_implementation("wcodec")``); a no-op without transformers."""
    try:
        from transformers.integrations.moe import ALL_EXPERTS_FUNCTIONS
    except ImportError:
        return
    ALL_EXPERTS_FUNCTIONS.register("wcodec", experts_forward)


__all__ = ["ExpertsKeptDenseError", "ExpertWeights", "FixedExpertsTensor", "SUFFIXES", "compress_expert_param",
           "compressed_attrs", "decodes_per_call", "decompress_experts", "expert_linear", "experts_forward", "grouped_forward",
           "is_expert_param", "load_compressed_experts", "load_expert_record", "register_implementation", "stored_record_fits"]
