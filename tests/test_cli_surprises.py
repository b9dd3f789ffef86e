"""The CLI without surprises (issue 29): outputs named as asked, commands that explain
themselves, no silent loss of a folder's files, the vectors index budget-aware."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from wcodec.cli import build_parser, main

SRC = str(Path(__file__).resolve().parents[1] / "src")


def _run(*args: str, **kw) -> subprocess.CompletedProcess:
    import os
    return subprocess.run([sys.executable, *args], capture_output=True, text=True, timeout=120,
                          env={**os.environ, "PYTHONPATH": SRC}, **kw)


@pytest.fixture
def enc(tmp_path):
    from safetensors.numpy import save_file
    save_file({"w": np.ones((64, 64), np.float32)}, tmp_path / "m.safetensors")
    assert main(["encode", "-q", str(tmp_path / "m.safetensors"), str(tmp_path / "m-wcodec") + "/"]) == 0
    return tmp_path / "m-wcodec"


def test_python_dash_m_wcodec_runs():
    r = _run("-m", "wcodec", "--version")
    assert r.returncode == 0 and r.stdout.startswith("wcodec ")


def test_decode_output_names(enc, tmp_path, capsys):
    assert main(["decode", "-q", str(enc), str(tmp_path / "out") + "/"]) == 0
    assert (tmp_path / "out").is_dir() and (tmp_path / "out" / "m.safetensors").is_file()
    assert main(["decode", "-q", str(enc / "model.wcodec"), str(tmp_path / "y.wcodec")]) == 1
    assert ".wcodec" in capsys.readouterr().err and not (tmp_path / "y.wcodec").exists()
    assert main(["decode", "-q", str(enc / "model.wcodec"), str(tmp_path / "plain")]) == 1
    assert not (tmp_path / "plain").exists()


def test_folder_to_one_file_does_not_drop_its_files(tmp_path, capsys):
    from safetensors.numpy import save_file
    (tmp_path / "model").mkdir()
    save_file({"w": np.ones((8, 8), np.float32)}, tmp_path / "model" / "model.safetensors")
    (tmp_path / "model" / "tokenizer.json").write_text("{}")
    assert main(["encode", "-q", str(tmp_path / "model"), str(tmp_path / "x.wcodec")]) == 1
    assert "would drop them" in capsys.readouterr().err
    assert not (tmp_path / "x.wcodec").exists()


def test_vectors_commands_explain_themselves(tmp_path, capsys):
    assert main(["vectors"]) == 2
    err = capsys.readouterr().err
    assert "vectors_command" not in err and "compress" in err and "bench" in err
    with pytest.raises(SystemExit):
        build_parser().parse_args(["vectors", "bench", "--help"])
    out = capsys.readouterr().out
    assert "wcodec vectors bench" in out and "test-cuda [" not in out


def test_vectors_compress_refuses_to_overwrite(tmp_path, capsys):
    np.save(tmp_path / "v.npy", np.zeros((10, 4), np.float32))
    (tmp_path / "v.wcodec").write_bytes(b"precious")
    assert main(["vectors", "compress", "-q", str(tmp_path / "v.npy"), str(tmp_path / "v.wcodec")]) == 1
    assert "--force" in capsys.readouterr().err and (tmp_path / "v.wcodec").read_bytes() == b"precious"


def test_anchor_count_follows_the_budget():
    from wcodec.vectors.cli import anchors_for_budget
    assert anchors_for_budget(70_000, 384, 20.4) == 256  # issue 29: m=256 beat 1024 at ~20.4 B
    assert anchors_for_budget(70_000, 384, None) == 1024
    assert anchors_for_budget(10_000_000, 128, 64) == 1024 and anchors_for_budget(100, 384, 8) == 16
    m = anchors_for_budget(50_000, 256, 32)
    assert m * 256 * 2 <= 0.25 * 32 * 50_000 < 2 * m * 256 * 2


def test_demo_seed_is_described_with_temperature():
    help_text = build_parser()._subparsers._group_actions[0].choices["demo"].format_help()
    assert "--temperature" in help_text and "greedy" in help_text


def test_hf_model_without_torch_names_the_extra():
    r = _run("-c", "import sys; sys.modules['torch'] = None\n"
                   "from wcodec.errors import MissingDependencyError\n"
                   "try:\n    from wcodec.hf import WCodecModel\n"
                   "except MissingDependencyError as e:\n    print('OK', e)\n")
    assert r.stdout.startswith("OK") and "wcodec[torch]" in r.stdout, r.stdout + r.stderr
