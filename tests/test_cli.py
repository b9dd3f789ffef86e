"""The wcodec command line: subcommands, exit codes, one-line errors."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

from wcodec.cli import build_parser, main


@pytest.fixture
def st_file(tmp_path):
    from safetensors.numpy import save_file

    rng = np.random.default_rng(0)
    tensors = {"w": rng.standard_normal((64, 48)).astype(np.float32),
               "q": rng.integers(-5, 5, (64, 64), dtype=np.int8), "b": np.zeros(3, np.float32)}
    save_file(tensors, tmp_path / "m.safetensors", metadata={"format": "np"})
    return tmp_path / "m.safetensors", tensors


def test_encode_info_verify_bench_decode(st_file, tmp_path, capsys):
    src, tensors = st_file
    assert main(["encode", str(src), str(tmp_path / "m.wcodec"), "-q", "--workers", "2"]) == 0
    assert main(["info", str(tmp_path / "m.wcodec")]) == 0
    out = capsys.readouterr().out
    assert "bits/w" in out and "float" in out and "int8" in out and "total: 3 tensors" in out
    assert any(m in out for m in ("NONE", "LEFT", "TOP", "AVG", "PLANAR"))
    assert main(["verify", "-q", str(tmp_path / "m.wcodec")]) == 0
    assert main(["bench", str(tmp_path / "m.wcodec"), "--repeat", "1"]) == 0
    assert "GB/s" in capsys.readouterr().out
    assert main(["decode", "-q", str(tmp_path / "m.wcodec"), str(tmp_path / "d.safetensors")]) == 0
    from safetensors.numpy import load_file
    dec = load_file(tmp_path / "d.safetensors")
    assert all(np.array_equal(dec[k], v) for k, v in tensors.items())


def test_int8_mode(st_file, tmp_path, capsys):
    assert main(["encode", str(st_file[0]), str(tmp_path / "q.wcodec"), "--mode", "int8", "-q"]) == 0
    assert main(["info", str(tmp_path / "q.wcodec")]) == 0
    assert "int8-quant" in capsys.readouterr().out


def test_errors_are_one_line(tmp_path, capsys):
    assert main(["info", str(tmp_path / "missing.wcodec")]) == 1
    (tmp_path / "bad.wcodec").write_bytes(b"not a wcodec file at all" * 4)
    assert main(["verify", str(tmp_path / "bad.wcodec")]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 2 and all(line.startswith("wcodec: error: ") for line in err)


def test_verify_reports_corruption(st_file, tmp_path, capsys):
    main(["encode", str(st_file[0]), str(tmp_path / "m.wcodec"), "-q"])
    data = bytearray((tmp_path / "m.wcodec").read_bytes())
    data[200] ^= 0xFF  # inside the first tensor's sections
    (tmp_path / "m.wcodec").write_bytes(bytes(data))
    assert main(["verify", "-q", str(tmp_path / "m.wcodec")]) == 1
    assert "FAIL tensor 'w'" in capsys.readouterr().err


def test_help_and_hooks(capsys):
    parser = build_parser()
    for cmd in ("encode", "decode", "info", "verify", "bench", "demo"):
        assert cmd in parser.format_help()
    with pytest.raises(SystemExit) as e:
        main(["encode", "--help"])
    assert e.value.code == 0 and "examples:" in capsys.readouterr().out
    args = parser.parse_args(["demo", "--steps", "5", "--seed", "1", "--prompt", "Once"])
    assert (args.steps, args.seed, args.prompt) == (5, 1, "Once")
    with pytest.raises(SystemExit) as e:
        main(["frobnicate"])
    assert e.value.code == 2


def test_console_script_runs():
    out = subprocess.run([sys.executable, "-m", "wcodec.cli", "--version"], capture_output=True, text=True)
    assert out.returncode == 0 and out.stdout.startswith("wcodec ")
