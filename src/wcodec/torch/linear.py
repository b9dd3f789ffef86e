"""CompressedLinear: an nn.Linear whose bf16 weight stays in the fixed-rate layout on the device
and is decoded inside the matmul (``wcodec.gpu.fixed``), so it reads ~12 instead of 16 bits per
weight. Forward and the input gradient run through ``torch.library`` custom ops, so
``torch.compile`` and CUDA graphs see one opaque op; the weight is frozen (adapters such as LoRA
train on top), the bias trains.
"""

from __future__ import annotations

from typing import Optional

import torch
from torch import nn

from ..errors import CorruptDataError
from ..gpu import fixed as fx
from .weight_view import FixedWeightTensor


@torch.library.custom_op("wcodec::fixed_linear", mutates_args=())
def _fixed_linear(x: torch.Tensor, packed: torch.Tensor, bias: Optional[torch.Tensor],
                  base: int, n: int, k: int) -> torch.Tensor:
    return fx.linear(x, fx.unpack(packed, base, n, k), bias)


@_fixed_linear.register_fake
def _(x, packed, bias, base, n, k):
    return x.new_empty((*x.shape[:-1], n))


@torch.library.custom_op("wcodec::fixed_grad_input", mutates_args=())
def _fixed_grad_input(g: torch.Tensor, packed: torch.Tensor, base: int, n: int, k: int) -> torch.Tensor:
    return fx.grad_input(g, fx.unpack(packed, base, n, k))


@_fixed_grad_input.register_fake
def _(g, packed, base, n, k):
    return g.new_empty((*g.shape[:-1], k))


def _setup_context(ctx, inputs, output):
    x, packed, bias, base, n, k = inputs
    ctx.save_for_backward(packed)
    ctx.meta = (base, n, k, bias is not None)


def _backward(ctx, grad):
    packed, = ctx.saved_tensors
    base, n, k, has_bias = ctx.meta
    gx = _fixed_grad_input(grad.contiguous(), packed, base, n, k) if ctx.needs_input_grad[0] else None
    gb = grad.reshape(-1, n).sum(0) if has_bias and ctx.needs_input_grad[2] else None
    return gx, None, gb, None, None, None


_fixed_linear.register_autograd(_backward, setup_context=_setup_context)


class _FixedLinearFn(torch.autograd.Function):
    """Eager training path: the kernels of the custom ops above without their dispatch, which
    costs hundreds of microseconds of host time per call (measured on a LoRA step on the H100)."""

    @staticmethod
    def forward(ctx, x, bias, fw):
        ctx.fw, ctx.has_bias = fw, bias is not None  # fw's buffers are frozen: no version check needed
        return fx.linear(x, fw, bias)

    @staticmethod
    def backward(ctx, grad):
        fw = ctx.fw
        gx = fx.grad_input(grad.contiguous(), fw) if ctx.needs_input_grad[0] else None
        gb = grad.reshape(-1, fw.N).sum(0) if ctx.has_bias and ctx.needs_input_grad[1] else None
        return gx, gb, None


def applied_dtype(fn, dtype: torch.dtype) -> torch.dtype:
    """The dtype that ``nn.Module._apply``'s ``fn`` gives a floating tensor of ``dtype``: the new
    one for ``module.to(dtype)`` / ``.float()`` / ``.half()`` (which cast floating tensors only,
    so a compressed module's uint8 buffers stay), ``dtype`` itself for a move. Probed on an
    empty tensor; an ``fn`` that cannot take one leaves ``dtype``."""
    try:
        after = fn(torch.empty(0, dtype=dtype))
    except (RuntimeError, TypeError, ValueError):
        return dtype
    return after.dtype if isinstance(after, torch.Tensor) and after.is_floating_point() else dtype


class FixedBuffers(nn.Module):
    """Holds a FixedWeight as one uint8 buffer ``w_packed`` (``wcodec.gpu.fixed.pack``:
    ``.to(device)`` moves it, ``state_dict`` saves it; one graph input per layer under
    torch.compile). ``_shape()`` is the held weight's [N, K]: the module's declared sizes
    (``in_features`` ...) are those too, but for a tensor-parallel shard, which declares the whole
    layer's as nn.Linear does under transformers' plan (:mod:`wcodec.hf.tp`). A subclass of
    another layout (``wcodec.torch.linear16``) also sets ``_view_type``, ``_pack`` and
    ``_check_packed``."""

    #: the ``.weight`` view's class (its constructor takes packed, base, n, k)
    _view_type = FixedWeightTensor
    #: the layout's packing into one uint8 buffer
    _pack = staticmethod(fx.pack)

    #: the dtype the module computes and returns in, and its ``.weight`` reads as: the layout's
    #: (bfloat16; float16 for CompressedLinear16) until ``module.to(dtype)`` / ``.float()`` /
    #: ``.half()`` casts it (the layout's values cast, as the dense module's cast weight holds)
    weight_dtype = torch.bfloat16

    def _register_fixed(self, fw: fx.FixedWeight) -> None:
        self.register_buffer("w_packed", self._pack(fw))
        self.base = fw.base
        self._n, self._k = fw.N, fw.K

    def _shape(self) -> tuple[int, int]:
        return self._n, self._k

    @property
    def weight(self) -> FixedWeightTensor:
        """The weight as a :class:`~wcodec.torch.weight_view.FixedWeightTensor` ([N, K] bfloat16,
        frozen): dtype, device and shape are free to read, any op on it decodes the whole weight
        (a new tensor each time). Not a parameter or buffer: ``state_dict`` holds ``w_packed``.
        A Parameter assigned to ``weight`` (transformers' ``tie_weights`` gives a tied lm_head
        the embedding's) is registered and returned instead; ``forward`` keeps the layout."""
        tied = self._parameters.get("weight")
        if tied is not None:
            return tied
        packed, shape = self._buffers["w_packed"], self._shape()
        view = self.__dict__.get("_weight_view")
        if view is not None and view.backed_by(packed, self.base, *shape, self.weight_dtype):
            return view
        view = self._view_type(packed, self.base, *shape, self.weight_dtype)
        if not torch.compiler.is_compiling():  # no attribute writes inside a traced forward
            self.__dict__["_weight_view"] = view
        return view

    def register_parameter(self, name: str, param) -> None:
        if name == "weight" and "weight" not in self._parameters:  # the property is no attribute clash
            self._parameters["weight"] = None
        super().register_parameter(name, param)

    @property
    def fixed_weight(self) -> fx.FixedWeight:
        """The weight's fixed layout as views of ``w_packed`` (no copy)."""
        return fx.unpack(self.w_packed, self.base, *self._shape())

    def _apply(self, fn, *args, **kwargs):
        self.__dict__.pop("_weight_view", None)  # it holds the buffer that fn replaces
        self.weight_dtype = applied_dtype(fn, self.weight_dtype)
        return super()._apply(fn, *args, **kwargs)

    def _load_from_state_dict(self, state_dict, prefix, *args, **kwargs):
        self.__dict__.pop("_weight_view", None)  # the buffer may be replaced below
        # untrusted input: everything checked against this module's declared shape before any
        # allocation or copy (wcodec.torch.fixed_state); CorruptDataError otherwise
        from . import fixed_state as fs
        where = f"{type(self).__name__} state dict '{prefix}"
        n, k = self._shape()
        extra = state_dict.get(prefix + "_extra_state")
        base = self.base if extra is None else fs.check_extra_state(extra, self._extra_fields(), where)
        if any(prefix + name in state_dict for name, _ in fs.OLD_BUFFERS.values()):
            # the six-buffer layout of earlier versions: pack it
            fw = fs.check_old_buffers(state_dict, prefix, base, n, k, where)
            for name, _ in fs.OLD_BUFFERS.values():
                state_dict.pop(prefix + name)
            state_dict[prefix + "w_packed"] = fx.pack(fw)
        new, old = state_dict.get(prefix + "w_packed"), self._buffers.get("w_packed")
        if new is not None:
            self._check_packed(new, base, n, k, where)
        elif base != self.base:
            raise CorruptDataError(f"{where}_extra_state' changes the window base without a 'w_packed'")
        # another weight's escape list has another length: take the stored size
        if new is not None and old is not None and new.shape != old.shape:
            self._buffers["w_packed"] = torch.empty(new.shape, dtype=old.dtype, device=old.device)
        super()._load_from_state_dict(state_dict, prefix, *args, **kwargs)

    def _check_packed(self, packed, base: int, n: int, k: int, where: str) -> None:
        """An untrusted ``w_packed`` checked for this layout (``fixed_state.check_packed``)."""
        from .fixed_state import check_packed
        check_packed(packed, base, n, k, where)

    def _extra_fields(self) -> dict:
        """The shape fields of ``_extra_state`` and this module's values of them."""
        return {key: v for key, v in self.get_extra_state().items() if key != "base"}

    def set_extra_state(self, state: dict) -> None:
        """Takes ``get_extra_state()``'s dict; raises CorruptDataError for another shape, a
        base outside [0, 119], or anything but that dict of ints."""
        from .fixed_state import check_extra_state
        self.base = check_extra_state(state, self._extra_fields(), f"{type(self).__name__} '")

    @property
    def compressed_nbytes(self) -> int:
        return self.fixed_weight.nbytes


class CompressedLinear(FixedBuffers):
    """``y = x @ W.T + b`` with W ([out_features, in_features] bfloat16) kept in the fixed-rate
    layout (about 12 bits/weight) and decoded in registers inside the matmul on CUDA.

    x: [..., in_features] bfloat16 (float16/float32 are accepted and multiplied in fp32/tf32);
    returns [..., out_features] in x's dtype. The weight is frozen (a buffer, no gradient); the
    bias is a Parameter. On the CPU the weight is decoded and multiplied by ``F.linear``.
    The compressed tensors are buffers: ``.to(device)`` moves them and ``state_dict`` holds them.

    ``.weight`` (for model code that reads it, as nn.Linear's): a FixedWeightTensor
    (``wcodec.torch.weight_view``), cached per module: reading its dtype, device or shape costs
    no memory and ~2.5x an nn.Linear's ``.weight.dtype`` read (11 vs 4 us on a loaded 2-vCPU
    host); ``.weight.data``, ``.weight.T`` or any op decodes the whole weight into a new bf16
    tensor each time (2 bytes per weight while the result lives; 4096x4096 on that CPU: 0.8-1.0
    s with the numpy decoder, 12-19 ms with the C extension's; on CUDA one decode kernel).
    ``forward`` never reads it. ``in_features``, ``out_features`` and ``bias`` are nn.Linear's.
    """

    def __init__(self, fw: fx.FixedWeight, bias: torch.Tensor | None = None):
        super().__init__()
        self._register_fixed(fw)
        self.in_features = fw.K
        self.out_features = fw.N
        self.bias = nn.Parameter(bias.detach().clone()) if bias is not None else None
        self._replays = fx.LinearReplays()

    @classmethod
    def from_weight(cls, weight: torch.Tensor, bias: torch.Tensor | None = None) -> "CompressedLinear":
        """weight: [N, K] bfloat16 on the device to compress on (not modified); bias: [N] or None.

        Raises UnsupportedError for a weight that is not 2-D bfloat16 (the layout is lossless
        for bf16 only; float16 weights: ``wcodec.torch.linear16.CompressedLinear16``).
        """
        return cls(fx.encode_weight(weight.detach()), bias)

    @classmethod
    def from_linear(cls, linear: nn.Linear) -> "CompressedLinear":
        """A CompressedLinear computing what ``linear`` (bfloat16 weight) computes."""
        return cls.from_weight(linear.weight, linear.bias)

    def decoded_weight(self) -> torch.Tensor:
        """The weight, bit-exact: [out_features, in_features] bfloat16 (a new tensor)."""
        return fx.decode(self.fixed_weight)

    def to_linear(self) -> nn.Linear:
        """A plain nn.Linear with the decoded weight (bit-exact, in ``weight_dtype``) and a copy
        of the bias."""
        w = self.decoded_weight().to(self.weight_dtype)
        n, k = self._shape()
        lin = nn.Linear(k, n, bias=self.bias is not None, device=w.device, dtype=w.dtype)
        with torch.no_grad():
            lin.weight.copy_(w)
            if self.bias is not None:
                lin.bias.copy_(self.bias)
        return lin

    def _apply(self, fn, *args, **kwargs):
        # .to() / .cpu() / .cuda() replace the buffers: recorded launches hold the old ones, which
        # would keep them alive (a model moved off the GPU would not free its memory)
        self._replays = fx.LinearReplays()
        return super()._apply(fn, *args, **kwargs)

    def _load_from_state_dict(self, *args, **kwargs):
        self._replays = fx.LinearReplays()
        super()._load_from_state_dict(*args, **kwargs)

    def get_extra_state(self) -> dict:
        n, k = self._shape()
        return {"base": self.base, "in_features": k, "out_features": n}

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        bias = None if self.bias is None else self.bias.to(x.dtype)
        if not torch.compiler.is_compiling():
            # eager: call the kernels directly; the custom op's dispatch costs tens of
            # microseconds per call, as much as a batch-1 matmul (measured in hf_lowmem.py);
            # inference replays recorded launches (wcodec.gpu.replay: host time of a layer)
            if torch.is_grad_enabled() and (x.requires_grad or (bias is not None and bias.requires_grad)):
                return _FixedLinearFn.apply(x, bias, self.fixed_weight)
            return self._replays(x, bias, self._buffers["w_packed"], self._n, self.base, lambda: self.fixed_weight)
        return _fixed_linear(x, self.w_packed, bias, self.base, self._n, self._k)

    def extra_repr(self) -> str:
        return (f"in_features={self._k}, out_features={self._n}, "
                f"bias={self.bias is not None}, bits/weight={self.fixed_weight.bits_per_weight:.2f}")


def compress_model(model: nn.Module, min_features: int = 64, skip: tuple = ()) -> dict:
    """Replace every eligible ``nn.Linear`` of ``model`` by a CompressedLinear, in place.

    Eligible: bfloat16 weight, both dimensions >= ``min_features``, name not matching any string
    of ``skip`` (substring match). Returns ``{"replaced": [names], "kept": {name: reason},
    "dense_bytes": int, "compressed_bytes": int}`` over the replaced layers.
    """
    report = {"replaced": [], "kept": {}, "dense_bytes": 0, "compressed_bytes": 0}
    for name, mod in list(model.named_modules()):
        if not isinstance(mod, nn.Linear):
            continue
        reason = _ineligible(name, mod, min_features, skip)
        if reason:
            report["kept"][name] = reason
            continue
        new = CompressedLinear.from_linear(mod)
        parent, _, attr = name.rpartition(".")
        setattr(model.get_submodule(parent) if parent else model, attr, new)
        report["replaced"].append(name)
        report["dense_bytes"] += mod.weight.numel() * 2
        report["compressed_bytes"] += new.compressed_nbytes
    return report


def _ineligible(name: str, mod: nn.Linear, min_features: int, skip: tuple) -> str:
    if any(s in name for s in skip):
        return "skipped by name"
    if mod.weight.dtype != torch.bfloat16:
        return f"weight is {str(mod.weight.dtype).replace('torch.', '')}, the fixed layout is for bfloat16"
    if mod.weight.device.type == "meta":
        return "weight is on the meta device"
    if min(mod.in_features, mod.out_features) < min_features:
        return f"smaller than {min_features} features"
    return ""


__all__ = ["CompressedLinear", "compress_model"]
