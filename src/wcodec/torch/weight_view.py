"""FixedWeightTensor: the ``.weight`` of a compressed module, for code that reads it.

Model code, generation utilities, gradient checkpointing and adapter libraries read
``module.weight.dtype`` / ``.device`` / ``.shape``, and some take ``.weight.data`` or ``.weight.T``
of a Linear. A CompressedLinear holds no dense weight, so ``.weight`` is this tensor subclass: a
bfloat16 [N, K] tensor (or of the dtype the module was cast to) whose metadata (dtype, device,
shape, ndim, numel) is free and whose values are decoded (bit-exact,
:func:`wcodec.gpu.fixed.decode`) by any torch operation on it, which then returns a plain tensor.
``isinstance(w, torch.Tensor)`` holds.
"""

from __future__ import annotations

import copy

import torch
from torch.utils._pytree import tree_map

from ..gpu import fixed as fx


class FixedWeightTensor(torch.Tensor):
    """A [n, k] bfloat16 tensor backed by a packed fixed-rate weight (``wcodec.gpu.fixed.pack``),
    on the packed buffer's device; it holds no dense storage.

    Cost: building one ~18 us (modules cache theirs); reading dtype/device/shape: nothing; any
    op (``.data``, ``.T``, ``.float()``, ``F.linear(x, w)``, printing) decodes the whole weight
    into a new [n, k] bf16 tensor (2*n*k bytes, freed with the op's result unless the result is
    a view of it, as ``.data`` and ``.T`` are) and runs the op on it: nothing is cached, so a
    second op decodes again. ``.to(same device/dtype)`` returns the tensor itself (no decode);
    ``data_ptr()`` is 0 (no storage). Frozen: requires_grad is False, in-place ops change only
    the decoded copy. torch.compile traces metadata reads without a graph break
    (``__tensor_flatten__``). Pickles and deep-copies with its packed buffer.
    """

    #: the dense weight's dtype and the layout module that unpacks and decodes the packed buffer
    #: (subclasses for other layouts set both: torch.linear16.Fixed16WeightTensor)
    _dtype = torch.bfloat16
    _layout = fx

    @staticmethod
    def __new__(cls, packed: torch.Tensor, base: int, n: int, k: int, dtype: torch.dtype | None = None):
        t = torch.Tensor._make_wrapper_subclass(cls, (n, k), dtype=dtype or cls._dtype, device=packed.device,
                                                requires_grad=False)
        t._packed, t._window = packed, base  # Tensor has its own _base: not that name
        return t

    def __init__(self, packed: torch.Tensor, base: int, n: int, k: int, dtype: torch.dtype | None = None):
        super().__init__()

    def dense(self) -> torch.Tensor:
        """The weight, bit-exact: a new [n, k] tensor of this tensor's dtype (the layout's, or the
        one its module was cast to: the layout's values cast)."""
        w = self._layout.decode(self._layout.unpack(self._packed, self._window, *self.shape))
        return w.to(self.dtype)  # the same tensor when the dtype is the layout's

    def backed_by(self, packed: torch.Tensor, base: int, n: int, k: int, dtype: torch.dtype | None = None) -> bool:
        """Whether this tensor reads ``packed`` as an [n, k] weight of window ``base`` (and of
        ``dtype``, when given)."""
        return (self._packed is packed and self._window == base and tuple(self.shape) == (n, k)
                and (dtype is None or self.dtype == dtype))

    def __repr__(self, *, tensor_contents=None) -> str:
        return f"{type(self).__name__}(shape={tuple(self.shape)}, dtype={self.dtype}, device={self.device})"

    def __reduce_ex__(self, protocol):
        return type(self), (self._packed, self._window, *self.shape, self.dtype)

    def __deepcopy__(self, memo):
        return type(self)(copy.deepcopy(self._packed, memo), self._window, *self.shape, self.dtype)

    def __tensor_flatten__(self):
        return ["_packed"], (self._window, *self.shape, self.dtype)

    @classmethod
    def __tensor_unflatten__(cls, inner, ctx, outer_size, outer_stride):
        return cls(inner["_packed"], *ctx)

    @classmethod
    def __torch_dispatch__(cls, func, types, args=(), kwargs=None):
        dense = lambda a: a.dense() if isinstance(a, cls) else a  # noqa: E731
        return func(*tree_map(dense, args), **tree_map(dense, kwargs or {}))

    __torch_function__ = torch._C._disabled_torch_function_impl


__all__ = ["FixedWeightTensor"]
