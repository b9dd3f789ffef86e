"""Rate-controlled lossy mode (wcodec.codecs.lossy): mode strings, qp and target-SNR step choice,
dead-zone quantizer, decoding through the int8-quant layout, API and CLI plumbing."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from wcodec.codecs import decode_tensor, encode_tensor
from wcodec.codecs import lossy
from wcodec.codecs.quant import checked_scales, f32_to_bf16, to_f32


def _w(shape=(96, 200), seed=0, std=0.03):
    rng = np.random.default_rng(seed)
    w = rng.standard_normal(shape).astype(np.float32) * std
    w *= (1 + rng.random((shape[0], 1))).astype(np.float32)  # rows of different scales
    return w


def _snr(w, d):
    return lossy.snr_db(w.astype(np.float32), d.astype(np.float32))


def test_mode_strings():
    assert lossy.mode_string("lossy", qp=30) == "lossy:qp=30"
    assert lossy.mode_string("lossy", target_snr_db=32.5) == "lossy:snr=32.5"
    assert lossy.mode_string("int8") == "int8"
    assert lossy.parse_mode("lossy:qp=30") == ("lossy", {"qp": 30.0})
    assert lossy.parse_mode("lossy:snr=32.5") == ("lossy", {"target_snr_db": 32.5})
    assert lossy.parse_mode("lossless") == ("lossless", {})
    for bad in ({"mode": "lossy"}, {"mode": "lossy", "qp": 3, "target_snr_db": 30},
                {"mode": "lossy", "qp": 64}, {"mode": "lossy", "target_snr_db": float("nan")},
                {"mode": "int8", "qp": 3}):
        with pytest.raises(ValueError):
            lossy.mode_string(**bad)
    for bad in ("lossy:", "lossy:qp=x", "lossy:rate=3", "lossy:qp=99", "lossy:qp=30.0", "lossyx:qp=3"):
        with pytest.raises(ValueError):
            lossy.parse_mode(bad)


def test_dead_zone_quantizer():
    w = np.array([[0.0, 0.59, -0.61, 1.4, 1.6, -300.0]], np.float32)
    q = lossy.quantize(w, np.array([1.0], np.float32), rounding=0.4)
    assert q.tolist() == [[0, 0, -1, 1, 2, -127]]
    q = lossy.quantize(w, np.array([1.0], np.float32), rounding=0.5)
    assert q.tolist() == [[0, 1, -1, 1, 2, -127]]


def test_qp_trades_bits_for_snr():
    w = _w()
    recs = [encode_tensor(w, "F32", f"lossy:qp={qp}") for qp in (24, 30, 36, 42)]
    bits = [r.bits_per_weight for r in recs]
    snrs = [r.info["snr_db"] for r in recs]
    assert all(a > b for a, b in zip(bits, bits[1:])), bits
    assert all(a > b for a, b in zip(snrs, snrs[1:])), snrs
    # 6 qp = one halving of the step: about 6 dB and about 1 bit per weight each
    assert all(4.5 < a - b < 7.5 for a, b in zip(snrs, snrs[1:])), snrs
    assert all(0.6 < a - b < 1.4 for a, b in zip(bits[:2], bits[1:3])), bits
    for r in recs:  # the record's SNR is the decoded tensor's
        assert r.codec == "int8-quant"
        assert _snr(w, decode_tensor(r)) == pytest.approx(r.info["snr_db"], abs=1e-9)


@pytest.mark.parametrize("dtype", ["F32", "F16", "BF16"])
@pytest.mark.parametrize("target", [18.0, 27.5, 38.0])
def test_target_snr_met_at_the_coarsest_step(dtype, target):
    w = _w((64, 130), seed=int(target))
    arr = {"F32": w, "F16": w.astype(np.float16), "BF16": f32_to_bf16(w)}[dtype]
    before = arr.copy()
    rec = encode_tensor(arr, dtype, f"lossy:snr={target:g}")
    assert np.array_equal(arr, before)  # the caller's tensor is not modified
    got = _snr(to_f32(arr.reshape(-1), dtype), to_f32(decode_tensor(rec).reshape(-1), dtype))
    assert got >= target
    assert got < target + 0.3  # the bisection stops at the coarsest step that meets it
    assert rec.info["target_snr_db"] == target


def test_unreachable_target_gives_the_finest_setting():
    w = _w((16, 300))
    rec = encode_tensor(w, "F32", "lossy:snr=120", scale_grid=0)
    ref = encode_tensor(w, "F32", "int8")  # finest step = int8 absmax per row
    assert np.array_equal(rec.sections["scales"], ref.sections["scales"])
    assert rec.info["snr_db"] == pytest.approx(ref.info["snr_db"], abs=1.0)
    # on the step grid (the default): the floor rounded up to the grid, never below it
    s = checked_scales(encode_tensor(w, "F32", "lossy:snr=120"), 16)
    assert np.all(s >= ref.sections["scales"]) and np.all(s < ref.sections["scales"] * 2 ** (1 / lossy.SCALE_GRID))


def test_vectors_and_small_tensors():
    v = _w((1, 4096))[0]
    rec = encode_tensor(v, "F32", "lossy:qp=40")  # vectors are kept exact
    assert rec.codec == "float" and np.array_equal(decode_tensor(rec), v)
    assert encode_tensor(np.ones((5, 5), np.float32), "F32", "lossy:qp=40").codec == "raw"
    z = np.zeros((20, 30), np.float32)
    assert np.array_equal(decode_tensor(encode_tensor(z, "F32", "lossy:snr=30")), z)


@settings(max_examples=25, deadline=None)
@given(st.integers(8, 40), st.integers(33, 90), st.floats(0, 63), st.integers(0, 2**31))
def test_decode_is_steps_times_indices(rows, cols, qp, seed):
    w = _w((rows, cols), seed)
    w[0, :3] = [0.0, 5.0, -5.0]  # an outlier row: its step is floored at absmax / 127
    rec = encode_tensor(w, "F32", f"lossy:qp={qp:g}")
    d = decode_tensor(rec)
    s = checked_scales(rec, rows)
    q = np.rint(d / s[:, None])
    assert np.all(np.abs(q) <= 127)
    assert np.array_equal(d, (q.astype(np.float32) * s[:, None]).astype(np.float32))
    assert np.all(np.abs(d - w) <= s[:, None] * 0.5001)  # plain rounding: half a step at most


def test_save_file_and_cli(tmp_path, capsys):
    from safetensors.numpy import save_file as st_save

    from wcodec import save_file
    from wcodec.cli import main
    from wcodec.format import CheckpointReader

    w = {"a.weight": _w((64, 128)), "a.bias": _w((1, 64))[0]}
    p = tmp_path / "m.wcodec"
    save_file(w, p, mode="lossy", target_snr_db=25)
    with CheckpointReader(p) as r:
        info = r.record("a.weight").info
        assert info["target_snr_db"] == 25 and 25 <= info["snr_db"] < 25.5
    with pytest.raises(ValueError):
        save_file(w, tmp_path / "x.wcodec", mode="lossy")
    src = tmp_path / "m.safetensors"
    st_save(w, src)
    out = tmp_path / "c.wcodec"
    assert main(["encode", "-q", str(src), str(out), "--mode", "lossy", "--qp", "30"]) == 0
    assert main(["info", str(out)]) == 0
    text = capsys.readouterr().out
    assert "qp=30" in text and "snr_db=" in text
    assert main(["encode", "-q", str(src), str(tmp_path / "d.wcodec"), "--mode", "lossy"]) == 2


def test_allocate_snr():
    sens = {"a": 1e-3, "b": 1e-4, "c": 1e-3, "unused": 0.0}
    sizes = {"a": 1000, "b": 1000, "c": 4000, "unused": 1000}
    t = lossy.allocate_snr(sens, sizes, deficit=1e-3, at_db=24)
    assert t["a"] == pytest.approx(t["b"] + 10)  # 10x the sensitivity: 10 dB more
    assert t["a"] == pytest.approx(t["c"] + 10 * np.log10(4))  # 4x the weights: 6 dB less
    assert t["unused"] == 6.0  # clamped
    # predicted losses add up to the deficit (unclamped tensors), each proportional to its size
    loss = {k: sens[k] * 10 ** (-(t[k] - 24) / 10) for k in ("a", "b", "c")}
    assert loss["c"] == pytest.approx(4 * loss["a"])
    assert sum(loss.values()) == pytest.approx(1e-3 * 6000 / 7000)


def test_row_weights():
    g = lossy.row_gains(np.array([4.0, 1.0, 0.0, 16.0]))
    assert g[1] == pytest.approx(2 * g[0]) and g[0] == pytest.approx(2 * g[3])
    assert g.max() / g.min() == pytest.approx(lossy.MAX_GAIN_RATIO)  # weight 0: capped
    w = np.random.default_rng(3).standard_normal((64, 100)).astype(np.float32) * 0.02
    weight = np.ones(64)
    weight[:8] = 100.0  # rows used 100x more often
    rec = encode_tensor(w, "F32", "lossy:snr=25", row_weight=weight, scale_grid=0)  # exact steps
    s = rec.sections["scales"]
    assert s[:8].max() < s[8:].min() and s[8] == pytest.approx(10 * s[0], rel=1e-5)
    assert 25 <= rec.info["weighted_snr_db"] < 25.3 and rec.info["snr_db"] < 25
    plain = encode_tensor(w, "F32", "lossy:snr=25")
    assert rec.nbytes < plain.nbytes  # the same weighted quality for fewer bits
    d = decode_tensor(rec)
    assert np.abs(d - w)[:8].max() < np.abs(d - w)[8:].max()
    for bad in (np.ones(63), -weight, np.full(64, np.nan)):
        with pytest.raises(ValueError):
            encode_tensor(w, "F32", "lossy:snr=25", row_weight=bad)


@pytest.mark.parametrize("alpha", [0.5, 0.4])
def test_allocate_fisher_steps_follow_row_weights_across_tensors(alpha):
    rng = np.random.default_rng(9)
    ws = {"a": rng.standard_normal((32, 300)).astype(np.float32) * 0.05,
          "b": rng.standard_normal((16, 300)).astype(np.float32) * 0.01,
          "unused": rng.standard_normal((8, 300)).astype(np.float32)}
    f = {"a": np.linspace(1, 8, 32), "b": np.full(16, 2.0), "unused": np.zeros(8)}
    lam = 3e-4
    alloc = lossy.allocate_fisher(f, {k: float(np.sqrt(np.mean(w.astype(np.float64) ** 2))) for k, w in ws.items()},
                                  lam, alpha)
    assert alloc["unused"] == ("lossy:snr=6", None)
    med = float(np.median(np.concatenate([f["a"], f["b"]])))
    for k in ("a", "b"):
        mode, rw = alloc[k]
        s = encode_tensor(ws[k], "F32", mode, row_weight=rw, scale_grid=0).sections["scales"]
        want = np.sqrt(lam / med) * (f[k] / med) ** -alpha  # one multiplier for both tensors
        floor = np.abs(ws[k]).max(1) / 127
        assert np.allclose(s, np.maximum(want, floor), rtol=2e-3)
        assert np.any(want > floor)
    with pytest.raises(ValueError):
        lossy.allocate_fisher({"a": -f["a"]}, {"a": 1.0}, lam)
