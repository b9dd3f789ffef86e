"""CompressedLinear16: a CompressedLinear whose weight is float16, kept in the fp16 fixed-rate
layout (codec "fixed16", about 14-15.5 bits/weight) and decoded inside the GEMV on CUDA
(``wcodec.gpu.fixed16``). Everything but the layout is CompressedLinear's: the packed buffer
``w_packed`` (``fixed16.pack``), ``_extra_state``, ``.weight`` as a decoding view, ``to_linear``.
"""

from __future__ import annotations

from typing import Optional

import numpy as np
import torch

from ..codecs.fixed16 import MAX_BASE, check_layout16
from ..errors import CorruptDataError
from ..gpu import fixed as fx
from ..gpu import fixed16 as fx16
from .fixed_state import _owned
from .linear import CompressedLinear
from .weight_view import FixedWeightTensor


class Fixed16WeightTensor(FixedWeightTensor):
    """The ``.weight`` of a CompressedLinear16: as FixedWeightTensor (metadata free, any op
    decodes the whole weight into a new tensor), a [n, k] float16 tensor."""

    _dtype = torch.float16
    _layout = fx16


def check_packed16(t, base: int, n: int, k: int, where: str) -> fx16.Fixed16Weight:
    """The ``w_packed`` buffer of an [n, k] fp16 weight (``fixed16.pack``), untrusted: dtype,
    rank, storage and size first (at most n*k escapes), then the codec's canonical check on a
    host copy (columns and values as stored, int32) and the escape rows equal to the
    pointer's. Returns its Fixed16Weight as views of ``t``. Raises CorruptDataError."""
    t = _owned(t, "w_packed", torch.uint8, where)
    _, _, esc = fx._packed_offsets(n, k)
    head = fx16.packed_offset(n, k)
    e, rest = divmod(t.numel() - head - esc, 16)
    if t.dim() != 1 or e < 0 or rest or e > n * k:
        raise CorruptDataError(f"{where}w_packed: an [{n}, {k}] fp16 weight packs into {head + esc} + 16 x "
                               f"escapes (at most {n * k}) bytes, got shape {list(t.shape)}")
    if not 0 <= base <= MAX_BASE:
        raise CorruptDataError(f"{where}_extra_state: 'base' must be in [0, {MAX_BASE}] for an fp16 weight, "
                               f"got {base}")
    fw = fx16.unpack(t, base, n, k)
    p, kpad = fw.planes, fw.kpad
    host = lambda x: x.detach().cpu().numpy()  # noqa: E731
    try:
        erow = check_layout16(base, n, k, host(p.lo).view(np.uint8).reshape(n, kpad),
                              host(p.nib).view(np.uint8).reshape(n, kpad // 2),
                              host(fw.m2).view(np.uint8).reshape(n, kpad // 4), host(p.eptr), host(p.ecol),
                              host(p.eval))
    except CorruptDataError as err:
        raise CorruptDataError(f"{where}w_packed: {err}") from None
    if not np.array_equal(host(p.erow), erow):
        raise CorruptDataError(f"{where}w_packed: field esc_row: escape rows differ from the row pointer's")
    return fw


# torch.compile / CUDA graphs: the fp16 layout's matmul as one opaque op (as the bf16 layout's)
@torch.library.custom_op("wcodec::fixed16_linear", mutates_args=())
def _linear_op(x: torch.Tensor, packed: torch.Tensor, bias: Optional[torch.Tensor], base: int, n: int,
               k: int) -> torch.Tensor:
    return fx16.linear(x, fx16.unpack(packed, base, n, k), bias)


@torch.library.custom_op("wcodec::fixed16_grad_input", mutates_args=())
def _grad_op(g: torch.Tensor, packed: torch.Tensor, base: int, n: int, k: int) -> torch.Tensor:
    return fx16.grad_input(g, fx16.unpack(packed, base, n, k))


_linear_op.register_fake(lambda x, packed, bias, base, n, k: x.new_empty((*x.shape[:-1], n)))
_grad_op.register_fake(lambda g, packed, base, n, k: g.new_empty((*g.shape[:-1], k)))


def _keep_for_backward(ctx, inputs, output):
    ctx.save_for_backward(inputs[1])
    ctx.meta = (*inputs[3:], inputs[2] is not None)


def _op_backward(ctx, grad):
    (packed,), (base, n, k, has_bias) = ctx.saved_tensors, ctx.meta
    gx = _grad_op(grad.contiguous(), packed, base, n, k) if ctx.needs_input_grad[0] else None
    gb = grad.reshape(-1, n).sum(0) if has_bias and ctx.needs_input_grad[2] else None
    return gx, None, gb, None, None, None


_linear_op.register_autograd(_op_backward, setup_context=_keep_for_backward)


class _Fixed16LinearFn(torch.autograd.Function):
    """Training through a frozen fp16 weight: the input gradient ``g @ W`` and the bias's."""

    @staticmethod
    def forward(ctx, x, bias, fw):
        ctx.fw, ctx.has_bias = fw, bias is not None
        return fx16.linear(x, fw, bias)

    @staticmethod
    def backward(ctx, grad):
        fw = ctx.fw
        gx = fx16.grad_input(grad, fw) if ctx.needs_input_grad[0] else None
        gb = grad.reshape(-1, fw.N).sum(0) if ctx.has_bias and ctx.needs_input_grad[1] else None
        return gx, gb, None


class CompressedLinear16(CompressedLinear):
    """``y = x @ W.T + b`` with W ([out_features, in_features] float16) kept in the fp16
    fixed-rate layout. x: [..., in_features] float16 (bfloat16/float32 accepted); returns
    [..., out_features] in x's dtype. On CUDA the fused GEMV (M <= 4 rows of x, fp32
    accumulation) or decode + cuBLAS; on the CPU the weight is decoded (numpy) and multiplied by
    ``F.linear``, exactly as nn.Linear with the dense weight. ``.weight``: a Fixed16WeightTensor.
    Under torch.compile the matmul is one custom op (``wcodec::fixed16_linear``)."""

    _view_type = Fixed16WeightTensor
    _pack = staticmethod(fx16.pack)
    weight_dtype = torch.float16

    def __init__(self, fw: fx16.Fixed16Weight, bias: torch.Tensor | None = None):
        super().__init__(fw, bias)

    def _check_packed(self, packed, base: int, n: int, k: int, where: str) -> None:
        check_packed16(packed, base, n, k, where)

    def set_extra_state(self, state: dict) -> None:
        """As CompressedLinear's, with the fp16 layout's bound on the base (0..23)."""
        if isinstance(state, dict) and type(state.get("base")) is int and not 0 <= state["base"] <= MAX_BASE:
            raise CorruptDataError(f"{type(self).__name__} '_extra_state: 'base' must be in [0, {MAX_BASE}] "
                                   f"for an fp16 weight, got {state['base']}")
        super().set_extra_state(state)

    @classmethod
    def from_weight(cls, weight: torch.Tensor, bias: torch.Tensor | None = None) -> "CompressedLinear16":
        """weight: [N, K] float16 (not modified); bias: [N] or None. Raises UnsupportedError for
        another dtype or rank, or a weight the layout would not shrink below 15.5 bits/weight."""
        return cls(fx16.encode_weight(weight.detach()), bias)

    @property
    def fixed_weight(self) -> fx16.Fixed16Weight:
        """The weight's fp16 layout as views of ``w_packed`` (no copy)."""
        return fx16.unpack(self.w_packed, self.base, *self._shape())

    def decoded_weight(self) -> torch.Tensor:
        """The weight, bit-exact: [out_features, in_features] float16 (a new tensor)."""
        return fx16.decode(self.fixed_weight)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        bias = None if self.bias is None else self.bias.to(x.dtype)
        if torch.compiler.is_compiling():
            return _linear_op(x, self.w_packed, bias, self.base, self._n, self._k)
        if torch.is_grad_enabled() and (x.requires_grad or (bias is not None and bias.requires_grad)):
            return _Fixed16LinearFn.apply(x, bias, self.fixed_weight)
        return fx16.linear(x, self.fixed_weight, bias)


__all__ = ["CompressedLinear16", "Fixed16WeightTensor", "check_packed16"]
