"""CompressedEmbedding: bit-exact rows through the row-gather kernel (Triton interpreter, or the
compiled kernel on a GPU with WCODEC_GPU_TESTS_ON_DEVICE=1) and through the CPU path, escapes
and special values included; out-of-range indices; state_dict; torch.compile sees no graph break."""

from __future__ import annotations

import os

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("triton", reason="triton is not installed (pip install triton)")
from torch import nn  # noqa: E402

from wcodec.errors import UnsupportedError  # noqa: E402
from wcodec.gpu import fixed as fx  # noqa: E402
from wcodec.torch.embedding import CompressedEmbedding  # noqa: E402

DEVICE = "cuda" if os.environ.get("WCODEC_GPU_TESTS_ON_DEVICE") == "1" else "cpu"


def table(n, k, seed=0, escapes=0):
    g = torch.Generator().manual_seed(seed)
    w = (torch.randn(n, k, generator=g) * 0.05).to(torch.bfloat16)
    flat = w.view(torch.int16).view(-1)
    special = torch.tensor([0x7FC1, 0x7F80, -32768, 0x0003], dtype=torch.int16)  # NaN, inf, -0, subnormal
    flat[:4] = special[:flat.numel()]
    if escapes:  # zeros and large values sit outside the exponent window: escapes
        pos = torch.randperm(flat.numel(), generator=g)[:escapes]
        flat[pos] = torch.where(torch.rand(escapes, generator=g) < 0.5, 0, 0x4700).to(torch.int16)
    return w.to(DEVICE)


def same_bits(a, b):
    return torch.equal(a.view(torch.int16).cpu(), b.view(torch.int16).cpu())


@pytest.mark.parametrize("triton_path", [True, False])
@pytest.mark.parametrize("n,k,escapes", [(1, 1, 0), (17, 13, 30), (40, 70, 200), (9, 300, 400)])
def test_rows_bit_exact(monkeypatch, triton_path, n, k, escapes):
    if triton_path:
        monkeypatch.setenv("WCODEC_FIXED_TRITON", "1")
    else:
        monkeypatch.delenv("WCODEC_FIXED_TRITON", raising=False)
    w = table(n, k, escapes=escapes)
    before = w.clone()
    emb = CompressedEmbedding(fx.encode_weight(w))
    idx = torch.randint(0, n, (3, 5), generator=torch.Generator().manual_seed(1)).to(DEVICE)
    out = emb(idx)
    assert out.shape == (3, 5, k) and out.dtype == torch.bfloat16
    assert same_bits(out, w[idx])
    assert same_bits(emb(torch.arange(n, device=DEVICE)), w)  # every row, so every escape
    assert same_bits(w, before)


def test_out_of_range_indices(monkeypatch):
    w = table(6, 24, escapes=10)
    emb = CompressedEmbedding(fx.encode_weight(w))
    monkeypatch.delenv("WCODEC_FIXED_TRITON", raising=False)
    if DEVICE == "cpu":
        with pytest.raises(IndexError):
            emb(torch.tensor([0, 6]))
    monkeypatch.setenv("WCODEC_FIXED_TRITON", "1")
    out = emb(torch.tensor([-1, 6, 2], device=DEVICE))  # the kernel: zeros, no out-of-bounds read
    assert torch.count_nonzero(out[:2].float()) == 0 and same_bits(out[2], w[2])


def test_from_embedding_state_dict_and_errors():
    torch.manual_seed(0)
    e = nn.Embedding(50, 16, padding_idx=3).to(torch.bfloat16)
    ce = CompressedEmbedding.from_embedding(e)
    idx = torch.tensor([[0, 3, 49]])
    assert same_bits(ce(idx), e(idx)) and ce.padding_idx == 3
    other = CompressedEmbedding.from_embedding(nn.Embedding(50, 16).to(torch.bfloat16))
    other.load_state_dict(ce.state_dict())
    assert same_bits(other(idx), e(idx))
    assert ce.compressed_nbytes < 50 * 16 * 2
    with pytest.raises(UnsupportedError):
        CompressedEmbedding.from_embedding(nn.Embedding(4, 4))  # float32 table
    with pytest.raises(ValueError, match="max_norm"):
        CompressedEmbedding.from_embedding(nn.Embedding(4, 4, max_norm=1.0).to(torch.bfloat16))


def test_compile_fullgraph():
    torch.manual_seed(0)
    e = nn.Embedding(30, 8).to(torch.bfloat16)
    ce = CompressedEmbedding.from_embedding(e)
    f = torch.compile(lambda i: ce(i) * 2, fullgraph=True, backend="eager")
    idx = torch.tensor([1, 2, 29])
    assert same_bits(f(idx), e(idx) * 2)
