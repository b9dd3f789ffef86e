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

__all__ = ["save_file", "load_file", "save", "load", "save_model", "load_model"]


def save_file(tensors: dict, filename, metadata: dict | None = None, mode: str = "lossless") -> None:
    """Compress ``{name: torch.Tensor}`` into ``filename`` (atomic). See wcodec.api.save_file."""
    api.save_file(tensors, filename, metadata, mode)


def load_file(filename, device="cpu") -> dict:
    """``{name: torch.Tensor}`` of a .wcodec checkpoint on ``device`` (str, int, torch.device or
    a torch.load map_location). Raises DeviceError when the device is absent."""
    return api.load_file(filename, device=device, framework="pt")


def save(tensors: dict, metadata: dict | None = None, mode: str = "lossless") -> bytes:
    """The .wcodec file of ``tensors`` as bytes."""
    return api.save(tensors, metadata, mode)


def load(data: bytes, device="cpu") -> dict:
    """``{name: torch.Tensor}`` decoded from .wcodec bytes."""
    return api.load(data, device=device, framework="pt")


def _storage_key(t: torch.Tensor):
    try:
        s = t.untyped_storage()
        return (t.device, s.data_ptr(), s.nbytes()) if s.data_ptr() and s.nbytes() else None
    except (NotImplementedError, RuntimeError):  # meta tensors
        return None


def _is_complete(t: torch.Tensor) -> bool:
    """The tensor covers its whole storage (safetensors keeps only such names)."""
    s = t.untyped_storage()
    return t.data_ptr() == s.data_ptr() and t.numel() * t.element_size() == s.nbytes()


def _overlapping(names: list, state_dict: dict) -> list[list]:
    """Split names of one storage into clusters of overlapping byte ranges (views of disjoint
    parts of one buffer, e.g. a fused qkv split, are not shared)."""
    areas = sorted((t.data_ptr(), t.data_ptr() + t.numel() * t.element_size(), n)
                   for n in names for t in [state_dict[n]])
    clusters, stop = [], -1
    for a, b, n in areas:
        if clusters and a < stop:
            clusters[-1].append(n)
        else:
            clusters.append([n])
        stop = max(stop, b)
    return clusters


def shared_names(state_dict: dict, preferred=()) -> dict[str, list[str]]:
    """{kept name: [dropped names]} for tensors sharing storage, by safetensors' rule: keep the
    first (sorted) name covering the whole storage, preferring names in ``preferred``. Raises
    SharedTensorsError (a RuntimeError, as in safetensors) when no name of a group covers its
    storage."""
    from ..errors import SharedTensorsError
    groups: dict = {}
    for k, v in state_dict.items():
        key = _storage_key(v)
        if key is not None:
            groups.setdefault(key, []).append(k)
    out = {}
    for names in (c for g in groups.values() for c in _overlapping(g, state_dict)):
        if len(names) < 2:
            continue
        complete = sorted(n for n in names if _is_complete(state_dict[n]))
        if not complete:
            raise SharedTensorsError(f"tensors {sorted(names)} share memory but none covers all of it: "
                                    "refusing to store more than the model holds")
        keep = next((n for n in complete if n in set(preferred)), complete[0])
        out[keep] = sorted(n for n in names if n != keep)
    return out


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


def load_model(model: torch.nn.Module, filename, strict: bool = True, device="cpu") -> tuple[list, list]:
    """Load a checkpoint into ``model``; returns (missing, unexpected) names as safetensors does.

    Names that share storage in the model count as present when one of them is in the file;
    a dropped name that the file holds anyway is reported unexpected (safetensors' rule). strict: raise RuntimeError (as torch / safetensors) when names are missing or unexpected.
    """
    state = load_file(filename, device=device)
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
