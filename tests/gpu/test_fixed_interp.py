"""Fixed-rate kernels (wcodec.gpu.fixed) under TRITON_INTERPRET=1 on small odd shapes: the torch
encoder equals the numpy codec, decode is bit-exact, every matmul kernel and the input gradient
match an fp32 reference within bf16 tolerance. On a GPU (WCODEC_GPU_TESTS_ON_DEVICE=1) the same
tests run the compiled kernels."""

from __future__ import annotations

import os

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="torch is needed for the fixed-rate kernels")
pytest.importorskip("triton", reason="triton is not installed (pip install triton)")

from wcodec.codecs import fixed as F  # noqa: E402
from wcodec.errors import CorruptDataError, InvalidInputError  # noqa: E402
from wcodec.gpu import fixed as fx  # noqa: E402

DEVICE = "cuda" if os.environ.get("WCODEC_GPU_TESTS_ON_DEVICE") == "1" else "cpu"
SPECIALS = [0x7FC1, -64, 0x7F80, -128, -32768, 0, 1, 0x0003, 0x7F7F]  # NaN, -NaN, inf, -inf, -0, 0, subnormals, max


@pytest.fixture(autouse=True)
def _triton_on_cpu(monkeypatch):
    monkeypatch.setenv("WCODEC_FIXED_TRITON", "1")


def weight(N, K, seed=0, specials=False, zeros=0):
    g = torch.Generator().manual_seed(seed)
    w = (torch.randn(N, K, generator=g) * 0.05).to(torch.bfloat16)
    flat = w.view(torch.int16).view(-1)
    if specials:
        flat[:len(SPECIALS)] = torch.tensor(SPECIALS, dtype=torch.int16)
    if zeros:  # zeros are escapes (exponent 0 is far below the window): finite, matmul-safe
        flat[torch.randperm(flat.numel(), generator=g)[:zeros]] = 0
    return w.to(DEVICE)


def rel(a, b):
    return float((a.float().cpu() - b.float().cpu()).norm() / b.float().cpu().norm())


@pytest.mark.parametrize("N,K", [(1, 1), (7, 13), (33, 70), (16, 64), (5, 200)])
def test_encode_matches_codec_and_decodes_bit_exact(N, K):
    w = weight(N, K, specials=N * K >= len(SPECIALS))
    before = w.clone()
    fw = fx.encode_weight(w)
    assert torch.equal(w.view(torch.int16), before.view(torch.int16))  # input untouched
    params, sections = F.encode_bits(w.view(torch.int16).cpu().numpy().view(np.uint16).reshape(-1), N, K)
    p2, s2 = fx.to_sections(fw)
    assert p2 == params
    for k in sections:
        assert np.array_equal(sections[k], s2[k]), k
    assert torch.equal(fx.decode(fw).view(torch.int16), w.view(torch.int16))
    back = fx.from_sections(params, sections, (N, K), DEVICE)
    assert torch.equal(fx.decode(back).view(torch.int16), w.view(torch.int16))


@pytest.mark.parametrize("patch_max_cols", [1 << 16, 16])
def test_decode_writes_escapes_in_every_column_tile(monkeypatch, patch_max_cols):
    """Escapes spread over several column tiles and row blocks (and more than one scan block of a
    row block) come out bit-exact, whether the decode kernel writes them itself or the second
    launch does (rows wider than PATCH_MAX_COLS)."""
    monkeypatch.setattr(fx, "PATCH_MAX_COLS", patch_max_cols)
    w = weight(37, 600, seed=3, specials=True, zeros=1500)
    fw = fx.encode_weight(w)
    assert fw.ecol.numel() > 1000 and int(fw.ecol.max()) > 512
    assert torch.equal(fx.decode(fw).view(torch.int16), w.view(torch.int16))


@pytest.mark.parametrize("kind", fx.KINDS)
@pytest.mark.parametrize("N,K,M", [(7, 13, 1), (33, 70, 2), (24, 64, 3), (40, 32, 17), (9, 136, 5)])
def test_linear_kernels(kind, N, K, M):
    w = weight(N, K, seed=N + K, zeros=N)
    fw = fx.encode_weight(w)
    assert fw.ecol.numel() >= N  # escapes exercised
    x = torch.randn(M, K, generator=torch.Generator().manual_seed(M)).to(torch.bfloat16).to(DEVICE)
    bias = torch.randn(N).to(torch.bfloat16).to(DEVICE)
    ref = x.float() @ w.float().T + bias.float()
    y = fx.linear(x, fw, bias, kind=kind)
    assert y.dtype == torch.bfloat16 and y.shape == (M, N)
    assert rel(y, ref) < 1e-2


@pytest.mark.parametrize("split", [2, 3, 4, 8])
@pytest.mark.parametrize("N,K,M,bias", [(33, 70, 5, True), (24, 64, 16, False), (9, 13, 2, True)])
def test_tiled_kernel_split_k(split, N, K, M, bias):
    """K sliced over programs (some slices empty when K is short), partial sums added in order:
    the escapes counted once, the bias once, y in x's dtype."""
    w = weight(N, K, seed=split, zeros=N)
    fw = fx.encode_weight(w)
    x = torch.randn(M, K, generator=torch.Generator().manual_seed(split)).to(torch.bfloat16).to(DEVICE)
    b = torch.randn(N).to(torch.bfloat16).to(DEVICE) if bias else None
    ref = x.float() @ w.float().T + (b.float() if bias else 0)
    y = fx.linear(x, fw, b, kind="mm", split=split)
    assert y.dtype == torch.bfloat16 and y.shape == (M, N)
    assert rel(y, ref) < 1e-2
    assert rel(y, fx.linear(x, fw, b, kind="mm", split=1)) < 1e-2


def test_split_k_only_for_few_output_tiles():
    dev = torch.device(DEVICE)
    assert fx.split_k(16, 4096, 4096, dev) > 1  # 128 tiles of 16x32 for a GPU's ~100+ SMs
    assert fx.split_k(16, 128256, 4096, dev) == 1  # an lm_head: tiles enough
    assert fx.split_k(16, 4096, 1024, dev) == 1  # too short to slice
    assert fx.split_k(16, 64, 1 << 20, dev) == fx.MAX_SPLIT


def test_split_k_of_the_mma_kernel():
    """Tiles of 16x64, up to 1.5 programs per SM (the H100's 132 on the interpreter): the split
    that was fastest for each of these Llama shapes at M = 16 (benchmarks/RESULTS.md)."""
    dev = torch.device(DEVICE)
    if DEVICE == "cuda" and fx._sm_count(dev) != 132:
        pytest.skip("the expected splits are an H100's (132 SMs)")
    expected = {(4096, 4096): 4, (11008, 4096): 2, (4096, 11008): 4, (32000, 4096): 1, (1024, 4096): 8,
                (14336, 4096): 1, (4096, 14336): 4, (128256, 4096): 1}
    assert {nk: fx.split_k(16, *nk, dev, mma=True) for nk in expected} == expected
    assert fx.split_k(16, 4096, 512, dev, mma=True) == 1  # too short to slice


@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_linear_other_activation_dtypes(dtype):
    w = weight(20, 40, zeros=3)
    fw = fx.encode_weight(w)
    x = torch.randn(2, 3, 40).to(getattr(torch, dtype)).to(DEVICE)
    for kind in fx.KINDS:
        y = fx.linear(x, fw, kind=kind)
        assert y.dtype == x.dtype and y.shape == (2, 3, 20)
        assert rel(y, x.float() @ w.float().T) < 1e-2


@pytest.mark.parametrize("N,K,M", [(7, 13, 1), (33, 70, 4), (40, 32, 20)])
def test_grad_input(N, K, M):
    w = weight(N, K, zeros=2 * N)
    fw = fx.encode_weight(w)
    g = torch.randn(M, N).to(torch.bfloat16).to(DEVICE)
    assert rel(fx.grad_input(g, fw), g.float() @ w.float()) < 1e-2


def test_shape_errors_and_corrupt_sections():
    fw = fx.encode_weight(weight(8, 16))
    with pytest.raises(ValueError):
        fx.linear(torch.zeros(1, 15, dtype=torch.bfloat16, device=DEVICE), fw)
    with pytest.raises(ValueError):
        fx.linear(torch.zeros(1, 16, dtype=torch.bfloat16, device=DEVICE), fw, kind="nope")
    for split in (0, -2, 65, 2.0):
        with pytest.raises(ValueError, match="split"):
            fx.linear(torch.zeros(5, 16, dtype=torch.bfloat16, device=DEVICE), fw, kind="mm", split=split)
    params, sections = fx.to_sections(fx.encode_weight(weight(8, 16, zeros=4)))
    sections["esc.col"] = np.full_like(sections["esc.col"], 99)
    with pytest.raises(CorruptDataError):
        fx.from_sections(params, sections, (8, 16), DEVICE)


def test_encoder_row_blocks_and_empty_shapes(monkeypatch):
    monkeypatch.setattr(fx, "ENCODE_BLOCK", 64)  # many row blocks: escapes and rows stitched back
    for N, K in [(37, 13), (9, 200), (5, 0)]:
        w = weight(N, K, zeros=N) if N * K else torch.zeros(N, K, dtype=torch.bfloat16, device=DEVICE)
        fw = fx.encode_weight(w)
        params, sections = F.encode_bits(w.view(torch.int16).cpu().numpy().view(np.uint16).reshape(-1), N, K)
        p2, s2 = fx.to_sections(fw)
        assert p2 == params and all(np.array_equal(sections[k], s2[k]) for k in sections)
        assert torch.equal(fx.decode(fw).view(torch.int16), w.view(torch.int16))
        assert fx.linear(torch.ones(2, K, dtype=torch.bfloat16, device=DEVICE), fw).shape == (2, N)


@pytest.mark.parametrize("N,K,M,split", [(40, 70, 33, 1), (24, 64, 100, 2), (17, 136, 130, 3)])
def test_wide_tiled_kernel(N, K, M, split):
    """bf16 x of 33-256 rows runs the tiled kernel with all rows in one block of pow2(M) >= 64
    rows (each W tile decoded once per program), escapes, bias and K slices included."""
    w = weight(N, K, seed=M, zeros=N)
    fw = fx.encode_weight(w)
    g = torch.Generator().manual_seed(M)
    x = torch.randn(M, K, generator=g).to(torch.bfloat16).to(DEVICE)
    b = torch.randn(N, generator=g).to(torch.bfloat16).to(DEVICE)
    assert fx._wide_rows(x) == max(64, 1 << (M - 1).bit_length())
    ref = x.float() @ w.float().T + b.float()
    y = fx.linear(x, fw, b, kind="mm", split=split)
    assert y.dtype == torch.bfloat16 and y.shape == (M, N)
    assert rel(y, ref) < 1e-2


def test_wide_rows_only_for_bf16_of_33_to_256_rows():
    x = torch.zeros(257, 8, dtype=torch.bfloat16)
    assert [fx._wide_rows(x[:m]) for m in (32, 33, 64, 65, 128, 129, 256, 257)] == [0, 64, 64, 128, 128, 256, 256, 0]
    assert fx._wide_rows(x[:100].float()) == 0 and fx._wide_rows(x[:100].half()) == 0


@pytest.mark.parametrize("ws", [False, True])
def test_wgmma_rows_only_for_weights_of_few_escapes(ws, monkeypatch):
    """65-128 rows go to the warp-specialised kernel (ws) or the wgmma kernel where they run,
    unless the weight's escapes exceed WGMMA_MAX_ESCAPES of its values: then decode + cuBLAS
    (both add escapes after their main loop, per row); 33-64 rows take any weight."""
    monkeypatch.setattr(fx, "_wgmma_ready", lambda x: True)
    monkeypatch.setattr(fx, "_ws_ready", lambda x: ws)
    monkeypatch.setattr(fx, "_mma_ready", lambda x: True)
    x = torch.zeros(100, 64, dtype=torch.bfloat16)
    few = fx.encode_weight(weight(200, 64, zeros=1))
    many = fx.encode_weight(weight(200, 64, zeros=40))
    assert few.ecol.numel() <= fx.WGMMA_MAX_ESCAPES * 200 * 64 < many.ecol.numel()
    assert fx.pick_kind(100, x, few) == "mm" and fx.pick_kind(100, x) == "mm"
    assert fx.pick_kind(100, x, many) == "decode"
    assert fx.pick_kind(fx.WGMMA_MAX_M + 1, x, few) == "decode" and fx.pick_kind(fx.WGMMA_MIN_M, x, many) == "mm"
    assert fx.pick_kind(fx.WS_MAX_M + 1, x, few) == "decode" and fx.pick_kind(fx.WS_ANY_MAX_M, x, many) == "mm"
    assert not fx._ws_fits(x[:, :40]) and fx._ws_fits(x)  # K % 16 != 0: not the ws kernel


def test_decode_rows_into_a_reused_scratch():
    """Row ranges decoded chunk after chunk into one scratch (fixed.decode_rows) are bit-exact:
    escapes of the range only, every row block and column tile, K below kpad; bad ranges and
    buffers raise."""
    w = weight(45, 70, seed=5, specials=True, zeros=200)
    fw = fx.encode_weight(w)
    assert fw.kpad > fw.K and fw.ecol.numel() > 100
    buf = torch.full((20 * fw.kpad,), float("nan"), dtype=torch.bfloat16, device=DEVICE)
    before = [t.clone() for t in fw.tensors().values()]
    for r0 in range(0, 45, 20):
        n = min(20, 45 - r0)
        got = fx.decode_rows(fw, r0, n, buf)
        assert got.shape == (n, 70) and got.data_ptr() == buf.data_ptr()
        assert torch.equal(got.view(torch.int16), w[r0:r0 + n].view(torch.int16))
    assert torch.equal(fx.decode_rows(fw, 44, 1).view(torch.int16), w[44:].view(torch.int16))
    assert fx.decode_rows(fw, 7, 0).shape == (0, 70)
    assert all(torch.equal(a, b) for a, b in zip(before, fw.tensors().values()))
    with pytest.raises(InvalidInputError, match="within"):
        fx.decode_rows(fw, 40, 6)
    with pytest.raises(InvalidInputError, match="within"):
        fx.decode_rows(fw, -1, 2)
    with pytest.raises(InvalidInputError, match="contiguous bfloat16"):
        fx.decode_rows(fw, 0, 21, buf)
    with pytest.raises(InvalidInputError, match="contiguous bfloat16"):
        fx.decode_rows(fw, 0, 2, buf.float())
