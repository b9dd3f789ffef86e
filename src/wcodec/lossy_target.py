"""Lossy encoding to a quality target or a size budget: the one multiplier ``lam`` of the
Fisher-weighted step allocation (:func:`wcodec.codecs.lossy.allocate_fisher`) searched by
bisection on log lam, each candidate encoded in full and measured.

- quality: the cosine between the original and the decoded model's output on held-out
  calibration sentences (:mod:`wcodec.hf.fisher` says what the output is per model kind),
  averaged; a cosine target must hold for that mean less MARGIN_SE standard errors, and on the
  line fitted through the neighbouring candidates' figures (a single candidate's figure carries
  the luck of its rounding pattern);
- size: all-in bits per weight, 8 * bytes of the .wcodec file(s) / weights of the checkpoint.

The linear layers' integer codes are chosen by GPTQ's error compensation (:mod:`wcodec.codecs.gptq`)
from their inputs on the Fisher items (:mod:`wcodec.hf.hessian`), at the allocated steps; each
candidate is also measured with those layers rounded to nearest, and a cosine goal counts on
COMPENSATION_CREDIT of the difference only (rounding ``"nearest"``: no compensation, the reference).

``target_cosine`` alone: the coarsest lam (fewest bits) whose cosine meets it. ``bits_per_weight``
alone: the finest lam whose size fits (best cosine). Both: the coarsest lam meeting the cosine,
which must also fit. A bigger lam gives coarser steps, fewer bits and a lower cosine; both are
monotone in practice, and the search keeps the best candidate that met the goal.
:class:`UnsupportedError` when the goal cannot be met (naming the best reachable figures).
"""

from __future__ import annotations

import contextlib
import json
import math
import shutil
import tempfile
import time
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np

from .errors import InvalidInputError, UnsupportedError

#: step ~ F_row ** -alpha; 0.4 measured best on MiniLM (benchmarks/RESULTS.md, Fisher rows)
DEFAULT_ALPHA = 0.4
#: the search stops when the bracket is this narrow (log2 lam): ~0.03 bits/weight on MiniLM
RESOLUTION = 0.25
#: bracketing moves lam by this factor (log2) per probe, at most MAX_EXPAND times
EXPAND = 3.0
MAX_EXPAND = 8
#: the last probe goes this fraction of the way from the bracket's good end to the interpolated
#: lam that meets the goal exactly (a margin against the curve's bend and the probes' noise)
INSIDE = 0.9
#: interpolated probes after the bisection, at most
INTERPOLATIONS = 2
#: the first lam gives the median row a step of rms / FIRST_STEP_DIV (about qp 36)
FIRST_STEP_DIV = 4.0
#: a cosine target must hold for the held-out mean less this many standard errors (one-sided
#: 95 %): the held-out items are a sample (55 items on the shipped set; on MiniLM near 0.999 the
#: standard error is ~3 % of 1 - cos). 2 took MiniLM to 5.507 bits/weight (held-out 0.99907,
#: nltk1k 0.99897, pydoc500 0.99908: benchmarks/HISTORY.md, lossy5)
MARGIN_SE = 1.645
#: a cosine goal must also hold on the line fitted through the probes within FIT_SPAN (log2 lam)
#: of a probe, log(1 - bound) against log2 lam by least squares, where there are >= FIT_MIN such
#: probes: each candidate's cosine carries the luck of its own rounding pattern (MiniLM near 0.999:
#: 1 - cos moves by ~4 % between lams 1 % apart, more than the curve's own slope there), and the
#: coarsest candidate that meets the goal is then the luckiest one, which other text does not
#: share (benchmarks/HISTORY.md, lossy6)
FIT_SPAN = 1.0
FIT_MIN = 3
#: how the integer codes are chosen at the allocated steps: "gptq" (linear layers' codes by GPTQ's
#: error compensation from their calibration inputs, :mod:`wcodec.codecs.gptq`; lookup tables and
#: other matrices rounded to nearest) or "nearest" (every weight rounded to nearest, the reference)
ROUNDINGS = ("gptq", "nearest")
DEFAULT_ROUNDING = "gptq"
#: the share of error compensation's held-out gain (cosine over the same steps rounded to
#: nearest) a cosine goal counts on. The Hessians come from the calibration text, and part of the
#: gain is that text's own: all-MiniLM-L6-v2 at lam 3e-10 (5.26 bits/weight), 1 - cos falls by
#: 32 % on held-out calibration items, 28 % on nltk1k, 21 % on pydoc500 (0.86 and 0.66 of it
#: carried over; benchmarks/HISTORY.md, lossy7). Counting it all meets a 0.999 goal at 5.06
#: bits/weight, where nltk1k reads 0.99884 and pydoc500 0.99893; a half: 5.29 bits/weight, 0.99911
#: and 0.99918, and room for text further from the calibration
COMPENSATION_CREDIT = 0.5
#: metadata key of the achieved figures (JSON)
META_KEY = "wcodec_lossy_target"


@dataclass
class Probe:
    """One encoded candidate: lam, all-in bits per weight, mean and minimum held-out cosine, the
    standard error of the mean (the items' spread / sqrt(items)), and with error compensation the
    held-out mean cosine of the same steps rounded to nearest (None: not compensated)."""

    lam: float
    bits: float
    cosine: float
    cosine_min: float
    cosine_se: float = 0.0
    cosine_nearest: float | None = None

    @property
    def cosine_bound(self) -> float:
        """The cosine a cosine target is checked against: the mean less MARGIN_SE standard errors,
        less the share of error compensation's gain over rounding to nearest that a goal does not
        count on (1 - COMPENSATION_CREDIT)."""
        gain = 0.0 if self.cosine_nearest is None else max(self.cosine - self.cosine_nearest, 0.0)
        return self.cosine - MARGIN_SE * self.cosine_se - (1.0 - COMPENSATION_CREDIT) * gain


@dataclass
class TargetResult:
    """What :func:`encode_to_target` wrote: the chosen probe, every probe tried, the model kind,
    the calibration split sizes, seconds spent, the written paths (file bits measured after the
    final write)."""

    chosen: Probe
    probes: list = field(default_factory=list)
    kind: str = ""
    fisher_sentences: int = 0
    held_out_sentences: int = 0
    seconds: float = 0.0
    paths: list = field(default_factory=list)

    def summary(self) -> str:
        c = self.chosen
        bound = f"mean less {MARGIN_SE:g} standard errors"
        if c.cosine_nearest is not None:
            bound += f" and {1 - COMPENSATION_CREDIT:g} of the gain over rounding to nearest ({c.cosine_nearest:.5f})"
        return (f"lossy target: cosine {c.cosine:.5f} (min {c.cosine_min:.5f}, {bound} "
                f"{c.cosine_bound:.5f}) on {self.held_out_sentences} held-out "
                f"calibration sentences at {c.bits:.3f} bits/weight all-in (lam {c.lam:.3g}, "
                f"{len(self.probes)} candidates, {self.seconds:.0f} s)")


def check_goal(target_cosine, bits_per_weight) -> None:
    """Raise InvalidInputError unless at least one goal is given and each is in range:
    target_cosine in (0, 1), bits_per_weight in (0, 32]."""
    if target_cosine is None and bits_per_weight is None:
        raise InvalidInputError("the lossy target search needs target_cosine and/or bits_per_weight")
    if target_cosine is not None:
        t = float(target_cosine)
        if not (math.isfinite(t) and 0 < t < 1):
            raise InvalidInputError(f"target cosine must be in (0, 1), e.g. 0.999; got {target_cosine}")
    if bits_per_weight is not None:
        b = float(bits_per_weight)
        if not (math.isfinite(b) and 0 < b <= 32):
            raise InvalidInputError(f"bits per weight must be in (0, 32], e.g. 4.0; got {bits_per_weight}")


def search(probe, lam0: float, target_cosine=None, bits_per_weight=None, resolution: float | None = None,
           progress=None) -> tuple[Probe, list]:
    """Bisection on log2 lam. probe(lam) -> Probe (encode + measure). Returns (chosen, every
    probe by lam).

    A cosine target: the largest lam whose cosine meets it (then its bits must fit the budget
    when one is given). A budget alone: the smallest lam whose bits fit. The bracket grows from
    lam0 by 2 ** EXPAND per probe, at most MAX_EXPAND times; it is bisected until it is
    ``resolution`` wide in log2 lam (None: RESOLUTION), then up to INTERPOLATIONS probes go where
    the goal's figure, interpolated across the bracket, meets it. A cosine goal is met where the
    probe's bound meets it and so does the line fitted through its neighbours (:func:`_fitted`).
    Raises InvalidInputError for bad goals, UnsupportedError when no lam meets them."""
    check_goal(target_cosine, bits_per_weight)
    resolution = RESOLUTION if resolution is None else float(resolution)
    tried: dict = {}

    def ok(log_lam) -> bool:
        if log_lam not in tried:
            tried[log_lam] = probe(2.0 ** log_lam)
            if progress is not None:
                progress.update(1)
        return meets(log_lam)

    def meets(log_lam) -> bool:
        p = tried[log_lam]
        if target_cosine is None:
            return p.bits <= bits_per_weight
        fit = _fitted(tried, log_lam)
        return p.cosine_bound >= target_cosine and (fit is None or fit >= target_cosine)

    # "good" is the side where the goal holds: small lam for a cosine, large lam for a budget.
    # Bracket: lo on the small side, hi on the large side, ok(lo) != ok(hi).
    small_ok = target_cosine is not None
    x = math.log2(lam0)
    lo = hi = None
    if ok(x) == small_ok:
        lo = x
        for k in range(1, MAX_EXPAND + 1):
            if ok(x + k * EXPAND) != small_ok:
                hi = x + k * EXPAND
                break
            lo = x + k * EXPAND
    else:
        hi = x
        for k in range(1, MAX_EXPAND + 1):
            if ok(x - k * EXPAND) == small_ok:
                lo = x - k * EXPAND
                break
            hi = x - k * EXPAND
    if lo is None or hi is None:
        if (lo is None) == small_ok:  # the goal holds nowhere in the range tried
            _unreachable(tried, target_cosine, bits_per_weight)
        end = lo if lo is not None else hi  # the goal holds everywhere: the range's best end
        chosen = tried[end]
    else:
        while hi - lo > resolution + 1e-12:
            mid = 0.5 * (lo + hi)
            if ok(mid) == small_ok:
                lo = mid
            else:
                hi = mid
        # up to INTERPOLATIONS more probes where the goal's figure, interpolated across the bracket,
        # meets it (regula falsi): the bisection alone leaves up to a bracket's width of bits unspent
        # (~0.03 on MiniLM); a probe that misses the goal narrows the bracket from the other end
        for _ in range(INTERPOLATIONS):
            x = _interpolate(tried, lo, hi, target_cosine, bits_per_weight)
            if x is None:
                break
            if ok(x):
                lo, hi = (x, hi) if small_ok else (lo, x)  # the goal holds there: the new good end
            else:
                lo, hi = (lo, x) if small_ok else (x, hi)
        chosen = tried[lo if small_ok else hi]
        if small_ok:  # judged again with every probe's neighbours: the coarsest that still meets it
            good = [k for k in tried if k <= lo and meets(k)]
            chosen = tried[max(good)] if good else tried[min(k for k in tried if tried[k].cosine_bound >= target_cosine)]
    if target_cosine is not None and bits_per_weight is not None and chosen.bits > bits_per_weight:
        raise UnsupportedError(f"cosine {target_cosine:g} needs {chosen.bits:.3f} bits/weight here, over the budget "
                               f"of {bits_per_weight:g}; nothing was written. Relax one of the two")
    return chosen, sorted(tried.values(), key=lambda p: p.lam)


def _line(tried: dict, x: float):
    """(slope, value at x) of the line fitted through the probes within FIT_SPAN of log2 lam
    ``x``, log(1 - cosine bound) against log2 lam by least squares; None with fewer than FIT_MIN."""
    near = [(k, p.cosine_bound) for k, p in tried.items() if abs(k - x) <= FIT_SPAN]
    if len(near) < FIT_MIN:
        return None
    ks = np.array([k for k, _ in near])
    ys = np.log(np.maximum(1.0 - np.array([b for _, b in near]), 1e-300))
    slope, at_x = np.polyfit(ks - x, ys, 1)
    return float(slope), float(at_x)


def _fitted(tried: dict, x: float) -> float | None:
    """The cosine bound at log2 lam ``x`` on the line of :func:`_line`, or None."""
    line = _line(tried, x)
    return None if line is None else 1.0 - math.exp(line[1])


def _interpolate(tried: dict, lo: float, hi: float, target_cosine, bits_per_weight) -> float | None:
    """The log2 lam in (lo, hi) where the goal's figure meets the goal: for a cosine, on the line
    fitted through the probes about the bracket (:func:`_line`; the luck of single probes
    averaged), else interpolated linearly in log2 lam between the bracket's two probes:
    log(1 - cosine) for a cosine (the deficit grows about as a power of lam), bits for a budget;
    moved INSIDE of the way from the good end, so that a slightly convex curve still meets the
    goal there. None when the figures do not straddle the goal."""
    p_lo, p_hi = tried[lo], tried[hi]
    if target_cosine is not None:
        goal, good = math.log(1.0 - target_cosine), lo
        mid = 0.5 * (lo + hi)
        line = _line(tried, mid)
        if line is not None and line[0] > 0:
            x = mid + (goal - line[1]) / line[0]
            x = good + INSIDE * (min(max(x, lo), hi) - good)
            return x if lo < x < hi else None
        f_lo, f_hi = (math.log(max(1.0 - p.cosine_bound, 1e-300)) for p in (p_lo, p_hi))
    else:
        f_lo, f_hi, goal, good = p_lo.bits, p_hi.bits, float(bits_per_weight), hi
    if not (min(f_lo, f_hi) < goal < max(f_lo, f_hi)):
        return None
    x = lo + (hi - lo) * (goal - f_lo) / (f_hi - f_lo)
    x = good + INSIDE * (x - good)
    return x if lo < x < hi else None


def _unreachable(tried: dict, target_cosine, bits_per_weight):
    ps = list(tried.values())
    if target_cosine is not None:
        best = max(ps, key=lambda p: p.cosine_bound)
        raise UnsupportedError(f"cosine {target_cosine:g} is out of reach: the finest setting tried gives "
                               f"{best.cosine_bound:.5f} (mean less {MARGIN_SE:g} standard errors) at {best.bits:.3f} bits/weight; nothing was written. "
                               "Choose a lower target, or mode 'lossless'")
    best = min(ps, key=lambda p: p.bits)
    raise UnsupportedError(f"{bits_per_weight:g} bits/weight is out of reach: the coarsest setting tried takes "
                           f"{best.bits:.3f} bits/weight; nothing was written. Choose a larger budget")


def _checkpoint_index(src: Path) -> dict:
    """{tensor name: (safetensors dtype, shape)} of a model folder's weights, from the
    safetensors headers (torch files: their tensors, read once)."""
    from .format import sources

    out = {}
    for f in sources.weight_files(src):
        if f.suffix == ".safetensors":
            _, _, entries = sources.read_safetensors_header(f)
            out.update({name: (dtype, tuple(shape)) for _, name, dtype, shape, _, _ in entries})
        else:
            out.update({it.name: (it.dtype, tuple(it.array.shape)) for it in sources.read_source(f)[1]})
    return out


def _fill_unseen_rows(rows: dict, tables=()) -> dict:
    """Rows of lookup tables the input picks (``tables``: positions, token types) are floored at
    the median of the table's positive rows: a user's inputs may be longer or typed otherwise
    than the calibration's, which reaches the last positions rarely or never (such a table is
    small: MiniLM's positions are 0.9% of the weights). Other rows the calibration never reached
    (F = 0 in a tensor with positive rows) get the tensor's smallest positive weight, not the
    coarsest steps."""
    out = {}
    for k, f in rows.items():
        pos = f[f > 0]
        if not pos.size:
            out[k] = f
        elif k in tables:
            out[k] = np.maximum(f, np.median(pos))
        else:
            out[k] = f if pos.size == f.size else np.where(f > 0, f, pos.min())
    return out


def _plan(rows: dict, rms: dict, lam: float, alpha: float, factors=None) -> dict:
    """{name: (mode string, codec options)}: allocate_fisher's per-row steps; a matrix the
    output never reaches (all rows 0, e.g. BERT's pooler under a sentence embedding) gets the
    coarsest step (qp QP_MAX: nearly all zeros, ~0.05 bits/weight; allocate_fisher's 6 dB took
    1.5 bits/weight there, 0.01 bits/weight of MiniLM all-in). factors: {name: InverseHessian}
    of the linear layers (:mod:`wcodec.hf.hessian`): their codes by GPTQ at those steps."""
    from .codecs.lossy import QP_MAX, allocate_fisher, mode_string

    unused = mode_string("lossy", qp=QP_MAX)
    factors = factors or {}
    plan = {}
    for k, (m, rw) in allocate_fisher(rows, rms, lam, alpha).items():
        used = bool(np.any(rows[k] > 0))
        opts = {} if rw is None else {"row_weight": rw}
        if used and rw is not None and k in factors:
            opts["inverse_hessian"] = factors[k]
        plan[k] = (m if used else unused, opts)
    return plan


def _source_arrays(src: Path, names) -> dict:
    """{name: (array, safetensors dtype)} of those tensors of the checkpoint (read once)."""
    from .format import sources

    names = set(names)
    if not names:
        return {}
    return {it.name: (it.array, it.dtype) for it in sources.read_source(src)[1] if it.name in names}


def _nearest(plan: dict, originals: dict) -> dict:
    """{name: torch tensor} the compensated tensors of ``plan`` decode to when their weights are
    rounded to nearest at the same steps (:func:`wcodec.codecs.quant.decoded_values`)."""
    import torch

    from .codecs.lossy import parse_mode
    from .codecs.quant import decoded_values, to_f32

    out = {}
    for k, (mode, opts) in plan.items():
        if "inverse_hessian" in opts and k in originals:
            a, dtype = originals[k]
            rest = {o: v for o, v in opts.items() if o != "inverse_hessian"}
            v = decoded_values(a, dtype, **parse_mode(mode)[1], **rest)
            out[k] = torch.from_numpy(to_f32(v.reshape(-1), dtype).reshape(a.shape))
    return out


def _first_lam(rows: dict, rms: dict) -> float:
    """A starting lam: the median row weight's step is the median rms / FIRST_STEP_DIV."""
    pos = np.concatenate([f[f > 0] for f in rows.values()] + [np.zeros(0)])
    med = float(np.median(pos)) if pos.size else 1.0
    r = float(np.median(list(rms.values()))) if rms else 1.0
    return med * (r / FIRST_STEP_DIV) ** 2 if med > 0 and r > 0 else 1.0


def encode_to_target(src, dst, target_cosine: float | None = None, bits_per_weight: float | None = None,
                     calibration=None, alpha: float = DEFAULT_ALPHA, workers: int | None = None,
                     max_shard_size: int | None = None, progress: bool = False,
                     rounding: str = DEFAULT_ROUNDING) -> TargetResult:
    """Encode a Hugging Face model folder lossily to a cosine target and/or a bits budget.

    src: a model folder (config.json, tokenizer, weights) of a kind :mod:`wcodec.hf.fisher`
    supports (sentence-transformers, transformers text encoder, causal LM). dst: a ``*.wcodec``
    file or an output folder, as :func:`wcodec.encode_safetensors_to_wcodec` takes them (a
    folder also gets config.json's ``quantization_config``). target_cosine: in (0, 1), the mean
    cosine between the original and the decoded model's outputs on held-out calibration
    sentences, less MARGIN_SE standard errors of that mean. bits_per_weight: in (0, 32], all-in. calibration: a text file, one sentence per
    line (None: the shipped set, :mod:`wcodec.hf.calibration`). alpha: step ~ F_row ** -alpha.
    Every matrix the output depends on is quantized with Fisher-weighted per-row steps; vectors
    and integer tensors stay lossless; matrices the output does not use (e.g. BERT's pooler for a
    sentence embedding) get the coarsest setting. rounding: one of ROUNDINGS ("gptq": the linear
    layers' codes by error compensation, judged as the module doc says; "nearest": every weight
    rounded to nearest). The achieved figures go into the file metadata
    under ``wcodec_lossy_target`` (JSON). Slow: one gradient pass over the calibration, then one
    full encode + decode + forward pass per candidate (about 8-10 candidates).
    Returns a TargetResult. Raises InvalidInputError (goals, alpha, rounding), UnsupportedError (model
    kind, a goal that cannot be met: nothing is written), MissingDependencyError (torch /
    transformers), NotFoundError, WcodecError subclasses on bad input.
    """
    check_goal(target_cosine, bits_per_weight)
    if rounding not in ROUNDINGS:
        raise InvalidInputError(f"rounding must be one of {', '.join(ROUNDINGS)}, got {rounding!r}")
    if not (isinstance(alpha, (int, float)) and 0 < float(alpha) <= 1):
        raise InvalidInputError(f"alpha must be in (0, 1], got {alpha!r}")
    src, dst = Path(src), Path(dst)
    from .hf.fisher import model_kind
    model_kind(src)  # UnsupportedError before torch / transformers load
    from .format import sources
    if dst.suffix == ".wcodec" and sources.side_files(src):  # refused by the final write: refuse it now
        raise InvalidInputError(f"{src} is a model folder with config/tokenizer files; a single '{dst.name}' "
                                "would drop them: encode into a folder instead")
    _need("torch", "hf")
    _need("transformers", "hf")
    from tqdm.auto import tqdm

    from .codecs import choose_codec
    from .hf.calibration import passages, read_sentences, split
    from .hf.fisher import ModelOutput, embedding_rows, fisher_rows
    from .hf.hessian import InputHessians

    t0 = time.perf_counter()
    lines = read_sentences(calibration)
    fit, held = split(passages(lines) if calibration is None else lines)
    index = _checkpoint_index(src)
    numel = sum(int(np.prod(s, dtype=np.int64)) for _, s in index.values())
    model = ModelOutput(src, index)
    reference = model.embed(held)
    hessians = InputHessians(model) if rounding == "gptq" else contextlib.nullcontext()
    with hessians, \
            tqdm(total=len(fit), desc="Fisher rows", unit="sentence", disable=not progress) as bar:
        rows = fisher_rows(model, fit, progress=bar)
    emb = model.input_embedding_name()
    if emb in rows:
        rows[emb] = embedding_rows(rows[emb], model.token_counts(fit))
    rows = _fill_unseen_rows(rows, model.input_table_names())
    rows = {k: f for k, f in rows.items() if k in index and choose_codec(*index[k], "lossy:qp=30") == "int8-quant"}
    if not rows:
        raise UnsupportedError(f"'{src}': no float matrix of the checkpoint is a parameter of the model; "
                               "nothing to quantize")
    factors = {}
    if rounding == "gptq":
        with tqdm(desc="GPTQ inverse Hessians", unit="input", disable=not progress) as bar:
            factors = hessians.factors(rows, progress=bar)
    originals = _source_arrays(src, factors)
    params = {model.names[n]: p for n, p in model.params.items() if n in model.names}
    rms = {k: float(params[k].detach().double().pow(2).mean().sqrt()) for k in rows}

    info = {"alpha": float(alpha), "kind": model.kind, "rounding": rounding, "target_cosine": target_cosine,
            "budget_bits_per_weight": bits_per_weight, "fisher_sentences": len(fit), "held_out_sentences": len(held),
            "calibration": "shipped" if calibration is None else Path(calibration).name}
    folder = dst.suffix != ".wcodec"

    with tempfile.TemporaryDirectory(prefix="wcodec-target-") as tmp, \
            tqdm(desc="lossy target search", unit="candidate", disable=not progress) as bar:
        def probe(lam: float) -> Probe:
            # written exactly as the final file will be (same metadata length), so its size is the final size
            path = Path(tmp) / (f"{lam:.6e}" + ("" if folder else ".wcodec"))
            plan = _plan(rows, rms, lam, alpha, factors)
            blank = Probe(lam, 0.0, 0.0, 0.0, 0.0, 0.0 if factors and target_cosine is not None else None)
            paths = _write(src, path, plan, _figures(info, blank), workers, max_shard_size)
            bits = 8.0 * sum(p.stat().st_size for p in paths if p.suffix == ".wcodec") / numel
            from .loading import load_tensors, open_checkpoint
            with open_checkpoint(path) as r:
                decoded = load_tensors(r, list(plan), "cpu", "pt", True)
            shutil.rmtree(path) if folder else path.unlink()
            model.load_weights(decoded)
            cos = np.sum(model.embed(held) * reference, axis=1)
            nearest = None
            if factors and target_cosine is not None:  # the same steps rounded to nearest, in memory
                model.load_weights({**decoded, **_nearest(plan, originals)})
                nearest = float(np.mean(np.sum(model.embed(held) * reference, axis=1)))
            p = Probe(lam, bits, float(cos.mean()), float(cos.min()), float(cos.std() / math.sqrt(max(cos.size, 1))),
                      nearest)
            bar.set_postfix_str(f"lam {lam:.3g}: {bits:.3f} bits/w, cosine {p.cosine:.5f}"
                                + ("" if nearest is None else f" (nearest {nearest:.5f})"))
            return p

        try:
            chosen, probes = search(probe, _first_lam(rows, rms), target_cosine, bits_per_weight, progress=bar)
        finally:
            model.restore()
    plan = _plan(rows, rms, chosen.lam, alpha, factors)
    paths = _write(src, dst, plan, _figures(info, chosen), workers, max_shard_size, progress, final=True)
    size = sum(p.stat().st_size for p in paths if p.suffix == ".wcodec")
    # the chosen probe's figures, with the bits of the files written
    result = TargetResult(replace(chosen, bits=8.0 * size / numel), probes, model.kind, len(fit), len(held),
                          time.perf_counter() - t0, paths)
    return result


def _figures(info: dict, p: Probe) -> dict:
    """The file metadata of a result: fixed-width figures, so that a candidate written with
    placeholders has the final file's exact size."""
    fig = {**info, "cosine": f"{p.cosine:+.6f}", "cosine_min": f"{p.cosine_min:+.6f}", "cosine_se": f"{p.cosine_se:.6f}",
           "cosine_bound": f"{p.cosine_bound:+.6f}",
           **({} if p.cosine_nearest is None else {"cosine_nearest": f"{p.cosine_nearest:+.6f}"}),
           "bits_per_weight": f"{min(p.bits, 99.0):07.4f}", "lam": f"{p.lam:.6e}"}
    return {META_KEY: json.dumps(fig, sort_keys=True)}


def _write(src: Path, dst: Path, plan: dict, metadata: dict, workers, max_shard_size, progress=False,
           final: bool = False) -> list:
    """The checkpoint encoded with ``plan`` into dst (a .wcodec file or a folder; the final
    folder also gets config.json's quantization_config). Returns the written paths."""
    from .api import encode_safetensors_to_wcodec

    if final and dst.suffix != ".wcodec":
        from .hf.convert import convert_folder
        return convert_folder(src, dst, workers=workers, max_shard_size=max_shard_size, progress=progress,
                              plan=plan, metadata=metadata)
    return encode_safetensors_to_wcodec(src, dst, workers=workers, max_shard_size=max_shard_size, progress=progress,
                                        plan=plan, metadata=metadata)


def _need(module: str, extra: str) -> None:
    import importlib.util

    if importlib.util.find_spec(module) is None:
        from .errors import MissingDependencyError
        raise MissingDependencyError(f"the lossy target search needs {module}, which is not installed: "
                                     f"pip install 'wcodec[{extra}]'")
