"""Put the stored tensors of a wcodec checkpoint into a built model, device by device.

Both loaders end here: :class:`wcodec.hf.WCodecModel` (slots found by name on a model whose
parameters are on the meta device) and the transformers quantizer (slots found as placeholders
that transformers placed with its ``device_map``). For each device, the tensors of its slots are

- decoded there in one batched call (``keep_compressed=False``), cast to the slot's dtype;
- or, with ``keep_compressed``: every plain ``nn.Linear`` whose model dtype is bf16 becomes a
  :class:`wcodec.torch.linear.CompressedLinear` (``True``: fused decode + matmul; the weight is
  decoded on the device one tensor at a time and re-encoded there, no host round trip), every
  plain untied bf16 ``nn.Embedding`` a :class:`wcodec.torch.embedding.CompressedEmbedding` (a
  lookup decodes only its rows), and the remaining 2-D float weights of ``nn.Linear`` /
  ``nn.Embedding`` stay as encoded records decoded just in time (:class:`wcodec.torch.
  CompressedWeights`; all of them with ``"jit"``); anything else is decoded. With
  ``jit_embeddings=False`` the matrices that are not fused (tied embeddings, other dtypes) are
  decoded instead: torch.compile then sees no graph break (each just-in-time decode is one).
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass

import torch

from .placeholders import put

_FLOATS = ("BF16", "F16", "F32", "F64")


@dataclass
class LoadOptions:
    keep_compressed: object = False   # False, True (fused linears + jit) or "jit"
    decoder: str = "auto"
    jit_embeddings: bool = True       # with True: False decodes what is not fused (no graph break)
    offload: bool = False
    verify: bool = True


def slots_by_name(model: torch.nn.Module, keys, prefix: str = "") -> dict:
    """{model tensor name: (module, attr, is_param, stored name)} for every parameter or buffer
    whose name matches a stored one (base-model prefix added or removed); a parameter shared with
    a matched one (tied weights) gets the same stored name."""
    from ..torch.state import stored_key

    keys = set(keys)
    out, by_id, rest = {}, {}, []
    for mname, module in model.named_modules(remove_duplicate=False):
        for slot, is_param in ((module._parameters, True), (module._buffers, False)):
            for attr, t in slot.items():
                if t is None:
                    continue
                full = f"{mname}.{attr}" if mname else attr
                k = stored_key(full, keys, prefix)
                if k is None:
                    rest.append((full, module, attr, is_param, t))
                    continue
                out[full] = (module, attr, is_param, k)
                by_id.setdefault(id(t), k)
    for full, module, attr, is_param, t in rest:
        if id(t) in by_id:
            out[full] = (module, attr, is_param, by_id[id(t)])
    return out


def fill_slots(model: torch.nn.Module, slots: dict, reader, meta: dict, options: LoadOptions,
               device=None) -> list:
    """Install the stored tensor of every slot (see the module docstring) on ``device``, or, when
    None, on the device of the tensor the slot holds now. meta: {name: (dtype, shape)} that the
    model declared. Returns the :class:`CompressedWeights` made (one per device; bound and
    reported as ``cw.report`` with "compressed", "decoded", "fused" and "kept" {name: reason})."""
    groups: dict = {}
    for name, slot in slots.items():
        dev = torch.device(device) if device is not None else getattr(slot[0], slot[1]).device
        groups.setdefault(dev, {})[name] = slot
    cws, params = [], {}
    for dev, group in groups.items():
        with torch.cuda.device(dev) if dev.type == "cuda" else contextlib.nullcontext():
            cw = _fill_device(model, group, dev, reader, meta, options, params)
        if cw is not None:
            cws.append(cw)
    if sum(d.type == "cuda" for d in groups) > 1:
        _guard_devices(model)
    return cws


def _guard_devices(model: torch.nn.Module) -> None:
    """Across several GPUs (device_map="auto"), make each CompressedLinear's GPU the current one
    while it runs: Triton launches its kernels on the current device, whatever the pointers."""
    from ..torch.linear import CompressedLinear

    def before(module, args):
        dev = next(module.buffers()).device
        module._wcodec_prev = torch.cuda.current_device()
        if dev.type == "cuda" and dev.index != module._wcodec_prev:
            torch.cuda.set_device(dev)

    def after(module, args, out):
        prev = module.__dict__.pop("_wcodec_prev", None)
        if prev is not None and prev != torch.cuda.current_device():
            torch.cuda.set_device(prev)

    for m in model.modules():
        if isinstance(m, CompressedLinear):
            m.register_forward_pre_hook(before)
            m.register_forward_hook(after)


def _fill_device(model, group: dict, dev, reader, meta: dict, options: LoadOptions, params: dict):
    """fill_slots for the slots of one device (Triton launches go to the current device)."""
    from ..api import _load

    keys = {n: reader.alias_of(s) or s for n, (_, _, _, s) in group.items()}
    fused, kept, jit = {}, {}, {}
    if options.keep_compressed:
        uses: dict = {}
        for k in keys.values():
            uses[k] = uses.get(k, 0) + 1
        for n, k in keys.items():
            if not _matrix_weight(group[n], reader.entry(k)):
                continue
            why = _fusable(group[n][0], meta.get(n, (None,))[0], uses[k] > 1) \
                if options.keep_compressed is True else "keep_compressed='jit'"
            if why is None:
                fused[n] = k
            elif options.keep_compressed == "jit" or options.jit_embeddings:
                jit[n], kept[n] = k, why
    cw = _compressed(reader, jit, meta, dev, options) if jit else None
    plain = sorted({k for n, k in keys.items() if n not in jit and n not in fused})
    decoded = _load(reader, plain, dev, "pt", options.verify) if plain else {}
    casts: dict = {}
    for n, (module, attr, is_param, _) in group.items():
        k = keys[n]
        if n in jit:
            put(module, attr, is_param, cw.weights[k].view, params)
        elif n not in fused:
            t, want = decoded[k], meta.get(n, (None,))[0]
            if t.is_floating_point() and want is not None and want.is_floating_point and t.dtype != want:
                t = casts.setdefault((k, want), t.to(want))
            put(module, attr, is_param, t, params)
    report = {"compressed": [], "decoded": [], "fused": [], "kept": kept}
    if fused:
        report["fused"] = _fuse(model, {n: (group[n][0], k) for n, k in fused.items()}, reader, meta, dev, options)
    if cw is not None:
        from .model import bind_compressed

        report.update(bind_compressed(model, cw, jit))
        cw.report = report
        return cw
    return _Report(report) if fused else None


class _Report:
    """What a device group holds when nothing there is decoded just in time."""

    def __init__(self, report):
        self.report, self.weights, self.compressed_nbytes = report, {}, 0


def _matrix_weight(slot, entry) -> bool:
    module, attr, is_param, _ = slot
    return (is_param and attr == "weight" and isinstance(module, (torch.nn.Linear, torch.nn.Embedding))
            and len(entry["shape"]) == 2 and entry["dtype"] in _FLOATS)


def _fusable(module, dtype, tied: bool) -> str | None:
    """None when this weight becomes a CompressedLinear / CompressedEmbedding, else why it stays
    just-in-time."""
    if type(module) is torch.nn.Embedding:
        if tied:  # transformers re-ties it to the output layer by parameter: keep a parameter
            return "embedding tied to another weight"
        if module.max_norm is not None:
            return "embedding with max_norm (renormalises its table in place)"
    elif type(module) is not torch.nn.Linear:
        return f"{type(module).__name__} (not a plain nn.Linear or nn.Embedding)"
    if dtype != torch.bfloat16:
        return f"model dtype {dtype} (the fixed-rate layout of the fused kernels is for bfloat16)"
    try:
        import wcodec.torch.linear  # noqa: F401
    except ImportError as e:
        return f"no fused kernels ({e})"
    return None


def _compressed(reader, jit: dict, meta: dict, dev, options):
    from ..torch import CompressedWeights

    cw = CompressedWeights(dev, decoder=options.decoder, offload=options.offload)
    for n, k in jit.items():
        if k not in cw.weights:
            cw.add(k, k, reader.record(k, verify=options.verify), meta[n][0])
    cw.allocate()
    return cw


def _fuse(model, linears: dict, reader, meta: dict, dev, options) -> list[str]:
    """Replace each nn.Linear by a CompressedLinear (nn.Embedding: CompressedEmbedding) of its
    stored weight, decoded on ``dev`` one tensor at a time (then freed). A module under several
    names is replaced under each."""
    from ..torch.embedding import CompressedEmbedding
    from ..torch.linear import CompressedLinear

    parents: dict = {}
    for pname, parent in model.named_modules(remove_duplicate=False):
        for cname, child in parent._modules.items():
            if child is not None:
                parents.setdefault(id(child), []).append((parent, cname))
    # Largest weight first: each transcode's transient (its compressed record, the decoded bf16
    # weight, the new layout) then comes while little of the model is resident. In the model's
    # order a 7B model's load peaked 0.43 GB above its loaded size, largest first 0.15 GB
    # (H100, benchmarks/RESULTS.md).
    done = {}
    for n in sorted(linears, key=lambda n: -reader.numel(linears[n][1])):
        module, k = linears[n]
        if id(module) not in done:
            fw = _fixed_weight(reader, k, dev, meta[n][0], options.verify)
            if isinstance(module, torch.nn.Embedding):
                done[id(module)] = CompressedEmbedding(fw, module.padding_idx)
            else:
                done[id(module)] = CompressedLinear(fw, None if module.bias is None else module.bias.detach())
            for parent, cname in parents.get(id(module), []):
                parent._modules[cname] = done[id(module)]
    return list(linears)


def _fixed_weight(reader, key: str, dev, dtype, verify: bool):
    """The fixed-rate layout of stored weight ``key`` on ``dev``: straight from the file's sections
    when it was stored with codec "fixed", else decoded on ``dev`` and encoded there (transcode:
    the decoded weight lives only until its encoding is done)."""
    from ..gpu import fixed as fx

    entry = reader.entry(key)
    if entry.get("codec") == "fixed" and entry["dtype"] == "BF16" and dtype == torch.bfloat16:
        rec = reader.record(key, verify=verify)
        return fx.from_sections(rec.params, rec.sections, tuple(rec.shape), dev, name=key)
    from ..api import _load

    w = _load(reader, [key], dev, "pt", verify)[key].to(dtype)
    return fx.encode_weight(w)
