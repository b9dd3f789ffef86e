"""``wcodec demo`` end to end: real .wcodec files, lossless story identical, int8 close."""

from __future__ import annotations

import argparse

import pytest

from wcodec.demo import run


def test_main_end_to_end(tmp_path, capsys):
    args = run.add_arguments(argparse.ArgumentParser()).parse_args(
        ["--steps", "12", "--prompt", "Once upon a time", "--out-dir", str(tmp_path)])
    assert (args.steps, args.seed, args.prompt, args.temperature) == (12, 0, "Once upon a time", 0.0)
    assert run.main(args) == 0
    text = capsys.readouterr().out
    assert "token-for-token IDENTICAL (12 of 12 tokens)" in text
    assert "weights bit-identical" in text and "SNR" in text
    assert text.count("Once upon a time") >= 3  # the prompt starts each of the three stories
    for mode in run.MODES:  # the demo went through real files
        assert (tmp_path / f"stories260K.{mode}.wcodec").stat().st_size > 0


def test_defaults_and_cli_namespace():
    # the CLI passes a Namespace with steps, seed, prompt only
    args = run.add_arguments(argparse.ArgumentParser()).parse_args([])
    assert (args.steps, args.seed, args.prompt, args.out_dir) == (200, 0, "", None)


def test_sampled_lossless_story_is_identical(capsys):
    s = run.run_demo(steps=16, seed=3, temperature=1.0)
    tokens = s["tokens"]
    assert s["lossless_identical"] and s["lossless_bit_identical"]
    assert tokens["lossless"] == tokens["original fp32"] and len(tokens["lossless"]) > 0
    assert s["int8_snr_db"] > 35.0  # per-channel int8 on these weights measures about 45 dB
    assert 0.0 <= s["int8_agreement"] <= 1.0
    assert s["file_bytes"]["int8"] < s["file_bytes"]["lossless"] < 260_032 * 4


def test_mismatch_exits_nonzero(monkeypatch):
    real = run.run_demo
    monkeypatch.setattr(run, "run_demo", lambda **kw: {**real(**kw), "lossless_identical": False})
    with pytest.raises(SystemExit) as e:
        run.main(argparse.Namespace(steps=2, seed=0, prompt=""))
    assert e.value.code == 1


def test_agreement_and_snr_helpers():
    import numpy as np

    assert run.agreement([1, 2, 3], [1, 2, 3]) == (3, 3, None)
    assert run.agreement([1, 2, 3], [1, 5, 3, 4]) == (2, 4, 1)
    assert run.agreement([1, 2], [1, 2, 3]) == (2, 3, 2)
    a = {"w": np.ones(100, np.float32)}
    assert run.snr_db(a, a) == (float("inf"), 0.0)
    snr, err = run.snr_db(a, {"w": np.full(100, 1.1, np.float32)})
    assert abs(snr - 20.0) < 1e-4 and abs(err - 0.1) < 1e-6
