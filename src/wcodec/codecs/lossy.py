"""Rate-distortion control of the lossy front end: a dead-zone uniform quantizer with a step per
output channel, its step picked from a quantization parameter (qp) or a target SNR.

The quantized indices are stored exactly as ``int8-quant`` records (indices through the int8
codec: tiles + intra prediction + rANS; steps as the ``scales`` section, or as a table of the
distinct steps + a byte per row where that is smaller: the steps lie on a log grid of SCALE_GRID
values per octave), so every decoder of that codec (numpy, numba, Triton to bf16/fp16/fp32)
decodes them: ``w' = float32(q) * step[row]``. Only the encoder differs from plain int8 absmax
quantization:

- step[row] = max(delta, absmax[row] / 127): one step for the whole tensor (the equal-distortion
  choice, which minimises the tensor's squared error at a given entropy at high rate), floored
  per row so that no index leaves [-127, 127] (no clipping, no escape symbols);
- q = sign(w) * floor(|w| / step + rounding): rounding 0.5 is plain rounding (the default), below
  0.5 an H.264-style dead zone (more zeros, fewer bits, more error);
- delta = rms(w) * 2 ** ((qp - QP_REF) / 6) for ``qp`` (6 qp steps halve or double the step,
  about one bit per weight and 6 dB of SNR), or for ``target_snr_db`` the largest delta whose
  SNR meets the target (bisection on log2 delta; the largest step codes to the fewest bits).

Mode strings carry the settings through the encoder pipeline unchanged: ``"lossy:qp=30"``,
``"lossy:snr=35"`` (see :func:`mode_string`, :func:`parse_mode`). In lossy mode, float vectors
(biases, norms: few weights, sensitive) are coded losslessly (``wcodec.codecs.choose_codec``).
"""

from __future__ import annotations

import math

import numpy as np

#: qp at which the step equals the tensor's rms (qp 0 = rms / 256, in practice the absmax floor)
QP_REF = 48
QP_MAX = 63
#: default rounding offset of the dead-zone quantizer (0.5 = plain rounding). A dead zone
#: (0.4) cost bits at equal SNR on MiniLM (5.75 vs 5.67 bits/weight at 32 dB): plain rounding
DEFAULT_ROUNDING = 0.5
#: bisection steps on log2(delta) for a target SNR: the bracket is ~10-20 octaves, so the step
#: found is within 0.003 octave (~0.02 dB) of the coarsest that meets the target
SNR_ITERATIONS = 14
#: rate-controlled steps lie on a grid of this many values per octave (delta * 2 ** (k / SCALE_GRID),
#: delta the tensor's step before row gains and floors: :func:`row_steps`), so
#: that a tensor's rows share few distinct steps and the record stores them as a table plus one
#: byte per row instead of a float32 per row (``int8-quant`` scale table, docs/CODEC_LAYOUT.md):
#: all-MiniLM-L6-v2 at 5.5 bits/weight, 0.073 -> 0.020 bits/weight all-in. A step moves by at most
#: 2.2 %, which at high rate costs ~0.1 % more squared error at equal bits (a random +-1/32
#: octave on log2 step). 0 keeps the exact steps (float32 per row).
SCALE_GRID = 16


def mode_string(mode: str = "lossy", qp: float | None = None, target_snr_db: float | None = None) -> str:
    """The encoder mode string for these settings. mode "lossy" needs exactly one of qp and
    target_snr_db; other modes take neither. Raises ValueError."""
    if mode != "lossy":
        if qp is not None or target_snr_db is not None:
            raise ValueError(f"qp / target_snr_db apply to mode 'lossy', not {mode!r}")
        return mode
    if (qp is None) == (target_snr_db is None):
        raise ValueError("mode 'lossy' needs exactly one of qp and target_snr_db")
    if qp is not None:
        if not 0 <= float(qp) <= QP_MAX:
            raise ValueError(f"qp must be in [0, {QP_MAX}], got {qp}")
        return f"lossy:qp={float(qp):g}"
    t = float(target_snr_db)
    if not (math.isfinite(t) and 0 < t <= 200):
        raise ValueError(f"target_snr_db must be in (0, 200] dB, got {target_snr_db}")
    return f"lossy:snr={t:g}"


def parse_mode(mode: str) -> tuple[str, dict]:
    """Mode string -> (base mode, encoder options). ``"lossy:qp=30"`` -> ("lossy", {"qp": 30.0});
    ``"lossy:snr=35"`` -> ("lossy", {"target_snr_db": 35.0}); other modes -> (mode, {}).
    Raises ValueError for a malformed lossy mode."""
    if not isinstance(mode, str) or not mode.startswith("lossy"):
        return mode, {}
    base, _, arg = mode.partition(":")
    key, _, val = arg.partition("=")
    names = {"qp": "qp", "snr": "target_snr_db"}
    if base != "lossy" or key not in names:
        raise ValueError(f"lossy mode must be 'lossy:qp=N' or 'lossy:snr=X', got {mode!r}")
    try:
        v = float(val)
    except ValueError:
        raise ValueError(f"lossy mode {mode!r}: {val!r} is not a number") from None
    opts = {names[key]: v}
    if mode_string("lossy", **opts) != mode:  # range check, one canonical spelling
        raise ValueError(f"lossy mode {mode!r} is not canonical (use {mode_string('lossy', **opts)!r})")
    return "lossy", opts


def row_steps(absmax: np.ndarray, delta, grid: int = 0, base: float | None = None) -> np.ndarray:
    """[rows] float32 steps: max(delta, absmax / 127), 1.0 for all-zero rows. delta: a step, or
    [rows] steps. grid > 0: each step rounded (in log2) to the nearest base * 2 ** (k / grid),
    one grid value up where that falls below absmax / 127 (so that no index leaves [-127, 127]);
    base: the grid's anchor (None: 1.0), e.g. the tensor's step before row gains, which then
    stays exact (a target SNR keeps its resolution; only the row gains and floors move)."""
    floor = (absmax / 127.0).astype(np.float32)
    s = np.maximum(np.asarray(delta, dtype=np.float32), floor)
    if grid:
        s = snap_steps(s, floor, int(grid), 1.0 if base is None else float(base))
    return np.where(absmax > 0, s, np.float32(1.0)).astype(np.float32)


def snap_steps(s: np.ndarray, floor: np.ndarray, grid: int, base: float = 1.0) -> np.ndarray:
    """[rows] float32 steps s (> 0) moved to the nearest base * 2 ** (k / grid) in log2, or the
    next grid value up where the nearest lies below ``floor``; a step whose grid value is not a
    positive finite float32 is kept as it is."""
    with np.errstate(divide="ignore", over="ignore", under="ignore", invalid="ignore"):
        k = np.round(np.log2(s.astype(np.float64) / base) * grid)
        v = (base * np.exp2(k / grid)).astype(np.float32)
        v = np.where(v < floor, (base * np.exp2((k + 1) / grid)).astype(np.float32), v)
    ok = np.isfinite(v) & (v > 0) & (v >= floor)
    return np.where(ok, v, s).astype(np.float32)


def quantize(w2: np.ndarray, steps: np.ndarray, rounding: float = DEFAULT_ROUNDING) -> np.ndarray:
    """Dead-zone quantizer. w2: [rows, cols] float32, steps: [rows] float32 -> int8 [rows, cols]
    with q = sign(w) * floor(|w| / step + rounding), clipped to [-127, 127]."""
    a = np.floor(np.abs(w2) / steps[:, None] + np.float32(rounding))
    return (np.sign(w2) * np.minimum(a, 127)).astype(np.int8)


def snr_db(w: np.ndarray, w_hat: np.ndarray) -> float:
    """10 log10(sum w^2 / sum (w - w_hat)^2) in dB (inf when exact). Both float arrays."""
    w64 = w.astype(np.float64)
    noise = float(np.sum((w_hat.astype(np.float64) - w64) ** 2))
    signal = float(np.sum(w64 ** 2))
    return float("inf") if noise == 0 else float(10 * np.log10(max(signal, 1e-300) / noise))


#: largest ratio between the steps of two rows that row weights may ask for
MAX_GAIN_RATIO = 64.0


def row_gains(row_weight: np.ndarray) -> np.ndarray:
    """[rows] float32 step multipliers for row importance weights (>= 0, e.g. how often a row
    of an embedding table is used): weight ** -1/2, the equal-weighted-distortion optimum (each
    row's weighted error w * step**2 the same), capped at MAX_GAIN_RATIO over the smallest."""
    w = np.asarray(row_weight, dtype=np.float64)
    g = 1.0 / np.sqrt(np.maximum(w, w.max() * MAX_GAIN_RATIO ** -2.0 if w.max() > 0 else 1.0))
    return (g / g.min()).astype(np.float32)


def choose_steps(w2: np.ndarray, reconstruct, qp: float | None = None,
                 target_snr_db: float | None = None, rounding: float = DEFAULT_ROUNDING,
                 row_weight: np.ndarray | None = None, grid: int = 0, inverse_hessian=None, to_dtype=None):
    """Steps for a [rows, cols] float32 tensor from qp or a target SNR.

    reconstruct(q, steps) -> float32 [rows, cols] as the decoder will produce it (rounded to the
    tensor's dtype), so the SNR measured here is the decoded tensor's. row_weight: optional
    [rows] importance of each row (see :func:`row_gains`); with it the steps are delta *
    row_gains(row_weight) (still floored per row) and the SNR met is the row-weighted one
    (signal and error of each row scaled by its weight). grid: steps on a log grid of that many
    values per octave (:func:`row_steps`; 0: exact). inverse_hessian: a
    :class:`wcodec.codecs.gptq.InverseHessian` of the layer's inputs: the codes are chosen by
    GPTQ's error compensation (:func:`wcodec.codecs.gptq.quantize`, the decoded values rounded by
    ``to_dtype``) at the same steps, so the weight SNR reported is lower and the layer's output
    error smaller; qp only (a target SNR is a weight error, which rounding to nearest already
    minimises). Returns (steps [rows] float32, q [rows, cols] int8, snr_db). For a target the
    finest setting (the absmax floor everywhere) is returned when even it misses the target.
    Raises ValueError (row_weight's shape or values, inverse_hessian with a target SNR).
    """
    absmax = np.abs(w2).max(axis=1) if w2.shape[1] else np.zeros(w2.shape[0], np.float32)
    rms = float(np.sqrt(np.mean(w2.astype(np.float64) ** 2))) if w2.size else 0.0
    if row_weight is not None:
        rw = np.asarray(row_weight)
        if rw.shape != (w2.shape[0],) or not np.all(np.isfinite(rw)) or np.any(rw < 0):
            raise ValueError(f"row_weight must be {w2.shape[0]} finite values >= 0")
    gain = np.ones(w2.shape[0], np.float32) if row_weight is None else row_gains(row_weight)
    sq = None if row_weight is None else np.sqrt(np.asarray(row_weight, np.float64))[:, None]

    if inverse_hessian is not None and target_snr_db is not None:
        raise ValueError("error compensation (inverse_hessian) takes a qp, not a target SNR")

    def at(delta):
        s = row_steps(absmax, np.float32(delta) * gain, grid, float(np.float32(delta)))
        if inverse_hessian is None:
            q = quantize(w2, s, rounding)
        else:
            from . import gptq
            q = gptq.quantize(w2, s, inverse_hessian, rounding, to_dtype)
        w_hat = reconstruct(q, s)
        return s, q, (snr_db(w2, w_hat) if sq is None else snr_db(w2 * sq, w_hat * sq))

    if rms == 0.0:
        return at(1.0)
    if qp is not None:
        return at(rms * 2.0 ** ((float(qp) - QP_REF) / 6.0))
    # finest: every row at its floor
    lo = math.log2(max(float(absmax[absmax > 0].min()) / 127.0 / float(gain.max()), 1e-30))
    hi = math.log2(max(float(absmax.max()), rms * 4.0))  # ~everything quantizes to zero
    best = at(2.0 ** lo)
    if not best[2] >= target_snr_db:
        return best
    for _ in range(SNR_ITERATIONS):
        mid = 0.5 * (lo + hi)
        cand = at(2.0 ** mid)
        if cand[2] >= target_snr_db:
            lo, best = mid, cand
        else:
            hi = mid
    return best


def allocate_snr(sensitivity: dict, sizes: dict, deficit: float, at_db: float,
                 lo_db: float = 6.0, hi_db: float = 60.0) -> dict:
    """Per-tensor SNR targets (dB) that minimise total bits for a predicted accuracy loss.

    sensitivity[name]: the loss measured (by the caller, e.g. 1 - embedding cosine) with that
    tensor alone quantized at ``at_db``; sizes[name]: its weight count; deficit: the total loss
    allowed. Model: a tensor's loss falls 10x per 10 dB and its size by n / 6.02 bits per dB, and
    losses add; the Lagrange optimum gives every tensor a loss proportional to n:
    snr = at_db + 10 log10(s / (mu n)), mu = deficit / sum(n), clamped to [lo_db, hi_db].
    Returns {name: dB}, for ``encode_tensor(..., mode_string("lossy", target_snr_db=round(dB, 1)))``.
    """
    mu = deficit / max(sum(sizes[k] for k in sensitivity), 1)
    return {k: float(np.clip(at_db + 10 * np.log10(max(s, 1e-12) / (mu * sizes[k])), lo_db, hi_db))
            for k, s in sensitivity.items()}


def allocate_fisher(row_weights: dict, rms: dict, lam: float, alpha: float = 0.5) -> dict:
    """Per-tensor settings from per-row importance weights (e.g. Fisher / Gauss-Newton diagonals
    of a model's output, summed over each row and divided by its length), one multiplier for the
    whole model: row r of tensor t gets the step sqrt(lam / m) * (F[t][r] / m) ** -alpha, m the
    median of all positive row weights. alpha 0.5 gives step = sqrt(lam / F), the steps that
    minimise total bits for a loss sum_w F_w err_w^2 at high rate (each weight's weighted
    squared error the same; the reverse water-filling of rate-distortion theory); measured
    alpha 0.4 did better on MiniLM (benchmarks/RESULTS.md).

    row_weights[name]: [rows] >= 0; rms[name]: the tensor's rms. Returns {name: (mode string,
    row_weight)} for ``encode_tensor(a, dtype, mode, row_weight=row_weight)``: ``"lossy:qp=N"``
    with the codec's steps delta * row_gains(row_weight) (still floored per row at absmax/127;
    row gains capped at MAX_GAIN_RATIO); tensors whose weights are all 0 (unused) get
    ``"lossy:snr=6"``. Raises ValueError for negative or non-finite weights.
    """
    pos = [np.asarray(f, np.float64) for f in row_weights.values()]
    if any(not np.all(np.isfinite(f)) or np.any(f < 0) for f in pos):
        raise ValueError("row weights must be finite and >= 0")
    pos = np.concatenate([f[f > 0] for f in pos] + [np.zeros(0)])
    med = float(np.median(pos)) if pos.size else 1.0
    out = {}
    for name, f in row_weights.items():
        f = np.asarray(f, np.float64)
        if not f.size or f.max() <= 0 or not rms[name] > 0:
            out[name] = (mode_string("lossy", target_snr_db=6), None)
            continue
        # the codec's steps: delta * (max(rw) / max(rw, max(rw) / ratio^2)) ** 1/2, rw = f ** 2alpha
        delta = math.sqrt(lam / med) * (f.max() / med) ** -alpha
        qp = float(np.clip(QP_REF + 6 * math.log2(delta / rms[name]), 0, QP_MAX))
        rw = f ** (2 * alpha)
        out[name] = (mode_string("lossy", qp=round(qp, 3)), np.maximum(rw, rw.max() * MAX_GAIN_RATIO ** -2))
    return out
