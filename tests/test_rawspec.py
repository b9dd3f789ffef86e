"""safetensors' low-level names: TensorSpec / serialize / serialize_file write raw buffers as
.wcodec, _safe_open_handle opens a file object (issue 29, safetensors 0.8.0's suite)."""

from __future__ import annotations

import io

import numpy as np
import pytest

import wcodec
from wcodec.errors import InvalidInputError, UnsupportedError, WcodecError


def spec(a: np.ndarray, name: str | None = None):
    return wcodec.TensorSpec(dtype=name or a.dtype.name, shape=a.shape, data_ptr=a.ctypes.data, data_len=a.nbytes)


def test_serialize_raw_buffers(tmp_path):
    a = np.arange(12, dtype=np.float32).reshape(3, 4)
    b = np.array([[True, False]])
    s = spec(a)
    assert (s.dtype, s.shape, s.data_len) == ("F32", [3, 4], 48) and "F32" in repr(s)
    data = wcodec.serialize({"a": s, "b": spec(b)}, {"k": "v"})
    back = wcodec.numpy.load(data)
    assert np.array_equal(back["a"], a) and np.array_equal(back["b"], b)
    wcodec.serialize_file({"a": s}, tmp_path / "x.wcodec")
    assert np.array_equal(wcodec.numpy.load_file(tmp_path / "x.wcodec")["a"], a)
    e = np.zeros((0, 3), np.int8)
    assert wcodec.numpy.load(wcodec.serialize({"e": spec(e)}))["e"].shape == (0, 3)


def test_serialize_bfloat16_through_torch():
    torch = pytest.importorskip("torch")
    t = torch.randn(4, 5).to(torch.bfloat16)
    bits = t.view(torch.int16).numpy()
    out = wcodec.load(wcodec.serialize({"t": spec(bits, "bfloat16")}))["t"]
    assert out.dtype == torch.bfloat16 and torch.equal(out, t)


def test_tensor_spec_and_serialize_errors():
    a = np.zeros(4, np.float32)
    with pytest.raises(WcodecError, match="Unknown dtype 'nonsense'"):
        wcodec.TensorSpec(dtype="nonsense", shape=[1], data_ptr=0, data_len=0)
    with pytest.raises(UnsupportedError, match="float8_e4m3fn"):
        wcodec.TensorSpec(dtype="float8_e4m3fn", shape=[1], data_ptr=a.ctypes.data, data_len=1)
    with pytest.raises(InvalidInputError, match="data_len 15 does not match"):
        wcodec.TensorSpec(dtype="float32", shape=[4], data_ptr=a.ctypes.data, data_len=15)
    with pytest.raises(InvalidInputError, match="negative dim"):
        wcodec.TensorSpec(dtype="float32", shape=[-1], data_ptr=a.ctypes.data, data_len=0)
    with pytest.raises(InvalidInputError, match="null"):
        wcodec.TensorSpec(dtype="float32", shape=[4], data_ptr=0, data_len=16)
    with pytest.raises(TypeError, match="TensorSpec"):  # raw dicts: refused as safetensors 0.8.0 does
        wcodec.serialize({"t": {"dtype": "float32", "shape": [1], "data_ptr": 0, "data_len": 0}})


def test_safe_open_handle_reads_file_objects(tmp_path):
    a = {"a": np.arange(6, dtype=np.float64).reshape(2, 3), "b": np.ones((2, 3), np.uint8)}
    path = tmp_path / "m.wcodec"
    wcodec.numpy.save_file(a, path)
    with open(path, "r") as f:  # text mode, as safetensors' own test opens it
        with wcodec._safe_open_handle(f, framework="np") as g:
            assert g.keys() == ["a", "b"] and np.array_equal(g.get_tensor("a"), a["a"])
    with open(path, "rb") as f:
        f.read(3)
        with wcodec._safe_open_handle(f, framework="np") as g:
            assert np.array_equal(g.get_tensor("b"), a["b"])
        assert f.tell() == 3  # the caller's position is kept
    with wcodec._safe_open_handle(io.BytesIO(path.read_bytes()), framework="np") as g:
        assert np.array_equal(g.get_slice("b")[1:], a["b"][1:])
    with pytest.raises(InvalidInputError, match="readable, seekable"):
        wcodec._safe_open_handle(object(), framework="np")
    with pytest.raises(InvalidInputError, match="not bytes"):
        wcodec._safe_open_handle(io.StringIO("abc"), framework="np")
