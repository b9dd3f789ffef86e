"""Tensor parallelism (transformers' ``tp_plan``) over the modules that keep_compressed makes.

transformers (checked with 5.17 and 5.24, ``transformers.distributed``) applies a plan before it loads
the weights: each planned parameter becomes a DTensor (on the meta device) sharded as its style
says, each planned module gets the style's forward (``TensorParallelLayer.install_forward``:
input and output transforms, the all-reduce after a row-parallel matmul), and each rank reads
its shard of every tensor through ``get_slice`` (``DtensorShardOperation``; a wcodec folder
decodes or cuts only that block, :mod:`wcodec.hf.checkpoint`). keep_compressed swaps a module
for a compressed one (CompressedLinear, CompressedEmbedding), or an experts module's class, while
the weights load, after the plan was applied; :func:`adopt` then makes the new module serve the
plan as the dense one did:

- it declares the whole layer's sizes, as a dense module under a plan does (``in_features`` /
  ``out_features``, ``num_embeddings`` / ``embedding_dim``: the styles read them to rebuild a
  gathered output) and holds its rank's shard (``_shape()``);
- it runs on local tensors (``_hf_quantized_needs_local_tp``, the flag transformers' styles
  read for quantized modules): a replicated input in, this rank's output features out
  (column-parallel), a partial sum that the style all-reduces, the bias added once after it
  (row-parallel), a partial lookup summed across ranks (vocabulary-parallel embedding: ids of
  other ranks' rows give zeros, ``CompressedEmbedding.vocab_range``);
- the plan's style is installed on it again (its forward wraps the module's own); a compressed
  experts module shows the style's transforms the dense parameters it replaced (their plan's
  sharding, no data: :class:`_PlannedView`), which 5.17's experts style reads to decide whether
  to all-reduce the rank's partial output.

What a split must respect, and what happens otherwise: see :func:`local_block`.
"""

from __future__ import annotations

import functools

import torch


def is_dtensor(t) -> bool:
    """Whether ``t`` is a torch DTensor (a parameter sharded by a tensor-parallel plan)."""
    if not isinstance(t, torch.Tensor) or not torch.distributed.is_available():
        return False
    from torch.distributed.tensor import DTensor

    return isinstance(t, DTensor)


def local_block(t) -> list[tuple[int, int]] | None:
    """The block ``[(start, stop)]`` (one pair per dim) of the whole tensor that this rank holds
    of DTensor ``t``, or None when its placement is not one block (a packed gate/up projection's
    ``_StridedShard`` holds a slice of each half: transformers then reads each piece and
    concatenates them, so the shard reaches keep_compressed decoded and is encoded again)."""
    from torch.distributed.tensor import Replicate, Shard
    from torch.distributed.tensor._utils import compute_local_shape_and_global_offset

    if not all(type(p) in (Shard, Replicate) for p in t.placements):
        return None
    shape, offset = compute_local_shape_and_global_offset(t.shape, t.device_mesh, t.placements)
    return [(int(o), int(o) + int(n)) for o, n in zip(offset, shape)]


def local(t: torch.Tensor) -> torch.Tensor:
    """This rank's local tensor of a DTensor, else ``t``."""
    return t.to_local() if is_dtensor(t) else t


def like(t: torch.Tensor, ref: torch.Tensor) -> torch.Tensor:
    """``t`` (a rank's local tensor) as a DTensor sharded like ``ref`` when ``ref`` is one (the
    parameter a plan made), sharing ``t``'s memory; else ``t``."""
    if not is_dtensor(ref):
        return t
    from torch.distributed.tensor import DTensor

    return DTensor.from_local(t, ref.device_mesh, ref.placements, run_check=False, shape=ref.shape,
                              stride=ref.stride())


def _tp_api():
    """transformers' tensor-parallel module: ``transformers.distributed.tensor_parallel`` (5.24
    has it; ``transformers.integrations.tensor_parallel`` is its shim in 5.25), else the older
    ``transformers.integrations.tensor_parallel``."""
    try:
        from transformers.distributed import tensor_parallel
    except ImportError:
        from transformers.integrations import tensor_parallel
    return tensor_parallel


def _style(model, module_name: str):
    """transformers' parallel style object that the model's plan gives module ``module_name``
    (its layer numbers matched by ``*``, as transformers matches them), or None."""
    api = _tp_api()
    plan = getattr(model, "tp_plan", None) or {}
    name = plan.get(api.replace_layer_number_by_wildcard(module_name))
    return None if name is None else api.ALL_PARALLEL_STYLES[name]


def adopt(model, module_name: str, old: torch.nn.Module, new: torch.nn.Module) -> None:
    """Make ``new`` (a compressed module holding this rank's shard, made from ``old``, the dense
    module transformers' plan sharded) serve the plan in its place: the whole layer's declared
    sizes, the vocabulary range of an embedding split by rows, local tensors, the plan's style.
    Does nothing when ``old``'s weight is not a DTensor (no plan applies to it)."""
    weight = old._parameters.get("weight")
    if not is_dtensor(weight):
        return
    for attr in ("in_features", "out_features", "num_embeddings", "embedding_dim"):
        if hasattr(old, attr) and hasattr(new, attr):
            setattr(new, attr, getattr(old, attr))
    block = local_block(weight)
    if isinstance(old, torch.nn.Embedding) and block is not None and block[0] != (0, weight.shape[0]):
        new.vocab_range = block[0]
    install(model, module_name, new, weight.device_mesh)


def install(model, module_name: str, module: torch.nn.Module, mesh, rewrap: bool = False) -> bool:
    """Install the plan's style for ``module_name`` on ``module`` (which runs on local tensors
    from now on); ``rewrap``: drop the style's forward installed before (the module changed
    class, or its forward was replaced: the style must wrap the new one). Returns False when the
    plan names no style for it."""
    style = _style(model, module_name)
    if style is None:
        return False
    if rewrap:
        module.__dict__.pop("forward", None)
    module._hf_quantized_needs_local_tp = True
    if module.__dict__.get("_wcodec_planned"):
        style = _planned(style)
    _local_inference(style).install_forward(module, mesh)
    module._is_hooked = True
    return True


class _PlannedView:
    """A compressed module as the plan made it, for its style's input and output transforms:
    its own attributes, and among its parameters the dense ones it replaced (meta DTensors with
    the plan's placements, ``module._wcodec_planned``). transformers 5.17's experts style
    all-reduces the rank's partial output only when the module has a sharded DTensor parameter
    (5.24's always does): shown the module's buffers alone it would return the partial sum."""

    def __init__(self, module: torch.nn.Module):
        object.__setattr__(self, "_module", module)

    def __getattr__(self, name: str):
        return getattr(self._module, name)

    def __setattr__(self, name: str, value) -> None:
        setattr(self._module, name, value)

    def named_parameters(self, prefix: str = "", recurse: bool = True, remove_duplicate: bool = True):
        yield from self._module.named_parameters(prefix, recurse, remove_duplicate)
        for name, p in self._module.__dict__.get("_wcodec_planned", {}).items():
            yield (f"{prefix}.{name}" if prefix else name), p

    def parameters(self, recurse: bool = True):
        for _, p in self.named_parameters(recurse=recurse):
            yield p


_PLANNED: dict = {}


def _planned(style):
    """``style`` (the same settings) with its input and output transforms shown the module as
    the plan made it (:class:`_PlannedView`); its forward context (which swaps the module's own
    DTensor parameters for local ones) gets the module itself."""
    if id(style) not in _PLANNED:
        cls = type(style)

        class Planned(cls):
            def transform_inputs_pre_forward(self, module, *args, **kwargs):
                return super().transform_inputs_pre_forward(_PlannedView(module), *args, **kwargs)

            def transform_output_post_forward(self, module, *args, **kwargs):
                return super().transform_output_post_forward(_PlannedView(module), *args, **kwargs)

        Planned.__name__ = Planned.__qualname__ = f"Planned{cls.__name__}"
        planned = object.__new__(Planned)
        planned.__dict__.update(style.__dict__)
        _PLANNED[id(style)] = (style, planned)  # the style held: its id is not reused
    return _PLANNED[id(style)][1]


_LOCAL_STYLES: dict = {}


def _local_inference(style):
    """``style`` itself, or for a row-parallel style that reduces to a replicated output, the same
    style reducing a local output as it does an nn.Linear's without autograd: one
    ``dist.all_reduce`` and the bias added after it. Its DTensor way (a Partial tensor
    redistributed to Replicate) computes the same sum with more host work per call, and eager
    decoding is bound by host time."""
    from torch.distributed.tensor import Replicate

    RowwiseParallel = _tp_api().RowwiseParallel
    if type(style) is not RowwiseParallel or not isinstance(style.output_layouts, Replicate):
        return style
    if id(style) not in _LOCAL_STYLES:
        _LOCAL_STYLES[id(style)] = _rowwise_local()(
            input_layouts=style.input_layouts, output_layouts=style.output_layouts,
            use_local_output=style.use_local_output)
    return _LOCAL_STYLES[id(style)]


@functools.cache
def _rowwise_local():
    import torch.distributed as dist
    from torch.distributed.tensor import DTensor

    class RowwiseLocal(_tp_api().RowwiseParallel):
        def transform_output_post_forward(self, module, output, mesh, *args, **kwargs):
            # (transformers 5.25 added a config keyword: passed on as it comes)
            if isinstance(output, DTensor) or output.requires_grad:
                return super().transform_output_post_forward(module, output, mesh, *args, **kwargs)
            dist.all_reduce(output, group=mesh.get_group() if mesh.ndim == 1 else mesh.get_group("tp"))
            bias = module._parameters.get("bias")
            return output if bias is None else output + local(bias)

    return RowwiseLocal


def refuse_sharded(model, what: str) -> None:
    """Raise UnsupportedError when ``model`` was loaded split across tensor-parallel ranks: each
    rank holds its shards compressed, which ``what`` (saving, dequantizing) would take for whole
    tensors; the shards are not gathered back."""
    size = getattr(model, "tp_size", None)
    if isinstance(size, int) and size > 1:
        from ..errors import UnsupportedError

        raise UnsupportedError(f"{what}: this model is split across {size} tensor-parallel ranks (tp_plan), each "
                               f"holding its shard of the weights compressed; {what} would take one rank's shards "
                               f"for whole tensors. Load the folder without tp_plan to do it")


def held_bytes(model) -> dict[str, int]:
    """Bytes of ``model``'s weights as this process holds them (a tensor-parallel rank: its
    shards), each tensor's own bytes counted once: "compressed" (the fixed-rate buffers of fused
    modules and compressed experts, the records decoded just in time), "scratch" (the
    just-in-time decode buffers, whose views the modules' weights are), "dense" (every other
    parameter and buffer). A tensor that is a view of a larger storage (a shard of a memory-mapped
    file) counts its own size."""
    from ..torch.experts import SUFFIXES

    out = {"compressed": 0, "scratch": 0, "dense": 0}
    holders = getattr(model, "wcodec_weights", None)
    holders = holders if isinstance(holders, list) else [holders] if holders is not None else []
    spans = []  # the scratch buffers' byte ranges
    for cw in holders:
        out["compressed"] += int(getattr(cw, "compressed_nbytes", 0))
        for t in (getattr(cw, "scratch", None), getattr(cw, "raw", None), getattr(cw, "work", None)):
            if t is not None and t.numel():
                spans.append((t.data_ptr(), t.data_ptr() + t.numel() * t.element_size()))
                out["scratch"] += t.numel() * t.element_size()
    packed = tuple(f"_{s}" for s in SUFFIXES) + ("w_packed",)
    seen = set()
    for name, t in [*model.named_parameters(), *model.named_buffers()]:
        t = local(t)
        nbytes, ptr = t.numel() * t.element_size(), t.data_ptr() if t.device.type != "meta" else None
        if ptr is None or (ptr, nbytes) in seen or any(a <= ptr < b for a, b in spans):
            continue
        seen.add((ptr, nbytes))
        out["compressed" if name.endswith(packed) else "dense"] += nbytes
    return out
