"""Grouped compressed experts (wcodec.gpu.fixed_grouped): the one-launch Triton kernel under
TRITON_INTERPRET=1 (on a GPU with WCODEC_GPU_TESTS_ON_DEVICE=1) and the torch path, against the
codec's numpy decode of each expert times x in float64; routing as a per-expert loop gives it."""

from __future__ import annotations

import os

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="torch is needed for the fixed-rate kernels")
pytest.importorskip("triton", reason="triton is not installed (pip install triton)")

from wcodec.codecs import fixed as F  # noqa: E402
from wcodec.errors import InvalidInputError  # noqa: E402
from wcodec.gpu import fixed as fx  # noqa: E402
from wcodec.gpu import fixed_grouped as fg  # noqa: E402

DEVICE = "cuda" if os.environ.get("WCODEC_GPU_TESTS_ON_DEVICE") == "1" else "cpu"


def experts(E, N, K, seed=0):
    g = torch.Generator().manual_seed(seed)
    ws = []
    for e in range(E):  # other scales: other windows (bases); zeros and huge values: escapes
        w = torch.randn(N, K, generator=g) * 0.05 * 4 ** e
        w.view(-1)[torch.randperm(N * K, generator=g)[:N]] = 0
        w.view(-1)[torch.randperm(N * K, generator=g)[:3]] *= 1e6
        ws.append(w.to(torch.bfloat16).to(DEVICE))
    return ws


def numpy_weight(w):
    """The codec's numpy encode + decode of w: float64 [N, K]."""
    N, K = w.shape
    params, sections = F.encode_bits(w.view(torch.int16).cpu().numpy().view(np.uint16).reshape(-1), N, K)
    bits = F.decode_bits(params, sections, N, K).astype(np.uint32) << 16
    return bits.view(np.float32).reshape(N, K).astype(np.float64)


def reference(x, ws, order, offsets):
    xs = x.double().cpu().numpy()
    out = np.zeros((order.numel(), ws[0].shape[0]))
    offs = offsets.tolist()
    for e, w in enumerate(ws):
        rows = order[offs[e]:offs[e + 1]].cpu().numpy()
        out[offs[e]:offs[e + 1]] = xs[rows] @ numpy_weight(w).T
    return out


def rel(y, ref):
    return float(np.linalg.norm(y.double().cpu().numpy() - ref) / np.linalg.norm(ref))


@pytest.mark.parametrize("triton_path,prefill", [(True, False), (True, True), (False, False)])
@pytest.mark.parametrize("dtype,tol", [(torch.float32, 1e-5), (torch.bfloat16, 1e-2)])
def test_grouped_matches_each_expert(monkeypatch, triton_path, prefill, dtype, tol):
    """The tiled kernel as a batch's decode step runs it, and as a prompt does (``prefill``: the
    prefill launch, with the W words of the next tile prefetched and the swapped dot)."""
    if triton_path:
        monkeypatch.setenv("WCODEC_FIXED_TRITON", "1")
    if prefill:
        monkeypatch.setattr(fg, "PREFILL_SLOTS", 0)
        assert fg.PREFILL_TILE[5:] == (True, True)
    E, N, K, T = 3, 24, 40, 9
    ws = experts(E, N, K)
    before = [w.clone() for w in ws]
    ex = fg.stack_experts([fx.encode_weight(w) for w in ws])
    assert ex.ecol.numel() >= E * N and len(set(ex.bases.tolist())) > 1  # escapes and several windows
    ids = torch.tensor([[0, 2], [2, 1], [0, 1], [2, 0], [1, 2], [0, 2], [2, 1], [2, 0], [0, 1]], device=DEVICE)
    order, offsets, choice = fg.route(ids, E)
    x = torch.randn(T, K, generator=torch.Generator().manual_seed(1)).to(dtype).to(DEVICE)
    y = fg.grouped_linear(x, ex, order, offsets)
    assert y.shape == (T * 2, N) and y.dtype == dtype
    assert rel(y, reference(x, ws, order, offsets)) < tol
    assert all(torch.equal(a.view(torch.int16), b.view(torch.int16)) for a, b in zip(ws, before))


@pytest.mark.parametrize("tokens", [1, 2])
def test_decode_step_gemv_matches_each_expert(monkeypatch, tokens):
    """A decode step's few slots (the per-slot GEMV kernel): every slot's expert found from the
    offsets, escapes and each expert's window applied, bias-free rows in slot order."""
    monkeypatch.setenv("WCODEC_FIXED_TRITON", "1")
    E, N, K = 4, 20, 72
    ws = experts(E, N, K, seed=2)
    ex = fg.stack_experts([fx.encode_weight(w) for w in ws])
    ids = torch.tensor([[3, 1], [0, 3]][:tokens], device=DEVICE)
    order, offsets, _ = fg.route(ids, E)
    assert order.numel() <= fg.GEMV_MAX_SLOTS
    x = torch.randn(tokens, K, generator=torch.Generator().manual_seed(4)).to(torch.bfloat16).to(DEVICE)
    assert rel(fg.grouped_linear(x, ex, order, offsets), reference(x, ws, order, offsets)) < 1e-2


def test_route_and_combine_like_a_per_expert_loop():
    """order/offsets/choice give what a loop over experts finds, and weighting + index_add_
    reproduce the MoE block's sum."""
    ids = torch.tensor([[3, 0], [1, 3], [0, 1], [3, 2]], device=DEVICE)
    weights = torch.tensor([[0.7, 0.3], [0.6, 0.4], [0.5, 0.5], [0.9, 0.1]], device=DEVICE)
    order, offsets, choice = fg.route(ids, 4)
    assert offsets.tolist() == [0, 2, 4, 5, 8]
    for e in range(4):
        tok, col = torch.where(ids == e)
        assert order[offsets[e]:offsets[e + 1]].tolist() == tok.tolist()
        assert choice[offsets[e]:offsets[e + 1]].tolist() == col.tolist()
    vals = torch.randn(8, 5, device=DEVICE)  # stand-in expert outputs, one per slot
    out = torch.zeros(4, 5, device=DEVICE).index_add_(0, order, vals * weights[order, choice][:, None])
    loop = torch.zeros(4, 5, device=DEVICE)
    for s in range(8):
        loop[order[s]] += vals[s] * weights[order[s], choice[s]]
    assert torch.allclose(out, loop)


def test_empty_experts_and_bad_input(monkeypatch):
    monkeypatch.setenv("WCODEC_FIXED_TRITON", "1")
    ex = fg.stack_experts([fx.encode_weight(w) for w in experts(3, 16, 24)])
    x = torch.randn(4, 24).to(torch.bfloat16).to(DEVICE)
    order, offsets, _ = fg.route(torch.tensor([[2], [2], [0], [2]], device=DEVICE), 3)  # expert 1 gets none
    assert rel(fg.grouped_linear(x, ex, order, offsets), reference(x, [fx.decode(w) for w in ex.weights],
                                                                     order, offsets)) < 1e-2
    assert fg.grouped_linear(x, ex, order[:0], torch.zeros(4, dtype=torch.int64)).shape == (0, 16)
    with pytest.raises(InvalidInputError, match="x must be"):
        fg.grouped_linear(x[:, :20], ex, order, offsets)
    with pytest.raises(InvalidInputError, match="offsets"):
        fg.grouped_linear(x, ex, order, offsets[:3])
    with pytest.raises(InvalidInputError, match="expert 1"):
        fg.stack_experts([fx.encode_weight(w) for w in (experts(1, 16, 24)[0], experts(1, 8, 24)[0])])
    with pytest.raises(InvalidInputError, match="empty"):
        fg.stack_experts([])
    with pytest.raises(InvalidInputError, match=r"\[0, 3\)"):
        fg.route(torch.tensor([[3]]), 3)


def test_one_decode_launch_over_stacked_experts(monkeypatch):
    """fixed.decode_launch over the stack (fixed_grouped.decode_experts): every expert at its own
    window in one launch, and the same row range of each expert's two halves (gate and up of a gate_up projection) side
    by side, bit-exact with escapes."""
    monkeypatch.setenv("WCODEC_FIXED_TRITON", "1")
    E, N, K = 3, 24, 40
    ws = experts(E, N, K, seed=5)
    ex = fg.stack_experts([fx.encode_weight(w) for w in ws])
    assert ex.kpad > K and ex.ecol.numel() >= E * N
    out = torch.full((E, N, ex.kpad), float("nan"), dtype=torch.bfloat16, device=DEVICE)
    got = fg.decode_experts(ex, out)
    assert got.data_ptr() == out.data_ptr() and got.shape == (E, N, K)
    assert torch.equal(got.view(torch.int16), torch.stack(ws).view(torch.int16))
    assert torch.equal(fg.decode_experts(ex).view(torch.int16), torch.stack(ws).view(torch.int16))
    with pytest.raises(InvalidInputError, match="contiguous bfloat16"):
        fg.decode_experts(ex, out[:, :, :K])
    half, r0, n = N // 2, 3, 5  # rows r0..r0+n of each half of each expert
    out = torch.full((E, 2 * n, ex.kpad), float("nan"), dtype=torch.bfloat16, device=DEVICE)
    fx.decode_launch(out, ex, 0, r0, n, groups=2 * E, group_rows=half, bases=ex.bases.repeat_interleave(2))
    for e, w in enumerate(ws):
        want = torch.cat([w[r0:r0 + n], w[half + r0:half + r0 + n]])
        assert torch.equal(out[e, :, :K].view(torch.int16), want.view(torch.int16))


@pytest.mark.gpu
@pytest.mark.skipif(DEVICE != "cuda" or not torch.cuda.is_available() or torch.cuda.get_device_capability()[0] < 9,
                    reason="torch._grouped_mm's route needs an sm_90+ GPU (WCODEC_GPU_TESTS_ON_DEVICE=1)")
def test_long_prompt_decodes_the_experts_for_grouped_mm(monkeypatch):
    """More than DECODE_SLOTS slots per expert: the experts decoded in one launch, then
    torch._grouped_mm; the same function as the tiled kernel (bf16 sums in another order)."""
    E, N, K, T = 4, 48, 64, 300
    ws = experts(E, N, K, seed=6)
    ex = fg.stack_experts([fx.encode_weight(w) for w in ws])
    g = torch.Generator().manual_seed(7)
    ids = torch.stack([torch.randperm(E, generator=g)[:2] for _ in range(T)]).to(DEVICE)
    order, offsets, _ = fg.route(ids, E)
    x = torch.randn(T, K, generator=g).to(torch.bfloat16).to(DEVICE)
    monkeypatch.setattr(fg, "DECODE_SLOTS", 8)
    calls, real = [], fg.decode_experts

    def counting(ex_, out=None):
        calls.append(1)
        return real(ex_, out)

    monkeypatch.setattr(fg, "decode_experts", counting)
    y = fg.grouped_linear(x, ex, order, offsets)
    assert calls and y.shape == (2 * T, N) and y.dtype == torch.bfloat16
    ref = reference(x, ws, order, offsets)
    assert rel(y, ref) < 1e-2
    monkeypatch.setattr(fg, "DECODE_SLOTS", 1 << 30)
    assert rel(fg.grouped_linear(x, ex, order, offsets), ref) < 1e-2

