"""One API for both formats (issue 29): safe_open, load_file, load_model and ``wcodec info``
take .safetensors files too, with safetensors' keys order and backend argument."""

from __future__ import annotations

import numpy as np
import pytest

import wcodec
from wcodec.cli import main
from wcodec.errors import InvalidInputError, TensorNotFoundError, WcodecError

torch = pytest.importorskip("torch")
import wcodec.torch as wt  # noqa: E402


@pytest.fixture
def pair(tmp_path):
    """The same tensors as model.safetensors (safetensors' writer) and model.wcodec."""
    from safetensors.torch import save_file
    sd = {"z.weight": torch.randn(8, 4).to(torch.bfloat16), "a.bias": torch.arange(4, dtype=torch.float32)}
    save_file(sd, tmp_path / "model.safetensors", metadata={"k": "v"})
    wt.save_file(sd, tmp_path / "model.wcodec", metadata={"k": "v"})
    return sd, tmp_path / "model.safetensors", tmp_path / "model.wcodec"


def test_safe_open_reads_both_formats_alike(pair):
    sd, st, wc = pair
    for path in (st, wc):
        with wcodec.safe_open(path, framework="pt") as f:
            assert f.keys() == ["a.bias", "z.weight"] and f.metadata() == {"k": "v"}
            for n, t in sd.items():
                assert torch.equal(f.get_tensor(n), t) and f.get_tensor(n).dtype == t.dtype
            s = f.get_slice("z.weight")
            assert s.get_shape() == [8, 4] and s.get_dtype() == "BF16"
            assert torch.equal(s[2:5, 1:], sd["z.weight"][2:5, 1:])
            with pytest.raises(TensorNotFoundError):
                f.get_tensor("nope")
        with pytest.raises(WcodecError):
            f.keys()  # closed
        with wcodec.safe_open(path, framework="np") as f:  # BF16 as uint16 bits for both
            z = f.get_tensor("z.weight")
            assert z.dtype == np.uint16 and np.array_equal(z, sd["z.weight"].view(torch.int16).numpy().view(np.uint16))


def test_load_file_and_load_model_take_a_mixed_set(pair):
    sd, st, wc = pair
    for path in (st, wc, str(st)):
        out = wcodec.load_file(path)
        assert list(out) == sorted(sd) and all(torch.equal(out[k], v) for k, v in sd.items())
        assert all(np.array_equal(a, b) for a, b in zip(wcodec.load_file(path, framework="np").values(),
                                                        wcodec.load_file(wc, framework="np").values()))
    model = torch.nn.Linear(4, 8)
    wt.save_file({"weight": torch.ones(8, 4), "bias": torch.zeros(8)}, st.with_name("lin.wcodec"))
    from safetensors.torch import save_file
    save_file({"weight": torch.full((8, 4), 2.0), "bias": torch.ones(8)}, st.with_name("lin.safetensors"))
    for path, w in ((st.with_name("lin.wcodec"), 1.0), (st.with_name("lin.safetensors"), 2.0)):
        assert wt.load_model(model, path) == ([], [])
        assert torch.all(model.weight == w)


def test_backend_argument_as_safetensors(pair):
    _, st, wc = pair
    for path in (st, wc):
        for backend in ("mmap", "pread"):
            with wcodec.safe_open(path, framework="pt", backend=backend) as f:
                assert f.keys()
            assert wt.load_file(path, backend=backend).keys() == {"a.bias", "z.weight"}
        with pytest.raises(InvalidInputError, match="backend"):
            wcodec.safe_open(path, framework="pt", backend="gds")
        with pytest.raises(ValueError):
            wcodec.load_file(path, backend="nope")


def test_keys_sorted_offset_keys_in_file_order(tmp_path):
    from safetensors.numpy import save_file
    wcodec.save_file({"b": np.ones(3, np.float32), "a": np.zeros(300, np.float32)}, tmp_path / "x.wcodec")
    save_file({"b": np.ones(3, np.float32), "a": np.zeros(300, np.float32)}, tmp_path / "x.safetensors")
    for p in (tmp_path / "x.wcodec", tmp_path / "x.safetensors"):
        with wcodec.safe_open(p, framework="np") as f:
            assert f.keys() == ["a", "b"] and sorted(f.offset_keys()) == ["a", "b"]


def test_info_of_a_safetensors_file(pair, capsys):
    _, st, _ = pair
    assert main(["info", str(st)]) == 0
    out = capsys.readouterr().out
    assert "bad magic" not in out and "z.weight" in out and "BF16" in out and "8x4" in out and "k=v" in out
    assert "wcodec encode" in out
