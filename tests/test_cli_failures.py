"""No silent or wrong-class failure (issue 27): settings that cannot take are refused naming the
tensors, missing paths raise a WcodecError that is a FileNotFoundError, and a failed or
interrupted encode leaves nothing behind, stopping within 0.5 s of Ctrl-C."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

import wcodec
from wcodec.cli import main
from wcodec.errors import InvalidInputError, NotFoundError, UnsupportedError, WcodecError

SRC = str(Path(__file__).resolve().parents[1] / "src")


@pytest.fixture
def fp32_file(tmp_path):
    from safetensors.numpy import save_file
    r = np.random.default_rng(0)
    save_file({"a.weight": r.standard_normal((64, 128)).astype(np.float32),
               "b.weight": (r.standard_normal((64, 128)) ** 3).astype(np.float32),
               "b.bias": np.ones(128, np.float32)}, tmp_path / "m.safetensors")
    return tmp_path / "m.safetensors"


def test_unreachable_snr_target_is_refused_naming_tensors(fp32_file, tmp_path, capsys):
    out = tmp_path / "o.wcodec"
    for target in ("50", "200"):
        assert main(["encode", "-q", str(fp32_file), str(out), "--mode", "lossy", "--target-snr-db", target]) == 1
        err = capsys.readouterr().err
        assert "'a.weight'" in err and "'b.weight'" in err and "b.bias" not in err, err
        assert "out of reach" in err and not out.exists()
    assert main(["encode", "-q", str(fp32_file), str(out), "--mode", "lossy", "--target-snr-db", "25"]) == 0
    with wcodec.safe_open(out, framework="np") as f:
        for n in ("a.weight", "b.weight"):
            assert f.record(n).info["snr_db"] >= 25
    with pytest.raises(UnsupportedError, match="a.weight"):
        wcodec.save_file({"a.weight": np.random.default_rng(1).standard_normal((64, 64)).astype(np.float32)},
                         tmp_path / "p.wcodec", mode="lossy", target_snr_db=90)
    assert not (tmp_path / "p.wcodec").exists()


def test_codec_fixed_that_cannot_take_is_refused(fp32_file, tmp_path, capsys):
    out = tmp_path / "o.wcodec"
    assert main(["encode", "-q", str(fp32_file), str(out), "--codec", "fixed"]) == 1
    assert "F32" in capsys.readouterr().err and not out.exists()
    assert main(["encode", "-q", str(fp32_file), str(out), "--codec", "fixed", "--mode", "int8"]) == 2
    assert "--mode int8" in capsys.readouterr().err and not out.exists()
    with pytest.raises(InvalidInputError):
        wcodec.save_file({"w": np.ones((64, 64), np.float32)}, out, mode="int8", codec="fixed")


def test_lossy_settings_errors_use_the_callers_names(fp32_file, tmp_path, capsys):
    assert main(["encode", "-q", str(fp32_file), str(tmp_path / "o.wcodec"), "--mode", "lossy"]) == 2
    err = capsys.readouterr().err
    assert "--qp" in err and "--target-snr-db" in err and "target_snr_db" not in err
    from wcodec.hf import convert_folder
    folder = tmp_path / "f"
    folder.mkdir()
    os.replace(fp32_file, folder / "model.safetensors")
    with pytest.raises(InvalidInputError, match="qp=.*target_snr_db="):
        convert_folder(folder, tmp_path / "out", mode="lossy")
    assert not (tmp_path / "out").exists()
    convert_folder(folder, tmp_path / "out", mode="lossy", qp=40)
    assert wcodec.load_file(tmp_path / "out", framework="np").keys() == {"a.weight", "b.weight", "b.bias"}


def test_missing_paths_raise_a_wcodec_file_not_found(tmp_path):
    for call in (lambda: wcodec.load_file(tmp_path / "nope.wcodec"),
                 lambda: wcodec.safe_open(tmp_path / "nope.wcodec", framework="np"),
                 lambda: wcodec.load_file(tmp_path, framework="np")):  # a folder without a checkpoint
        with pytest.raises(NotFoundError) as e:
            call()
        assert isinstance(e.value, FileNotFoundError) and isinstance(e.value, WcodecError)
    with pytest.raises(FileNotFoundError) as e:
        wcodec.save_file({"w": np.ones(4, np.float32)}, tmp_path / "no" / "x.wcodec")
    assert isinstance(e.value, WcodecError) and ".tmp" not in str(e.value) and str(tmp_path / "no") in str(e.value)


def test_failed_folder_encode_leaves_no_folder(tmp_path, capsys):
    empty = tmp_path / "empty-model"
    empty.mkdir()
    (empty / "config.json").write_text("{}")
    assert main(["encode", "-q", str(empty), str(tmp_path / "out")]) == 1
    assert "no safetensors or torch weight files" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


def test_sigint_stops_a_folder_encode_within_half_a_second_leaving_nothing(tmp_path):
    from safetensors.numpy import save_file
    model = tmp_path / "model"
    model.mkdir()
    # six tensors: the encode runs ~1.5 s after the folder appears (one tensor took ~0.4 s, and the
    # interrupt 0.3 s in sometimes came after it had finished: exit 0, the folder committed)
    rng = np.random.default_rng(0)
    save_file({f"w{i}": rng.standard_normal((2048, 2048)).astype(np.float32) for i in range(6)},
              model / "model.safetensors")
    (model / "config.json").write_text("{}")
    out = tmp_path / "out"
    env = {**os.environ, "PYTHONPATH": SRC}
    p = subprocess.Popen([sys.executable, "-m", "wcodec", "encode", str(model), str(out), "--mode", "lossy",
                          "--target-snr-db", "30"], env=env, stderr=subprocess.PIPE, stdout=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 30
        while not out.exists() and time.monotonic() < deadline and p.poll() is None:
            time.sleep(0.02)  # the writer made the folder: the (seconds long) encode has started
        time.sleep(0.3)
        assert p.poll() is None, "the encode ended before it could be interrupted"
        t = time.monotonic()
        p.send_signal(signal.SIGINT)
        rc = p.wait(10)
        took = time.monotonic() - t
    finally:
        p.kill()
        p.wait()
    assert rc == 130 and b"interrupted" in p.stderr.read()
    assert took < 0.5, took
    assert not out.exists()
