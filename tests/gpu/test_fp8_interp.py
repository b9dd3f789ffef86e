"""GPU decode of the fp8 codec (byte-plane kernel + copy, viewed as float8) under
TRITON_INTERPRET=1: bit-exact with the CPU decoder, batched with other codecs, FP8 / E8M0 / FP4 /
complex raw tensors through the same plan."""

from __future__ import annotations

import os

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="torch is needed for the GPU decoder")
pytest.importorskip("triton", reason="triton is not installed (pip install triton)")

from wcodec.codecs import decode_tensor, encode_tensor  # noqa: E402
from wcodec.errors import CorruptDataError  # noqa: E402
from wcodec.gpu import decode_records  # noqa: E402
from wcodec.torch.tensors import torch_dtype  # noqa: E402

DEVICE = "cuda" if os.environ.get("WCODEC_GPU_TESTS_ON_DEVICE") == "1" else "cpu"


def _fp8(rng, shape, tname="float8_e4m3fn"):
    w = torch.from_numpy(rng.standard_normal(shape).astype(np.float32))
    dt = getattr(torch, tname)
    return (w / (w.abs().max() / torch.finfo(dt).max)).to(dt).view(torch.uint8).numpy()


def test_fp8_bit_exact_with_cpu_and_mixed_batch():
    rng = np.random.default_rng(0)
    items = [("e4m3", encode_tensor(_fp8(rng, (70, 33)), "F8_E4M3", chunk_steps=2, tables=3)),
             ("e5m2", encode_tensor(_fp8(rng, (5, 7, 11), "float8_e5m2"), "F8_E5M2", chunk_steps=1)),
             ("fnuz", encode_tensor(_fp8(rng, (300,), "float8_e4m3fnuz"), "F8_E4M3FNUZ")),
             ("tiny", encode_tensor(_fp8(rng, (3,)), "F8_E5M2FNUZ")),  # raw (too small to code)
             ("e8m0", encode_tensor(rng.integers(100, 140, (40, 8)).astype(np.uint8), "F8_E8M0")),
             ("fp4", encode_tensor(rng.integers(0, 256, (16, 20)).astype(np.uint8), "F4_X2")),
             ("c64", encode_tensor(rng.standard_normal((9, 4)).astype(np.complex64), "C64")),
             ("bf16", encode_tensor((rng.standard_normal((40, 10)).astype(np.float32).view(np.uint32) >> 16)
                                    .astype(np.uint16), "BF16", chunk_steps=2))]
    assert [r.codec for _, r in items][:4] == ["fp8", "fp8", "fp8", "raw"]
    out = decode_records(items, DEVICE)
    for name, rec in items:
        got = out[name]
        assert got.dtype == torch_dtype(rec.dtype) and tuple(got.shape) == rec.shape, name
        want = np.ascontiguousarray(decode_tensor(rec, name)).reshape(-1).view(np.uint8)
        assert np.array_equal(got.cpu().reshape(-1).view(torch.uint8).numpy(), want), name


def test_fp8_corrupt_stream_is_reported():
    rng = np.random.default_rng(1)
    rec = encode_tensor(_fp8(rng, (64, 64)), "F8_E4M3", chunk_steps=4)
    words = rec.sections["data.words"].copy()
    words[: words.size // 2] ^= 0x5A5A
    rec.sections["data.words"] = words
    with pytest.raises(CorruptDataError, match="t"):
        decode_records([("t", rec)], DEVICE)


def test_seed_gpu_decoder_runs_the_triton_path():
    from wcodec.gpu import GPUDecoder
    rng = np.random.default_rng(2)
    rec = encode_tensor(_fp8(rng, (48, 40)), "F8_E4M3", chunk_steps=2)
    dec = GPUDecoder(use_gpu=True, device=DEVICE)  # the interpreter runs the kernels on the CPU
    assert dec.use_gpu
    got = dec.decode_layer(rec, "w")
    assert got.dtype == torch.float8_e4m3fn and tuple(got.shape) == (48, 40)
    assert np.array_equal(got.cpu().view(torch.uint8).numpy(), decode_tensor(rec))
