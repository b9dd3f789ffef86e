"""A kept-compressed model back to a wcodec folder, or to a plain model.

:func:`save_folder` writes what :func:`wcodec.hf.convert_folder` writes (config.json with the
codec block, generation config, .wcodec shards + index) from a loaded model, under the model's
own parameter names (transformers loads them as they are): fused weights are stored as the
fixed-rate records they are (no re-encode), just-in-time weights as the records they were loaded
from, everything else encoded lossless. :func:`bind_save` makes ``model.save_pretrained`` do it.
:func:`dequantize_model` (transformers' ``model.dequantize()``) turns every compressed module
back into its plain one, bit-exact.
"""

from __future__ import annotations

import copy
import functools
from pathlib import Path

import numpy as np
import torch


def _fixed_modules(model) -> dict:
    """{module name: module} of the modules holding a fixed-rate weight (CompressedLinear / Embedding)."""
    try:
        from ..torch.linear import FixedBuffers
    except ImportError:
        return {}
    return {n: m for n, m in model.named_modules() if isinstance(m, FixedBuffers)}


def _fixed_record(fw):
    """(EncodedTensor of codec "fixed" (a FixedWeight, bf16) or "fixed16" (a Fixed16Weight,
    fp16), CRC-32 of the decoded bits)."""
    from ..codecs.base import EncodedTensor
    from ..format import spec
    from ..gpu import fixed as fx
    from ..gpu import fixed16 as fx16

    layout, codec, dtype = (fx16, "fixed16", "F16") if isinstance(fw, fx16.Fixed16Weight) else (fx, "fixed", "BF16")
    params, sections = layout.to_sections(fw)
    rec = EncodedTensor(codec, dtype, (fw.N, fw.K), params, sections)
    bits = layout.decode(fw).detach().cpu().view(torch.int16).numpy().view(np.uint16)
    return rec, spec.crc32(bits)


def _expert_tensors(model) -> tuple[dict, set]:
    """({param name: dense bf16 tensor} of compressed MoE experts, {state_dict keys of their
    buffers, replaced by those tensors}). Saved dense-named so that any loader reads them; each
    expert is re-encoded on a kept-compressed reload."""
    try:
        from ..torch import experts as ex
    except ImportError:
        return {}, set()
    dense, replaced = {}, set()
    for mname, module in model.named_modules():
        for attr in ex.compressed_attrs(module):
            name = f"{mname}.{attr}" if mname else attr
            dense[name] = getattr(module, attr).dense()  # a FixedExpertsTensor: every expert decoded
            replaced.update(f"{name}_{suffix}" for suffix in ex.SUFFIXES)
    return dense, replaced


def save_folder(model, save_directory, max_shard_size="5GB", progress: bool = False) -> list[Path]:
    """Write ``model`` (loaded from a wcodec folder, kept compressed or not) as a wcodec folder.

    save_directory: created if missing; existing wcodec shards of the same name are replaced
    atomically (the index is written last). max_shard_size: bytes or a string such as "5GB".
    Returns the written weight paths. Raises OSError, WcodecError subclasses (UnsupportedError
    for a model split across tensor-parallel ranks, ``tp_plan``: its shards are not gathered).
    """
    from ..api import _item
    from ..format import ShardedWriter, encode_into
    from ..format.sharded import DEFAULT_MAX_SHARD_SIZE
    from .convert import codec_config
    from .tp import refuse_sharded

    refuse_sharded(model, "save_pretrained")

    out = Path(save_directory)
    out.mkdir(parents=True, exist_ok=True)
    fixed = _fixed_modules(model)
    experts, expert_buffers = _expert_tensors(model)
    skip = tuple(f"{n}." for n in fixed)
    dense = {}
    for name, t in model.state_dict(keep_vars=True).items():
        if name.startswith(skip) and not name.endswith(".bias"):
            continue
        if name.endswith("._extra_state") or name in expert_buffers or not isinstance(t, torch.Tensor):
            continue
        dense[name] = t.detach()  # just-in-time weights: decoded by their state-dict hook
    for name, t in experts.items():
        dense[name] = t
    records = {f"{n}.weight": m.fixed_weight for n, m in fixed.items()}
    shard = _shard_bytes(max_shard_size, DEFAULT_MAX_SHARD_SIZE)
    with ShardedWriter(out, max_shard_size=shard, metadata={"format": "pt"}) as sink:
        done: dict[int, str] = {}
        for name, fw in records.items():
            if id(fw) in done:
                sink.add_alias(name, done[id(fw)])
                continue
            rec, crc = _fixed_record(fw)
            sink.add_record(name, rec, crc)
            done[id(fw)] = name
        items = [_item(n, t.cpu() if t.device.type != "cpu" else t) for n, t in sorted(dense.items())]
        encode_into(sink, items, mode="lossless")
        paths = sink.commit()
    cfg = copy.deepcopy(model.config)
    dtype = getattr(model, "dtype", None)
    if isinstance(dtype, torch.dtype) and dtype.is_floating_point:  # as transformers' save_pretrained
        cfg.dtype = str(dtype).split(".")[1]  # records it: the dtype a plain reload takes (after a .to(dtype))
    block = codec_config("lossless")
    if records:
        block["codec"] = "fixed"
    cfg.quantization_config = block
    cfg.save_pretrained(out)
    gen = getattr(model, "generation_config", None)
    if gen is not None and getattr(model, "can_generate", lambda: False)():
        gen.save_pretrained(out)
    return paths


def _shard_bytes(size, default: int) -> int:
    if size is None:
        return default
    if isinstance(size, int):
        return size
    from transformers.utils.hub import convert_file_size_to_int

    return convert_file_size_to_int(size)


def _save_pretrained(self, save_directory, *args, push_to_hub: bool = False, max_shard_size="5GB", **kwargs):
    """``save_pretrained`` of a model loaded kept compressed: a wcodec folder (see
    :func:`save_folder`); ``push_to_hub`` uploads the folder as transformers would."""
    paths = save_folder(self, save_directory, max_shard_size=max_shard_size)
    if push_to_hub:
        from huggingface_hub import create_repo, upload_folder

        repo_id = kwargs.get("repo_id") or Path(save_directory).name
        token = kwargs.get("token")
        create_repo(repo_id, token=token, private=kwargs.get("private"), exist_ok=True)
        upload_folder(repo_id=repo_id, folder_path=str(save_directory), token=token,
                      commit_message=kwargs.get("commit_message") or "Upload wcodec model")
    return paths


def bind_save(model) -> None:
    """Make ``model.save_pretrained`` write a wcodec folder (an instance attribute, so
    transformers' own, which would write the decoded weights as safetensors, is not reached)."""
    # a partial of a module-level function, not a bound method: the model still pickles
    # (torch.save(model)), the attribute with it
    model.__dict__["save_pretrained"] = functools.partial(_save_pretrained, model)


def dequantize_model(model):
    """Every compressed module of ``model`` back to its plain one (bit-exact): CompressedLinear ->
    nn.Linear, CompressedEmbedding -> nn.Embedding, compressed experts -> dense parameters,
    just-in-time weights -> decoded parameters. Returns ``model``. Raises UnsupportedError for
    a model split across tensor-parallel ranks (``tp_plan``)."""
    from ..torch.linear import CompressedLinear
    from .tp import refuse_sharded

    refuse_sharded(model, "dequantize")

    parents: dict = {}
    for _, parent in model.named_modules(remove_duplicate=False):
        for cname, child in parent._modules.items():
            if child is not None:
                parents.setdefault(id(child), []).append((parent, cname))
    for name, m in list(_fixed_modules(model).items()):
        plain = m.to_linear() if isinstance(m, CompressedLinear) else _to_embedding(m)
        for parent, cname in parents.get(id(m), []):
            parent._modules[cname] = plain
    try:
        from ..torch.experts import decompress_experts
    except ImportError:
        decompress_experts = None
    if decompress_experts is not None:
        for m in model.modules():
            decompress_experts(m)
    for cw in _holders(model):
        _decode_jit(cw)
    for m in model.modules():  # a plain model now: nothing for model code to steer around
        cfg = getattr(m, "config", None)
        if cfg is not None and "_is_quantized" in getattr(cfg, "__dict__", {}):
            del cfg._is_quantized
    model.__dict__.pop("wcodec_weights", None)
    model.__dict__.pop("save_pretrained", None)
    return model


def _to_embedding(m) -> torch.nn.Embedding:
    w = m.decoded_weight().to(m.weight_dtype)
    emb = torch.nn.Embedding(w.shape[0], w.shape[1], padding_idx=m.padding_idx, device=w.device, dtype=w.dtype)
    with torch.no_grad():
        emb.weight.copy_(w)
    return emb


def _holders(model) -> list:
    h = getattr(model, "wcodec_weights", None)
    h = h if isinstance(h, list) else [h] if h is not None else []
    return [cw for cw in h if getattr(cw, "weights", None) and hasattr(cw, "materialize")]


def _decode_jit(cw) -> None:
    """Every module decoding just in time from ``cw`` gets its decoded weight
    (:meth:`CompressedWeights.release`); modules that shared one Parameter (tied) share the new one."""
    decoded: dict[int, torch.nn.Parameter] = {}
    for module in list(cw.bound):
        old = module.weight
        decoded[id(old)] = cw.release(module, decoded.get(id(old)))
