"""The Triton fixed-rate encoder (wcodec.gpu.fixed_encode) under TRITON_INTERPRET=1: bit-identical
to the numpy codec and to the torch-ops encoder, across column blocks (K > BLOCK, padding) and with
escapes in every block (specials, random bit patterns). On a GPU (WCODEC_GPU_TESTS_ON_DEVICE=1)
the compiled kernels, on larger shapes too."""

from __future__ import annotations

import os

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("triton", reason="triton is not installed (pip install triton)")

from wcodec.codecs import fixed as F  # noqa: E402
from wcodec.gpu import fixed as fx  # noqa: E402
from wcodec.gpu import fixed_encode  # noqa: E402

ON_GPU = os.environ.get("WCODEC_GPU_TESTS_ON_DEVICE") == "1"
DEVICE = "cuda" if ON_GPU else "cpu"
SHAPES = [(1, 1), (3, 8), (4, 1037), (2, 2 * fixed_encode.BLOCK + 16)] + ([(333, 4100), (64, 14336)] if ON_GPU else [])


def weight(N, K, seed):
    g = torch.Generator().manual_seed(seed)
    w = (torch.randn(N, K, generator=g) * 0.05).to(torch.bfloat16)
    flat = w.view(torch.int16).view(-1)
    n = max(1, flat.numel() // 20)  # random bit patterns: NaNs, infinities, subnormals, -0.0
    flat[torch.randperm(flat.numel(), generator=g)[:n]] = torch.randint(-32768, 32768, (n,), generator=g,
                                                                        dtype=torch.int32).to(torch.int16)
    return w


def _same(fw, params, sections):
    p, s = fx.to_sections(fw)
    assert p == params
    for k, v in sections.items():
        assert np.array_equal(s[k], v), k
    assert torch.equal(fw.erow.cpu(), torch.repeat_interleave(torch.arange(fw.N), torch.diff(fw.eptr.cpu().long())))


@pytest.mark.parametrize("N,K", SHAPES)
def test_triton_encoder_matches_numpy_and_torch(N, K, monkeypatch):
    w = weight(N, K, N * 7 + K)
    rec = F.FixedCodec().encode(w.view(torch.int16).numpy().view(np.uint16), "BF16")
    monkeypatch.setenv("WCODEC_FIXED_TRITON", "1")
    before = w.clone()
    fw = fx.encode_weight(w.to(DEVICE))
    _same(fw, rec.params, rec.sections)
    assert torch.equal(w.view(torch.int16), before.view(torch.int16))
    monkeypatch.setattr(fx, "_triton_encoder", lambda: None)  # the torch ops
    _same(fx.encode_weight(w.to(DEVICE)), rec.params, rec.sections)
