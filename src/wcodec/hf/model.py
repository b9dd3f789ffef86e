"""``WCodecModel.from_pretrained``: a transformers model from a folder of .wcodec weights.

The model is built by its transformers class from the config with parameters on the meta
device (buffers such as RoPE tables built for real), tied as the class ties them, and each
parameter or buffer that has a stored tensor (matched by name, base-model prefix added or
removed) gets it decoded straight onto the target device or kept compressed there
(:mod:`wcodec.hf.materialize`): no per-architecture tables here.
"""

from __future__ import annotations

from pathlib import Path

import torch

from ..format import CheckpointReader
from ..torch import CompressedWeights
from ..torch.state import empty_parameters, meta_tensors, stored_key
from ..torch.tensors import resolve_dtype, torch_dtype
from .convert import QUANT_METHOD
from .materialize import LoadOptions, fill_slots, slots_by_name

_FLOATS = ("BF16", "F16", "F32", "F64")


def load_config(folder, **kwargs):
    """AutoConfig of a converted folder, without its wcodec ``quantization_config`` (the weights
    are decoded on load, so the model is an ordinary one)."""
    from transformers import AutoConfig

    config = AutoConfig.from_pretrained(str(folder), **kwargs)
    q = getattr(config, "quantization_config", None)
    if isinstance(q, dict) and q.get("quant_method") == QUANT_METHOD:
        delattr(config, "quantization_config")
    return config


def model_class_for(config):
    """The transformers class named by ``config.architectures[0]``, else AutoModel's choice."""
    import transformers

    for name in getattr(config, "architectures", None) or []:
        cls = getattr(transformers, name, None)
        if cls is not None:
            return cls
    return transformers.AutoModel


def concrete_class(model_class, config):
    """An Auto class (AutoModel, AutoModelForCausalLM...) resolved to its class for ``config``
    (Auto classes have no ``_from_config``); others unchanged."""
    mapping = getattr(model_class, "_model_mapping", None)
    return mapping[type(config)] if mapping is not None else model_class


def target_dtype(reader: CheckpointReader, config, torch_dtype_=None) -> torch.dtype:
    """torch_dtype if given, else the config's dtype, else the first stored float dtype (fp32 if none)."""
    dt = resolve_dtype(torch_dtype_)
    if dt is None:
        dt = getattr(config, "dtype", None)
        if dt is None and not hasattr(type(config), "dtype"):  # transformers before 4.56 only
            dt = getattr(config, "torch_dtype", None)  # (later ones warn that it is deprecated)
        dt = resolve_dtype(dt)
    if dt is None:
        first = next((reader.entry(n)["dtype"] for n in reader.keys() if reader.entry(n)["dtype"] in _FLOATS), "F32")
        dt = torch_dtype(first)
    return dt


def instantiate(model_class, config, dtype: torch.dtype, **kwargs):
    """``model_class`` built from ``config`` in ``dtype``, parameters on meta, buffers real."""
    import transformers

    major, minor = (int(x) for x in transformers.__version__.split(".")[:2])
    dkey = "dtype" if (major, minor) >= (4, 56) else "torch_dtype"  # renamed in 4.56 (then warns)
    with empty_parameters(), _no_init_weights():
        return model_class._from_config(config, **{dkey: dtype}, **kwargs)


def _no_init_weights():
    """transformers' switch that skips random initialisation (every weight is loaded after);
    it moved between versions, and without it the init runs on meta tensors (about 0.1 s)."""
    import contextlib

    for where in ("transformers.initialization", "transformers.modeling_utils"):
        try:
            return __import__(where, fromlist=["no_init_weights"]).no_init_weights()
        except (ImportError, AttributeError):
            continue
    return contextlib.nullcontext()


def bind_compressed(model: torch.nn.Module, cw: CompressedWeights, names: dict) -> dict:
    """Attach a decode hook to every nn.Linear / nn.Embedding whose weight is a scratch view.

    names: {stored name or alias: key in cw}. Other parameters holding a scratch view (another
    module type, or a copy transformers made) get a decoded tensor instead. Returns
    {"compressed": [param names], "decoded": [param names]}. Raises RuntimeError if a scratch view
    is left that cannot be traced to a stored tensor.
    """
    prefix = getattr(model, "base_model_prefix", "") or ""
    seen: dict[int, tuple] = {}  # id(original param) -> (key, param now used)
    report = {"compressed": [], "decoded": []}
    scratch = cw.scratch.untyped_storage().data_ptr()
    for mname, module in model.named_modules():
        for pname, p in list(module._parameters.items()):
            full = f"{mname}.{pname}" if mname else pname
            if p is None:
                continue
            if id(p) in seen:  # tied: the same Parameter under another module
                key, now = seen[id(p)]
            else:
                ck = stored_key(full, names, prefix)
                if ck is None:
                    continue
                key, now = names[ck], p
                w = cw.weights[key]
                is_view = p.data_ptr() == w.view.data_ptr() and p.dtype == w.view.dtype
                jit_ok = isinstance(module, (torch.nn.Linear, torch.nn.Embedding)) and pname == "weight"
                if not (is_view and jit_ok):
                    now = torch.nn.Parameter(cw.materialize(key).to(p.dtype), requires_grad=False)
                seen[id(p)] = (key, now)
            if now is p and now.data_ptr() == cw.weights[key].view.data_ptr():
                cw.attach(module, key)
                report["compressed"].append(full)
            else:
                module._parameters[pname] = now
                report["decoded"].append(full)
    bound = set(report["compressed"])
    for n, t in [*model.named_parameters(remove_duplicate=False), *model.named_buffers()]:
        if n not in bound and t.device == cw.scratch.device and t.numel() \
                and t.untyped_storage().data_ptr() == scratch:
            raise RuntimeError(f"{n}: holds a compressed weight that could not be traced to a stored tensor")
    return report


class WCodecModel:
    """Hugging Face style entry point: ``WCodecModel.from_pretrained(folder, ...)``."""

    @classmethod
    def from_pretrained(cls, folder, device="cpu", dtype=None, keep_compressed=False,
                        model_class=None, offload: bool = False, decoder: str = "auto",
                        verify: bool = True, torch_dtype=None, jit_embeddings: bool = True, **kwargs):
        """Load a folder written by :func:`wcodec.hf.convert_folder` as a transformers model.

        folder: config.json + model.wcodec (or shards + index). device: "cpu", "cuda[:i]" or a
        torch.device; tensors are decoded straight onto it. dtype: model dtype (torch dtype or
        name; default: the config's, else the stored one; ``torch_dtype`` is the same, the name
        transformers used before 4.56). keep_compressed: False; True: every plain
        nn.Linear with a bf16 weight becomes a fused :class:`wcodec.torch.linear.
        CompressedLinear`, every untied bf16 nn.Embedding a :class:`wcodec.torch.embedding.
        CompressedEmbedding` (a lookup decodes its rows only), the other Linear / Embedding
        weights stay compressed on ``device``
        and are decoded just before their module runs; "jit": all of them just in time (peak
        memory about the compressed model + the largest weight). The weights are bit-exact either
        way, but on CUDA the fused kernels sum in another order than cuBLAS: logits agree to
        rounding and greedy tokens can part from the bf16 model's at a near-tie; "jit" (decode,
        then the same ``F.linear``) gives its eager outputs bit for bit. Compressed weights are frozen;
        adapters on top train (peft LoRA). jit_embeddings: with True, False decodes the
        weights that are not fused (tied embeddings, other dtypes) instead (no graph break
        under torch.compile).
        model_class: a transformers class (default: ``config.architectures[0]``, else AutoModel).
        offload: with keep_compressed on CUDA, hold the compressed bytes in pinned CPU memory.
        decoder: "auto", "triton" or "numba" (keep_compressed). verify: check checksums.
        kwargs: passed to the class's ``_from_config`` (e.g. attn_implementation).

        Returns the model in eval mode; with keep_compressed its ``wcodec_weights`` attribute is
        the :class:`wcodec.torch.CompressedWeights` (sizes, ``detach()``, ``report``: names
        "fused", "compressed" (just in time), "decoded", "kept" {name: why not fused}). Raises
        FileNotFoundError (no checkpoint), WcodecError subclasses (corrupt data), and what
        transformers raises for a config it does not know.
        """
        folder = Path(folder)
        config = load_config(folder)
        model_class = concrete_class(model_class or model_class_for(config), config)
        with CheckpointReader(folder) as reader:
            dtype = target_dtype(reader, config, dtype if dtype is not None else torch_dtype)
            model = instantiate(model_class, config, dtype, **kwargs)
            model.tie_weights()  # tied parameters share the stored tensor of their partner
            slots = slots_by_name(model, reader.keys(), getattr(model, "base_model_prefix", "") or "")
            meta = {n: (getattr(m, a).dtype, tuple(getattr(m, a).shape)) for n, (m, a, _, _) in slots.items()}
            cws = fill_slots(model, slots, reader, meta, LoadOptions(keep_compressed, decoder, jit_embeddings, offload, verify),
                             device=device)
            used = {s for *_, s in slots.values()}
            unused = [n for n in reader.keys() if n not in used]
        model.tie_weights()
        left = meta_tensors(model)
        if left:
            raise ValueError(f"{folder}: no stored tensor for {left[:5]}{' ...' if len(left) > 5 else ''}"
                             f" (unused stored names: {unused[:5]})")
        model.to(device)
        if cws:
            model.wcodec_weights = cws[0] if len(cws) == 1 else cws
        return model.eval()
