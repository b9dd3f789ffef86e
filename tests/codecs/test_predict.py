"""int8 intra prediction: the C extension (csrc/predict.c), the numba kernels and the numpy
specification (codecs._predict_reference) give the same bits, on odd shapes and tiles, signed
and unsigned, on one thread and on the extension's threads."""

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st
from hypothesis.extra.numpy import arrays

from wcodec import native
from wcodec.codecs import _predict as P

BACKENDS = ["reference", "numba"] + (["native"] if native.available() else [])
needs_ext = pytest.mark.skipif(not native.available(), reason="C extension wcodec._cext not built (or WCODEC_NATIVE=0)")


def _all_backends(fn, *args, size):
    """{backend: fn(*args, backend=b)} over every backend available here."""
    return {b: fn(*args, size=size, backend=b) for b in BACKENDS}


def _check(a: np.ndarray, signed: bool, th: int, tw: int, modes: np.ndarray, cost: np.ndarray, size: int):
    rows, cols = a.shape
    x = (a if signed else a.view(np.uint8)).astype(np.int16)
    res = _all_backends(P.residuals, x, th, tw, modes, size=size)
    costs = _all_backends(P.mode_costs, x, th, tw, cost, size=size)
    ref = res["reference"]
    for b in BACKENDS:
        assert np.array_equal(res[b], ref), f"{b} residuals differ from the reference"
        # the same float64 sums, not merely close: the same additions in the same order
        assert np.array_equal(costs[b].view(np.uint64), costs["reference"].view(np.uint64)), f"{b} mode costs differ"
        back = P.reconstruct(ref, rows, cols, th, tw, modes, signed, size=size, backend=b)
        assert back.dtype == np.uint8 and back.shape == (rows, cols)
        assert np.array_equal(back, a.view(np.uint8)), f"{b} reconstruct does not invert the residuals"
        dst = np.empty((rows, cols), np.uint8)
        assert P.reconstruct(ref, rows, cols, th, tw, modes, signed, size=size, backend=b, out=dst) is dst
        assert np.array_equal(dst, back)


@settings(max_examples=60, deadline=None)
@given(arrays(np.int8, st.tuples(st.integers(1, 37), st.integers(1, 37))), st.integers(1, 9), st.integers(1, 9),
       st.booleans(), st.integers(0, 2**32 - 1))
def test_backends_identical(a, th, tw, signed, seed):
    rng = np.random.default_rng(seed)
    n_tiles = P._n_tiles(*a.shape, th, tw)
    modes = rng.integers(0, P.N_MODES, n_tiles).astype(np.uint8)
    cost = rng.random(256) * 14  # bits per residual symbol
    _check(a, signed, th, tw, modes, cost, size=a.size)


@pytest.mark.parametrize("signed", [True, False])
@pytest.mark.parametrize("mode", range(5))
def test_each_mode_on_extreme_values(signed, mode):
    """Every tile in one mode, values at the int8/uint8 extremes (AVG's floor of negative sums,
    PLANAR's wrap-around), tiles wider than the tensor and 1-wide ones."""
    rng = np.random.default_rng(mode)
    a = rng.choice(np.array([-128, -127, -1, 0, 1, 126, 127], np.int8), (23, 29))
    for th, tw in ((1, 1), (4, 7), (23, 29), (64, 3)):
        modes = np.full(P._n_tiles(23, 29, th, tw), mode, np.uint8)
        _check(a, signed, th, tw, modes, np.linspace(0, 14, 256), size=a.size)


@needs_ext
@pytest.mark.parametrize("signed", [True, False])
def test_native_threads_match_one_thread(signed):
    """A tensor above PARALLEL_MIN runs its tiles on the extension's threads: same bits as one
    thread and as numba's serial kernels (compiled for small inputs only, to keep CI fast)."""
    rng = np.random.default_rng(1)
    smooth = np.add.outer(np.arange(600), np.arange(500)) // 7 + rng.integers(-3, 4, (600, 500))
    a = smooth.astype(np.int8)
    x = (a if signed else a.view(np.uint8)).astype(np.int16)
    modes = rng.integers(0, P.N_MODES, P._n_tiles(600, 500, 32, 16)).astype(np.uint8)
    big, small = x.size, 1
    assert big >= native.PARALLEL_MIN
    res = P.residuals(x, 32, 16, modes, size=big, backend="native")
    assert np.array_equal(res, P.residuals(x, 32, 16, modes, size=small, backend="native"))
    assert np.array_equal(res, P.residuals(x, 32, 16, modes, size=small, backend="numba"))
    cost = np.linspace(1, 9, 256)
    costs = P.mode_costs(x, 32, 16, cost, size=big, backend="native")
    assert np.array_equal(costs, P.mode_costs(x, 32, 16, cost, size=small, backend="numba"))
    back = P.reconstruct(res, 600, 500, 32, 16, modes, signed, size=big, backend="native")
    assert np.array_equal(back, a.view(np.uint8))
    mine = np.zeros((600, 500), np.uint8)  # decoded in place into the caller's buffer
    assert P.reconstruct(res, 600, 500, 32, 16, modes, signed, size=big, backend="native", out=mine) is mine
    assert np.array_equal(mine, back)


@needs_ext
def test_native_rejects_bad_arguments():
    x = np.zeros((4, 4), np.int16)
    with pytest.raises(ValueError, match="unknown mode"):
        P.residuals(x, 2, 2, np.array([0, 1, 5, 0], np.uint8), size=16, backend="native")
    with pytest.raises(ValueError, match="unknown mode"):
        P.reconstruct(np.zeros(16, np.uint8), 4, 4, 2, 2, np.array([9, 0, 0, 0], np.uint8), True, size=16,
                      backend="native")
    with pytest.raises(ValueError, match="modes"):  # one mode short
        P.residuals(x, 2, 2, np.zeros(3, np.uint8), size=16, backend="native")
    with pytest.raises(ValueError, match="res"):  # plane shorter than the tensor
        P.reconstruct(np.zeros(15, np.uint8), 4, 4, 2, 2, np.zeros(4, np.uint8), False, size=16, backend="native")
    with pytest.raises(ValueError, match="out"):  # a destination of another size
        P.reconstruct(np.zeros(16, np.uint8), 4, 4, 2, 2, np.zeros(4, np.uint8), False, size=16, backend="native",
                      out=np.zeros((4, 3), np.uint8))
    with pytest.raises(ValueError, match="tile size"):
        P.residuals(x, 0, 2, np.zeros(4, np.uint8), size=16, backend="native")


def test_empty_tensor():
    for b in BACKENDS:
        x = np.zeros((0, 5), np.int16)
        assert P.residuals(x, 4, 4, np.zeros(0, np.uint8), size=0, backend=b).size == 0
        assert P.mode_costs(x, 4, 4, np.ones(256), size=0, backend=b).shape == (0, 5)
        assert P.reconstruct(np.zeros(0, np.uint8), 0, 5, 4, 4, np.zeros(0, np.uint8), True, size=0,
                             backend=b).shape == (0, 5)
