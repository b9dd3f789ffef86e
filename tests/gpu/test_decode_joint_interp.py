"""Format version 2 on the GPU path (TRITON_INTERPRET=1 on CPU): a float record with a joint low
plane decodes bit-exact with the CPU decoder (the plane is decoded on the host, the head on the
device), beside v1 records in the same batch."""

from __future__ import annotations

import os

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="torch is needed for the GPU decoder")
pytest.importorskip("triton", reason="triton is not installed (pip install triton)")

from wcodec.codecs import decode_tensor, encode_tensor  # noqa: E402
from wcodec.errors import CorruptDataError  # noqa: E402
from wcodec.gpu import decode_records  # noqa: E402

DEVICE = "cuda" if os.environ.get("WCODEC_GPU_TESTS_ON_DEVICE") == "1" else "cpu"


def _joint_record(seed=0):
    rng = np.random.default_rng(seed)
    a = rng.standard_normal((24, 100)).astype(np.float32) * 0.05
    a[:16] = a[:16].astype(np.float16).astype(np.float32)
    a.view(np.uint32)[20, :3] = [0x7FC00001, 0xFF800000, 0x80000000]  # NaN payload, -inf, -0.0
    rec = encode_tensor(a, "F32", codec="float", chunk_steps=64, low_joint=True)
    assert "low_joint" in rec.params
    return a, rec


def test_joint_plane_bit_exact_beside_v1():
    a, rec = _joint_record()
    v1 = encode_tensor(a, "F32", codec="float", chunk_steps=64)
    out = decode_records([("j", rec), ("v1", v1)], DEVICE)
    for name, r in (("j", rec), ("v1", v1)):
        got = out[name].cpu().numpy().view(np.uint32)
        assert np.array_equal(got, decode_tensor(r).view(np.uint32)), name
        assert np.array_equal(got, a.view(np.uint32)), name


def test_joint_plane_corrupt_reported():
    _, rec = _joint_record(1)
    words = rec.sections["low16.words"].copy()
    words[:4] ^= 0x1234
    rec.sections["low16.words"] = words
    with pytest.raises(CorruptDataError, match="low16"):
        decode_records([("j", rec)], DEVICE)
