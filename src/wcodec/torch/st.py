"""``wcodec.torch`` in the idiom of ``safetensors.torch``: save_file / load_file / save / load /
save_model / load_model with the same names, arguments and semantics.

Differences, all supersets: tensors that share memory are stored once (later names as aliases)
instead of refused, and non-contiguous tensors are copied instead of refused. save_model /
load_model follow safetensors' shared-tensor rules (one name kept per shared storage, the
dropped names recorded in the metadata; on load, names shared in the model are not "missing").
"""

from __future__ import annotations

import torch

from .. import api

__all__ = ["save_file", "load_file", "save", "load", "save_model", "load_model", "storage_ptr", "storage_size"]


def _check_tensors(tensors) -> None:
    """safetensors.torch's argument checks, with its messages (InvalidInputError, a ValueError):
    a dict of torch tensors, none sparse."""
    from ..errors import InvalidInputError
    if not isinstance(tensors, dict):
        raise InvalidInputError(f"Expected a dict of [str, torch.Tensor] but received {type(tensors)}")
    for k, v in tensors.items():
        if not isinstance(v, torch.Tensor):
            raise InvalidInputError(f"Key `{k}` is invalid, expected torch.Tensor but received {type(v)}")
    sparse = [k for k, v in tensors.items() if v.layout != torch.strided]
    if sparse:
        raise InvalidInputError(f"You are trying to save a sparse tensors: `{sparse}` which this library does not "
                                "support. You can make it a dense tensor before saving with `.to_dense()` but be "
                                "aware this might make a much larger file than needed.")


def save_file(tensors: dict, filename, metadata: dict | None = None, mode: str = "lossless",
              low_joint: bool = False) -> None:
    """Compress ``{name: torch.Tensor}`` into ``filename`` (atomic). See wcodec.api.save_file
    (mode, low_joint).
    Raises InvalidInputError (a ValueError) as safetensors.torch for a non-dict, a non-tensor
    value or sparse tensors."""
    _check_tensors(tensors)
    api.save_file(tensors, filename, metadata, mode, low_joint=low_joint)


def load_file(filename, device="cpu", backend: str = "mmap") -> dict:
    """``{name: torch.Tensor}`` of a .wcodec checkpoint or .safetensors file on ``device`` (str,
    int, torch.device or a torch.load map_location). backend: "mmap" or "pread". Raises
    DeviceError when the device is absent, NotFoundError (a FileNotFoundError)."""
    return api.load_file(filename, device=device, framework="pt", backend=backend)


def save(tensors: dict, metadata: dict | None = None, mode: str = "lossless", low_joint: bool = False) -> bytes:
    """The .wcodec file of ``tensors`` as bytes (canonical: the same bytes whatever the dict
    order). Raises as :func:`save_file`."""
    _check_tensors(tensors)
    return api.save(tensors, metadata, mode, low_joint=low_joint)


def load(data: bytes, device="cpu") -> dict:
    """``{name: torch.Tensor}`` decoded from .wcodec bytes."""
    return api.load(data, device=device, framework="pt")


def storage_ptr(tensor: torch.Tensor) -> int:
    """Address of the tensor's storage (0 for tensors without one, e.g. meta), as safetensors."""
    try:
        return tensor.untyped_storage().data_ptr()
    except (NotImplementedError, RuntimeError):
        return 0


def storage_size(tensor: torch.Tensor) -> int:
    """Bytes of the tensor's storage (its own bytes when the storage is unknown), as safetensors."""
    try:
        return tensor.untyped_storage().nbytes()
    except (NotImplementedError, RuntimeError):
        return tensor.nelement() * tensor.element_size()


def _end_ptr(tensor: torch.Tensor) -> int:
    """One past the address of the tensor's last element (its start when empty)."""
    if tensor.nelement():  # from the strides: views that are not contiguous too
        last = sum((d - 1) * st for d, st in zip(tensor.shape, tensor.stride()))
        return tensor.data_ptr() + (last + 1) * tensor.element_size()
    return tensor.data_ptr()


def _is_complete(t: torch.Tensor) -> bool:
    """The tensor covers its whole storage (safetensors keeps only such names)."""
    return t.data_ptr() == storage_ptr(t) and t.nelement() * t.element_size() == storage_size(t)


def _overlapping(names, state_dict: dict) -> list[set]:
    """Split names of one storage into sets of overlapping byte ranges (views of disjoint
    parts of one buffer, e.g. a fused qkv split, are not shared)."""
    areas = sorted((state_dict[n].data_ptr(), _end_ptr(state_dict[n]), n) for n in names)
    clusters, stop = [], -1
    for a, b, n in areas:
        if clusters and a < stop:
            clusters[-1].add(n)
        else:
            clusters.append({n})
        stop = max(stop, b)
    return clusters


def _find_shared_tensors(state_dict: dict) -> list[set]:
    """Sets of names whose tensors overlap in memory (singletons for the unshared ones), as
    safetensors' helper of that name; meta tensors and empty storages are left out."""
    groups: dict = {}
    for k, v in state_dict.items():
        if v.device.type != "meta" and storage_ptr(v) != 0 and storage_size(v) != 0:
            groups.setdefault((v.device, storage_ptr(v), storage_size(v)), set()).add(k)
    return [c for g in sorted(groups.values()) for c in (_overlapping(g, state_dict) if len(g) > 1 else [g])]


def _remove_duplicate_names(state_dict: dict, *, preferred_names=None, discard_names=None,
                            _lone_views: bool = False) -> dict[str, list[str]]:
    """{kept name: [dropped names]} for tensors sharing storage, by safetensors' rule: keep the
    first (sorted) name covering the whole storage, preferring names not in ``discard_names``,
    then names in ``preferred_names``. Raises SharedTensorsError (a RuntimeError, as in
    safetensors) when no name of a group (a lone tensor too, unless ``_lone_views``: wcodec's
    save_model stores views of disjoint parts of one buffer) covers its storage."""
    from ..errors import SharedTensorsError
    preferred_names, discard_names = set(preferred_names or ()), set(discard_names or ())
    out = {}
    for names in _find_shared_tensors(state_dict):  # singletons too: a lone partial view is refused
        if _lone_views and len(names) < 2:
            continue
        complete = {n for n in names if _is_complete(state_dict[n])}
        if not complete:
            raise SharedTensorsError(f"tensors {sorted(names)} share memory but none covers all of it: "
                                    "refusing to store more than the model holds")
        keep = sorted(complete)[0]
        for better in (complete - discard_names, preferred_names & complete):
            if better:
                keep = sorted(better)[0]
        if len(names) > 1:
            out[keep] = sorted(n for n in names if n != keep)
    return out


def shared_names(state_dict: dict, preferred=()) -> dict[str, list[str]]:
    """:func:`_remove_duplicate_names` with ``preferred`` names kept where they can be; a lone
    view of part of a buffer (a fused qkv split) is kept, not refused (safetensors refuses it)."""
    return _remove_duplicate_names(state_dict, preferred_names=preferred, _lone_views=True)


def save_model(model: torch.nn.Module, filename, metadata: dict | None = None, force_contiguous: bool = True,
               mode: str = "lossless") -> None:
    """Save ``model.state_dict()`` with shared tensors stored once: each dropped name is
    recorded in the metadata as ``{dropped: kept}`` (user keys are not overwritten)."""
    state = model.state_dict()
    meta = dict(metadata or {})
    for keep, dropped in shared_names(state).items():
        for n in dropped:
            meta.setdefault(n, keep)
            del state[n]
    if force_contiguous:
        state = {k: v.contiguous() for k, v in state.items()}
    else:
        from ..errors import InvalidInputError
        bad = next((k for k, v in state.items() if not v.is_contiguous()), None)
        if bad is not None:  # safetensors refuses these; so does save_model without the flag
            raise InvalidInputError(f"tensor '{bad}' is not contiguous; use save_model(..., force_contiguous=True)")
    api.save_file(state, filename, meta or None, mode)


def load_model(model: torch.nn.Module, filename, strict: bool = True, device="cpu",
               backend: str = "mmap") -> tuple[list, list]:
    """Load a checkpoint into ``model``; returns (missing, unexpected) names as safetensors does.

    Names that share storage in the model count as present when one of them is in the file;
    a dropped name that the file holds anyway is reported unexpected (safetensors' rule). strict: raise RuntimeError (as torch / safetensors) when names are missing or unexpected.
    """
    state = load_file(filename, device=device, backend=backend)
    dropped = shared_names(model.state_dict(), preferred=state.keys())
    missing, unexpected = model.load_state_dict(state, strict=False)
    missing = set(missing)
    unexpected = list(unexpected)
    for names in dropped.values():
        for n in names:
            if n in missing:
                missing.remove(n)
            else:
                unexpected.append(n)
    if strict and (missing or unexpected):
        msg = f"Error(s) in loading state_dict for {model.__class__.__name__}:"
        if missing:
            msg += "\n    Missing key(s) in state_dict: " + ", ".join(f'"{k}"' for k in sorted(missing))
        if unexpected:
            msg += "\n    Unexpected key(s) in state_dict: " + ", ".join(f'"{k}"' for k in sorted(unexpected))
        raise RuntimeError(msg)
    return sorted(missing), unexpected
