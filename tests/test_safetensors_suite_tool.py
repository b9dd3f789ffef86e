"""tools/safetensors_suite.py: the name-only shim it writes maps safetensors' names onto wcodec's
(and keeps the real compiled core reachable for wcodec's own .safetensors reader), and its
failure causes are classified as documented."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
spec = importlib.util.spec_from_file_location("safetensors_suite", REPO / "tools" / "safetensors_suite.py")
suite = importlib.util.module_from_spec(spec)
spec.loader.exec_module(suite)


@pytest.mark.parametrize("kind, message, cause", [
    ("NotImplementedError", "shim: wcodec has no safetensors.serialize", "missing name"),
    ("AssertionError", "b'\\x89WCODEC\\n' != b'@\\x00'", "byte layout (out of scope)"),
    ("MemoryError", "MemoryError", "byte layout (out of scope)"),
    ("AssertionError", "RuntimeError not raised", "error class"),
    ("AssertionError", "'index -6 is out of bounds' != 'Invalid index -6'", "message text"),
    ("TypeError", "unexpected keyword argument 'backend'", "other: TypeError"),
])
def test_classify(kind, message, cause):
    assert suite.classify(kind, message) == cause


def test_shim_maps_names_only(tmp_path):
    pytest.importorskip("torch")
    suite.write_shim(tmp_path)
    code = (
        "import safetensors, safetensors.torch as st, safetensors.numpy as sn, wcodec, wcodec.torch, wcodec.numpy\n"
        "from safetensors.safetensors_rust import safe_open\n"
        "assert safe_open is wcodec.safe_open and safetensors.SafetensorError is wcodec.errors.WcodecError\n"
        "assert st.save_file is wcodec.torch.save_file and sn.load is wcodec.numpy.load\n"
        "assert st._is_complete is wcodec.torch._is_complete\n"
        "assert safetensors.serialize is wcodec.serialize and safetensors.TensorSpec is wcodec.TensorSpec\n"
        "try:\n    safetensors.deserialize(b'')\nexcept NotImplementedError as e:\n    assert 'wcodec has no' in str(e)\n"
        "else:\n    raise SystemExit('placeholder did not raise')\n"
        "from safetensors._safetensors_rust import safe_open as real\n"
        "assert real is not wcodec.safe_open\n")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), str(REPO / "src")])}
    proc = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
