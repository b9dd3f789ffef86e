"""Validation of the state dicts of CompressedLinear / CompressedEmbedding (untrusted input: users
load them from the internet with ``torch.load(weights_only=True)``).

Every check runs before the module allocates or copies anything sized from the state dict:
``_extra_state`` is a dict of exactly the module's integer fields; the packed buffer (or the six
buffers of the earlier layout) has the dtype, rank and size that the module's declared
[N, K] shape and its escape count imply (at most N*K escapes), lies in memory it owns
(contiguous, its storage large enough: a stride-0 expansion of 1 byte is refused, not
materialised); then its contents pass the codec's own canonical check
(``wcodec.codecs.fixed.check_layout``) on the host, with the int32 columns and values checked as
stored (no uint16 cast that would wrap 65539 to 3) and the escape rows equal to the pointer's.
Anything else raises CorruptDataError naming the module's key and the field.
"""

from __future__ import annotations

import numpy as np
import torch

from ..codecs.fixed import MAX_BASE, check_layout, padded_cols
from ..errors import CorruptDataError
from ..gpu import fixed as fx

#: FixedWeight field -> (buffer name of the six-buffer layout, dtype)
OLD_BUFFERS = {"lo": ("w_lo", torch.int64), "nib": ("w_nib", torch.int32), "eptr": ("esc_ptr", torch.int32),
               "ecol": ("esc_col", torch.int32), "eval": ("esc_val", torch.int32), "erow": ("esc_row", torch.int64)}


def check_extra_state(state, fields: dict, where: str) -> int:
    """``state``: the module's ``_extra_state``; fields: {key: expected value} of its shape
    fields. Returns the checked ``base``. Raises CorruptDataError."""
    keys = {"base", *fields}
    if not isinstance(state, dict) or set(state) != keys:
        got = sorted(map(str, state)) if isinstance(state, dict) else type(state).__name__
        raise CorruptDataError(f"{where}_extra_state: must be a dict of {sorted(keys)}, got {got}"[:300])
    for key, value in state.items():
        if type(value) is not int:
            raise CorruptDataError(f"{where}_extra_state: '{key}' must be an int, got {type(value).__name__}")
    if not 0 <= state["base"] <= MAX_BASE:
        raise CorruptDataError(f"{where}_extra_state: 'base' must be in [0, {MAX_BASE}], got {state['base']}")
    for key, want in fields.items():
        if state[key] != want:
            raise CorruptDataError(f"{where}_extra_state: '{key}' is {state[key]}, this module has {want} "
                                   "(build the module with the stored shape)")
    return state["base"]


def _owned(t, name: str, dtype, where: str) -> torch.Tensor:
    """t is a dense tensor of ``dtype`` whose storage holds all of its elements."""
    if not isinstance(t, torch.Tensor):
        raise CorruptDataError(f"{where}{name}: must be a tensor, got {type(t).__name__}")
    if t.dtype != dtype:
        raise CorruptDataError(f"{where}{name}: must be {dtype}, got {t.dtype}")
    if t.layout != torch.strided or t.is_meta or not t.is_contiguous():
        raise CorruptDataError(f"{where}{name}: must be a dense contiguous tensor (strides {tuple(t.stride())})")
    need = (t.storage_offset() + t.numel()) * t.element_size()
    if t.untyped_storage().nbytes() < need:
        raise CorruptDataError(f"{where}{name}: its storage holds {t.untyped_storage().nbytes()} bytes, "
                               f"the tensor claims {need}")
    return t


def check_packed(t, base: int, n: int, k: int, where: str) -> fx.FixedWeight:
    """The ``w_packed`` buffer of an [n, k] weight (``wcodec.gpu.fixed.pack``), checked (sizes,
    then contents); returns its FixedWeight as views of ``t``. Raises CorruptDataError."""
    t = _owned(t, "w_packed", torch.uint8, where)
    _, _, esc = fx._packed_offsets(n, k)
    e, rest = divmod(t.numel() - esc, 16)
    if t.dim() != 1 or e < 0 or rest or e > n * k:
        raise CorruptDataError(f"{where}w_packed: an [{n}, {k}] weight packs into {esc} + 16 x escapes "
                               f"(at most {n * k}) bytes, got shape {list(t.shape)}")
    fw = fx.unpack(t, base, n, k)
    check_weight(fw, where + "w_packed")
    return fw


def check_old_buffers(state_dict: dict, prefix: str, base: int, n: int, k: int, where: str) -> fx.FixedWeight:
    """The six buffers of the earlier layout, checked as :func:`check_packed` does (each one's
    dtype and shape from [n, k] and the escape count). Raises CorruptDataError."""
    missing = [name for name, _ in OLD_BUFFERS.values() if prefix + name not in state_dict]
    if missing:
        raise CorruptDataError(f"{where}: the six-buffer layout lacks {missing}")
    g = padded_cols(k) // 8
    t = {f: _owned(state_dict[prefix + name], name, dtype, where) for f, (name, dtype) in OLD_BUFFERS.items()}
    e = t["ecol"].numel()
    shapes = {"lo": (n, g), "nib": (n, g), "eptr": (n + 1,), "ecol": (e,), "eval": (e,), "erow": (e,)}
    for f, shape in shapes.items():
        if tuple(t[f].shape) != shape or e > n * k:
            raise CorruptDataError(f"{where}{OLD_BUFFERS[f][0]}: must have shape {list(shape)} for an [{n}, {k}] "
                                   f"weight with {e} escapes (at most {n * k}), got {list(t[f].shape)}")
    fw = fx.FixedWeight(*(t[f] for f in OLD_BUFFERS), base, n, k)
    check_weight(fw, where.rstrip("."))
    return fw


def check_weight(fw: fx.FixedWeight, where: str) -> None:
    """The contents of a FixedWeight of the right sizes: the codec's canonical-layout check on a
    host copy, and the escape rows equal to the pointer's. Raises CorruptDataError."""
    n, k, kpad = fw.N, fw.K, fw.kpad
    host = lambda x: x.detach().cpu().numpy()  # noqa: E731
    lo = host(fw.lo).view(np.uint8).reshape(n, kpad)
    nib = host(fw.nib).view(np.uint8).reshape(n, kpad // 2)
    try:
        erow = check_layout(fw.base, n, k, lo, nib, host(fw.eptr), host(fw.ecol), host(fw.eval))
    except CorruptDataError as e:
        raise CorruptDataError(f"{where}: {e}") from None
    if not np.array_equal(host(fw.erow), erow):
        raise CorruptDataError(f"{where}: field esc_row: escape rows differ from the row pointer's")
