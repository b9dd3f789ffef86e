"""keep_compressed: what becomes of each tensor as transformers loads it.

:class:`KeepCompressed` is the quantize operation that transformers' loader applies to every
tensor after its own conversions (renames, expert merges) and placement, one tensor at a time
(transformers loads sequentially when a quantizer quantizes on load, so the transient is one
tensor). For a parameter ``name`` holding ``value`` (already on its device, in the load dtype):

- with ``keep_compressed=True``: the weight of a plain ``nn.Linear`` in bfloat16 becomes a
  :class:`wcodec.torch.linear.CompressedLinear` (fused decode + matmul), in float16 a
  :class:`wcodec.torch.linear16.CompressedLinear16` where its fp16 layout saves (codec
  "fixed16"; else it stays as loaded, reported with the layout's size), the weight of a plain
  untied bfloat16 ``nn.Embedding`` a :class:`wcodec.torch.embedding.CompressedEmbedding`, a 3-D
  expert parameter of an experts module compressed experts (:mod:`wcodec.torch.experts`: a
  transformers experts module's run on the fused kernels on CUDA; those of an experts module
  with a forward of its own, Llama-4's or JetMoE's, and those held in another dtype than
  bfloat16 with bfloat16 values, a bf16 checkpoint loaded in float32, decode for each call and
  run the dense forward, listed as "compressed"); the
  fixed-rate layout comes straight from the file when the tensor was stored with codec "fixed"
  (or "fixed16") and reached the model unchanged, else it is encoded on the device;
- weights of ``nn.Linear`` / ``nn.Embedding`` that are not fused (``keep_compressed="jit"``, or
  tied, or another dtype, with ``jit_embeddings``) stay compressed, decoded just in time into a
  shared scratch (:class:`wcodec.torch.CompressedWeights`): one that reached the model unchanged
  from a stored record stays that record; one that did not (transformers split a fused qkv or
  gate_up into it, merged or converted it, or a safetensors source) is encoded in memory, lossless,
  as loaded (:func:`_encode_loaded`; the fixed-rate layout in a fixed folder). Transformers ties
  and places a placeholder for them (the weight's shape over one element), swapped for the
  scratch view by :func:`finish`;
  with ``"jit"``, 3-D expert parameters are compressed experts that decode for each call and
  multiply as the dense module does (``compress_expert_param(..., exact=True)``);
- anything else is handed back to transformers as the dense tensor (in the parameter's dtype):
  other modules' tensors, and matrices no codec takes (empty, an unsupported dtype), named in
  the report with why.

Under a tensor-parallel plan (``tp_plan``), ``value`` is this rank's shard: a block of a stored
fixed record is cut from it (:func:`_cut_weight`), any other shard decoded and encoded for the
rank; the compressed module takes the plan's place (:func:`wcodec.hf.tp.adopt`).

``model.wcodec_weights.report``: "fused", "compressed" (just in time), "decoded" (Linear /
Embedding / expert weights held dense) and "kept" ({name: why such a weight was not fused}).
"""

from __future__ import annotations

import contextlib
import warnings
from dataclasses import dataclass, field
from typing import NamedTuple

import torch

from . import tp
from .checkpoint import StoredTensor, materialize


@dataclass
class KeepState:
    """What one load keeps, filled by :class:`KeepCompressed`, finished by :func:`finish`."""

    mode: object                 # True or "jit"
    jit_embeddings: bool = True
    decoder: str = "auto"
    offload: bool = False
    verify: bool = True
    reader: object = None        # CheckpointReader of the folder (None: a safetensors source)
    folder: object = None        # the folder's Path (None: a safetensors source)
    report: dict = field(default_factory=lambda: {"fused": [], "compressed": [], "decoded": [], "kept": {}})
    jit: dict = field(default_factory=dict)       # storage id -> (placeholder, stored key, dtype, why)
    held: dict = field(default_factory=dict)      # id(module holding a weight compressed) -> its dtype
    load_dtype: object = None    # the dtype transformers loads in (None: the checkpoint's)
    _parents: dict | None = None
    _tied: set | None = None
    _fixed: bool | None = None

    def fixed_folder(self) -> bool:
        """Whether the folder stores matrices in the fixed-rate layouts (converted with codec
        "fixed", or saved from a fused model): weights encoded on load then take them too
        (:func:`_encode_loaded`), as the fused kernels read."""
        if self._fixed is None:
            self._fixed = self.reader is not None and any(
                self.reader.entry(k).get("codec") in ("fixed", "fixed16") for k in self.reader.keys())
        return self._fixed

    # -- model facts, computed once per load ------------------------------------------------
    def parents(self, model) -> dict:
        """{id(module): [(parent, child name)]}: a module under several names is swapped under each."""
        if self._parents is None:
            self._parents = {}
            for _, parent in model.named_modules(remove_duplicate=False):
                for cname, child in parent._modules.items():
                    if child is not None:
                        self._parents.setdefault(id(child), []).append((parent, cname))
        return self._parents

    def tied(self, model) -> set:
        """Parameter names that transformers ties after loading (either side of a tie)."""
        if self._tied is None:
            keys = getattr(model, "all_tied_weights_keys", None)
            if keys is None and hasattr(model, "get_expanded_tied_weights_keys"):
                keys = model.get_expanded_tied_weights_keys(all_submodels=True)
            keys = keys or {}
            self._tied = set(keys) | set(keys.values())
        return self._tied


def _locate(model, name: str):
    mname, _, attr = name.rpartition(".")
    return (model.get_submodule(mname) if mname else model), attr


def _stored_record_key(state: KeepState, sources, value: torch.Tensor, same_dtype: bool = True) -> str | None:
    """The stored name whose record ``value`` is, unchanged (one source, same shape, and the same
    dtype unless ``same_dtype`` is False: a cast), else None (converted by transformers, or a
    safetensors source). A tensor-parallel shard read as a block of the record (a
    :class:`StoredTensor` with a ``region``) is that record's block: its key too."""
    if state.reader is None or not sources or len(sources) != 1:
        return None
    key = sources[0]
    if key not in state.reader:
        return None
    from .._torch_tensors import torch_dtype

    entry = state.reader.entry(key)
    stored = torch_dtype(entry["dtype"]) if entry["dtype"] in ("BF16", "F16", "F32", "F64") else None
    region = _region(value)
    shape = tuple(entry["shape"]) if region is None else tuple(b - a for a, b in region)
    if shape != tuple(value.shape) or stored is None or (same_dtype and stored != value.dtype):
        return None
    return key


def _recast_record(state: KeepState, sources, value: torch.Tensor, want: torch.dtype) -> torch.Tensor | None:
    """The stored record of ``value`` decoded in its own dtype ``want`` (the dtype the module
    holds: transformers' keep-in-float32 modules, Voxtral's float32 embed_positions) when
    transformers handed it over cast to the load dtype (rounded: a float32 table in bfloat16),
    as it loads without wcodec; None when the record is not in ``want``."""
    from .._torch_tensors import torch_dtype
    from ..loading import load_tensors

    key = _stored_record_key(state, sources, value, same_dtype=False)
    if key is None or state.reader.entry(key)["dtype"] not in ("BF16", "F16", "F32", "F64") or \
            torch_dtype(state.reader.entry(key)["dtype"]) != want:
        return None
    return load_tensors(state.reader, [key], value.device, "pt", state.verify)[key]  # (decoded twice: rare)


def _region(value: torch.Tensor):
    """The block of its record that ``value`` is (a tensor-parallel shard read lazily), else None."""
    return value.region if isinstance(value, StoredTensor) else None


def _why_not_fused(state: KeepState, model, module, name: str, value: torch.Tensor) -> str | None:
    if value.dtype != torch.bfloat16 and not (value.dtype == torch.float16 and type(module) is torch.nn.Linear):
        return f"dtype {value.dtype} (the fused kernels' fixed-rate layouts are for bfloat16, and float16 " \
               f"nn.Linear weights)"
    if name in state.tied(model):
        return "tied to another weight (transformers ties it by parameter after loading)"
    if value.numel() == 0:  # a [0, K] layout's record would not read back (MobileBERT's [0, 512] head)
        return "empty (no values to compress)"
    if type(module) is torch.nn.Embedding and module.max_norm is not None:
        return "embedding with max_norm (renormalises its table in place)"
    if type(module) not in (torch.nn.Linear, torch.nn.Embedding):
        return f"{type(module).__name__} (not a plain nn.Linear or nn.Embedding)"
    return None


def _fixed_record(state: KeepState, key: str | None, dtype: torch.dtype) -> str | None:
    """``key`` when its stored record is the fixed-rate layout of ``dtype`` (codec "fixed" for
    bfloat16, "fixed16" for float16), which a layer takes as stored, never decoded; else None."""
    want = "fixed16" if dtype == torch.float16 else "fixed"
    return key if key is not None and state.reader.entry(key).get("codec") == want else None


def _fixed_weight(state: KeepState, key: str | None, value: torch.Tensor):
    """The fixed-rate layout of ``value`` on its device: the stored sections of record ``key``
    (one :func:`_fixed_record` accepts; ``value`` then gives only device and dtype), else
    encoded from ``value``. Raises UnsupportedError for an fp16 weight the fp16 layout would not
    shrink."""
    from ..gpu import fixed as fx
    from ..gpu import fixed16 as fx16

    layout = fx16 if value.dtype == torch.float16 else fx
    region = _region(value)
    if key is not None and region is not None:
        fw = _cut_weight(state, key, region, value.device)
        if fw is not None:
            return fw
    elif key is not None:
        rec = _stored(state, key, value.device)
        return layout.from_sections(rec.params, rec.sections, tuple(rec.shape), value.device, name=key)
    return layout.encode_weight(materialize(value))


def _cut_weight(state: KeepState, key: str, region, device):
    """A tensor-parallel shard of stored codec "fixed" record ``key``: the block ``region`` cut
    from the record (:mod:`wcodec.codecs.fixed_slice`: no decode, only the block's bytes held) as
    a FixedWeight on ``device``; None for a record of another codec or a region that is not one
    block of it."""
    from ..codecs.fixed_slice import slice_record
    from ..gpu import fixed as fx

    rec = state.reader.record(key, verify=state.verify, copy=False)
    cut = slice_record(rec, region) if rec.codec == "fixed" else None
    return None if cut is None else fx.from_sections(cut.params, cut.sections, tuple(cut.shape), device, name=key)


def _stored(state: KeepState, key: str, device: torch.device):
    """Record ``key`` (checksums checked unless the load skips them), read for a layer that copies
    it to ``device`` at once: off the CPU as views of the file's memory map (no host copy of the
    bytes; as the GPU loader reads), on the CPU into a buffer of its own."""
    return state.reader.record(key, verify=state.verify, copy=torch.device(device).type == "cpu")


def _device_scope(t: torch.Tensor):
    # Triton launches its kernels on the current device, whatever the pointers
    return torch.cuda.device(t.device) if t.device.type == "cuda" else contextlib.nullcontext()


def keep_tensor(state: KeepState, model, name: str, value: torch.Tensor, sources) -> torch.Tensor | None:
    """Keep one loaded tensor compressed if it can be; returns None when it was consumed (its
    module now holds it compressed), else the tensor to set (dense, or a just-in-time placeholder).
    ``value`` may be a :class:`wcodec.hf.checkpoint.StoredTensor` (no data yet): it is decoded
    only where its values are needed."""
    module, attr = _locate(model, name)
    current = getattr(module, attr, None)
    want = current.dtype if isinstance(current, torch.Tensor) and current.is_floating_point() else None
    if not value.is_floating_point():
        return materialize(value)
    # (a value in another dtype than the load dtype was cast on purpose by transformers' dtype
    # plan, keep-in-fp32: in 5.17 onto a module still in the load dtype; kept as handed over)
    planned = state.load_dtype is not None and value.dtype != state.load_dtype
    if want is not None and value.dtype != want and _region(value) is None and not planned:
        recast = _recast_record(state, sources, value, want)
        if recast is not None:
            state.report["kept"][name] = f"held in {want}, stored in {want}, the load dtype is {value.dtype}"
            state.report["decoded"].append(name)
            return recast
    matrix = attr == "weight" and isinstance(module, (torch.nn.Linear, torch.nn.Embedding)) and value.dim() == 2
    expert = not matrix and _is_expert_param(module, attr, value)
    if not (matrix or expert):  # norms, biases, buffers: dense, as transformers loads them
        if attr == "weight" and value.dim() == 2 or value.dim() == 3:
            # another module's matrix (transformers' Conv1D: [in, out], its own addmm; a router) or
            # a 3-D tensor of a module that is not an experts module (a Conv1d): dense, named
            state.report["kept"][name] = f"{type(module).__name__} (not a plain nn.Linear, nn.Embedding " \
                                         f"or experts module)"
            state.report["decoded"].append(name)
        value = materialize(value)
        if state.load_dtype is not None and value.dtype != state.load_dtype:
            # transformers chose this dtype on purpose (its keep-in-float32 plan: Inkling's short
            # convolutions; in 5.17 the plan's dtype, not the model's yet): as it loads without wcodec
            return value
        return value if want is None or value.dtype == want else value.to(want)
    why = _why_not_fused(state, model, module, name, value) if state.mode is True and matrix else None
    if expert and state.mode in (True, "jit"):
        # a bf16 record loaded in float32 (the config's dtype) holds the same values: taken as stored
        widened = value.dtype in (torch.float32, torch.float64)
        key = _fixed_record(state, _stored_record_key(state, sources, value, same_dtype=not widened),
                            torch.bfloat16 if widened else value.dtype)
        why = _keep_expert(state, model, module, attr, name, value, key, exact=state.mode == "jit")
        if why is None:
            return None
    elif state.mode is True and why is None:
        key = _fixed_record(state, _stored_record_key(state, sources, value), value.dtype)
        if key is None:
            value = materialize(value)
        why = _fuse_weight(state, model, module, name, key, value)
        if why is None:
            return None
    if why is None:
        why = "keep_compressed='jit'"
    jit = matrix and (state.mode == "jit" or state.jit_embeddings)
    key = _stored_record_key(state, sources, value, same_dtype=False) if jit else None
    record = None
    if jit and key is None:  # split, merged or converted by the loader, or a safetensors source
        value = materialize(value)
        record, dense = _encode_loaded(state, name, value)
        why = why if dense is None else dense
    state.report["kept"][name] = why
    if key is None and record is None:
        state.report["decoded"].append(name)
        return materialize(value)
    # the weight's shape over one zero element (strides 0): transformers' tie code reads shapes
    # (it pads an output bias to its weight's rows) and compares tied values; no memory is held.
    # A tensor-parallel shard's is on the meta device: transformers makes the DTensor of a shard
    # from its contiguous local tensor, which would allocate a zero-stride one
    sharded = tp.is_dtensor(current)
    placeholder = torch.empty(value.shape, dtype=value.dtype, device="meta") if sharded else \
        torch.zeros((), dtype=value.dtype, device=value.device).expand(value.shape)
    if record is not None:
        state.jit[_storage_id(placeholder)] = _Jit(placeholder, name, value.dtype, why, None, value.device, record)
    else:
        state.jit[_storage_id(placeholder)] = _Jit(placeholder, key, value.dtype, why, _region(value), value.device)
    return placeholder


def _encode_loaded(state: KeepState, name: str, value: torch.Tensor) -> tuple:
    """(record, None): a lossless record of ``value`` encoded in memory, for a weight that is no
    single stored record (transformers' loader split a fused qkv or gate_up into it, merged or
    converted it, or a safetensors source); it then decodes just in time like a stored one.
    Its codec is the fixed-rate layout where that takes it ("fixed" / "fixed16") when the
    folder stores matrices so, else the lossless policy's. (None, why) when it stays dense:
    empty, or a dtype no codec takes."""
    from ..codecs import encode_tensor
    from ..errors import UnsupportedError
    from ..format.sources import torch_to_numpy

    if value.numel() == 0:
        return None, "empty (no values to compress)"
    try:
        arr, dtype, _ = torch_to_numpy(value, name)  # a CPU copy: the encoders run on the CPU
        return encode_tensor(arr, dtype, name=name, prefer="fixed" if state.fixed_folder() else None), None
    except UnsupportedError as e:
        return None, f"no stored record (the loader converted it) and no codec for it: {e}"


def _fuse_tied_linears(state: KeepState, model) -> None:
    """The output layer tied to an embedding (``lm_head``) is the largest matmul of a decode
    step: fuse it from the tied weight (kept as loaded for the embedding, just in time or dense),
    with its own fixed-rate copy; the tie is then dropped from transformers' mapping."""
    from ..api import _load

    tied = getattr(model, "all_tied_weights_keys", None) or {}
    for target in list(tied):
        try:
            module, attr = _locate(model, target)
        except AttributeError:
            continue
        p = module._parameters.get(attr) if attr == "weight" and type(module) is torch.nn.Linear else None
        if p is None or p.dtype not in (torch.bfloat16, torch.float16):
            continue
        hit = state.jit.get(_storage_id(p))
        cut = _cut_weight(state, hit.key, hit.region, hit.device) if hit is not None and hit.region is not None \
            and p.dtype == torch.bfloat16 else None
        if cut is not None:  # a tensor-parallel shard of a fixed record: cut, not decoded
            _fuse(state, model, module, target, cut)
            why = None
        elif hit is not None and hit.region is not None:  # a shard of another record: decoded, encoded
            why = _fuse_weight(state, model, module, target, None, _shard_values(state, hit).to(p.dtype))
        elif hit is not None and hit.record is not None:  # encoded on load: decoded, fused
            why = _fuse_weight(state, model, module, target, None, _record_values(hit).to(p.dtype))
        elif hit is not None:
            key = _fixed_record(state, hit.key, p.dtype)  # a stored fixed record is not decoded
            value = p if key is not None else _load(state.reader, [hit.key], p.device, "pt", state.verify)[hit.key]
            why = _fuse_weight(state, model, module, target, key, value.to(p.dtype))
            del value
        else:
            why = _fuse_weight(state, model, module, target, None, tp.local(p.detach()))
        if why is not None:  # an fp16 layout that would not save: the tie stays
            state.report["kept"][target] = why
            continue
        state.report["kept"].pop(target, None)
        if target in state.report["decoded"]:
            state.report["decoded"].remove(target)
        tied.pop(target, None)


def _storage_id(t: torch.Tensor) -> int:
    """Identity of a tensor's storage: transformers wraps our placeholder in a new Parameter
    object (a DTensor of it under a tensor-parallel plan) and ties parameters by object, all
    sharing the placeholder's storage."""
    return tp.local(t).untyped_storage()._cdata


class _Jit(NamedTuple):
    """A weight to decode just in time, as :func:`keep_tensor` left it to :func:`finish`."""

    placeholder: torch.Tensor
    key: str                 # its stored record
    dtype: torch.dtype       # the module's dtype
    why: str                 # why it is not fused
    region: list | None      # the block of the record a tensor-parallel rank holds, else None
    device: torch.device     # where it runs
    record: object = None    # its record encoded on load (:func:`_encode_loaded`; key: the
                             # parameter's name), None for a stored one

    @property
    def cw_key(self) -> str:
        if self.record is not None:  # never a stored record's key: another weight may use that
            return f"{self.key} (encoded on load)"
        return self.key if self.region is None else f"{self.key}{self.region}"


def _shard_values(state: KeepState, hit: _Jit) -> torch.Tensor:
    """A tensor-parallel shard's values decoded on the CPU (only the part of its record holding them)."""
    from ..codecs.partial import decode_region
    from ..loading import to_torch
    from .checkpoint import count_decoded

    stats: dict = {}
    rec = state.reader.record(hit.key, verify=state.verify, copy=False)
    arr = decode_region(rec, hit.region, hit.key, stats)
    count_decoded(state.folder, state.reader, hit.key, stats.get("decoded", 0))
    return to_torch(arr, rec.dtype)


def _record_values(hit: _Jit) -> torch.Tensor:
    """The values of a weight's record encoded on load, decoded on its device."""
    from ..codecs import decode_tensor
    from ..loading import to_torch

    return to_torch(decode_tensor(hit.record, hit.key), hit.record.dtype).to(hit.device)


def _jit_record(state: KeepState, hit: _Jit):
    """The record a weight decodes from just in time: the one encoded on load, else the stored
    one; for a tensor-parallel shard, the block of a stored fixed record (cut, not decoded),
    else the shard decoded and encoded again (lossless) for this rank."""
    if hit.record is not None:
        return hit.record
    if hit.region is None:
        return state.reader.record(hit.key, verify=state.verify)
    from ..codecs import encode_tensor
    from ..codecs.fixed_slice import slice_record

    rec = state.reader.record(hit.key, verify=state.verify, copy=False)
    cut = slice_record(rec, hit.region) if rec.codec == "fixed" else None
    if cut is not None:
        return cut
    arr = _shard_values(state, hit).contiguous()
    bits = arr.view(torch.int16) if arr.dtype == torch.bfloat16 else arr
    return encode_tensor(bits.numpy(), rec.dtype, name=hit.key)


def _is_expert_param(module, attr: str, value: torch.Tensor) -> bool:
    try:
        from ..torch.experts import is_expert_param
    except ImportError:
        return False
    return value.dim() == 3 and is_expert_param(module, attr)


def _keep_expert(state: KeepState, model, module, attr: str, name: str, value: torch.Tensor, key: str | None,
                 exact: bool = False) -> str | None:
    """None when the expert tensor is now held compressed by its module, else why not. ``key``:
    the stored fixed record ``value`` is (:func:`_fixed_record`), taken as stored where its
    layout serves the experts as it is, never decoded (a tensor-parallel shard of it is decoded
    and encoded: each expert's block is strided in the [E, N*K] record). ``exact``
    (keep_compressed="jit"): the module decodes its experts for each call and multiplies as the
    dense module does (outputs equal to the dense model's), listed as "compressed", not "fused";
    so does an experts module with a forward of its own in either mode."""
    from ..torch import experts as ex

    sharded = module._parameters.get(attr)
    sharded = sharded if tp.is_dtensor(sharded) else None
    entry = state.reader.entry(key) if key is not None and sharded is None else None
    try:
        with _device_scope(value):
            if entry is not None and ex.stored_record_fits(module, attr, entry["codec"], entry["dtype"],
                                                           entry["shape"]):
                ex.load_expert_record(module, attr, _stored(state, key, value.device), value.device, exact=exact,
                                      name=key, dtype=value.dtype)
            else:
                ex.compress_expert_param(module, attr, materialize(value), exact=exact)
    except ex.ExpertsKeptDenseError as e:
        return str(e)
    if sharded is not None:  # the class changed: the plan's style wraps the compressed forward
        tp.install(model, name.rpartition(".")[0], module, sharded.device_mesh, rewrap=True)
    state.report["compressed" if ex.decodes_per_call(module) else "fused"].append(name)
    state.held.setdefault(id(module), value.dtype)
    return None


def _fuse_weight(state: KeepState, model, module, name: str, key: str | None, value: torch.Tensor) -> str | None:
    """Fuse ``module`` with the fixed-rate layout of ``value`` (stored record ``key`` or encoded);
    None when done, else why not (an fp16 weight its layout would not shrink)."""
    from ..errors import UnsupportedError

    try:
        with _device_scope(value):
            fw = _fixed_weight(state, key, value)
    except UnsupportedError as e:
        return str(e)
    _fuse(state, model, module, name, fw)
    return None


def _fuse(state: KeepState, model, module, name: str, fw) -> None:
    from ..gpu.fixed16 import Fixed16Weight
    from ..torch.embedding import CompressedEmbedding
    from ..torch.linear import CompressedLinear
    from ..torch.linear16 import CompressedLinear16

    if isinstance(module, torch.nn.Embedding):
        new = CompressedEmbedding(fw, module.padding_idx)
    else:
        bias = module.bias
        new = (CompressedLinear16 if isinstance(fw, Fixed16Weight) else CompressedLinear)(fw, None)
        if bias is not None:  # loaded already, or still on meta (transformers sets it later)
            new.bias = bias if isinstance(bias, torch.nn.Parameter) else torch.nn.Parameter(bias)
    for parent, cname in state.parents(model).get(id(module), []):
        parent._modules[cname] = new
    state.parents(model)[id(new)] = state.parents(model).pop(id(module), [])
    tp.adopt(model, name.rpartition(".")[0], module, new)
    state.report["fused"].append(name)
    state.held[id(new)] = torch.float16 if isinstance(fw, Fixed16Weight) else torch.bfloat16


class Report:
    """``model.wcodec_weights`` when no weight is decoded just in time."""

    def __init__(self, report: dict):
        self.report, self.weights, self.compressed_nbytes = report, {}, 0


def finish(state: KeepState, model) -> None:
    """After transformers loaded and tied everything: swap just-in-time placeholders for views of
    a shared decode scratch (one :class:`CompressedWeights` per device), attach the decode hooks,
    and set ``model.wcodec_weights``. Warns with the count of Linear / expert weights kept dense."""
    from ..torch import CompressedWeights

    _materialize_left(model)
    if state.mode is True:
        _fuse_tied_linears(state, model)
    cws = {}
    for hit in state.jit.values():
        cw = cws.get(hit.device)
        if cw is None:
            cw = cws[hit.device] = CompressedWeights(hit.device, decoder=state.decoder, offload=state.offload)
        if hit.cw_key not in cw.weights:
            cw.add(hit.cw_key, hit.key, _jit_record(state, hit), hit.dtype)
    for cw in cws.values():
        with torch.cuda.device(cw.device) if cw.device.type == "cuda" else contextlib.nullcontext():
            cw.allocate()
    params: dict = {}
    for mname, module in model.named_modules(remove_duplicate=False):
        for pname, p in list(module._parameters.items()):
            hit = state.jit.get(_storage_id(p)) if p is not None else None
            if hit is None:
                continue
            cw, key = cws[hit.device], hit.cw_key
            full = f"{mname}.{pname}" if mname else pname
            state.report["kept"].setdefault(full, hit.why)  # a tied partner: the same reason
            if pname == "weight" and isinstance(module, (torch.nn.Linear, torch.nn.Embedding)):
                if id(p) not in params:
                    params[id(p)] = torch.nn.Parameter(tp.like(cw.weights[key].view, p), requires_grad=False)
                module._parameters[pname] = params[id(p)]
                before = module.__dict__.get("forward")
                cw.attach(module, key)
                if tp.is_dtensor(p) and module.__dict__.get("forward") is not before:
                    tp.install(model, mname, module, p.device_mesh)  # the plan's style over attach's forward
                state.report["compressed"].append(full)
            else:  # only Linear / Embedding weights decode just in time
                module._parameters[pname] = torch.nn.Parameter(tp.like(cw.materialize(key), p), requires_grad=False)
                state.report["decoded"].append(full)
    _name_tied_partners(state, model)
    state.report["compressed"] = sorted(set(state.report["compressed"]))
    for cw in cws.values():
        cw.report = state.report
    holders = list(cws.values())
    model.wcodec_weights = holders[0] if len(holders) == 1 else (holders or Report(state.report))
    _record_dense_dtype(state, model)
    dense = [n for n, why in state.report["kept"].items() if n in state.report["decoded"]]
    if dense:
        warnings.warn(f"wcodec: {len(dense)} Linear/Embedding/expert weight(s) kept dense (see "
                      f"model.wcodec_weights.report['kept'] for each reason), e.g. {dense[0]}: "
                      f"{state.report['kept'][dense[0]]}", UserWarning, stacklevel=3)


def _name_tied_partners(state: KeepState, model) -> None:
    """A weight transformers tied to one kept dense (IBert's lm_head.decoder to its QuantEmbedding
    table) never reached :func:`keep_tensor` under its own name: it is that same dense tensor
    (no memory of its own), reported with its partner's reason, never silently dense."""
    rep = state.report
    done = set(rep["fused"]) | set(rep["compressed"])
    names: dict = {}
    for name, p in model.named_parameters(remove_duplicate=False):
        names.setdefault(id(p), []).append(name)
    for group in names.values():
        if len(group) < 2:
            continue
        dense = next((n for n in group if n in rep["kept"] and n in rep["decoded"]), None)
        if dense is None:
            continue
        for n in group:
            if n not in rep["kept"] and n not in done:
                rep["kept"][n] = f"tied to {dense}, kept dense: {rep['kept'][dense]}"
                rep["decoded"].append(n)


def _dense_dtype(module, held: dict):
    """The dtype transformers' ``model.dtype`` gives for ``module`` loaded dense: that of its first
    floating parameter in ``parameters()`` order, a weight held compressed counting where it was
    (a module of ``held``, first among its own parameters as a Linear's weight is); None if none."""
    for m in module.modules():
        if id(m) in held:
            return held[id(m)]
        for p in m._parameters.values():
            if p is not None and p.is_floating_point():
                return p.dtype
    return None


def _record_dense_dtype(state: KeepState, model) -> None:
    """Each transformers model (the top one and the base model inside) whose weights held
    compressed are no parameters now would report another ``dtype`` (its first floating
    parameter may then be a float32 norm or sink: DeepSeek-V4): it keeps the dense model's, read
    by ``model.dtype`` through :func:`wcodec.hf.quantizer.patch_dtype`."""
    if not state.held:
        return
    for m in model.modules():
        if not hasattr(type(m), "dtype") or not hasattr(m, "config"):
            continue
        want = _dense_dtype(m, state.held)
        m.__dict__.pop("_wcodec_dtype", None)
        first = next((p.dtype for p in m.parameters() if p.is_floating_point()), None)
        if want is not None and want != first:
            m.__dict__["_wcodec_dtype"] = want


def _materialize_left(model) -> None:
    """Decode the stored tensors that reached the model without the quantize operation (one the
    model holds in another dtype than the load's: wcodec.hf.quantizer.param_needs_quantization);
    else they would stay records, decoded at every use and refused by save_pretrained."""
    from .checkpoint import StoredTensor

    for module in model.modules():
        for table in (module._parameters, module._buffers):
            for name, t in list(table.items()):
                if isinstance(t, StoredTensor):
                    value = materialize(t)
                    table[name] = torch.nn.Parameter(value, t.requires_grad) if table is module._parameters else value
