"""Error-compensated rounding of a linear layer's weights (GPTQ: Frantar, Ashkboos, Hoefler and
Alistarh 2022, "GPTQ: Accurate Post-Training Quantization for Generative Pre-trained
Transformers", Algorithm 1; Optimal Brain Quantization / Surgeon before it).

A layer y = W x is judged by its output error on calibration inputs, sum_x |(W - W') x|^2 =
sum_rows e_r^T H e_r with H = sum_x x x^T, not by its weight error. Round-to-nearest makes each
weight's error as small as it can be; GPTQ rounds the input columns one at a time, in order,
and moves each column's rounding error onto the columns not yet rounded through the inverse
Hessian (the least-squares correction of the rest of the row), so that errors cancel in the
output. The step of every weight is given (:mod:`.lossy`'s allocation): only which integer each
weight gets changes, so the codes decode through the unchanged int8-quant decoder,
``w' = float32(q) * step``.

The columns go in GPTQ's "act order", largest H_jj first (the inputs with the most energy are
rounded while most columns are left to absorb their error): on all-MiniLM-L6-v2's layers at ~5
bits/weight it leaves 4-19 % less output error than the natural order, on held-out and unrelated
text alike (benchmarks/HISTORY.md, lossy7).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

#: damping added to H's diagonal, a fraction of its mean. GPTQ uses 1 %; H estimated on a few
#: thousand calibration tokens is noisy and near-singular for wide inputs, and other text puts
#: energy where the calibration had little. all-MiniLM-L6-v2's linear layers at ~5.3 bits/weight,
#: output error (Fisher-weighted) against round-to-nearest's on the inputs of held-out
#: calibration items / nltk1k / pydoc500 (benchmarks/HISTORY.md, lossy7): damp 0.01 0.33 / 0.44
#: / 0.55, 0.03 0.33 / 0.43 / 0.54, 0.1 0.35 / 0.44 / 0.53, 0.3 0.38 / 0.47 / 0.54
DAMP = 0.1
#: columns updated lazily per block (GPTQ's 128): the rest of the matrix is updated once a block
BLOCK = 128


@dataclass(frozen=True)
class InverseHessian:
    """A layer's inputs as GPTQ uses them: ``u`` the upper Cholesky factor of the damped inverse
    Hessian (H + damp * mean(diag H) * I)^-1 = u^T u, float64 [n, n], of the inputs taken in
    ``order`` (int64 [n], a permutation; None: 0..n-1); ``axis`` the axis of the weight's 2-D
    view [rows, cols] the inputs multiply: 1 for ``nn.Linear`` ([out, in], n = cols), 0 for a
    layer stored transposed ([in, out], n = rows, e.g. GPT-2's ``Conv1D``)."""

    u: np.ndarray
    axis: int = 1
    order: np.ndarray | None = None

    @classmethod
    def from_hessian(cls, hessian: np.ndarray, axis: int = 1, damp: float = DAMP,
                     act_order: bool = True) -> "InverseHessian":
        """hessian: [n, n] symmetric, positive semi-definite (e.g. the mean of x x^T over the
        calibration tokens), not modified. act_order: the inputs by decreasing H_jj (ties in
        index order), else in index order. Inputs that are always 0 (H_jj = 0) get H_jj = 1:
        their columns are rounded to nearest, coupled to nothing. The damping grows tenfold
        until the Cholesky factorisations succeed (at most 4 times). Raises ValueError for a
        non-square, non-finite or empty hessian, an axis other than 0 / 1, damp < 0."""
        h = np.array(hessian, dtype=np.float64)
        if h.ndim != 2 or h.shape[0] != h.shape[1] or not h.size or not np.all(np.isfinite(h)):
            raise ValueError(f"a Hessian must be a finite non-empty square matrix, got shape {h.shape}")
        if axis not in (0, 1):
            raise ValueError(f"axis must be 0 or 1, got {axis}")
        if not damp >= 0:
            raise ValueError(f"damp must be >= 0, got {damp}")
        h = 0.5 * (h + h.T)
        order = np.argsort(-np.diag(h), kind="stable") if act_order else None
        if order is not None:
            h = h[np.ix_(order, order)]
        dead = np.diag(h) <= 0
        h[dead, :] = 0.0
        h[:, dead] = 0.0
        h[dead, dead] = 1.0
        mean = float(np.mean(np.diag(h)))
        for k in range(5):
            try:
                lower = np.linalg.cholesky(h + (damp * 10 ** k + (k > 0) * 1e-10) * mean * np.eye(h.shape[0]))
                inv = np.linalg.inv(lower)
                u = np.linalg.cholesky(inv.T @ inv).T  # H^-1 = u^T u, u upper
                break
            except np.linalg.LinAlgError:
                continue
        else:
            raise ValueError("the Hessian is not positive definite even with damping")
        return cls(np.ascontiguousarray(u), axis, order)


def quantize(w2: np.ndarray, steps: np.ndarray, factor: InverseHessian, rounding: float = 0.5,
             to_dtype=None, block: int = BLOCK) -> np.ndarray:
    """GPTQ's rounding of w2 [rows, cols] float32 (not modified) with ``steps`` [rows] float32
    (one per row, as the int8-quant record stores them) -> q int8 [rows, cols].

    Each weight of the column being rounded gets sign(x) * min(floor(|x| / step + rounding), 127)
    (:func:`wcodec.codecs.lossy.quantize`'s rule, on the weight as corrected so far); its error
    against the decoded value (``to_dtype(float32(q) * step)``: to_dtype rounds float32 values to
    the tensor's dtype, None for float32) is spread over the later columns by ``factor.u``'s row.
    ``factor.axis`` 0: the inputs multiply the rows, which are then rounded one at a time (the
    steps still per row); ``factor.order``: the order the columns (rows) are rounded in. With u
    = I it is round-to-nearest, bit for bit. Raises ValueError when the factor's size is not the
    inputs' axis's length."""
    w2 = np.asarray(w2, np.float32)
    steps = np.asarray(steps, np.float32)
    n = w2.shape[factor.axis]
    if factor.u.shape != (n, n) or (factor.order is not None and factor.order.shape != (n,)):
        raise ValueError(f"the inverse Hessian is {factor.u.shape}, the weight's input axis has {n} entries")
    # the inputs' axis last, in the factor's order; the steps along with their rows
    w, s = (w2, steps[:, None]) if factor.axis == 1 else (w2.T, steps[None, :])
    if factor.order is not None:
        w = w[:, factor.order]
        s = s if factor.axis == 1 else s[:, factor.order]
    q = _columns(w, s, factor.u, rounding, to_dtype, block)
    if factor.order is not None:
        q[:, factor.order] = q.copy()
    return np.ascontiguousarray(q if factor.axis == 1 else q.T)


def _columns(w: np.ndarray, steps: np.ndarray, u: np.ndarray, rounding: float, to_dtype, block: int) -> np.ndarray:
    """The GPTQ loop over the columns of w [rows, n] (steps broadcast [rows, 1] or [1, n]),
    worked on transposed (one column per contiguous row of ``work``: the loop reads and updates
    whole columns)."""
    rows, n = w.shape
    work = w.T.astype(np.float64)  # [n, rows]
    q = np.empty((n, rows), np.int8)
    r = np.float32(rounding)
    per_row = steps.shape[1] == 1
    srow = steps[:, 0] if per_row else None
    for b0 in range(0, n, block):
        b1 = min(b0 + block, n)
        err = np.empty((b1 - b0, rows))
        for j in range(b0, b1):
            x = work[j]
            s = srow if per_row else steps[0, j]
            # the rounding on float32 values, as lossy.quantize does it (u = I: identical codes)
            c = np.sign(x) * np.minimum(np.floor(np.abs(x.astype(np.float32)) / s + r), 127)
            q[j] = c
            dec = c.astype(np.float32) * s
            e = (x - (dec if to_dtype is None else to_dtype(dec))) / u[j, j]
            work[j + 1:b1] -= np.outer(u[j, j + 1:b1], e)
            err[j - b0] = e
        if b1 < n:
            work[b1:] -= u[b0:b1, b1:].T @ err
    return q.T
