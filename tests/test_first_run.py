"""A fresh install starts working at once (issue 15): with the C extension built, the first
``wcodec encode`` / ``verify`` / ``demo`` and ``load_file`` / ``safe_open`` of the default codecs
(float BF16/F32/F16, int8, int8-quant) compile nothing and do not even import numba; without it
(WCODEC_NATIVE=0) the numba compile is announced by one line, once."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from wcodec import native

SRC = Path(__file__).resolve().parents[1] / "src"

# Runs in a fresh interpreter with an empty numba cache; prints the modules that matter last.
FIRST_RUN = r"""
import sys, numpy as np
from pathlib import Path
from wcodec import native
assert native.available(), "this interpreter does not find wcodec._cext"
from wcodec.cli import main
from wcodec.numpy import load_file, save_file
from wcodec.safeopen import safe_open

d = Path(sys.argv[1])
rng = np.random.default_rng(0)
t = {"bf16": rng.integers(0, 1 << 16, (300, 70)).astype(np.uint16),
     "f32": rng.standard_normal((120, 90)).astype(np.float32),
     "f16": rng.standard_normal((64, 50)).astype(np.float16),
     "i8": np.add.outer(np.arange(90), np.arange(80)).astype(np.int8),
     "u8": rng.integers(0, 256, (40, 33)).astype(np.uint8)}
save_file({k: v for k, v in t.items() if k != "bf16"}, str(d / "a.wcodec"))
save_file({"f32": t["f32"]}, str(d / "q.wcodec"), mode="int8")
src = d / "m.safetensors"
import safetensors.numpy
safetensors.numpy.save_file({k: v for k, v in t.items() if k != "bf16"}, str(src))
for args in (["encode", str(src), str(d / "m.wcodec"), "-q"],
             ["encode", str(src), str(d / "m8.wcodec"), "--mode", "int8", "-q"],
             ["verify", str(d / "m.wcodec")], ["verify", str(d / "m8.wcodec")]):
    assert main(args) == 0, args
back = load_file(str(d / "a.wcodec"))
assert all(np.array_equal(back[k], t[k]) for k in back)
with safe_open(str(d / "q.wcodec"), framework="np") as f:
    assert f.get_tensor("f32").shape == (120, 90)
from wcodec.demo import run
assert run.run_demo(steps=3, out=lambda *a: None)["lossless_identical"]
print("numba imported:", "numba" in sys.modules)
"""


def _run(code: str, tmp_path: Path, **env) -> subprocess.CompletedProcess:
    environ = {**os.environ, "PYTHONPATH": f"{SRC}{os.pathsep}{os.environ.get('PYTHONPATH', '')}",
               "NUMBA_CACHE_DIR": str(tmp_path / "numba-cache"), **env}
    return subprocess.run([sys.executable, "-c", code, str(tmp_path)], capture_output=True, text=True,
                          env=environ, timeout=600)


@pytest.mark.skipif(not native.available(), reason="C extension wcodec._cext not built (or WCODEC_NATIVE=0)")
def test_first_run_compiles_nothing(tmp_path):
    r = _run(FIRST_RUN, tmp_path)
    assert r.returncode == 0, r.stderr[-3000:]
    assert "compiling numba" not in r.stderr, r.stderr[-3000:]
    assert r.stdout.strip().splitlines()[-1] == "numba imported: False"
    assert not (tmp_path / "numba-cache").exists() or not any((tmp_path / "numba-cache").rglob("*.nbi"))


def test_numba_compile_is_announced_once(tmp_path):
    """The numba path says that it compiles, on one line, once (a tiny kernel: compiling the
    codec's own would cost seconds of every CI run; tests/codecs/test_predict.py runs those)."""
    (tmp_path / "tiny_kernel.py").write_text(
        "from wcodec.native._numba import kernel\n\n@kernel\ndef add_one(x):\n    return x + 1\n")
    code = r"""
import sys
sys.path.insert(0, sys.argv[1])
from tiny_kernel import add_one
assert add_one(1, size=1) == 2 and add_one(2, size=1) == 3
"""
    r = _run(code, tmp_path, WCODEC_NATIVE="0")
    assert r.returncode == 0, r.stderr[-3000:]
    assert r.stderr.count("compiling numba kernels") == 1, r.stderr
    assert "WCODEC_NATIVE=0" in r.stderr
    r = _run(code, tmp_path, WCODEC_NATIVE="0")  # the on-disk cache now holds it: silent
    assert r.returncode == 0 and "compiling" not in r.stderr, r.stderr[-3000:]


def test_extension_loads_once_under_concurrent_first_calls(tmp_path):
    """Pool threads asking ``native.ext()`` at once all get the extension (a race once sent some
    of encode's threads to numba, compiling on a first run)."""
    if not native.available():
        pytest.skip("C extension wcodec._cext not built (or WCODEC_NATIVE=0)")
    code = r"""
import threading
from wcodec import native
barrier, got = threading.Barrier(8), []
def ask():
    barrier.wait()
    got.append(native.ext())
threads = [threading.Thread(target=ask) for _ in range(8)]
for t in threads: t.start()
for t in threads: t.join()
assert len(got) == 8 and all(g is not None for g in got), got
"""
    r = _run(code, tmp_path)
    assert r.returncode == 0, r.stderr[-3000:]
