"""Kernel tuning at load time, so that none happens while a kept-compressed model serves.

The fused kernels (:mod:`wcodec.gpu.fixed`) are autotuned by Triton once per key (the weight's
N and K, a bucket of the activation rows M, the split-K slices, dtypes) and compiled once per
specialisation (Triton specialises integer arguments such as M on ``== 1`` and divisibility by
16). A serving engine meets new row counts M at every step (a continuous-batching step packs
the tokens of all running sequences into one [M, hidden] matmul), so an untuned process tunes
in the middle of generation: the first fused process on a fresh H100 served 3.5-9x slower than
later ones (issue 28). :func:`warmup` runs each distinct fused weight once for every row count
``1 .. max(fixed.LARGE_M, fixed.WGMMA_MAX_M)`` right after loading: every key and specialisation the routing can reach
is then tuned and compiled (Triton also caches both on disk, so later processes only compile
from that cache).

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
    """The activation row counts M that :func:`warmup` runs: 1 .. the larger of ``fixed.LARGE_M``
    and ``fixed.WGMMA_MAX_M`` inclusive (from LARGE_M on, :func:`wcodec.gpu.fixed.linear`
    decodes and calls cuBLAS, except where the wgmma kernel takes up to WGMMA_MAX_M rows on
    sm_90: above both nothing tunes, one call warms the decode path's kernels)."""
    from ..gpu import fixed as fx

    return range(1, max(fx.LARGE_M, fx.WGMMA_MAX_M) + 1)


def buckets() -> list[int]:
    """The distinct autotuning buckets of M (``fixed._bucket``) that :func:`rows` covers."""
    from ..gpu import fixed as fx

    return sorted({fx._bucket(m) for m in rows()})


def distinct_weights(model: torch.nn.Module) -> dict:
    """One fused module per distinct kernel key of ``model``: ``{("linear", N, K, has_bias,
    device): CompressedLinear, ("embedding", N, K, device): CompressedEmbedding}`` (the first of
    each in ``named_modules`` order; modules holding the same key share every tuning result)."""
    from ..torch.embedding import CompressedEmbedding
    from ..torch.linear import CompressedLinear

    found: dict = {}
    for _, m in model.named_modules():
        if isinstance(m, CompressedLinear):
            key = ("linear", m.out_features, m.in_features, m.bias is not None, m.w_packed.device)
        elif isinstance(m, CompressedEmbedding):
            n, k = m._shape()
            key = ("embedding", n, k, m.w_packed.device)
        else:
            continue
        found.setdefault(key, m)
    return found


def warm_module(module: torch.nn.Module, dtype: torch.dtype) -> int:
    """Run one CompressedLinear's kernels for every M of :func:`rows` (x: zeros [M, K] of
    ``dtype``, the module's bias cast as its forward casts it), or one CompressedEmbedding's row
    lookup, on the module's device; returns the number of calls. The module is not modified."""
    from ..gpu import fixed as fx
    from ..gpu import fixed16 as fx16
    from ..torch.embedding import CompressedEmbedding

    fw = module.fixed_weight
    with torch.no_grad():
        if isinstance(module, CompressedEmbedding):
            fx.embedding(torch.zeros(1, dtype=torch.int64, device=fw.device), fw)
            return 1
        bias = None if module.bias is None else module.bias.detach().to(dtype)
        x = torch.zeros((rows()[-1], fw.K), dtype=dtype, device=fw.device)
        # an fp16 weight (CompressedLinear16) tunes its GEMV only; above it, decode + cuBLAS
        lin, ms = (fx16.linear, range(1, fx16.GEMV_MAX_M + 2)) if isinstance(fw, fx16.Fixed16Weight) \
            else (fx.linear, rows())
        for n in ms:
            lin(x[:n], fw, bias)  # x[:n] is contiguous, aligned as a fresh tensor
        return len(ms)


def _dtype(model: torch.nn.Module) -> torch.dtype:
    """The activations' dtype: the model's floating dtype (bfloat16 for a kept-compressed model)."""
    dtype = getattr(model, "dtype", None)
    return dtype if isinstance(dtype, torch.dtype) and dtype.is_floating_point else torch.bfloat16


def warmup(model: torch.nn.Module, dtype: torch.dtype | None = None) -> dict:
    """Tune and compile the fused kernels of every CUDA CompressedLinear / CompressedEmbedding
    of ``model`` for every row count of :func:`rows` (see the module docstring). No-op on the
    CPU and under the Triton interpreter (nothing to tune there).

    dtype: the activations' dtype (default: the model's, else bfloat16). The model is not
    modified (its replay caches are untouched: the kernels are called directly with scratch
    inputs of zeros). Returns ``{"weights": distinct keys warmed, "calls": kernel calls,
    "seconds": wall time, "skipped": why nothing ran, or None}``.
    """
    from ..gpu import fixed as fx

    todo = {k: m for k, m in distinct_weights(model).items() if k[-1].type == "cuda"}
    if not todo or fx._interpreting():
        why = "no fused weight on a CUDA device" if not todo else "Triton interpreter"
        return {"weights": 0, "calls": 0, "seconds": 0.0, "skipped": why}
    dtype = dtype or _dtype(model)
    t0, calls = time.perf_counter(), 0
    for dev in {k[-1] for k in todo}:
        with torch.cuda.device(dev):
            for key, m in todo.items():
                if key[-1] == dev:
                    calls += warm_module(m, dtype)
            torch.cuda.synchronize(dev)
    torch.cuda.empty_cache()  # the tuner's scratch (and its 256 MB L2 flush buffer) goes back
    return {"weights": len(todo), "calls": calls, "seconds": time.perf_counter() - t0, "skipped": None}


def after_load(model: torch.nn.Module, option) -> dict | None:
    """The quantizer's after-load step: :func:`warmup` when ``option`` (``WcodecConfig.warmup``)
    is True; None (the default) and False skip it (its cost on a fresh GPU is not measured yet:
    on the H100 a test's load with it did not finish in 150 s).
    The result is set as ``model.wcodec_warmup`` (None when skipped). Raises ValueError for an
    option that is not True, False or None."""
    if option not in (None, True, False):
        raise ValueError(f"warmup must be True, False or None (auto), got {option!r}")
    report = warmup(model) if option is True else None
    with contextlib.suppress(AttributeError):  # a model class refusing new attributes: no report
        model.wcodec_warmup = report
    return report


__all__ = ["rows", "buckets", "distinct_weights", "warm_module", "warmup", "after_load"]
