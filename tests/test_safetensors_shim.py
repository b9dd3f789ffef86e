"""A representative subset of safetensors' own Python tests (bindings/python/tests: test_pt.py,
test_simple.py, test_pt_model.py, safetensors 0.8), run against wcodec through a shim that only
maps names (safetensors.torch -> wcodec.torch, safetensors.numpy -> wcodec.numpy, safe_open ->
wcodec.safe_open). Where wcodec deliberately accepts more (non-contiguous, big-endian and shared
tensors are stored instead of refused), the test states the difference and checks the round
trip instead."""

from __future__ import annotations

import copy

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import wcodec  # noqa: E402
import wcodec.numpy as st_np  # noqa: E402
import wcodec.torch as st_pt  # noqa: E402
from wcodec import safe_open  # noqa: E402
from wcodec.torch.st import _is_complete, shared_names  # noqa: E402

MMAP_DATA = {"test": torch.zeros((2, 2), dtype=torch.bfloat16), "test2": torch.zeros((2, 2), dtype=torch.float16),
             "test3": torch.zeros((2, 2), dtype=torch.bool)}


def _verify(reloaded):
    assert isinstance(reloaded, dict)
    assert all(torch.equal(MMAP_DATA[k], reloaded[k]) for k in MMAP_DATA)


# -- test_pt.py -----------------------------------------------------------------------------------
def test_odd_dtype_and_load(tmp_path):
    st_pt.save_file(MMAP_DATA, tmp_path / "a.wcodec")
    _verify(st_pt.load_file(tmp_path / "a.wcodec"))
    _verify(st_pt.load(st_pt.save(MMAP_DATA)))


@pytest.mark.filterwarnings("ignore::UserWarning")  # torch: sparse invariant checks
def test_sparse(tmp_path):
    with pytest.raises(ValueError):
        st_pt.save_file({"test": torch.sparse_coo_tensor(size=(2, 3))}, tmp_path / "s.wcodec")


def test_deserialization_slice(tmp_path):
    tensor = torch.arange(6, dtype=torch.float32).reshape((1, 2, 3))
    st_pt.save_file({"test": tensor}, tmp_path / "s.wcodec")
    with safe_open(tmp_path / "s.wcodec", framework="pt") as f:
        out = f.get_slice("test")[:, :, 1:2]
    assert out.numpy().tobytes() == b"\x00\x00\x80?\x00\x00\x80@"
    assert torch.equal(out, torch.Tensor([[[1.0], [4.0]]])) and torch.equal(out, tensor[:, :, 1:2])


def test_deserialization_metadata(tmp_path):
    tensor = torch.arange(6, dtype=torch.float32).reshape((1, 2, 3))
    st_pt.save_file({"test": tensor}, tmp_path / "a.wcodec")
    with safe_open(tmp_path / "a.wcodec", framework="pt") as f:
        assert f.metadata() is None
    st_pt.save_file({"test": tensor}, tmp_path / "b.wcodec", metadata={"Something": "more"})
    with safe_open(tmp_path / "b.wcodec", framework="pt") as f:
        assert f.metadata() == {"Something": "more"}


def test_non_contiguous_is_stored_not_refused(tmp_path):
    # difference: safetensors raises ValueError; wcodec copies the view (the caller's tensor is untouched)
    x = torch.arange(6, dtype=torch.float32).reshape((1, 2, 3))[:, :, 1]
    assert not x.is_contiguous()
    st_pt.save_file({"test": x}, tmp_path / "n.wcodec")
    assert torch.equal(st_pt.load_file(tmp_path / "n.wcodec")["test"], x)


# -- test_simple.py -------------------------------------------------------------------------------
def test_deserialization_numpy():
    out = st_np.load(st_np.save({"test": np.zeros((2, 2), dtype=np.int32)}))
    assert list(out.keys()) == ["test"]
    np.testing.assert_array_equal(out["test"], np.zeros((2, 2), dtype=np.int32))


def test_big_endian_is_stored_little_endian():
    # difference: safetensors raises ValueError; wcodec stores the values little-endian
    data = np.arange(4, dtype=">u4").reshape(2, 2)
    out = st_np.load(st_np.save({"test1": data}))["test1"]
    assert out.dtype == np.uint32 and np.array_equal(out, data)


def test_accept_path(tmp_path):
    tensors = {"a": torch.zeros((2, 2)), "b": torch.zeros((2, 3), dtype=torch.uint8)}
    st_pt.save_file(tensors, tmp_path / "out.wcodec")
    st_pt.load_file(tmp_path / "out.wcodec")
    st_pt.save_file(tensors, str(tmp_path / "out2.wcodec"))
    st_pt.load_file(str(tmp_path / "out2.wcodec"))


def test_get_correctly_dropped(tmp_path):
    st_pt.save_file({"a": torch.zeros((2, 2))}, tmp_path / "out.wcodec")
    with safe_open(tmp_path / "out.wcodec", framework="pt") as f:
        pass
    assert f.closed
    (tmp_path / "out.wcodec").write_text("something")


def test_numpy_and_torch_examples(tmp_path):
    tensors = {"a": np.zeros((2, 2)), "b": np.zeros((2, 3), dtype=np.uint8)}
    st_np.save_file(tensors, tmp_path / "out.wcodec")
    for loaded in (st_np.load_file(tmp_path / "out.wcodec"), st_np.load(st_np.save(tensors))):
        assert loaded.keys() == tensors.keys() and all(np.allclose(tensors[k], loaded[k]) for k in tensors)
    pt = {"a": torch.zeros((2, 2)), "b": torch.zeros((2, 3), dtype=torch.uint8)}
    st_pt.save_file(pt, tmp_path / "pt.wcodec")
    loaded = st_pt.load_file(tmp_path / "pt.wcodec")
    assert loaded.keys() == pt.keys() and all(torch.allclose(pt[k], loaded[k]) for k in pt)


# -- test_pt_model.py -----------------------------------------------------------------------------
class OnesModel(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.a = torch.nn.Linear(4, 4)
        self.a.weight = torch.nn.Parameter(torch.ones((4, 4)))
        self.a.bias = torch.nn.Parameter(torch.ones((4,)))
        self.b = self.a


class Model(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.a = torch.nn.Linear(100, 100)
        self.b = self.a


class NonContiguousModel(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.a = torch.nn.Linear(100, 100)
        self.a.weight = torch.nn.Parameter(torch.zeros((100, 100)).transpose(0, 1))


class CopyModel(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.a = torch.nn.Linear(100, 100)
        self.b = copy.deepcopy(self.a)


class NoSharedModel(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.a = torch.nn.Linear(100, 100)
        self.b = torch.nn.Linear(100, 100)


def _same_state(m1, m2):
    sd = m1.state_dict()
    for k, v in m2.state_dict().items():
        torch.testing.assert_close(v, sd[k])


def test_is_complete_and_remove_duplicate_names():
    A = torch.zeros((3, 3))
    assert _is_complete(A) and not _is_complete(A[:1, :]) and not _is_complete(A[::2, :])
    B = A[:1, :]
    assert shared_names({"A": A, "B": B}) == {"A": ["B"]}
    assert shared_names({"A": A, "B": B, "C": A}) == {"A": ["B", "C"]}
    A = torch.zeros((4,))
    assert shared_names({"B": A[:2], "C": A[2:]}) == {}
    with pytest.raises(RuntimeError):
        shared_names({"B": A[:2], "C": A[1:]})


def test_save_ones_model(tmp_path):
    model = OnesModel()
    st_pt.save_model(model, tmp_path / "ones.wcodec")
    with safe_open(tmp_path / "ones.wcodec", framework="pt") as f:
        assert f.metadata() == {"b.bias": "a.bias", "b.weight": "a.weight"}
    model2 = OnesModel()
    st_pt.load_model(model2, tmp_path / "ones.wcodec")
    _same_state(model, model2)


def test_workaround_and_different_on_file_names(tmp_path):
    model = Model()
    st_pt.save_model(model, tmp_path / "t.wcodec")
    model2 = Model()
    st_pt.load_model(model2, tmp_path / "t.wcodec")
    _same_state(model, model2)
    sd = model.state_dict()
    sd.pop("a.weight")
    sd.pop("a.bias")
    st_pt.save_file(sd, tmp_path / "t2.wcodec")
    model3 = Model()
    st_pt.load_model(model3, tmp_path / "t2.wcodec")
    _same_state(model, model3)


def test_workaround_non_contiguous(tmp_path):
    model = NonContiguousModel()
    with pytest.raises(ValueError, match=r"use save_model\(\.\.\., force_contiguous=True\)"):
        st_pt.save_model(model, tmp_path / "c.wcodec", force_contiguous=False)
    st_pt.save_model(model, tmp_path / "c.wcodec", force_contiguous=True)
    model2 = NonContiguousModel()
    st_pt.load_model(model2, tmp_path / "c.wcodec")
    _same_state(model, model2)


def test_workaround_copy(tmp_path):
    model = CopyModel()
    assert shared_names(model.state_dict()) == {}
    st_pt.save_model(model, tmp_path / "t.wcodec")
    model2 = CopyModel()
    st_pt.load_model(model2, tmp_path / "t.wcodec")
    _same_state(model, model2)


def test_difference_with_torch(tmp_path):
    st_pt.save_model(Model(), tmp_path / "t.wcodec")
    with pytest.raises(RuntimeError) as e:
        st_pt.load_model(NoSharedModel(), tmp_path / "t.wcodec")
    assert 'Missing key(s) in state_dict: "b.bias", "b.weight"' in str(e.value)


def test_difference_torch_odd(tmp_path):
    st_pt.save_model(NoSharedModel(), tmp_path / "t.wcodec")
    with pytest.raises(RuntimeError) as e:
        st_pt.load_model(Model(), tmp_path / "t.wcodec")
    assert 'Unexpected key(s) in state_dict: "b.bias", "b.weight"' in str(e.value)


def test_shared_state_dict_is_stored_once_not_refused(tmp_path):
    # difference: safetensors' save_file raises RuntimeError on shared tensors; wcodec stores
    # the second name as an alias of the first, and load gives one tensor under both names
    sd = Model().state_dict()
    st_pt.save_file(sd, tmp_path / "t.wcodec")
    out = st_pt.load_file(tmp_path / "t.wcodec")
    assert out["a.weight"] is out["b.weight"] and torch.equal(out["a.weight"], sd["a.weight"])
    assert wcodec.safe_open(tmp_path / "t.wcodec").record("a.weight").nbytes > 0
