"""``WCodecModel.from_pretrained``: a transformers model from a folder of .wcodec weights.

A thin layer over transformers' own ``from_pretrained`` with :class:`wcodec.hf.WcodecConfig`
(:mod:`wcodec.hf.quantizer`): transformers builds the model on the meta device, reads the
folder's tensors through :mod:`wcodec.hf.checkpoint` and applies its own renames, expert
merges, ties and placement, so every architecture transformers loads from safetensors loads
from a wcodec folder. What this layer adds is for untrusted folders: config.json is parsed by
wcodec's strict rules (regular file inside the folder, bounded size and nesting, no NaN, no
duplicate keys) before transformers reads it, and transformers is never allowed to run or import
code from the folder (``trust_remote_code=False``; it then never asks on stdin either).
"""

from __future__ import annotations

from pathlib import Path

from .convert import QUANT_METHOD, codec_config


def read_config(folder) -> dict:
    """The folder's config.json, strictly parsed. Raises FileNotFoundError when absent,
    :class:`wcodec.errors.FormatError` when it is a link out of the folder, not a regular file,
    too large, too deeply nested, or not strict JSON."""
    from ..errors import FormatError
    from ..format import _io

    folder = Path(folder)
    if not (folder / "config.json").exists():
        raise FileNotFoundError(f"{folder}: no config.json (not a Hugging Face model folder)")
    path = _io.inside(folder, "config.json", "config.json", must_exist=True)
    cfg = _io.read_json(path, "config.json")
    if not isinstance(cfg, dict):
        raise FormatError(f"{path}: config.json must hold a JSON object, got {type(cfg).__name__}")
    return cfg


def load_config(folder, **kwargs):
    """AutoConfig of a wcodec folder, after :func:`read_config`'s checks, without remote code;
    its ``quantization_config`` names wcodec (added when the folder's config.json lacks it)."""
    from transformers import AutoConfig

    from ..errors import UnsupportedError

    if kwargs.pop("trust_remote_code", False):
        raise UnsupportedError("wcodec never runs code from a model folder (trust_remote_code=True refused)")
    raw = read_config(folder)
    config = AutoConfig.from_pretrained(str(folder), trust_remote_code=False, **kwargs)
    q = raw.get("quantization_config")
    if not (isinstance(q, dict) and q.get("quant_method") == QUANT_METHOD):
        config.quantization_config = codec_config("lossless")
    return config


def model_class_for(config):
    """The transformers class named by ``config.architectures[0]``, else AutoModel."""
    import transformers

    for name in getattr(config, "architectures", None) or []:
        cls = getattr(transformers, name, None)
        if cls is not None:
            return cls
    return transformers.AutoModel


class WCodecModel:
    """Hugging Face style entry point: ``WCodecModel.from_pretrained(folder, ...)``."""

    @classmethod
    def from_pretrained(cls, folder, device="cpu", dtype=None, keep_compressed=False,
                        model_class=None, offload: bool = False, decoder: str = "auto",
                        verify: bool = True, torch_dtype=None, jit_embeddings: bool = True, warmup=None,
                        **kwargs):
        """Load a folder written by :func:`wcodec.hf.convert_folder` (or saved from a wcodec model)
        as a transformers model, through transformers' own loading (see the module docstring).

        folder: config.json + model.wcodec (or shards + index). device: "cpu", "cuda[:i]", a
        torch.device, or a transformers ``device_map`` ("auto", a dict). dtype: model dtype (torch
        dtype or name; default: the checkpoint's, as transformers' ``dtype="auto"``;
        ``torch_dtype`` is the same). keep_compressed: False (an ordinary model); True (bf16
        Linear weights become fused :class:`wcodec.torch.linear.CompressedLinear`, untied bf16
        embeddings :class:`wcodec.torch.embedding.CompressedEmbedding`, bf16 MoE experts stay
        compressed per expert; other Linear / Embedding weights are decoded just in time with
        ``jit_embeddings``, else decoded); "jit" (every Linear / Embedding weight decoded just
        before its module runs). Weights are bit-exact either way; on CUDA the fused kernels sum
        in another order than cuBLAS (logits agree to rounding), "jit" gives the bf16 model's
        eager outputs bit for bit. model_class: a transformers class (default:
        ``config.architectures[0]``, else AutoModel). offload, decoder, verify, warmup: see
        :class:`wcodec.hf.WcodecConfig`. kwargs: passed to transformers' ``from_pretrained``
        (e.g. attn_implementation); ``trust_remote_code=True`` is refused.

        Returns the model in eval mode; with keep_compressed, ``model.wcodec_weights.report``
        lists names "fused", "compressed" (just in time), "decoded" and "kept" {name: why not
        fused}. Raises FileNotFoundError (no config or checkpoint), DeviceError (CUDA asked for
        and absent), WcodecError subclasses (corrupt or hostile folder), and what transformers
        raises for a config it does not know.
        """
        from ..api import torch_device
        from .quantizer import WcodecConfig

        folder = Path(folder)
        config = load_config(folder, trust_remote_code=kwargs.pop("trust_remote_code", False))
        model_class = model_class or model_class_for(config)
        device_map = device if isinstance(device, dict) or device == "auto" else str(torch_device(device))
        options = WcodecConfig(keep_compressed=keep_compressed, decoder=decoder, offload=offload, verify=verify,
                               jit_embeddings=jit_embeddings, warmup=warmup)
        dtype = dtype if dtype is not None else torch_dtype
        model = model_class.from_pretrained(str(folder), config=config, quantization_config=options,
                                            device_map=device_map, dtype="auto" if dtype is None else dtype,
                                            trust_remote_code=False, **kwargs)
        return model.eval()
