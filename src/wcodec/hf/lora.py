"""peft LoRA adapters on fused ``CompressedLinear`` layers (``keep_compressed=True``).

peft wraps only the layer types it knows; others go through its (experimental) custom-module
registry of a ``LoraConfig``. :func:`lora_config` returns a ``LoraConfig`` with
``CompressedLinear -> LoraCompressedLinear`` registered: peft's own ``lora.Linear`` around the
fused layer (``base_layer(x)`` plus the adapters), told the layer's sizes, device and dtype,
which it would otherwise read from a ``weight`` that a CompressedLinear does not have.
Just-in-time layers (``keep_compressed="jit"``) are plain nn.Linear and need none of this.
"""

from __future__ import annotations

from peft import LoraConfig
from peft.tuners.lora.layer import Linear as LoraLinear

from ..torch.linear import CompressedLinear


class _PeftCompressedLinear(CompressedLinear):
    """A CompressedLinear as peft's module replacement reads it: the device of the layer comes
    from ``qweight`` (its first buffer, as for GPTQ layers); nothing else differs."""

    @property
    def qweight(self):
        return next(self.buffers())


class LoraCompressedLinear(LoraLinear):
    """peft's LoRA Linear over a CompressedLinear base (frozen, fused kernels); merging the
    adapters into the compressed weight is not supported (it would need a re-encode)."""

    def __init__(self, base_layer, adapter_name, **kwargs):
        if type(base_layer) is CompressedLinear:  # peft finds a module's device through a weight
            base_layer.__class__ = _PeftCompressedLinear
        super().__init__(base_layer, adapter_name, **kwargs)

    def _get_in_out_features(self, module):
        return module.in_features, module.out_features

    def _get_base_layer_device_and_dtype(self, base_layer):
        buf = next(base_layer.buffers(), None)
        return (None if buf is None else buf.device), base_layer.weight_dtype

    def merge(self, *args, **kwargs):
        raise NotImplementedError("LoRA adapters cannot be merged into a CompressedLinear (frozen fixed-rate weight)")


def lora_config(**kwargs) -> LoraConfig:
    """``peft.LoraConfig(**kwargs)`` that also adapts CompressedLinear layers."""
    cfg = LoraConfig(**kwargs)
    register(cfg)
    return cfg


def register(config: LoraConfig) -> LoraConfig:
    """Add the CompressedLinear mapping to an existing LoraConfig (in place; returned)."""
    config._register_custom_module({CompressedLinear: LoraCompressedLinear})
    return config


__all__ = ["LoraCompressedLinear", "lora_config", "register"]
