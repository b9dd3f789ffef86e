"""Kernel tuning at load time, so that none happens while a kept-compressed model serves.

The fused kernels (:mod:`wcodec.gpu.fixed`) are autotuned by Triton once per key (the weight's
N and K, a bucket of the activation rows M, the split-K slices, dtypes) and compiled once per
specialisation (Triton specialises integer arguments such as M on ``== 1`` and divisibility by
16). A serving engine meets new row counts M at every step (a continuous-batching step packs
the tokens of all running sequences into one [M, hidden] matmul), so an untuned process tunes
in the middle of generation: the first fused process on a fresh H100 served 3.5-9x slower than
later ones (issue 28). :func:`warmup` runs each distinct fused weight once for every row count
``1 .. max(fixed.LARGE_M, fixed.WGMMA_MAX_M, fixed.WS_MAX_M) + 1`` right after loading, and each
distinct compressed MoE experts module its own forward over those token counts and the ones
where the grouped kernels change launch (:func:`expert_tokens`): every key and specialisation
the routing can reach is then tuned and compiled (Triton also caches both on
disk, so later processes load them from that cache). First the kernels compiled for this Triton
and GPU that wcodec ships go into that cache (:mod:`wcodec.gpu.kernel_pack`); on a cache still
cold for the model the compiles are spread over worker processes (:mod:`wcodec.gpu.precompile`):
Triton compiles in the calling process, one kernel at a time.

Why every M and not one call per bucket: within one bucket the routing still changes the key
(the tiled kernel's kind and split-K slices follow ``ceil(M / 64)``; the kernels of branch
``kernels`` key the mma kernel per power of two of M) and Triton's specialisation changes with
``M % 16``; a sweep over every M needs no copy of those rules, at the price of ``LARGE_M``
calls per distinct weight, each a few microseconds to a fraction of a millisecond once tuned.
"""

from __future__ import annotations

import contextlib
import time

import torch


def rows() -> range:
    """The activation row counts M that :func:`warmup` runs: 1 .. the largest of ``fixed.LARGE_M``,
    ``fixed.WGMMA_MAX_M`` and ``fixed.WS_MAX_M``, plus one above them. From LARGE_M on,
    :func:`wcodec.gpu.fixed.linear` decodes and calls cuBLAS, except where the warp-specialised
    (up to WS_MAX_M) or wgmma (up to WGMMA_MAX_M) kernels take the rows on sm_90; above them
    nothing tunes, and the one call there compiles the decode path's kernel (on sm_90 no smaller
    M reaches it for a weight of few escapes: a prefill compiled it)."""
    from ..gpu import fixed as fx

    return range(1, max(fx.LARGE_M, fx.WGMMA_MAX_M, fx.WS_MAX_M) + 2)


def buckets() -> list[int]:
    """The distinct autotuning buckets of M (``fixed._bucket``) that :func:`rows` covers."""
    from ..gpu import fixed as fx

    return sorted({fx._bucket(m) for m in rows()})


def distinct_weights(model: torch.nn.Module) -> dict:
    """One fused module per distinct kernel key of ``model``: ``{("linear", N, K, has_bias,
    device): CompressedLinear, ("embedding", N, K, device): CompressedEmbedding, ("experts",
    class name, ((attr, (E, d1, d2)), ...), device): compressed experts module}`` (the first of
    each in ``named_modules`` order; modules holding the same key share every tuning result).
    Experts modules count when their CUDA forward runs the fused kernels
    (:func:`wcodec.torch.experts.decodes_per_call` false)."""
    from ..torch import experts as ex
    from ..torch.embedding import CompressedEmbedding
    from ..torch.linear import CompressedLinear

    found: dict = {}
    for _, m in model.named_modules():
        if isinstance(m, CompressedLinear):
            key = ("linear", *m._shape(), m.bias is not None, m.w_packed.device)
        elif isinstance(m, CompressedEmbedding):
            n, k = m._shape()
            key = ("embedding", n, k, m.w_packed.device)
        elif isinstance(m, ex._CompressedExpertsMixin) and ex.compressed_attrs(m) and not ex.decodes_per_call(m):
            attrs = ex.compressed_attrs(m)
            shapes = tuple((a, tuple(m._buffers[f"{a}_shape"].tolist())) for a in attrs)
            key = ("experts", type(m).__name__, shapes, m._buffers[f"{attrs[0]}_packed"].device)
        else:
            continue
        found.setdefault(key, m)
    return found


def warm_module(module: torch.nn.Module, dtype: torch.dtype) -> int:
    """Run one CompressedLinear's kernels for every M of :func:`rows` (x: zeros [M, K] of
    ``dtype``, the module's bias cast as its forward casts it), one CompressedEmbedding's row
    lookup of int64 and of int32 indices, or a compressed experts module's forward
    (:func:`warm_experts`), on the module's device; returns the number of calls.
    One module stands for all of its shape: the kernels do not specialise on what differs between
    weights of one shape (``wcodec.gpu.fixed_kernels.PER_WEIGHT``). The module is not modified."""
    from ..gpu import fixed as fx
    from ..gpu import fixed16 as fx16
    from ..gpu.precompile import sweep
    from ..torch import experts as ex
    from ..torch.embedding import CompressedEmbedding

    if isinstance(module, ex._CompressedExpertsMixin):
        return warm_experts(module, dtype)
    fw = module.fixed_weight
    with torch.no_grad():
        if isinstance(module, CompressedEmbedding):  # token ids come as int64 or int32 (an engine's buffers)
            for ids in (torch.int64, torch.int32):
                fx.embedding(torch.zeros(1, dtype=ids, device=fw.device), fw)
            return 2
    bias = _bias(module, dtype)
    if isinstance(fw, fx16.Fixed16Weight):  # an fp16 weight tunes its GEMV only; above it, decode + cuBLAS
        return sweep(fw, bias, dtype, range(1, fx16.GEMV_MAX_M + 2), linear=fx16.linear)
    return sweep(fw, bias, dtype, rows())


def expert_tokens(n_experts: int, top_k: int) -> list[int]:
    """The token counts T that :func:`warm_experts` runs: every M of :func:`rows`, and the first T
    whose ``T * top_k`` routed slots pass ``fixed_grouped.PREFILL_SLOTS`` and
    ``fixed_grouped.DECODE_SLOTS`` slots per expert (the prefill tiles; all experts decoded and
    ``torch._grouped_mm``), so that every launch the grouped routing can choose is compiled."""
    from ..gpu import fixed_grouped as fg

    edges = {limit * n_experts // top_k + 1 for limit in (fg.PREFILL_SLOTS, fg.DECODE_SLOTS)}
    return sorted(set(rows()) | edges)


def warm_experts(module: torch.nn.Module, dtype: torch.dtype) -> int:
    """Run a compressed experts module's own forward for every T of :func:`expert_tokens`
    (hidden_states: zeros [T, hidden] of ``dtype``; top_k_index ``(arange(T * k) % E).view(T, k)``,
    k the config's ``num_experts_per_tok`` where the module has a config, else 2, at most E:
    the slots reach every expert evenly; top_k_weights 1/k) on the module's device; returns the
    number of calls. The forward is what serving runs, so its routing (GEMV, tiles, decode +
    grouped_mm; the per-expert fused linears where one projection is kept dense) needs no copy
    here. At the largest T the decode route holds the dense experts transiently (Mixtral's
    gate_up_proj: 1.9 GB), as a prompt of that length would. Its parameters and buffers are
    not modified (its caches of expert views fill as at its first serving call)."""
    from ..torch import experts as ex

    up = ex._expert_attrs(module)[0]
    shape = (tuple(module._buffers[f"{up}_shape"].tolist()) if f"{up}_packed" in module._buffers
             else tuple(getattr(module, up).shape))
    n_experts, hidden = shape[0], shape[1] if ex._transposed(module) else shape[2]
    top_k = getattr(getattr(module, "config", None), "num_experts_per_tok", None) or 2
    top_k = max(1, min(int(top_k), n_experts))
    device = module._buffers[f"{ex.compressed_attrs(module)[0]}_packed"].device
    tokens = expert_tokens(n_experts, top_k)
    with torch.no_grad():
        for t in tokens:
            ids = (torch.arange(t * top_k, device=device) % n_experts).view(t, top_k)
            # forward, not __call__: a tensor-parallel plan's hooks would reduce across ranks
            module.forward(torch.zeros(t, hidden, dtype=dtype, device=device), ids,
                           torch.full((t, top_k), 1.0 / top_k, dtype=dtype, device=device))
    return len(tokens)


def _bias(module: torch.nn.Module, dtype: torch.dtype) -> torch.Tensor | None:
    """A linear's bias as its forward passes it (cast to the activations' dtype), or None."""
    return None if module.bias is None else module.bias.detach().to(dtype)


#: a first call slower than this (seconds) means Triton compiled: the cache is cold for this model
PROBE_COLD_S = 0.5
#: the same once the kernel pack is installed: the probe then still pays Triton's C compile of the
#: kernel's launcher (not in the pack: a host binary), H200 0.53 s against 1.31-1.45 s for a probe
#: that compiles its kernels too (tools/warmup_cold.py, 2026-12-03)
PROBE_COLD_PACKED_S = 1.0


def _precompile(mods: list, dtype: torch.dtype, device, packed: bool = False) -> dict | None:
    """On a cold Triton cache, compile the bf16 fused linears' kernels in worker processes
    (:func:`wcodec.gpu.precompile.precompile`) before the caller's own sweep loads them from the
    cache. Cold means: the first linear's first two row counts took over PROBE_COLD_S
    (PROBE_COLD_PACKED_S when ``packed``: a kernel pack is in the cache). Returns the precompile
    report, with ``probe_s``; None when there is no such linear."""
    from ..gpu import fixed as fx
    from ..gpu import precompile as pc

    lins = [m for m in mods if hasattr(m, "in_features") and type(m.fixed_weight) is fx.FixedWeight]
    if not lins:
        return None
    first = lins[0]
    t = time.perf_counter()
    pc.sweep(first.fixed_weight, _bias(first, dtype), dtype, (1, 2))
    torch.cuda.synchronize(device)
    probe = time.perf_counter() - t
    if probe < (PROBE_COLD_PACKED_S if packed else PROBE_COLD_S):
        return {"probe_s": probe, "workers": 0, "tasks": 0, "failed": 0, "seconds": 0.0, "errors": []}
    tasks = [pc.task_of(m.fixed_weight, m.bias is not None, dtype, rows()) for m in lins]
    return {"probe_s": probe, **pc.precompile(tasks, device)}


def _dtype(model: torch.nn.Module) -> torch.dtype:
    """The activations' dtype: the model's floating dtype (bfloat16 for a kept-compressed model)."""
    dtype = getattr(model, "dtype", None)
    return dtype if isinstance(dtype, torch.dtype) and dtype.is_floating_point else torch.bfloat16


def warmup(model: torch.nn.Module, dtype: torch.dtype | None = None) -> dict:
    """Tune and compile the fused kernels of every CUDA CompressedLinear / CompressedEmbedding
    of ``model`` for every row count of :func:`rows` (see the module docstring), and of every
    compressed experts module for every token count of :func:`expert_tokens`; on a cold Triton
    cache the shipped kernel pack is installed (:func:`wcodec.gpu.kernel_pack.install`) and the bf16
    linears' kernels it lacks are compiled by worker processes (:func:`_precompile`).
    No-op on the CPU and under the Triton interpreter (nothing to tune there).

    dtype: the activations' dtype (default: the model's, else bfloat16). The model is not
    modified (its replay caches are untouched: the kernels are called directly with scratch
    inputs of zeros). Returns ``{"weights": distinct keys warmed, "calls": kernel calls,
    "seconds": wall time, "skipped": why nothing ran, or None, "kernel_pack": {device: the
    pack's report (:func:`wcodec.gpu.kernel_pack.install`)}, "precompile": {device: the workers'
    report (:func:`wcodec.gpu.precompile.precompile`) with the probe's seconds, or None}}``.
    """
    from ..gpu import fixed as fx
    from ..gpu import kernel_pack

    todo = {k: m for k, m in distinct_weights(model).items() if k[-1].type == "cuda"}
    if not todo or fx._interpreting():
        why = "no fused weight on a CUDA device" if not todo else "Triton interpreter"
        return {"weights": 0, "calls": 0, "seconds": 0.0, "skipped": why}
    dtype = dtype or _dtype(model)
    t0, calls, pre, packs = time.perf_counter(), 0, {}, {}
    for dev in {k[-1] for k in todo}:
        with torch.cuda.device(dev):
            mods = [m for key, m in todo.items() if key[-1] == dev]
            packs[str(dev)] = kernel_pack.install(dev)
            pre[str(dev)] = _precompile(mods, dtype, dev, packs[str(dev)]["ready"])
            for m in mods:
                calls += warm_module(m, dtype)
            torch.cuda.synchronize(dev)
    torch.cuda.empty_cache()  # the tuner's scratch (and its 256 MB L2 flush buffer) goes back
    return {"weights": len(todo), "calls": calls, "seconds": time.perf_counter() - t0, "skipped": None,
            "kernel_pack": packs, "precompile": pre}


def after_load(model: torch.nn.Module, option) -> dict | None:
    """The quantizer's after-load step: :func:`warmup` when ``option`` (``WcodecConfig.warmup``)
    is True; None (the default) and False skip it: a load that serves few row counts tunes only
    those, on first use (H200, empty Triton cache: a 7B layer's warm-up 2.6-3.2 s with the
    shipped kernel pack, 15.4 s without; a Mixtral-wide layer 4.1 / 19.3 s).
    The result is set as ``model.wcodec_warmup`` (None when skipped). Raises ValueError for an
    option that is not True, False or None."""
    if option not in (None, True, False):
        raise ValueError(f"warmup must be True, False or None (auto), got {option!r}")
    report = warmup(model) if option is True else None
    with contextlib.suppress(AttributeError):  # a model class refusing new attributes: no report
        model.wcodec_warmup = report
    return report


__all__ = ["rows", "buckets", "distinct_weights", "expert_tokens", "warm_module", "warm_experts", "warmup",
           "after_load"]
