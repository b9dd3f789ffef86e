"""decode_tensor(out=) and the entry points above it decode every codec straight into the
caller's buffer: a numpy array, a torch tensor's memory, an np.memmap. Bit-exact with a plain
decode; the result is a view of ``out``; peak allocations (tracemalloc, which numpy reports to)
stay below a full-size copy wherever the codec needs none; a bad ``out`` raises before writing.
"""

from __future__ import annotations

import tracemalloc

import numpy as np
import pytest

from wcodec import native
from wcodec.codecs import decode_tensor, encode_tensor
from wcodec.codecs.base import DTYPES
from wcodec.errors import InvalidInputError

ROWS, COLS = 512, 1024
_rng = np.random.default_rng(7)


def _weights(dtype: str, shape=(ROWS, COLS)) -> np.ndarray:
    x = (_rng.standard_normal(shape) * 0.02).astype(np.float32)
    if dtype == "BF16":
        return (x.view(np.uint32) >> 16).astype(np.uint16)
    return x.astype(np.float16 if dtype == "F16" else np.float32)


def _smooth_i8() -> np.ndarray:  # prediction pays: LEFT/PLANAR tiles, a residual plane
    return np.cumsum(_rng.integers(-2, 3, (ROWS, COLS)), axis=1).astype(np.int8)


def _cosine_basis() -> np.ndarray:
    n, k = np.mgrid[0:128, 0:256]
    return np.round(120 * np.cos(2 * np.pi * n * (k + 0.5) / 2048)).astype(np.int8).reshape(128, 1, 256)


# (case id, factory of (array, dtype, encode options), bound of the peak with out=, in bytes per
# weight beyond the output: None = no bound claimed)
CASES = {
    "float-BF16": (lambda: (_weights("BF16"), "BF16", {}), 0.2),
    "float-F16": (lambda: (_weights("F16"), "F16", {}), 0.2),
    "float-F32": (lambda: (_weights("F32"), "F32", {}), 0.2),
    # predicted int8 keeps its residual plane (1 byte/weight, tile-major) for the inverse prediction
    "int8-predicted": (lambda: (_smooth_i8(), "I8", {}), 1.2),
    # DCT/ADST tiles (a cosine basis, 3-D): the inverse transform overwrites its tiles of out;
    # residual and hi planes (1 byte/weight each at most) and lookup tables stay
    "int8-transform": (lambda: (_cosine_basis(), "I8", {}), 2.5),  # + the hi plane, small tensor
    "int8-one-row": (lambda: (_rng.integers(-128, 128, ROWS * COLS).astype(np.int8), "I8", {}), 0.2),
    # int8-quant: the int8 plane and the residual plane (1 byte/weight each), float32 blocks
    "int8-quant-BF16": (lambda: (_weights("BF16"), "BF16", {"mode": "int8"}), 2.3),
    "int8-quant-F32": (lambda: (_weights("F32"), "F32", {"mode": "int8"}), 2.3),
    "lossy-F16": (lambda: (_weights("F16"), "F16", {"mode": "lossy:qp=4"}), 2.3),
    "fp8": (lambda: (_rng.integers(0, 256, (ROWS, COLS)).astype(np.uint8), "F8_E4M3", {}), 0.2),
    "raw": (lambda: (_weights("F32"), "F32", {"codec": "raw"}), 0.05),
    "fixed": (lambda: (_weights("BF16"), "BF16", {"codec": "fixed"}), None),  # numpy temporaries
}
_records: dict = {}


def _case(cid):
    if cid not in _records:
        array, dtype, opts = CASES[cid][0]()
        _records[cid] = (array, encode_tensor(array, dtype, **opts))
    return _records[cid]


def _peak(fn) -> int:
    tracemalloc.start()
    try:
        fn()
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


@pytest.mark.parametrize("cid", list(CASES))
@pytest.mark.parametrize("dest", ["numpy", "torch", "memmap", "bytes"])
def test_decode_into_every_codec(cid, dest, tmp_path):
    array, rec = _case(cid)
    if cid == "int8-transform":
        assert {"DCT", "ADST"} & set(rec.info["modes"]) and "hi" in rec.params
    want = decode_tensor(rec)
    if rec.codec in ("float", "raw", "fixed", "fp8") or rec.dtype == "I8":
        assert want.tobytes() == np.ascontiguousarray(array).tobytes()  # lossless codecs
    npdt = np.dtype(DTYPES[rec.dtype])
    if dest == "numpy":
        out = np.full(rec.shape, 0x5A, npdt) if npdt.kind != "f" else np.full(rec.shape, np.nan, npdt)
    elif dest == "torch":
        torch = pytest.importorskip("torch")
        tdt = {"BF16": torch.bfloat16, "F16": torch.float16, "F32": torch.float32, "I8": torch.int8}
        t = torch.empty(rec.shape, dtype=tdt.get(rec.dtype, torch.uint8))
        out = t.view(torch.int16).numpy() if rec.dtype == "BF16" else t.numpy()
    elif dest == "memmap":
        out = np.memmap(tmp_path / "out.bin", dtype=npdt, mode="w+", shape=rec.shape)
    else:  # a flat byte buffer (a pinned staging buffer)
        out = np.empty(rec.raw_nbytes, np.uint8)
    got = decode_tensor(rec, "w", out=out)
    assert np.shares_memory(got, out) and got.shape == tuple(rec.shape)
    assert got.__array_interface__["data"][0] == out.__array_interface__["data"][0]
    assert out.tobytes() == want.tobytes()
    if dest == "torch":
        assert t.view(torch.uint8).numpy().tobytes() == want.tobytes()


@pytest.mark.skipif(not native.available(), reason="C extension not built: the numba inverse prediction copies")
@pytest.mark.parametrize("cid", [c for c, (_, bound) in CASES.items() if bound is not None])
def test_decode_into_allocates_no_full_size_copy(cid):
    _, rec = _case(cid)
    bound = CASES[cid][1] * rec.numel
    out = np.empty(rec.shape, DTYPES[rec.dtype])
    decode_tensor(rec, out=out)  # warm: kernels and lookup caches
    into = _peak(lambda: decode_tensor(rec, out=out))
    fresh = _peak(lambda: decode_tensor(rec))
    assert into <= bound, f"{cid}: peak {into} B with out=, bound {bound:.0f} B"
    assert fresh >= rec.raw_nbytes  # the measurement sees a full-size allocation when there is one
    if rec.codec != "int8-quant":  # there the int8 plane and the output outlive the residuals
        assert fresh - into >= 0.9 * rec.raw_nbytes


@pytest.mark.parametrize("bad, what", [
    (lambda s, d: np.empty(s, np.float64), "dtype"),
    (lambda s, d: np.empty((s[0] + 1,) + s[1:], d), "shape"),
    (lambda s, d: np.empty(s[::-1], d), "shape"),
    (lambda s, d: np.empty((s[0], 2 * s[1]), d)[:, ::2], "contiguous"),
    (lambda s, d: _readonly(np.empty(s, d)), "writable"),
    (lambda s, d: [0] * int(np.prod(s)), "numpy array"),
])
@pytest.mark.parametrize("cid", ["float-BF16", "int8-predicted", "int8-quant-F32", "raw"])
def test_bad_out_raises_before_writing(cid, bad, what):
    _, rec = _case(cid)
    out = bad(tuple(rec.shape), DTYPES[rec.dtype])
    before = out.tobytes() if isinstance(out, np.ndarray) else None
    with pytest.raises(InvalidInputError, match=what) as e:
        decode_tensor(rec, "layer.w", out=out)
    assert isinstance(e.value, ValueError) and "layer.w" in str(e.value)
    if before is not None:
        assert out.tobytes() == before


def _readonly(a):
    a.flags.writeable = False
    return a


def test_entry_points_decode_into(tmp_path):
    """CheckpointReader.get_numpy(out=) and safe_open.get_tensor(out=) with a numpy array, a
    torch tensor (bfloat16 given as itself) and an np.memmap; aliases resolve."""
    torch = pytest.importorskip("torch")
    import wcodec
    from wcodec.format import CheckpointReader

    tensors = {"a": torch.randn(64, 300).to(torch.bfloat16), "q": torch.randint(-100, 100, (40, 70), dtype=torch.int8),
               "f": torch.randn(33, 65)}
    path = tmp_path / "m.wcodec"
    wcodec.save_file(tensors, path)
    with CheckpointReader(path) as r:
        out = np.empty((33, 65), np.float32)
        assert np.shares_memory(r.get_numpy("f", out=out), out)
        assert torch.equal(torch.from_numpy(out), tensors["f"])
    with wcodec.safe_open(path, framework="pt") as f:
        for name, t in tensors.items():
            dst = torch.empty_like(t)
            assert f.get_tensor(name, out=dst) is dst
            assert torch.equal(dst, t)
        mm = np.memmap(tmp_path / "q.bin", dtype=np.int8, mode="w+", shape=(40, 70))
        assert f.get_tensor("q", out=mm) is mm
        assert np.array_equal(mm, tensors["q"].numpy())
        with pytest.raises(InvalidInputError, match="contiguous"):
            f.get_tensor("a", out=torch.empty(300, 64, dtype=torch.bfloat16).t())
        with pytest.raises(InvalidInputError, match="dtype"):
            f.get_tensor("a", out=torch.empty(64, 300))
