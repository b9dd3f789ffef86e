"""safetensors parity (issue 29): canonical save() bytes, safetensors' error classes (still
WcodecErrors) and messages where its tests read them, its shared-tensor helpers by name."""

from __future__ import annotations

import numpy as np
import pytest

import wcodec
from wcodec.errors import NotFoundError, WcodecError

torch = pytest.importorskip("torch")
import wcodec.torch as wt  # noqa: E402


def test_save_bytes_do_not_depend_on_dict_order():
    a, b = np.zeros((2, 2), np.int32), np.ones(3, np.float16)
    assert wcodec.save({"x": a, "y": b}) == wcodec.save({"y": b, "x": a})
    assert wcodec.save({"x": a}, {"k": "1", "j": "2"}) == wcodec.save({"x": a}, {"j": "2", "k": "1"})


def test_error_classes_as_safetensors_raises_them(tmp_path):
    with pytest.raises(NotImplementedError, match="Cannot copy out of meta tensor") as e:
        wt.save_file({"m": torch.zeros(3, device="meta")}, tmp_path / "m.wcodec")
    assert isinstance(e.value, RuntimeError) and isinstance(e.value, WcodecError)
    with pytest.raises(ValueError, match="Key `t` is invalid, expected torch.Tensor"):
        wt.save_file({"t": {"some": "thing"}}, tmp_path / "b.wcodec")
    with pytest.raises(ValueError, match=r"Expected a dict of \[str, torch.Tensor\]"):
        wt.save_file("notadict", tmp_path / "b.wcodec")
    with pytest.raises(ValueError, match=r"sparse tensors: `\['s'\]`"):
        wt.save({"s": torch.sparse_coo_tensor(size=(2, 3))})
    with pytest.raises(NotFoundError, match='^No such file or directory: nope$'):
        wcodec.safe_open("nope", framework="pt")
    assert not list(tmp_path.iterdir())


def test_slice_index_errors_are_index_errors(tmp_path):
    wt.save_file({"t": torch.arange(24, dtype=torch.float32).reshape(2, 3, 4)}, tmp_path / "s.wcodec")
    with wcodec.safe_open(tmp_path / "s.wcodec", framework="pt") as f:
        s = f.get_slice("t")
        # safetensors 0.8.0's words: a negative int, a positive one (with the index and shape shown)
        for index, msg in ((5, r"^Error during slicing \[5\] with shape \[2, 3, 4\]: index 5 out of bounds for "
                               r"tensor dimension #0 of size 2$"),
                           ((slice(1, None), -4), r"^Invalid index -4 for dimension 1 of size 3$"),
                           ((..., 2, 9), r"^Error during slicing \[:, 2, 9\] with shape \[2, 3, 4\]: index 9 out of "
                                         r"bounds for tensor dimension #2 of size 4$"),
                           ((-1, slice(None, 2, 2), 4), r"^Error during slicing \[1, :2:2, 4\] with shape"),
                           ((0, 0, 0, 0), "too many indices")):
            with pytest.raises(IndexError, match=msg) as e:
                s[index]
            assert isinstance(e.value, WcodecError)
        assert s[..., 1].shape == (2, 3) and s[None].shape == (1, 2, 3, 4) and s[1:5].shape == (1, 3, 4)


def test_shared_tensor_helpers_under_safetensors_names():
    from wcodec.torch import _end_ptr, _find_shared_tensors, _remove_duplicate_names, storage_ptr, storage_size
    A = torch.zeros((4,))
    assert _find_shared_tensors({"B": A[:2], "C": A[2:], "D": A[:1]}) == [{"B", "D"}, {"C"}]
    v = torch.zeros(16)[::4]
    assert _end_ptr(v) - v.data_ptr() == 16 * 3 + 4
    B = torch.zeros((3, 3))
    assert _remove_duplicate_names({"A": B, "B": B[:1], "C": B}) == {"A": ["B", "C"]}
    assert _remove_duplicate_names({"A": B, "C": B}, preferred_names=["C"]) == {"C": ["A"]}
    with pytest.raises(RuntimeError):
        _remove_duplicate_names({"B": B[:1]})
    m = torch.randn(10)
    n = torch.empty([], dtype=m.dtype)
    n.set_(source=m.untyped_storage()[:16])
    assert storage_ptr(n) == storage_ptr(m) and (storage_size(n), storage_size(m)) == (16, 40)
    assert _find_shared_tensors({"m": m, "n": n}) == [{"m"}, {"n"}]
    assert _find_shared_tensors({"c": torch.zeros(2, device="meta")}) == []
