"""safe_open(...).get_strided_slice(name, dim, intervals) (safetensors' name and semantics) on
.wcodec and .safetensors files: the concatenation of the [a, b) pieces along dim, in the order
given, and InvalidInputError for a bad dim or interval."""

from __future__ import annotations

import numpy as np
import pytest

import wcodec
from wcodec.errors import InvalidInputError, TensorNotFoundError

W = np.arange(8 * 6 * 4, dtype=np.float32).reshape(8, 6, 4)


def reference(dim, intervals):
    return np.concatenate([W[(slice(None),) * dim + (slice(a, b),)] for a, b in intervals], axis=dim)


@pytest.fixture(params=["wcodec", "safetensors"])
def path(request, tmp_path):
    if request.param == "wcodec":
        p = tmp_path / "m.wcodec"
        wcodec.save_file({"w": W, "v": W[0, 0].copy()}, p)
    else:
        from safetensors.numpy import save_file
        p = tmp_path / "m.safetensors"
        save_file({"w": W, "v": W[0, 0].copy()}, str(p))
    return p


@pytest.mark.parametrize("dim, intervals", [(0, [(0, 2), (4, 6)]), (1, [(3, 5), (0, 1)]), (2, [(0, 4)]),
                                            (-1, [(1, 2), (0, 2)]), (0, [(0, 3), (1, 4)])])
def test_matches_concatenated_slices(path, dim, intervals):
    with wcodec.safe_open(path, framework="np") as f:
        got = f.get_strided_slice("w", dim=dim, intervals=intervals)
    assert np.array_equal(got, reference(dim % 3, intervals))


def test_torch(path):
    torch = pytest.importorskip("torch")
    with wcodec.safe_open(path, framework="pt") as f:
        got = f.get_strided_slice("w", 1, [(4, 6), (0, 2)])
    assert torch.equal(got, torch.from_numpy(reference(1, [(4, 6), (0, 2)])))


@pytest.mark.parametrize("dim, intervals, match", [
    (3, [(0, 1)], "dim 3 is out of range"), (0, [], "at least one interval"), (0, [(4, 2)], r"interval \(4, 2\)"),
    (0, [(3, 3)], r"interval \(3, 3\)"), (0, [(0, 100)], "0 <= a < b <= 8"), (1, [(0, 1, 2)], "must be"),
    (True, [(0, 1)], "out of range"),
])
def test_bad_arguments(path, dim, intervals, match):
    with wcodec.safe_open(path, framework="np") as f:
        with pytest.raises(InvalidInputError, match=match):
            f.get_strided_slice("w", dim, intervals)
        with pytest.raises(InvalidInputError, match="out of range for a tensor of 1"):
            f.get_strided_slice("v", 1, [(0, 1)])
        with pytest.raises(TensorNotFoundError):
            f.get_strided_slice("nope", 0, [(0, 1)])
