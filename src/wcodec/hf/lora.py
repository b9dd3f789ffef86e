"""peft LoRA adapters on layers kept compressed: fused ``CompressedLinear`` (``keep_compressed=True``)
and nn.Linear decoded just in time (``keep_compressed="jit"``).

After ``import wcodec``, plain ``peft.LoraConfig`` / ``get_peft_model`` / ``PeftModel.from_pretrained``
build these layers (:mod:`wcodec.hf.peft_hook` puts :func:`dispatch` in front of peft's own
dispatchers). The adapters are peft's own ``lora.Linear`` (same parameters, same state-dict keys,
so an adapter saved on a compressed base loads on the bf16 one and back); only what touches the
base weight differs:

- :class:`LoraCompressedLinear`: told the fused layer's sizes, device and dtype, which peft would
  read from a ``weight``. Merging replaces the fused layer by a dense nn.Linear holding its
  decoded weight, then merges into that (``merge_and_unload()`` gives dense bf16 layers;
  :func:`wcodec.torch.linear.compress_model` compresses them again, losslessly).
- :class:`LoraJitLinear`: merging first gives the layer its own decoded weight
  (:meth:`wcodec.torch.CompressedWeights.release`): merged into the shared scratch, the
  adapter would be overwritten by the next decode.

:func:`lora_config` / :func:`register` (a config with the mapping registered) still work; they
are no longer needed.
"""

from __future__ import annotations

import torch
from peft import LoraConfig
from peft.tuners.lora.layer import Linear as LoraLinear
from peft.tuners.tuners_utils import BaseTunerLayer, check_adapters_to_merge

from ..torch.linear import CompressedLinear


class _PeftCompressedLinear(CompressedLinear):
    """A CompressedLinear as peft's module replacement reads it: the device of the layer comes
    from ``qweight`` (its first buffer, as for GPTQ layers); nothing else differs."""

    @property
    def qweight(self):
        return next(self.buffers())


def _swap_base(layer: BaseTunerLayer, old: torch.nn.Module, new: torch.nn.Module) -> None:
    """Put ``new`` where ``old`` is in the chain of ``base_layer``s below ``layer``."""
    holder = layer
    while holder.base_layer is not old:
        holder = holder.base_layer
    holder.base_layer = new


class LoraCompressedLinear(LoraLinear):
    """peft's LoRA Linear over a CompressedLinear base (frozen, fused kernels). :meth:`merge`
    first replaces the base by a dense nn.Linear of the decoded weight (bf16, bit-exact), then
    merges as peft does (the merged weight is rounded to bf16 once, as for an nn.Linear base)."""

    def __init__(self, base_layer, adapter_name, **kwargs):
        if type(base_layer) is CompressedLinear:  # peft finds a module's device through a weight
            base_layer.__class__ = _PeftCompressedLinear
        super().__init__(base_layer, adapter_name, **kwargs)

    def _get_in_out_features(self, module):
        if isinstance(module, CompressedLinear):
            return module.in_features, module.out_features
        return super()._get_in_out_features(module)

    def _get_base_layer_device_and_dtype(self, base_layer):
        if isinstance(base_layer, CompressedLinear):
            buf = next(base_layer.buffers(), None)
            return (None if buf is None else buf.device), base_layer.weight_dtype
        return super()._get_base_layer_device_and_dtype(base_layer)

    def merge(self, safe_merge: bool = False, adapter_names=None) -> None:
        """peft's merge, into a dense copy of the fused weight (see the class docstring)."""
        base = self.get_base_layer()
        if isinstance(base, CompressedLinear) and check_adapters_to_merge(self, adapter_names):
            dense = base.to_linear()
            dense.weight.requires_grad_(False)
            if base.bias is not None:
                dense.bias.requires_grad_(base.bias.requires_grad)
            _swap_base(self, base, dense)
        super().merge(safe_merge, adapter_names)


class LoraJitLinear(LoraLinear):
    """peft's LoRA Linear over an nn.Linear whose weight is decoded just in time. :meth:`merge`
    first gives the base layer its own decoded weight (see the module docstring)."""

    def merge(self, safe_merge: bool = False, adapter_names=None) -> None:
        """peft's merge, into the layer's own decoded weight (see the module docstring)."""
        base = self.get_base_layer()
        cw = base.__dict__.get("_wcodec_jit")
        if cw is not None and check_adapters_to_merge(self, adapter_names):
            cw.release(base)
        super().merge(safe_merge, adapter_names)


def dispatch(target, adapter_name: str, config, **kwargs):
    """The wcodec LoRA layer for ``target`` (a module peft is about to wrap), or None when peft's
    own dispatchers should handle it: not a wcodec layer, a parameter target
    (``target_parameters``), or a layer type the config maps itself."""
    if kwargs.get("parameter_name") is not None:
        return None
    base = target.get_base_layer() if isinstance(target, BaseTunerLayer) else target
    custom = getattr(config, "_custom_modules", None) or {}
    if any(isinstance(base, t) for t in custom):
        return None
    if isinstance(base, CompressedLinear):
        return LoraCompressedLinear(target, adapter_name, config=config, **kwargs)
    if isinstance(base, torch.nn.Linear) and base.__dict__.get("_wcodec_jit") is not None:
        return LoraJitLinear(target, adapter_name, config=config, **kwargs)
    return None


def lora_config(**kwargs) -> LoraConfig:
    """``peft.LoraConfig(**kwargs)`` that also adapts CompressedLinear layers (plain
    ``LoraConfig`` does too after ``import wcodec``; kept for earlier code)."""
    cfg = LoraConfig(**kwargs)
    register(cfg)
    return cfg


def register(config: LoraConfig) -> LoraConfig:
    """Add the CompressedLinear mapping to an existing LoraConfig (in place; returned)."""
    config._register_custom_module({CompressedLinear: LoraCompressedLinear})
    return config


__all__ = ["LoraCompressedLinear", "LoraJitLinear", "dispatch", "lora_config", "register"]
