"""wcodec as a transformers quantization method: plain ``AutoModel*.from_pretrained(folder)``,
pipelines and ``SentenceTransformer(folder)`` load a folder written by
:func:`wcodec.hf.convert_folder` (its config.json has ``quantization_config.quant_method ==
"wcodec"``).

Registered with transformers' public API (``register_quantization_config`` /
``register_quantizer``) by :func:`register`, which ``import wcodec`` arranges lazily (see
:mod:`wcodec.hf.hook`). Loading goes through transformers' own machinery (checked with 5.24):

1. the quantizer names the folder's weights :data:`wcodec.hf.checkpoint.CHECKPOINT_NAME`
   (``config.transformers_weights``) before transformers resolves them, and transformers opens
   that name through ``safe_open``, which :mod:`wcodec.hf.checkpoint` routes to a view of the
   .wcodec shards: transformers reads real tensors, decoded on demand, and applies its own
   renames, ``key_mapping``, expert merges, ties, dtype and ``device_map`` placement;
2. with ``keep_compressed``, each tensor then passes through the quantize operation of
   :mod:`wcodec.hf.keep` as it is loaded, which keeps Linear, Embedding and expert weights
   compressed on their device (so the load's transient is one tensor);
3. a loaded model saves back to a wcodec folder (:mod:`wcodec.hf.save`) and ``dequantize()``
   turns it into a plain one.

Options go in :class:`WcodecConfig`, passed as ``from_pretrained(folder,
quantization_config=WcodecConfig(keep_compressed=True))``; ``WcodecConfig(keep_compressed=True)``
also compresses a plain safetensors folder's bf16 weights on load.
"""

from __future__ import annotations

from pathlib import Path

import torch
from transformers.quantizers import HfQuantizer
from transformers.utils.quantization_config import QuantizationConfigMixin

from .checkpoint import CHECKPOINT_NAME, is_checkpoint_name
from .convert import QUANT_METHOD

KEEP_COMPRESSED = (False, True, "jit")


class WcodecConfig(QuantizationConfigMixin):
    """Loading options of a wcodec folder (``quantization_config`` of ``from_pretrained``).

    keep_compressed: False (decode every tensor on its device: an ordinary model, no quantizer
        left on it); True (every bf16 nn.Linear becomes a fused :class:`wcodec.torch.linear.
        CompressedLinear`, every untied bf16 nn.Embedding a :class:`wcodec.torch.embedding.
        CompressedEmbedding`, other Linear / Embedding weights as "jit"); "jit" (Linear / Embedding
        weights stay compressed on their device and are decoded just in time into one scratch
        buffer per device, :class:`wcodec.torch.CompressedWeights`; the bf16 model's eager outputs bit
        for bit, where the fused kernels on CUDA agree to rounding). Kept-compressed models are
        frozen (adapters train on top) and not serialisable; place them with ``device_map``
        (moving a just-in-time model afterwards is not supported).
    jit_embeddings: with keep_compressed=True, False decodes the weights that are not fused
        (tied embeddings, other dtypes) instead of keeping them just in time (no graph break
        under torch.compile).
    decoder: "auto", "triton" or "numba" (keep_compressed). offload: keep_compressed on CUDA
        with the compressed bytes in pinned CPU memory. verify: check checksums.
    warmup: True: with keep_compressed on CUDA, tune the fused kernels (linears, embeddings, MoE
        experts) for every row count right after loading (:mod:`wcodec.hf.warmup`) so that none
        tunes or compiles while serving; None (default) and False skip it.
    format_version / mode / wcodec_version: written by convert_folder, informative.
    Raises ValueError for an unknown keep_compressed, decoder or warmup.
    """

    def __init__(self, keep_compressed=False, decoder: str = "auto", offload: bool = False,
                 verify: bool = True, mode: str | None = None, format_version: int | None = None,
                 wcodec_version: str | None = None, jit_embeddings: bool = True, warmup: bool | None = None, **kwargs):
        if not (keep_compressed is False or keep_compressed is True or keep_compressed == "jit"):
            raise ValueError(f"keep_compressed must be one of {KEEP_COMPRESSED}, got {keep_compressed!r}")
        if decoder not in ("auto", "triton", "numba"):
            raise ValueError(f"decoder must be 'auto', 'triton' or 'numba', got {decoder!r}")
        if warmup not in (None, True, False):
            raise ValueError(f"warmup must be True, False or None (auto), got {warmup!r}")
        self.quant_method = QUANT_METHOD
        self.keep_compressed, self.decoder, self.offload, self.verify = keep_compressed, decoder, offload, verify
        self.jit_embeddings, self.warmup = jit_embeddings, warmup
        self.mode, self.format_version, self.wcodec_version = mode, format_version, wcodec_version
        # transformers removes the quantizer from a model whose config says dequantize
        self.dequantize = keep_compressed is False

    def get_loading_attributes(self) -> dict:
        """The options that a config passed to from_pretrained overrides in the folder's."""
        return {k: getattr(self, k) for k in ("keep_compressed", "decoder", "offload", "verify", "dequantize",
                                              "jit_embeddings", "warmup")}


class WcodecHfQuantizer(HfQuantizer):
    """transformers' side of loading a wcodec folder; see the module docstring."""

    requires_calibration = False  # keep_compressed also compresses a plain folder on load

    def __init__(self, quantization_config: WcodecConfig, **kwargs):
        super().__init__(quantization_config, **kwargs)
        # pre_quantized: the folder's config.json names wcodec (its weights are .wcodec files).
        # transformers applies a quantize operation only when not pre_quantized: that is how
        # keep_compressed sees each tensor as it loads
        self.from_folder = self.pre_quantized
        self.pre_quantized = self.from_folder and not quantization_config.keep_compressed
        self.state = None
        self.load_dtype = None  # the dtype transformers loads in (update_dtype)

    def validate_environment(self, *args, **kwargs):
        from .checkpoint import install

        if not install():
            import transformers

            from ..errors import UnsupportedError

            raise UnsupportedError(f"wcodec: transformers {transformers.__version__} does not read checkpoints "
                                   f"through transformers.modeling_utils.safe_open; wcodec folders cannot load with it")

    def update_dtype(self, dtype):
        self.load_dtype = dtype if isinstance(dtype, torch.dtype) else None  # see param_needs_quantization
        return dtype

    # The hooks that transformers calls with the model config before it resolves the weights file
    # (update_attn_implementation in 5.2x; update_tp_plan / update_ep_plan in 5.17). Each names
    # the checkpoint; naming it twice is harmless.
    def update_attn_implementation(self, config):
        return self._name_checkpoint(config)

    def update_tp_plan(self, config):
        return self._name_checkpoint(config)

    def update_ep_plan(self, config):
        return self._name_checkpoint(config)

    def _name_checkpoint(self, config):
        if self.from_folder and getattr(config, "transformers_weights", None) is None:
            config.transformers_weights = CHECKPOINT_NAME
        return config

    def param_needs_quantization(self, model, param_name: str, **kwargs) -> bool:
        # every tensor passes through KeepCompressed (which hands back what it does not keep), but a
        # vector the model holds in another dtype than the load's (a float32 A_log or expert bias in
        # a bfloat16 model): transformers casts what it hands to a quantize operation to the load
        # dtype first, which would round it; it loads as it does without wcodec (matrices still
        # pass: they may stay compressed, decoded from their record). An integer tensor is never
        # kept compressed, and the cast would make it a float (RADIO's int64 summary_idxs, an
        # index, became bfloat16): it loads as without wcodec too
        if not self.quantization_config.keep_compressed:
            return False
        held = _model_tensor(model, param_name)
        if held is not None and not held.is_floating_point():
            return False
        return held is None or held.dim() >= 2 or self.load_dtype is None or held.dtype == self.load_dtype

    def get_quantize_ops(self):
        return KeepCompressed(self)

    @property
    def quantized_element_size(self):
        # device_map="auto" sizing: about 12 bits per weight kept compressed
        return 1.5 if self.quantization_config.keep_compressed else None

    def param_element_size(self, model, param_name: str, param) -> float:
        # transformers reserves sum(numel * this) on each GPU before loading
        # (caching_allocator_warmup): the kept-compressed size, not the bf16 model's
        size = self.quantized_element_size
        return param.element_size() if size is None or not param.is_floating_point() else size

    def _process_model_before_weight_loading(self, model, checkpoint_files=None, **kwargs):
        from .keep import KeepState

        if "transformers_weights" in model.config.__dict__:
            del model.config.transformers_weights
        q = self.quantization_config
        reader = folder = None
        if self.from_folder:
            if not checkpoint_files or not is_checkpoint_name(checkpoint_files[0]):
                raise RuntimeError(f"wcodec: transformers did not resolve the weights to {CHECKPOINT_NAME} "
                                   f"(got {checkpoint_files}); this transformers is not supported")
            from ..format import CheckpointReader
            from .checkpoint import keep_lazily

            folder = Path(checkpoint_files[0]).parent
            reader = CheckpointReader(folder)
            check_model_size(model, reader)
            keep_lazily(folder, bool(q.keep_compressed), q.verify)
        if q.keep_compressed:
            from ..gpu import kernel_pack

            kernel_pack.install()  # before the weights load: the load's own GPU kernels find them too
            self.state = KeepState(q.keep_compressed, q.jit_embeddings, q.decoder, q.offload, q.verify, reader, folder)
            self.state.load_dtype = self.load_dtype
        elif reader is not None:
            reader.close()
        return model

    def _process_model_after_weight_loading(self, model, **kwargs):
        from .save import bind_save

        state, self.state = self.state, None
        if state is None:
            return model
        try:
            from .keep import finish

            finish(state, model)
            clear_quantized_flag(model)
        finally:
            if state.reader is not None:  # records kept just in time are copies
                from .checkpoint import keep_lazily

                keep_lazily(state.folder, False)
                state.reader.close()
        bind_save(model)
        from .warmup import after_load

        after_load(model, self.quantization_config.warmup)
        return model

    def _dequantize(self, model, dtype=None):
        from .save import dequantize_model

        return dequantize_model(model)

    def is_serializable(self, safe_serialization=None):
        return True  # save_pretrained writes a wcodec folder (wcodec.hf.save)

    @property
    def is_trainable(self) -> bool:
        return True  # adapters on top (the compressed base weights are frozen)

    @property
    def is_compileable(self) -> bool:
        return True


def _reads_weights_unsafely(model) -> str | None:
    """Why model code that reads a layer's ``.weight`` directly would go wrong in ``model`` (the
    cases transformers' ``config._is_quantized`` steers around), else None."""
    from ..torch.jit import JitWeight
    from ..torch.linear import FixedBuffers

    for name, m in model.named_modules():
        # a just-in-time Linear's .weight is a JitWeight, which decodes when read; a plain view of
        # the shared scratch would hold another layer's values outside the module's forward
        if isinstance(m, torch.nn.Linear) and "_wcodec_jit" in m.__dict__ \
                and not isinstance(m._parameters.get("weight"), JitWeight):
            return f"{name}: decoded just in time (its .weight holds another layer's values outside its forward)"
    impl = str(getattr(model.config, "_attn_implementation", None) or "")
    if "flash" in impl and any(isinstance(m, FixedBuffers) for m in model.modules()):
        return f"attention {impl}: its float32 target dtype looks for an nn.Linear, which a fused layer is not"
    return None


def clear_quantized_flag(model) -> list:
    """Remove transformers' ``config._is_quantized`` from the configs of a kept-compressed model
    whose every layer's ``.weight`` reads as that weight; returns the models (``model`` and the
    transformers models inside it) that keep the flag, each with why.

    transformers sets the flag on every loaded model with a quantizer (``_assign_is_quantized``),
    and model code reads it (5.24: FalconMamba's and Jamba's mixers call ``dt_proj(x) - bias``
    instead of ``dt_proj.weight @ x``, whose bf16 rounding differs: logits 0.03 off; GPT-Neo's,
    Falcon's and flash attention's float32-input cast take ``config.dtype`` instead of a
    projection's ``.weight.dtype``), since a quantized layer's ``.weight`` is no weight. Here a
    fused layer's ``.weight`` decodes (``FixedWeightTensor``) and a dense one is itself, so those
    reads give the dense model's values and outputs, as does a just-in-time Linear's
    (``JitWeight``: decoded when read); the flag stays where a read would not: a just-in-time
    Linear holding a plain view of the shared scratch, or a flash
    attention implementation with fused layers (chosen at load time; switching the attention
    implementation afterwards is not re-checked)."""
    from transformers.modeling_utils import PreTrainedModel

    kept, configs = [], {}
    for m in model.modules():
        cfg = getattr(m, "config", None)
        if not isinstance(m, PreTrainedModel) or cfg is None or "_is_quantized" not in cfg.__dict__:
            continue
        configs[id(cfg)] = cfg
        why = _reads_weights_unsafely(m)
        if why is not None:
            kept.append((m, why))
    for cfg_id in configs.keys() - {id(m.config) for m, _ in kept}:  # a config shared with a model
        del configs[cfg_id]._is_quantized  # that keeps the flag keeps it (the base model inside its head)
    return kept


def check_model_size(model, reader, slack: float = 0.05, floor: int = 1 << 24) -> None:
    """Refuse a config whose model (built on the meta device, nothing allocated yet) holds more
    elements than the checkpoint can fill: transformers would allocate and initialise every
    missing parameter (a config.json claiming vocab_size 2**40 asked for 70 TB). Allows
    ``slack`` of the stored elements, at least ``floor``, for heads a checkpoint may lack.
    Raises :class:`wcodec.errors.FormatError` naming the largest parameters."""
    from ..errors import FormatError

    tied = set(getattr(model, "all_tied_weights_keys", None) or {})  # filled from their source
    seen, total, sizes = set(), 0, []
    for name, t in [*model.named_parameters(), *model.named_buffers()]:
        if id(t) in seen or name in tied:
            continue
        seen.add(id(t))
        total += t.numel()
        sizes.append((t.numel(), name, tuple(t.shape)))
    stored = sum(reader.numel(n) for n in reader.keys() if not reader.alias_of(n))
    if total > stored + max(floor, int(slack * stored)):
        big = ", ".join(f"{n} {s}" for _, n, s in sorted(sizes, reverse=True)[:3])
        raise FormatError(f"config.json implies {total:,} parameter elements but the checkpoint stores {stored:,}: "
                          f"refusing to allocate (largest: {big})")


try:  # transformers' base class of conversion operations (5.x); duck-typed where it is missing
    from transformers.core_model_loading import ConversionOps as _Op
except ImportError:  # pragma: no cover
    _Op = object


def _model_tensor(model, name: str):
    """The model's parameter or buffer ``name`` (on the meta device while loading), None if none."""
    module_name, _, attr = name.rpartition(".")
    try:
        module = model.get_submodule(module_name) if module_name else model
    except AttributeError:
        return None
    t = module._parameters.get(attr)
    return t if t is not None else module._buffers.get(attr)


class KeepCompressed(_Op):
    """transformers' quantize operation for keep_compressed: see :mod:`wcodec.hf.keep`."""

    def __init__(self, quantizer: WcodecHfQuantizer):
        self.quantizer = quantizer

    def convert(self, input_dict: dict, source_patterns=None, target_patterns=None, model=None,
                missing_keys=None, **kwargs) -> dict:
        from .keep import keep_tensor

        out = {}
        for name, value in input_dict.items():
            value = value[0] if isinstance(value, list) else value
            kept = keep_tensor(self.quantizer.state, model, name, value, source_patterns)
            if kept is None:
                if missing_keys is not None:
                    missing_keys.discard(name)
            else:
                out[name] = kept
        return out


def register() -> bool:
    """Register wcodec with transformers (idempotent). Returns False when this transformers has no
    public registration API (before 4.4x)."""
    try:
        from transformers.quantizers.auto import (AUTO_QUANTIZATION_CONFIG_MAPPING, AUTO_QUANTIZER_MAPPING,
                                                  register_quantization_config, register_quantizer)
    except ImportError:
        return False
    if AUTO_QUANTIZATION_CONFIG_MAPPING.get(QUANT_METHOD) is not WcodecConfig:
        AUTO_QUANTIZATION_CONFIG_MAPPING.pop(QUANT_METHOD, None)  # a reload of this module
        register_quantization_config(QUANT_METHOD)(WcodecConfig)
    if AUTO_QUANTIZER_MAPPING.get(QUANT_METHOD) is not WcodecHfQuantizer:
        AUTO_QUANTIZER_MAPPING.pop(QUANT_METHOD, None)
        register_quantizer(QUANT_METHOD)(WcodecHfQuantizer)
    _accept_loading_options()
    patch_dtype()
    from .checkpoint import install

    install()
    return True


def patch_dtype() -> None:
    """transformers' ``model.dtype`` is the dtype of the model's first floating parameter; a
    weight held compressed is no parameter, so a model kept compressed could report the dtype of
    a float32 norm where the dense model reports bfloat16 (and its code casts by it), or have no
    parameter at all (``model.device`` raised StopIteration). A model that
    :func:`wcodec.hf.keep.finish` gave ``_wcodec_dtype`` reports that, and the device of its
    buffers when it has no parameter; every other model the properties' own answers
    (idempotent)."""
    try:
        from transformers.modeling_utils import ModuleUtilsMixin
    except ImportError:
        return
    prop = ModuleUtilsMixin.__dict__.get("dtype")
    if not isinstance(prop, property) or getattr(prop.fget, "_wcodec", False):
        return
    orig = prop.fget

    def dtype(self):
        held = self.__dict__.get("_wcodec_dtype")
        return held if held is not None else orig(self)

    dtype._wcodec = True
    ModuleUtilsMixin.dtype = property(dtype, prop.fset, prop.fdel, prop.__doc__)
    dev = ModuleUtilsMixin.__dict__.get("device")
    if isinstance(dev, property):
        orig_device = dev.fget

        def device(self):
            # every parameter held compressed (OLMo: norms without weights): the device of its buffers
            # (transformers 5.25 reads it inside from_pretrained, before keep.finish has run)
            try:
                return orig_device(self)
            except StopIteration:
                if "_wcodec_dtype" not in self.__dict__ and not _holds_compressed(self):
                    raise
                return next(self.buffers()).device

        ModuleUtilsMixin.device = property(device, dev.fset, dev.fdel, dev.__doc__)


def _holds_compressed(model) -> bool:
    """Whether ``model`` holds a wcodec module (its weights as buffers of ours)."""
    return any(type(m).__module__.startswith("wcodec.") for m in model.modules())


# transformers warns whenever a quantization_config is passed for a folder that has one, even
# when it applies its loading options (ours); silence exactly that message for our options
_OPTIONS_WARNING = r"You passed `quantization_config`.*loading attributes \(e\.g\. \['keep_compressed'"


def _accept_loading_options() -> None:
    """transformers keeps the folder's quantization_config and applies the options of the one
    passed to from_pretrained only for the config types in this tuple (not public: if it moves,
    options passed that way are ignored with transformers' warning; the folder's config.json
    options still apply)."""
    import transformers.quantizers.auto as auto

    import warnings

    types = getattr(auto, "LOADING_ATTRIBUTES_CONFIG_TYPES", None)
    if isinstance(types, tuple) and WcodecConfig not in types:
        auto.LOADING_ATTRIBUTES_CONFIG_TYPES = (*types, WcodecConfig)
        warnings.filterwarnings("ignore", message=_OPTIONS_WARNING, category=UserWarning)
