"""The inputs of a model's linear layers on calibration text, H = mean x x^T per layer, for GPTQ's
error-compensated rounding (:mod:`wcodec.codecs.gptq`) in the lossy target search.

:class:`InputHessians` hooks the forward passes that run anyway (the Fisher pass,
:func:`wcodec.hf.fisher.fisher_rows`): ``nn.Linear`` layers (weight [out, in], the inputs
multiply its columns) and transformers' ``Conv1D`` (GPT-2: weight [in, out], its rows). Padding
tokens are left out. Layers fed the same input tensor (BERT's query / key / value, Llama's q / k
/ v and gate / up) share one matrix. Weights that are also a lookup table (an output layer tied to
the word embeddings) are left out: a row picked by a token id sees its own error, not the
layer's. Needs torch.
"""

from __future__ import annotations

import numpy as np

#: accumulators (float64 n x n per distinct input) are not made past this many bytes in all:
#: the layers beyond it are rounded to nearest (MiniLM needs 24 of 3.5 MB each plus 6 of 19 MB)
HESSIAN_BYTES = 1 << 30


class InputHessians:
    """Context manager: forward hooks on ``model``'s (a :class:`wcodec.hf.fisher.ModelOutput`)
    linear layers while the block runs, accumulating sum x x^T over the non-padding tokens of
    each distinct layer input. After the block: :meth:`hessians`, :meth:`factors`.
    budget_bytes: see HESSIAN_BYTES."""

    def __init__(self, model, budget_bytes: int = HESSIAN_BYTES):
        import torch

        self.model = model
        self.budget = int(budget_bytes)
        lookups = {id(m.weight) for m in model.model.modules()
                   if isinstance(m, torch.nn.Embedding) and m.weight is not None}
        pname = {id(p): n for n, p in model.params.items()}
        self._layers = {}  # module -> (checkpoint name, axis, input width)
        for m in model.model.modules():
            w = getattr(m, "weight", None)
            axis = _axis(m)
            if axis is None or w is None or w.ndim != 2 or id(w) in lookups or pname.get(id(w)) not in model.names:
                continue
            self._layers[m] = (model.names[pname[id(w)]], axis, int(w.shape[axis]))
        self._key = {}  # checkpoint name -> accumulator key (the first layer fed that input), None: left out
        self._sum, self._count = {}, {}
        self._prev = None  # (input tensor, key) of the last hook: the next layer fed it shares the key
        self._handles = []

    def __enter__(self):
        self._handles = [m.register_forward_hook(self._hook) for m in self._layers]
        return self

    def __exit__(self, *exc):
        for h in self._handles:
            h.remove()
        self._handles, self._prev = [], None
        return False

    def _hook(self, module, inputs, output) -> None:
        import torch

        name, axis, n = self._layers[module]
        x = inputs[0] if inputs else None
        if name in self._key and self._key[name] is None:
            return
        if not isinstance(x, torch.Tensor) or not x.is_floating_point() or x.shape[-1] != n:
            self._key[name] = None  # not a plain x @ W: left out
            return
        if self._prev is not None and self._prev[0] is x:  # fed the previous layer's input
            shared = self._prev[1]
            if self._key.setdefault(name, shared) != shared:
                self._key[name] = None  # shared once, not now: left out rather than guessed
            return
        key = self._key.setdefault(name, name)
        if key != name:  # it shared another layer's input before, not now
            self._key[name] = None
            return
        if key not in self._sum:
            if 8 * n * n + sum(8 * s.shape[0] ** 2 for s in self._sum.values()) > self.budget:
                self._key[name] = None
                return
            self._sum[key] = torch.zeros((n, n), dtype=torch.float64)
            self._count[key] = 0
        mask = getattr(self.model, "mask", None)
        with torch.no_grad():
            if mask is not None and x.dim() == 3 and tuple(x.shape[:2]) == tuple(mask.shape):
                x = x[mask.bool()]
            x = x.detach().reshape(-1, n).double()
            self._sum[key] += x.T @ x
        self._count[key] += int(x.shape[0])
        self._prev = (inputs[0], key)

    def hessians(self) -> dict:
        """{checkpoint name: (H [n, n] float64 numpy, axis)}: the mean of x x^T over the tokens
        seen (layers sharing an input share the array); layers never run, fed no token or left
        out (see the module doc) are absent."""
        mean = {k: (s / self._count[k]).numpy() for k, s in self._sum.items() if self._count[k] > 0}
        return {name: (mean[key], self._layers_axis(name)) for name, key in self._key.items() if key in mean}

    def factors(self, names=None, damp: float | None = None, progress=None) -> dict:
        """{checkpoint name: :class:`wcodec.codecs.gptq.InverseHessian`} of :meth:`hessians`
        (names: only these, None: all; damp: None for gptq.DAMP), each distinct input
        factorised once (O(n^3): seconds for n = 1536, minutes past 8192); progress: a
        tqdm-like object advanced by factorisations, or None."""
        from ..codecs import gptq

        damp = gptq.DAMP if damp is None else damp
        done, out = {}, {}
        for name, (h, axis) in self.hessians().items():
            if names is not None and name not in names:
                continue
            key = (id(h), axis)
            if key not in done:
                done[key] = gptq.InverseHessian.from_hessian(h, axis, damp)
                if progress is not None:
                    progress.update(1)
            out[name] = done[key]
        return out

    def _layers_axis(self, name: str) -> int:
        return next(axis for n, axis, _ in self._layers.values() if n == name)


def _axis(module) -> int | None:
    """1 for an ``nn.Linear`` (y = x W^T), 0 for transformers' ``Conv1D`` (y = x W), else None."""
    import torch

    if isinstance(module, torch.nn.Linear):
        return 1
    if type(module).__name__ == "Conv1D" and type(module).__module__.startswith("transformers"):
        return 0
    return None
