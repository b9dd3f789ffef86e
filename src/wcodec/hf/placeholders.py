"""Placeholders that let transformers' own loader walk a wcodec folder without reading weights.

transformers (5.x) only reads safetensors / torch files, and its quantizer API has no hook that
supplies tensors. So :class:`wcodec.hf.quantizer.WcodecHfQuantizer` hands it a stub safetensors
file (header only, no data): one zero-size uint8 tensor per stored name, the name's index in the
checkpoint encoded as the second dimension (shape ``(0, i)``). transformers renames the keys,
places each placeholder on the device that its ``device_map`` gives the parameter, ties weights,
and reports missing / unexpected keys as for any checkpoint; the quantizer then finds the
placeholders in the model and replaces each by the real tensor decoded on that same device.
"""

from __future__ import annotations

import json
import os
import struct
import tempfile
from pathlib import Path

import torch


def write_stub(names: list[str], folder=None) -> Path:
    """A safetensors file holding, for ``names[i]``, a uint8 tensor of shape (0, i) (no bytes).
    Written in a new temporary directory (or ``folder``); returns its path."""
    header = {"__metadata__": {"format": "pt", "wcodec": "placeholders"}}
    header.update({n: {"dtype": "U8", "shape": [0, i], "data_offsets": [0, 0]} for i, n in enumerate(names)})
    raw = json.dumps(header, separators=(",", ":")).encode()
    raw += b" " * (-len(raw) % 8)  # safetensors pads the header to 8 bytes
    d = Path(folder) if folder is not None else Path(tempfile.mkdtemp(prefix="wcodec-stub-"))
    path = d / "placeholders.safetensors"
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(raw)) + raw)
    return path


def remove_stub(path: Path) -> None:
    """Delete a stub written by :func:`write_stub` in its own temporary directory."""
    path = Path(path)
    path.unlink(missing_ok=True)
    if path.parent.name.startswith("wcodec-stub-"):
        try:
            os.rmdir(path.parent)
        except OSError:
            pass


def is_placeholder(t) -> bool:
    return isinstance(t, torch.Tensor) and t.dtype == torch.uint8 and t.dim() == 2 and t.shape[0] == 0


def find_placeholders(model: torch.nn.Module, names: list[str]) -> dict[str, tuple]:
    """{model tensor name: (module, attribute, is_parameter, stored name)} for every parameter or
    buffer of ``model`` that is still a placeholder (tied parameters appear under each name)."""
    out = {}
    for mname, module in model.named_modules(remove_duplicate=False):
        for slot, is_param in ((module._parameters, True), (module._buffers, False)):
            for attr, t in slot.items():
                if is_placeholder(t):
                    out[f"{mname}.{attr}" if mname else attr] = (module, attr, is_param, names[t.shape[1]])
    return out


def put(module: torch.nn.Module, attr: str, is_param: bool, value: torch.Tensor, cache: dict) -> None:
    """Install ``value`` as ``module.attr`` (a frozen-by-dtype Parameter or a buffer). ``cache``
    maps id(value) -> Parameter so that tied slots receive one shared Parameter."""
    if not is_param:
        module._buffers[attr] = value
        return
    p = cache.get(id(value))
    if p is None:
        p = value if isinstance(value, torch.nn.Parameter) else \
            torch.nn.Parameter(value, requires_grad=value.is_floating_point())
        cache[id(value)] = p
    module._parameters[attr] = p
