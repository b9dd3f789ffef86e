"""An encode's settings, checked before any work (mode, lossy target, per-file codec) and its
result checked before the file is committed (a lossy target every tensor met, a ``codec`` that
some tensor took), so that no setting is silently ignored.
"""

from __future__ import annotations

import math

from .errors import InvalidInputError, UnsupportedError

MODES = ("lossless", "int8", "lossy")


def mode_of(mode: str, qp=None, target_snr_db=None, codec: str | None = None) -> str:
    """The encoder mode string for the API's arguments (``"lossless"``, ``"int8"``,
    ``"lossy:qp=30"``, ``"lossy:snr=35"``; mode strings of that form are accepted as given).
    Raises InvalidInputError (a ValueError) naming the arguments to pass."""
    from .codecs.lossy import mode_string, parse_mode

    if isinstance(mode, str) and mode.startswith("lossy:") and qp is None and target_snr_db is None:
        try:
            parse_mode(mode)
        except ValueError as e:
            raise InvalidInputError(str(e)) from None
        out = mode
    else:
        if mode not in MODES:
            raise InvalidInputError(f"mode must be one of {MODES}, got {mode!r}")
        if mode == "lossy" and (qp is None) == (target_snr_db is None):
            raise InvalidInputError("mode 'lossy' needs one of qp= (0-63, +6 doubles the step) or "
                                    "target_snr_db= (dB per tensor), not both")
        try:
            out = mode_string(mode, qp, target_snr_db)
        except ValueError as e:
            raise InvalidInputError(str(e)) from None
    if codec is not None and out != "lossless":
        raise InvalidInputError(f"codec {codec!r} is a lossless layout of BF16/F16 weights; it does not combine "
                                f"with mode {out.split(':')[0]!r} (encode with mode 'lossless')")
    return out


def check_flag(name: str, value) -> None:
    """An on/off setting must be a bool (numpy's too): a string such as "no" would read as on.
    Raises InvalidInputError (a ValueError) naming it."""
    import numpy as np

    if not isinstance(value, (bool, np.bool_)):
        raise InvalidInputError(f"{name} must be True or False, got {value!r}")


def target_of(mode: str) -> float | None:
    """The per-tensor SNR target (dB) of a mode string, or None."""
    return float(mode.split("=", 1)[1]) if mode.startswith("lossy:snr=") else None


def _snr(entry: dict) -> float:
    v = entry.get("info", {}).get("snr_db", math.inf)
    return float(v)  # the writer stores inf as the string "inf"


def check_results(entries: dict, mode: str, codec: str | None) -> None:
    """Refuse a finished encode whose settings did not take, before it is committed.

    entries: {name: header entry} as the writer holds them. A lossy SNR target that some tensors
    miss (their finest 8-bit steps fall short) raises UnsupportedError naming them and the
    highest target all reach; ``codec`` that no tensor took (e.g. ``"fixed"`` on an fp32
    model) raises UnsupportedError naming the dtypes found.
    """
    stored = {n: e for n, e in entries.items() if "alias_of" not in e}
    target = target_of(mode)
    if target is not None:
        missed = sorted(((n, _snr(e)) for n, e in stored.items()
                         if "target_snr_db" in e.get("info", {}) and _snr(e) < target - 1e-9), key=lambda t: t[1])
        if missed:
            reach = min(s for _, s in missed)
            shown = ", ".join(f"'{n}' {s:.1f} dB" for n, s in missed[:5])
            more = f" and {len(missed) - 5} more" if len(missed) > 5 else ""
            raise UnsupportedError(
                f"SNR target {target:g} dB is out of reach for {len(missed)} tensor(s) even at their finest "
                f"8-bit steps: {shown}{more}; nothing was written. Choose a target <= {math.floor(reach * 10) / 10:g} "
                "dB, a qp, or mode 'lossless'")
    ids = (codec, "fixed16") if codec == "fixed" else (codec,)  # "fixed" stores F16 as "fixed16"
    if codec is not None and stored and not any(e.get("codec") in ids for e in stored.values()):
        from .codecs import MIN_CODED_NUMEL
        dtypes = sorted({e["dtype"] for e in stored.values()})
        raise UnsupportedError(f"codec {codec!r} takes BF16 tensors of at least {MIN_CODED_NUMEL} weights "
                               f"(and F16 ones its fp16 layout shrinks below 15.5 bits/weight); this checkpoint "
                               f"has none (dtypes {', '.join(dtypes)}); nothing was written")
