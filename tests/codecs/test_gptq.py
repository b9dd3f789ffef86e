"""GPTQ's error-compensated rounding (wcodec.codecs.gptq): round-to-nearest when nothing couples
the inputs, a lower output error than round-to-nearest's at equal steps on correlated inputs
(in and out of sample), the codes through the unchanged int8-quant decoder, the transposed
layout, and its errors."""

from __future__ import annotations

import numpy as np
import pytest

from wcodec.codecs import decode_tensor, encode_tensor, gptq, lossy
from wcodec.codecs.quant import checked_scales, f32_to_bf16, to_f32


def _layer(rows=48, cols=96, tokens=2000, seed=0):
    """A weight [rows, cols] and inputs [tokens, cols] with strongly correlated features (a few
    latent factors, as a layer's inputs have), plus fresh inputs of the same distribution."""
    rng = np.random.default_rng(seed)
    mix = rng.standard_normal((8, cols)) * rng.uniform(0.2, 3.0, cols)

    def inputs(n):
        return (rng.standard_normal((n, 8)) @ mix + 0.1 * rng.standard_normal((n, cols))).astype(np.float64)

    w = (rng.standard_normal((rows, cols)) * 0.05).astype(np.float32)
    return w, inputs(tokens), inputs(tokens)


def _steps(w, div=8.0):
    rms = float(np.sqrt(np.mean(w.astype(np.float64) ** 2)))
    return lossy.row_steps(np.abs(w).max(axis=1), np.float32(rms / div))


def _out_err(w, q, s, x):
    e = q.astype(np.float64) * s[:, None].astype(np.float64) - w
    return float(np.sum((x @ e.T) ** 2))


def test_identity_is_round_to_nearest_bit_for_bit():
    w, _, _ = _layer()
    s = _steps(w)
    ident = gptq.InverseHessian(np.eye(w.shape[1]))
    assert np.array_equal(gptq.quantize(w, s, ident), lossy.quantize(w, s))
    assert np.array_equal(gptq.quantize(w, s, ident, rounding=0.4), lossy.quantize(w, s, 0.4))
    ident0 = gptq.InverseHessian(np.eye(w.shape[0]), axis=0)
    assert np.array_equal(gptq.quantize(w, s, ident0), lossy.quantize(w, s))
    # inputs that are never nonzero couple to nothing: those columns round to nearest
    f = gptq.InverseHessian.from_hessian(np.zeros((w.shape[1], w.shape[1])))
    assert np.array_equal(gptq.quantize(w, s, f), lossy.quantize(w, s))


@pytest.mark.parametrize("div", [4.0, 16.0])
def test_lower_output_error_than_round_to_nearest(div):
    w, x, fresh = _layer()
    s = _steps(w, div)
    h = x.T @ x / x.shape[0]
    before = w.copy()
    q0 = lossy.quantize(w, s)
    q1 = gptq.quantize(w, s, gptq.InverseHessian.from_hessian(h))
    assert np.array_equal(w, before)  # the caller's weights are not modified
    assert np.abs(q1.astype(int) - q0).max() >= 1 and np.abs(q1).max() <= 127
    assert _out_err(w, q1, s, x) < 0.6 * _out_err(w, q0, s, x)
    assert _out_err(w, q1, s, fresh) < 0.6 * _out_err(w, q0, s, fresh)  # inputs it never saw
    # the weight error grows (that is the trade): it is the output's that falls
    assert np.sum((q1 * s[:, None] - w) ** 2) > np.sum((q0 * s[:, None] - w) ** 2)


def test_transposed_layer_is_the_same_rounding():
    """axis 0 (GPT-2's Conv1D, weight [in, out]): the inputs multiply the rows; with one step for
    all weights the codes are those of the transposed weight as an nn.Linear."""
    w, x, _ = _layer(rows=40, cols=56)
    h = x[:, :40].T @ x[:, :40] / x.shape[0]
    s = np.full(40, 0.004, np.float32)
    q = gptq.quantize(w, s, gptq.InverseHessian.from_hessian(h, axis=0))
    assert np.array_equal(q, gptq.quantize(w.T, np.full(56, 0.004, np.float32), gptq.InverseHessian.from_hessian(h)).T)
    xs = x[:, :40]
    e = q * s[:, None] - w  # rows rounded one at a time, each row's error onto the later rows
    e0 = lossy.quantize(w, s) * s[:, None] - w
    assert np.sum((xs @ e) ** 2) < 0.7 * np.sum((xs @ e0) ** 2)
    rs = _steps(w)  # steps per row: rows carry theirs wherever the order takes them
    assert np.abs(gptq.quantize(w, rs, gptq.InverseHessian.from_hessian(h, axis=0))).max() <= 127


def test_act_order():
    """Columns by decreasing H_jj (GPTQ's act order, the default) or in index order: both beat
    round-to-nearest; an H already in decreasing order gives the same codes either way."""
    w, x, fresh = _layer()
    s = _steps(w)
    h = x.T @ x / x.shape[0]
    act, plain = gptq.InverseHessian.from_hessian(h), gptq.InverseHessian.from_hessian(h, act_order=False)
    assert sorted(act.order.tolist()) == list(range(h.shape[0])) and plain.order is None
    assert np.all(np.diff(np.diag(h)[act.order]) <= 0)
    base = _out_err(w, lossy.quantize(w, s), s, fresh)
    for f in (act, plain):
        assert _out_err(w, gptq.quantize(w, s, f), s, fresh) < 0.6 * base
    o = np.argsort(-np.diag(h), kind="stable")
    hs, ws = h[np.ix_(o, o)], np.ascontiguousarray(w[:, o])
    assert np.array_equal(gptq.quantize(ws, s, gptq.InverseHessian.from_hessian(hs)),
                          gptq.quantize(ws, s, gptq.InverseHessian.from_hessian(hs, act_order=False)))


def test_blocks_do_not_change_the_codes():
    w, x, _ = _layer(rows=8, cols=70)
    f = gptq.InverseHessian.from_hessian(x.T @ x)
    s = _steps(w)
    a, b = gptq.quantize(w, s, f, block=128), gptq.quantize(w, s, f, block=16)
    assert np.mean(a == b) > 0.99  # the same algebra; float sums in another order may flip a tie


@pytest.mark.parametrize("dtype", ["F32", "BF16", "F16"])
def test_codes_decode_through_the_unchanged_decoder(dtype):
    w, x, fresh = _layer(rows=32, cols=64)
    arr = {"F32": w, "F16": w.astype(np.float16), "BF16": f32_to_bf16(w)}[dtype]
    f = gptq.InverseHessian.from_hessian(x.T @ x / x.shape[0])
    rw = np.linspace(1.0, 4.0, w.shape[0])
    plain = encode_tensor(arr, dtype, "lossy:qp=40", row_weight=rw)
    comp = encode_tensor(arr, dtype, "lossy:qp=40", row_weight=rw, inverse_hessian=f)
    again = encode_tensor(arr, dtype, "lossy:qp=40", row_weight=rw, inverse_hessian=f)
    assert comp.codec == "int8-quant" and comp.info["error_compensation"] == "gptq"
    assert "error_compensation" not in plain.info
    assert comp.sections.keys() == plain.sections.keys()  # the same layout
    assert np.array_equal(checked_scales(comp, 32), checked_scales(plain, 32))  # the same steps
    assert all(np.array_equal(comp.sections[k], again.sections[k]) for k in comp.sections)  # deterministic
    wf = to_f32(arr.reshape(-1), dtype).reshape(w.shape).astype(np.float64)
    d0 = to_f32(decode_tensor(plain).reshape(-1), dtype).reshape(w.shape) - wf
    d1 = to_f32(decode_tensor(comp).reshape(-1), dtype).reshape(w.shape) - wf
    assert not np.array_equal(d0, d1)
    assert np.sum((fresh @ d1.T) ** 2) < 0.7 * np.sum((fresh @ d0.T) ** 2)
    assert comp.info["snr_db"] < plain.info["snr_db"]  # weight SNR is not what it minimises


def test_errors():
    w, x, _ = _layer(rows=8, cols=16)
    f = gptq.InverseHessian.from_hessian(x.T @ x)
    with pytest.raises(ValueError, match="input axis has 8"):
        gptq.quantize(w, _steps(w), gptq.InverseHessian(f.u, axis=0))
    for bad in (np.ones((3, 4)), np.full((2, 2), np.nan), np.zeros((0, 0)), np.ones(3)):
        with pytest.raises(ValueError, match="square"):
            gptq.InverseHessian.from_hessian(bad)
    with pytest.raises(ValueError, match="axis"):
        gptq.InverseHessian.from_hessian(np.eye(2), axis=2)
    with pytest.raises(ValueError, match="damp"):
        gptq.InverseHessian.from_hessian(np.eye(2), damp=-1.0)
    w, x, _ = _layer(rows=32, cols=64)  # large enough for the int8-quant codec
    f = gptq.InverseHessian.from_hessian(x.T @ x)
    with pytest.raises(ValueError, match="qp"):
        encode_tensor(w, "F32", "lossy:snr=30", inverse_hessian=f)
    with pytest.raises(ValueError, match="qp"):
        encode_tensor(w, "F32", "int8", inverse_hessian=f)


@pytest.mark.parametrize("dtype", ["F32", "BF16"])
def test_decoded_values_without_coding(dtype):
    """quant.decoded_values: what the record decodes to, computed without coding it (the
    search's round-to-nearest reference), bit for bit; with or without compensation."""
    from wcodec.codecs.quant import decoded_values

    w, x, _ = _layer(rows=32, cols=64)
    arr = w if dtype == "F32" else f32_to_bf16(w)
    rw = np.linspace(1.0, 4.0, 32)
    f = gptq.InverseHessian.from_hessian(x.T @ x)
    for mode, opts in (("int8", {}), ("lossy:qp=38", {"row_weight": rw}),
                       ("lossy:qp=30", {"row_weight": rw, "inverse_hessian": f})):
        got = decoded_values(arr, dtype, **lossy.parse_mode(mode)[1], **opts)
        assert got.dtype == arr.dtype and np.array_equal(got, decode_tensor(encode_tensor(arr, dtype, mode, **opts)))
