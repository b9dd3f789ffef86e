"""wcodec as a transformers quantization method: plain ``AutoModel*.from_pretrained(folder)``,
pipelines and ``SentenceTransformer(folder)`` load a folder written by
:func:`wcodec.hf.convert_folder` (its config.json has ``quantization_config.quant_method ==
"wcodec"``).

Registered with transformers' public API (``register_quantization_config`` /
``register_quantizer``) by :func:`register`, which ``import wcodec`` arranges lazily (see
:mod:`wcodec.hf.hook`). transformers reads only safetensors / torch files and the quantizer API
has no hook that supplies tensors, so the quantizer (checked with transformers 5.17 and 5.23):

1. names a weights file that does not exist (``config.transformers_weights``) so that the folder
   resolves, and, before loading, swaps it for a stub of placeholders (:mod:`.placeholders`);
2. lets transformers load the placeholders (renaming, ``device_map`` placement, weight tying,
   missing / unexpected key report: all its own);
3. after loading, decodes each stored tensor on the device its placeholder landed on (each GPU of
   ``device_map="auto"`` decodes only its layers, in one batched launch per device), or keeps it
   compressed there (``keep_compressed``).

Options go in :class:`WcodecConfig`, passed as ``from_pretrained(folder,
quantization_config=WcodecConfig(keep_compressed=True))``.
"""

from __future__ import annotations

from pathlib import Path

import torch
from transformers.quantizers import HfQuantizer
from transformers.utils.quantization_config import QuantizationConfigMixin

from .convert import QUANT_METHOD
from .placeholders import find_placeholders, remove_stub, write_stub

STUB_NAME = "wcodec-placeholders.safetensors"  # named to transformers, never written in the folder
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
    format_version / mode / wcodec_version: written by convert_folder, informative.
    Raises ValueError for an unknown keep_compressed or decoder.
    """

    def __init__(self, keep_compressed=False, decoder: str = "auto", offload: bool = False,
                 verify: bool = True, mode: str | None = None, format_version: int | None = None,
                 wcodec_version: str | None = None, jit_embeddings: bool = True, **kwargs):
        if not (keep_compressed is False or keep_compressed is True or keep_compressed == "jit"):
            raise ValueError(f"keep_compressed must be one of {KEEP_COMPRESSED}, got {keep_compressed!r}")
        if decoder not in ("auto", "triton", "numba"):
            raise ValueError(f"decoder must be 'auto', 'triton' or 'numba', got {decoder!r}")
        self.quant_method = QUANT_METHOD
        self.keep_compressed, self.decoder, self.offload, self.verify = keep_compressed, decoder, offload, verify
        self.jit_embeddings = jit_embeddings
        self.mode, self.format_version, self.wcodec_version = mode, format_version, wcodec_version
        # transformers removes the quantizer from a model whose config says dequantize
        self.dequantize = keep_compressed is False

    def get_loading_attributes(self) -> dict:
        """The options that a config passed to from_pretrained overrides in the folder's."""
        return {k: getattr(self, k) for k in ("keep_compressed", "decoder", "offload", "verify", "dequantize",
                                              "jit_embeddings")}


class WcodecHfQuantizer(HfQuantizer):
    """transformers' side of loading a wcodec folder; see the module docstring."""

    requires_calibration = True  # only folders written by convert_folder: no on-the-fly encoding

    def __init__(self, quantization_config: WcodecConfig, **kwargs):
        super().__init__(quantization_config, **kwargs)
        self.reader = self.stub = None
        self.names: list[str] = []
        self.meta: dict[str, tuple] = {}

    def validate_environment(self, *args, **kwargs):
        # called before the weights file is resolved (5.17, 5.23)
        if not _PROBING and config_hook_reached() is False:
            import transformers

            from ..errors import UnsupportedError

            raise UnsupportedError(
                f"wcodec: transformers {transformers.__version__} resolves the weights file before any quantizer "
                f"hook sees the model config, so AutoModel*.from_pretrained cannot load a wcodec folder with it; "
                f"load with wcodec.hf.WCodecModel.from_pretrained(folder, device=..., keep_compressed=...)")

    # The hooks that transformers calls with the model config before it resolves the weights file:
    # update_tp_plan and update_ep_plan in 5.17, update_attn_implementation in 5.23 (the version
    # in between that switched is not known here). Each names the stub; naming it twice is harmless.
    def update_attn_implementation(self, config):
        return name_stub(config)

    def update_tp_plan(self, config):
        return name_stub(config)

    def update_ep_plan(self, config):
        return name_stub(config)

    def param_needs_quantization(self, model, param_name: str, **kwargs) -> bool:
        # placeholders have their own shape: transformers must not report them as mismatched
        return self.pre_quantized

    @property
    def quantized_element_size(self):
        # device_map="auto" sizing: about 11.5 bits per weight kept compressed
        return 1.45 if self.quantization_config.keep_compressed else None

    def param_element_size(self, model, param_name: str, param) -> float:
        # transformers reserves sum(numel * this) on each GPU before loading
        # (caching_allocator_warmup): the kept-compressed size, where 5.17's default (the dtype's
        # size) reserved the bf16 model's and put a kept-compressed 7B model's load peak at 1.0x
        size = self.quantized_element_size
        return param.element_size() if size is None else size

    def _process_model_before_weight_loading(self, model, checkpoint_files=None, **kwargs):
        from ..format import CheckpointReader

        if not checkpoint_files or Path(checkpoint_files[0]).name != STUB_NAME:
            raise RuntimeError(f"wcodec: transformers did not resolve the weights to {STUB_NAME} "
                               f"(got {checkpoint_files}); load with wcodec.hf.WCodecModel.from_pretrained")
        self.reader = CheckpointReader(Path(checkpoint_files[0]).parent)
        self.names = self.reader.keys()
        self.stub = write_stub(self.names)
        checkpoint_files[:] = [str(self.stub)]
        self.meta = {n: (t.dtype, tuple(t.shape)) for n, t in model.state_dict(keep_vars=True).items()}
        if "transformers_weights" in model.config.__dict__:
            del model.config.transformers_weights
        return model

    def _process_model_after_weight_loading(self, model, **kwargs):
        try:
            fill(model, self.reader, self.names, self.meta, self.quantization_config)
        finally:
            self.reader.close()
            remove_stub(self.stub)
            self.reader = self.stub = None
        return model

    def is_serializable(self, safe_serialization=None):
        return False  # a decoded model has no quantizer left; a compressed one saves as its folder

    @property
    def is_trainable(self) -> bool:
        return True  # adapters on top (the compressed base weights are frozen)

    @property
    def is_compileable(self) -> bool:
        return True


def name_stub(config):
    """Point transformers' weight-file resolution at STUB_NAME (``config.transformers_weights``,
    which it resolves inside the folder without checking that the file exists) and give the
    config a dtype (else transformers reads the absent file for it). Returns ``config``."""
    if getattr(config, "transformers_weights", None) is None:
        config.transformers_weights = STUB_NAME
    if getattr(config, "dtype", None) is None:
        config.dtype = torch.get_default_dtype()
    return config


_PROBING = False
_REACHED: bool | None = None


def config_hook_reached() -> bool | None:
    """Whether this transformers calls one of the config hooks of :class:`WcodecHfQuantizer`
    before resolving the weights file: a dry run of its ``get_hf_quantizer`` (the function
    ``from_pretrained`` calls for that, not public) on an empty config of a wcodec folder, once.
    None when wcodec is not registered, or that function is missing or fails (the load then
    tells by itself)."""
    global _PROBING, _REACHED
    if _REACHED is not None:
        return _REACHED
    try:
        from transformers import PretrainedConfig
        from transformers.quantizers.auto import AUTO_QUANTIZER_MAPPING, get_hf_quantizer
    except ImportError:
        return None
    if AUTO_QUANTIZER_MAPPING.get(QUANT_METHOD) is not WcodecHfQuantizer:
        return None  # not registered (yet): nothing to check
    config = PretrainedConfig(quantization_config={"quant_method": QUANT_METHOD})
    _PROBING = True
    try:
        get_hf_quantizer(config, None, None, True, {})
    except Exception:
        return None
    finally:
        _PROBING = False
    _REACHED = getattr(config, "transformers_weights", None) == STUB_NAME
    return _REACHED


def fill(model, reader, names: list[str], meta: dict, options: WcodecConfig) -> None:
    """Replace every placeholder of ``model`` by its stored tensor on the placeholder's device
    (:func:`wcodec.hf.materialize.fill_slots`); ``model.wcodec_weights``: the
    CompressedWeights (a list when several devices hold some). Raises NotImplementedError when
    transformers converted placeholders on load (e.g. merged MoE experts): such models load with
    :class:`wcodec.hf.WCodecModel`."""
    from .materialize import LoadOptions, fill_slots

    opts = LoadOptions(options.keep_compressed, options.decoder, options.jit_embeddings, options.offload,
                       options.verify)
    cws = fill_slots(model, find_placeholders(model, names), reader, meta, opts)
    if cws:
        model.wcodec_weights = cws[0] if len(cws) == 1 else cws
    empty = [n for n, t in [*model.named_parameters(), *model.named_buffers()]
             if t.numel() == 0 and n in meta and 0 not in meta[n][1]]
    if empty:
        raise NotImplementedError(f"wcodec: transformers converted these weights on load, which the placeholders "
                                  f"cannot follow: {empty[:4]}; load with wcodec.hf.WCodecModel.from_pretrained")


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
    return True


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
