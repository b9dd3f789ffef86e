"""The CLI as a new user meets it: refusals before work, --force, explicit output kind, one
clean line per error, quiet on a closed pipe, the vectors warnings."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from wcodec.cli import error_line, main

SRC = str(Path(__file__).resolve().parents[1] / "src")


@pytest.fixture
def st_file(tmp_path):
    from safetensors.numpy import save_file
    save_file({"w": np.ones((64, 64), np.float32)}, tmp_path / "m.safetensors")
    return tmp_path / "m.safetensors"


def _err(capsys) -> list[str]:
    lines = capsys.readouterr().err.strip().splitlines()
    assert lines and all(line.startswith("wcodec: error: ") and ".tmp" not in line for line in lines), lines
    return lines


def test_refusals_happen_before_any_work_and_force_overwrites(st_file, tmp_path, capsys):
    out = tmp_path / "m.wcodec"
    assert main(["encode", "-q", str(st_file), str(out)]) == 0
    stamp = out.stat().st_mtime_ns
    assert main(["encode", "-q", str(st_file), str(out)]) == 1
    assert "exists; use --force" in _err(capsys)[0] and out.stat().st_mtime_ns == stamp
    assert main(["encode", "-q", "--force", str(st_file), str(out)]) == 0
    assert main(["encode", "-q", str(st_file), str(st_file)]) == 1
    assert "is the input" in _err(capsys)[0] and st_file.stat().st_size > 8
    assert main(["encode", "-q", str(tmp_path / "nope"), str(tmp_path / "n.wcodec")]) == 1
    line = _err(capsys)[0]
    assert "input" in line and "does not exist" in line
    assert main(["encode", "-q", str(st_file), str(tmp_path / "no" / "x.wcodec")]) == 1
    assert "output folder" in _err(capsys)[0]
    (tmp_path / "d").mkdir()
    assert main(["decode", "-q", str(out), str(tmp_path / "d")]) == 0  # an existing folder: decode into it
    assert [p.name for p in (tmp_path / "d").iterdir()] == ["m.safetensors"]  # the source's own name
    assert main(["decode", "-q", str(out), str(tmp_path / "d")]) == 1
    assert "use --force" in _err(capsys)[0]
    assert main(["decode", "-q", str(out), str(st_file)]) == 1
    assert "use --force" in _err(capsys)[0]
    assert main(["decode", "-q", "--force", str(out), str(tmp_path / "back.safetensors")]) == 0
    assert not [p for p in tmp_path.iterdir() if p.name.endswith(".tmp")]


def test_output_kind_is_explicit(st_file, tmp_path, capsys):
    assert main(["encode", "-q", str(st_file), str(tmp_path / "out.wc")]) == 1
    assert "--to folder" in _err(capsys)[0] and not (tmp_path / "out.wc").exists()
    assert main(["encode", "-q", "--to", "file", str(st_file), str(tmp_path / "out.wc")]) == 1
    assert "must end in .wcodec" in _err(capsys)[0]
    assert main(["encode", "-q", "--to", "folder", str(st_file), str(tmp_path / "f.wcodec")]) == 1
    assert "must not end in .wcodec" in _err(capsys)[0] and not (tmp_path / "f.wcodec").exists()
    assert main(["encode", "-q", "--to", "folder", str(st_file), str(tmp_path / "out.wc")]) == 0
    assert "to folder" in capsys.readouterr().out and (tmp_path / "out.wc" / "model.wcodec").is_file()
    assert main(["encode", "-q", str(st_file), str(tmp_path / "slash") + "/"]) == 0
    assert (tmp_path / "slash" / "model.wcodec").is_file()
    assert main(["encode", "-q", "--to", "folder", str(st_file), str(tmp_path / "out.wc")]) == 1
    assert "already holds a checkpoint" in _err(capsys)[0]


def test_non_checkpoint_inputs_are_named(tmp_path, capsys):
    (tmp_path / "junk.bin").write_bytes(os.urandom(3000).replace(b"PK", b"xx").replace(b"\x80\x02", b"xx"))
    assert main(["encode", "-q", str(tmp_path / "junk.bin"), str(tmp_path / "o.wcodec")]) == 1
    assert "is not a torch checkpoint" in _err(capsys)[0]
    (tmp_path / "bad.wcodec").write_bytes(b"x" * 100)
    assert main(["info", str(tmp_path / "bad.wcodec")]) == 1
    assert len(_err(capsys)) == 1


def test_error_line_hides_temp_names_errno_and_names_extras():
    e = FileNotFoundError(2, "No such file or directory", "/x/.out.wcodec.fcfd4e55af77.tmp")
    assert error_line(e) == "wcodec: error: No such file or directory: '/x/out.wcodec'"
    e = IsADirectoryError(21, "Is a directory", ".d.tmp")
    assert error_line(e) == "wcodec: error: Is a directory: 'd'"
    assert error_line(ModuleNotFoundError("No module named 'torch'", name="torch")) == \
        "wcodec: error: this needs torch, which is not installed: pip install 'wcodec[torch]'"
    assert "wcodec[gpu]" in error_line(ModuleNotFoundError("x", name="triton"))
    assert error_line(ValueError("first line\nsecond line")) == "wcodec: error: first line"
    e = ValueError("x.bin: cannot load as a weights-only torch state dict: Weights only load failed. In PyTorch "
                   "2.6, ... Re-running `torch.load` with `weights_only` set to `False` will likely succeed")
    assert "weights_only` set to `False" not in error_line(e) and "not a plain state dict" in error_line(e)


def test_closed_pipe_is_quiet(tmp_path):
    import wcodec
    wcodec.numpy.save_file({f"t{i:05d}": np.zeros(2, np.float32) for i in range(3000)}, tmp_path / "many.wcodec")
    env = {**os.environ, "PYTHONPATH": SRC}
    p = subprocess.Popen([sys.executable, "-m", "wcodec.cli", "info", str(tmp_path / "many.wcodec")],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
    p.stdout.read(100)
    p.stdout.close()  # as `| head` does
    err = p.stderr.read().decode()
    assert p.wait() == 0 and err == "", err


def test_vectors_compress_warnings_and_bad_input(tmp_path, capsys):
    (tmp_path / "t.txt").write_text("hello\n")
    assert main(["vectors", "compress", str(tmp_path / "t.txt"), str(tmp_path / "v.wcodec")]) == 1
    err = capsys.readouterr().err
    assert "not a .npy file" in err and "pickle" not in err
    np.save(tmp_path / "p.npy", np.random.default_rng(0).random((200, 8)).astype(np.float32))
    assert main(["vectors", "compress", str(tmp_path / "p.npy"), str(tmp_path / "v.wcodec"), "--anchors", "4",
                 "--iterations", "3"]) == 0
    assert "warning: no --bytes-per-vector" in capsys.readouterr().err
