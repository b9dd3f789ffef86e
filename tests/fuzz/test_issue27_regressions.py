"""Regression tests of issue 27's hostile-input defects that are not codec "fixed" records
(tests/codecs/test_fixed_canonical.py) or module state dicts (tests/torch/test_packed.py):
get_slice's checks, allocation bounds of vectors indexes, empty input names, empty shapes."""

from __future__ import annotations

import json
import struct

import numpy as np
import pytest

import wcodec
from wcodec.codecs import decode_tensor, encode_tensor
from wcodec.codecs.partial import decode_range
from wcodec.errors import CorruptDataError, InvalidInputError, WcodecError


# -- get_slice makes the full decode's checks, naming the tensor --------------------------------
def test_partial_fp8_without_its_plane_is_a_named_corrupt_error():
    rec = encode_tensor(np.arange(4096, dtype=np.uint8).reshape(64, 64), "F8_E4M3", codec="fp8")
    del rec.params["data"]
    for call in (lambda: decode_range(rec, 0, 64, name="w"), lambda: decode_tensor(rec, "w")):
        with pytest.raises(CorruptDataError, match="tensor 'w'.*'data'"):
            call()


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_partial_quant_refuses_non_finite_scales_anywhere(bad):
    """Rows 0-7 have finite scales: the full decode refuses the record, so does a slice of them."""
    w = np.random.default_rng(0).standard_normal((64, 64)).astype(np.float32)
    rec = encode_tensor(w, "F32", "int8", tile=8, chunk_steps=1)
    scales = rec.sections["scales"].copy()
    scales[40] = bad
    rec.sections["scales"] = scales
    with pytest.raises(CorruptDataError, match="tensor 'w'.*scale of row 40"):
        decode_tensor(rec, "w")
    with pytest.raises(CorruptDataError, match="tensor 'w'.*scale of row 40"):
        decode_range(rec, 0, 8 * 64, name="w")


def test_get_slice_errors_name_the_tensor(tmp_path):
    path = tmp_path / "m.wcodec"
    w = np.random.default_rng(0).standard_normal((64, 64)).astype(np.float32)
    wcodec.save_file({"layer.weight": w}, path, mode="int8")
    data = bytearray(path.read_bytes())
    with wcodec.safe_open(path, framework="np") as f:
        rec = f._open().record("layer.weight")
    # a NaN in the stored scales, found by its bytes (checksums are not verified on a slice here)
    scales = rec.sections["scales"]
    at = bytes(data).find(scales.tobytes())
    data[at + 4 * 10:at + 4 * 11] = np.float32(np.nan).tobytes()
    path.write_bytes(bytes(data))
    with wcodec.safe_open(path, framework="np") as f:
        with pytest.raises(CorruptDataError, match="tensor 'layer.weight'"):
            f.get_slice("layer.weight")[0:2]


# -- vectors indexes: claimed counts against the planes' bytes ------------------------------------
def _constant_index(n: int):
    from wcodec.vectors import CompressedIndex
    anchors = np.ones((1, 4), np.float32)
    return CompressedIndex(anchors, np.zeros(n, np.int64), 0.0, 0)


def test_vectors_count_bounded_by_plane_bytes(tmp_path, monkeypatch):
    from wcodec import rans
    from wcodec.vectors import coding, load
    n = 1 << 21
    legit = tmp_path / "legit.wcodec"
    _constant_index(n).save(legit)  # the writer's densest plane (248 vectors per byte) loads
    idx = load(legit)
    assert idx.n_vectors == n
    d, ids = idx.search(np.ones((2, 4), np.float32), k=3)
    assert ids.shape == (2, 3)
    # the same claim in 2048-step chunks: ~500 vectors per byte (the rANS bound is 1024)
    monkeypatch.setattr(coding, "encode_planes", lambda planes: [rans.encode(p, chunk_steps=2048) for p in planes])
    hostile = tmp_path / "hostile.wcodec"
    _constant_index(n).save(hostile)
    assert hostile.stat().st_size < 8192
    with pytest.raises(CorruptDataError, match="per stored byte"):
        load(hostile)


def test_search_distances_are_bounded_per_block(monkeypatch):
    """[queries, N] distances are held a block of queries at a time, fewer queries for large N."""
    from wcodec.vectors import search
    monkeypatch.setattr(search, "MAX_BLOCK_DISTANCES", 1000)
    idx = _constant_index(600)
    shapes = []
    real = np.argpartition
    monkeypatch.setattr(np, "argpartition", lambda a, *args, **kw: shapes.append(a.shape) or real(a, *args, **kw))
    d, ids = idx.search(np.ones((5, 4), np.float32), k=2)
    assert ids.shape == (5, 2) and shapes and all(s[0] == 1 for s in shapes)


# -- inputs whose tensor names a .wcodec file cannot store -----------------------------------------
def test_safetensors_input_with_an_empty_name(tmp_path):
    h = json.dumps({"": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}}).encode()
    src = tmp_path / "m.safetensors"
    src.write_bytes(struct.pack("<Q", len(h)) + h + bytes(8))
    out = tmp_path / "o.wcodec"
    with pytest.raises(InvalidInputError, match="empty") as err:
        wcodec.api.encode_safetensors_to_wcodec(src, out)
    assert isinstance(err.value, ValueError) and isinstance(err.value, WcodecError)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.safetensors"]  # nothing written
