"""peft LoRA adapters on layers kept compressed: fused ``CompressedLinear`` (``keep_compressed=True``)
and nn.Linear decoded just in time (``keep_compressed="jit"``).

After ``import wcodec``, plain ``peft.LoraConfig`` / ``get_peft_model`` / ``PeftModel.from_pretrained``
build these layers (:mod:`wcodec.hf.peft_hook` puts :func:`dispatch` in front of peft's own
dispatchers). The adapters are peft's own ``lora.Linear`` (same parameters, same state-dict keys,
so an adapter saved on a compressed base loads on the bf16 one and back); only what touches the
base weight differs:

- :class:`LoraCompressedLinear`: told the fused layer's sizes, device and dtype, which peft would
  read from a ``weight``.
- :class:`LoraJitLinear`, :class:`LoraJitEmbedding`: an nn.Linear / nn.Embedding whose weight is
  a view of the shared decode scratch.

Whatever reads or writes the base weight as a tensor (a merge, DoRA, peft's data-driven inits
such as PiSSA) first turns that one base layer dense: the fused layer is replaced by an
nn.Linear of its decoded weight, the just-in-time layer gets its own decoded weight
(:meth:`wcodec.torch.CompressedWeights.release`; merged into the scratch, the adapter would be
overwritten by the next decode). So ``merge_and_unload()`` gives the weights peft gives on the
bf16 model, as dense layers; :func:`wcodec.torch.linear.compress_model` compresses them again,
losslessly.

:func:`lora_config` / :func:`register` (a config with the mapping registered) still work; they
are no longer needed.
"""

from __future__ import annotations

import torch
from peft import LoraConfig
from peft.tuners.lora.layer import Embedding as LoraEmbedding
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


def _reads_base_weight(config) -> bool:
    """Whether an adapter of ``config`` needs the base weight as a tensor: DoRA (its norm, in
    every forward and backward) and peft's data-driven inits (PiSSA, OLoRA, CorDA, LoftQ,
    LoRA-GA, orthogonal: they read it, and most rewrite it)."""
    init = getattr(config, "init_lora_weights", True)
    return bool(getattr(config, "use_dora", False)) or (
        isinstance(init, str) and init.lower() not in ("gaussian", "eva"))


class _DenseWhenWritten:
    """Mixed into a peft LoRA layer over a compressed base: the base becomes a dense copy
    (:meth:`_densify`) before anything reads or writes its weight as a tensor: a merge, DoRA, a
    data-driven init. Everything else runs on the compressed base."""

    def _densify(self) -> None:
        raise NotImplementedError

    def update_layer(self, adapter_name, r, lora_alpha, config, **kwargs):
        if _reads_base_weight(config):
            self._densify()
        return super().update_layer(adapter_name, r, lora_alpha=lora_alpha, config=config, **kwargs)

    def merge(self, safe_merge: bool = False, adapter_names=None) -> None:
        """peft's merge, into a dense copy of the base weight (see the module docstring)."""
        if check_adapters_to_merge(self, adapter_names):
            self._densify()
        super().merge(safe_merge, adapter_names)


class LoraCompressedLinear(_DenseWhenWritten, LoraLinear):
    """peft's LoRA Linear over a CompressedLinear base (frozen, fused kernels). Densifying
    replaces the base by a dense nn.Linear of the decoded weight (bf16, bit-exact); a merge then
    rounds the merged weight to bf16 once, as for an nn.Linear base."""

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

    def _densify(self) -> None:
        base = self.get_base_layer()
        if not isinstance(base, CompressedLinear):
            return
        # built on meta, then given the decoded weight: nn.Linear's random init would draw from
        # the RNG that the adapters' own init (or the user's next draw) expects untouched
        w = base.decoded_weight().to(base.weight_dtype)
        dense = torch.nn.Linear(base.in_features, base.out_features, bias=base.bias is not None,
                                device="meta", dtype=w.dtype)
        dense.weight = torch.nn.Parameter(w, requires_grad=False)
        if base.bias is not None:
            dense.bias = torch.nn.Parameter(base.bias.detach().clone(), requires_grad=base.bias.requires_grad)
        _swap_base(self, base, dense)


class _JitDensify(_DenseWhenWritten):
    """Densifying gives the base layer its own decoded weight
    (:meth:`wcodec.torch.CompressedWeights.release`): written into the shared scratch, a merge
    would be overwritten by the next decode."""

    def _densify(self) -> None:
        base = self.get_base_layer()
        cw = base.__dict__.get("_wcodec_jit")
        if cw is not None:
            cw.release(base)


class LoraJitLinear(_JitDensify, LoraLinear):
    """peft's LoRA Linear over an nn.Linear whose weight is decoded just in time."""


class LoraJitEmbedding(_JitDensify, LoraEmbedding):
    """peft's LoRA Embedding over an nn.Embedding whose weight is decoded just in time."""


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
    if base.__dict__.get("_wcodec_jit") is not None:
        if isinstance(base, torch.nn.Linear):
            return LoraJitLinear(target, adapter_name, config=config, **kwargs)
        if isinstance(base, torch.nn.Embedding):
            return LoraJitEmbedding(target, adapter_name, config=config, **kwargs)
    return None


def densify_targeted_experts(model: torch.nn.Module, target_parameters) -> list[str]:
    """Make the compressed expert parameters of ``model`` that peft's ``target_parameters``
    matches (peft's rule: ``"<module>.<param>"`` equal to a target or ending in ``".<target>"``)
    dense nn.Parameters again (:func:`wcodec.torch.experts.decompress_experts`, bit-exact, in
    their dtype), so that peft's ``ParamWrapper`` can parametrize them; the module's other
    parameters stay compressed. peft adds the adapter's delta to the whole [E, N, K] stack in
    every forward, on a dense tensor, so a compressed stack would be decoded for it anyway.
    Warns with the names and the dense bytes added; the load report lists them as decoded.
    Returns the names made dense."""
    import warnings

    from ..torch import experts as ex

    targets = sorted(set(target_parameters))
    done, added = [], 0
    for name, module in model.named_modules():
        attrs = ex.compressed_attrs(module)
        unwrapped = name.replace(".base_layer", "")  # a module peft already wrapped
        keys = {a: f"{unwrapped}.{a}" for a in attrs}
        hit = [a for a, key in keys.items() if key in targets or any(key.endswith(f".{t}") for t in targets)]
        if not hit:
            continue
        before = sum(module._buffers[f"{a}_packed"].numel() for a in hit)
        ex.decompress_experts(module, hit)
        added += sum(module._parameters[a].nbytes for a in hit) - before
        done += [f"{unwrapped}.{a}" for a in hit]
    if done:
        _report_dense(model, done)
        warnings.warn(f"wcodec: LoRA target_parameters on {len(done)} compressed expert parameter(s), e.g. "
                      f"{done[0]}: peft adapts nn.Parameters only, so these were decompressed to dense "
                      f"parameters (+{added / 2**30:.2f} GiB); the rest of the model stays compressed",
                      UserWarning, stacklevel=4)
    return done


def _report_dense(model: torch.nn.Module, names: list) -> None:
    """List ``names`` in the load report (``model.wcodec_weights.report``) as decoded, with why."""
    report = getattr(getattr(model, "wcodec_weights", None), "report", None)
    if not isinstance(report, dict):
        return
    for n in names:
        for kind in ("fused", "compressed"):
            if n in report.get(kind, []):
                report[kind].remove(n)
        if n not in report.setdefault("decoded", []):
            report["decoded"].append(n)
        report.setdefault("kept", {})[n] = "decompressed for a LoRA adapter on the parameter (peft target_parameters)"


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


__all__ = ["LoraCompressedLinear", "LoraJitLinear", "LoraJitEmbedding", "densify_targeted_experts", "dispatch",
           "lora_config", "register"]
