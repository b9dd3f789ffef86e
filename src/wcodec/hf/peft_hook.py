"""Make plain peft LoRA configs adapt wcodec's compressed layers (called by :mod:`wcodec.hf.hook`
right after ``peft.tuners.lora.model`` is imported, or at ``import wcodec`` if it already is).

peft builds each LoRA layer in ``LoraModel._create_new_module`` from a fixed list of dispatchers
(plus a config's own ``_register_custom_module`` mapping). :func:`register` puts one step in
front of it: a fused :class:`wcodec.torch.linear.CompressedLinear`, or an nn.Linear whose weight
is decoded just in time (:class:`wcodec.torch.CompressedWeights`), gets wcodec's LoRA layer
(:mod:`wcodec.hf.lora`); anything else, and any layer type the config maps itself, goes to
peft unchanged. So ``LoraConfig(target_modules=[...])``, ``get_peft_model`` and
``PeftModel.from_pretrained`` work as for nn.Linear, whenever the config was made. A second step
in front of peft's ``target_parameters`` matching turns the compressed expert parameters that a
config targets into dense parameters, with a warning (peft adapts nn.Parameters only).

This module imports nothing at load; the step imports :mod:`wcodec.hf.lora` only when a model
holds wcodec layers (which means torch and the layer modules are loaded already).
"""

from __future__ import annotations

import sys

_MODULE = "peft.tuners.lora.model"
_LAYERS = ("wcodec.torch.linear", "wcodec.torch.jit")  # a model holds wcodec layers only once these are loaded


def register() -> None:
    """Wrap ``peft.tuners.lora.model.LoraModel._create_new_module`` (once; later calls do
    nothing). Raises ImportError when peft is not importable, AttributeError when this peft
    version has no such method (the caller warns)."""
    model = sys.modules.get(_MODULE)
    if model is None:
        import importlib

        model = importlib.import_module(_MODULE)
    cls = model.LoraModel
    original = cls.__dict__["_create_new_module"].__func__  # a staticmethod
    if getattr(original, "_wcodec", False):
        return

    def _create_new_module(lora_config, adapter_name, target, **kwargs):
        if any(m in sys.modules for m in _LAYERS):
            from .lora import dispatch

            new = dispatch(target, adapter_name, lora_config, **kwargs)
            if new is not None:
                return new
        return original(lora_config, adapter_name, target, **kwargs)

    _create_new_module._wcodec = True
    _create_new_module.__wrapped__ = original
    cls._create_new_module = staticmethod(_create_new_module)
    _wrap_inject_parameters()


def _wrap_inject_parameters() -> None:
    """Wrap ``BaseTuner._inject_parameters`` (peft >= 0.17: ``target_parameters``, LoRA on an
    nn.Parameter such as an experts module's ``gate_up_proj``): compressed expert parameters the
    config targets are made dense parameters first (:func:`wcodec.hf.lora.densify_targeted_experts`),
    since peft finds and parametrizes nn.Parameters only. A peft without the method: nothing."""
    tuners = sys.modules.get("peft.tuners.tuners_utils")
    tuner = getattr(tuners, "BaseTuner", None)
    inject = None if tuner is None else tuner.__dict__.get("_inject_parameters")
    if inject is None or getattr(inject, "_wcodec", False):
        return

    def _inject_parameters(self, peft_config, model, *args, **kwargs):
        if getattr(peft_config, "target_parameters", None) and "wcodec.torch.experts" in sys.modules:
            from .lora import densify_targeted_experts

            densify_targeted_experts(model, peft_config.target_parameters)
        return inject(self, peft_config, model, *args, **kwargs)

    _inject_parameters._wcodec = True
    _inject_parameters.__wrapped__ = inject
    tuner._inject_parameters = _inject_parameters
