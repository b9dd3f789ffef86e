"""A compressed experts module's CUDA forward on the grouped kernels (wcodec.torch.experts.
grouped_forward, one launch per projection over the module's packed buffer, no copy), run here
through the Triton interpreter (WCODEC_FIXED_TRITON=1; on a GPU with
WCODEC_GPU_TESTS_ON_DEVICE=1), against the per-expert path (on the CPU: the dense module's eager
math, bit-identical to the dense model) on tiny Mixtral, Qwen3-MoE, DeepSeek-V3 and gpt-oss
experts (gpt-oss: transposed layout, biases, its own gate)."""

from __future__ import annotations

import copy
import os

import pytest

torch = pytest.importorskip("torch")
tf = pytest.importorskip("transformers")
pytest.importorskip("triton", reason="triton is not installed (pip install triton)")

from test_experts import ARCHS, compress_all, dense_model  # noqa: E402

from wcodec.gpu import fixed_grouped as fg  # noqa: E402
from wcodec.torch import experts as ex  # noqa: E402

DEVICE = "cuda" if os.environ.get("WCODEC_GPU_TESTS_ON_DEVICE") == "1" else "cpu"


def routed(model, T, seed):
    """(experts module, hidden [T, H] bf16, top-k ids [T, k], top-k weights [T, k]) of layer 0."""
    experts = model.model.layers[0].mlp.experts
    g = torch.Generator().manual_seed(seed)
    E, k, H = experts.num_experts, 2, model.config.hidden_size
    ids = torch.stack([torch.randperm(E, generator=g)[:k] for _ in range(T)]).to(DEVICE)
    w = torch.rand(T, k, generator=g).softmax(-1).to(torch.bfloat16).to(DEVICE)
    x = torch.randn(T, H, generator=g).to(torch.bfloat16).to(DEVICE)
    return experts, x, ids, w


def per_expert(experts, x, ids, w, monkeypatch):
    """The module's output on the per-expert path (the reference here)."""
    with monkeypatch.context() as m:
        m.setattr(ex, "GROUPED", False)
        return experts(x, ids, w)


def rel(a, b):
    return float((a.detach().float() - b.detach().float()).norm() / b.detach().float().norm())


@pytest.mark.parametrize("arch,tokens", [(a, 5) for a in ARCHS] + [("mixtral", 1), ("gpt_oss", 1)])
def test_grouped_forward_matches_per_expert(monkeypatch, arch, tokens):
    """1 token (2 slots: the per-slot GEMV) and 5 (10 slots: the tiled kernel); the kernels run
    (a spy counts their launches: one per projection), the caller's tensors are not touched."""
    model = copy.deepcopy(dense_model(arch)).to(DEVICE)
    compress_all(model)
    experts, x, ids, w = routed(model, tokens, seed=tokens)
    want = per_expert(experts, x, ids, w, monkeypatch)
    monkeypatch.setenv("WCODEC_FIXED_TRITON", "1")
    calls, real = [], fg.grouped_linear
    monkeypatch.setattr(fg, "grouped_linear", lambda *a: calls.append(1) or real(*a))
    before = [t.clone() for t in (x, ids, w)]
    with torch.no_grad():
        got = experts(x, ids, w)
    assert len(calls) == 2 and got.shape == want.shape and got.dtype == want.dtype
    assert torch.isfinite(got).all() and rel(got, want) < 2e-2
    assert all(torch.equal(a, b) for a, b in zip((x, ids, w), before))


def test_whole_model_and_prompt_path(monkeypatch):
    """A Mixtral model forward (every layer's experts grouped) against the per-expert path, with
    the prefill tiles (PREFILL_SLOTS 0) and the decode-all + grouped-matmul threshold off."""
    model = copy.deepcopy(dense_model("mixtral")).to(DEVICE)
    compress_all(model)
    ids = torch.randint(0, 64, (2, 7), generator=torch.Generator().manual_seed(3)).to(DEVICE)
    with torch.no_grad():
        with monkeypatch.context() as m:
            m.setattr(ex, "GROUPED", False)
            want = model(ids).logits
        monkeypatch.setenv("WCODEC_FIXED_TRITON", "1")
        monkeypatch.setattr(fg, "PREFILL_SLOTS", 0)
        got = model(ids).logits
    assert rel(got, want) < 2e-2


def test_expert_parallel_sentinels_contribute_nothing(monkeypatch):
    """Ids >= num_experts (expert parallelism's sentinel) sort past every expert: zeros, as the
    eager loop skips them."""
    model = copy.deepcopy(dense_model("qwen3_moe")).to(DEVICE)
    compress_all(model)
    experts, x, ids, w = routed(model, 3, seed=9)
    # the reference: the same slot routed to expert 0 with weight 0 (transformers 5.17's eager
    # loop has no sentinel class in its one_hot: it raises on such an id)
    ref_ids, ref_w = ids.clone(), w.clone()
    ref_ids[1, 1], ref_w[1, 1] = 0, 0
    want = per_expert(experts, x, ref_ids, ref_w, monkeypatch)
    ids = ids.clone()
    ids[1, 1] = experts.num_experts
    monkeypatch.setenv("WCODEC_FIXED_TRITON", "1")
    monkeypatch.setattr(experts, "_is_expert_parallel", True, raising=False)
    with torch.no_grad():
        got = experts(x, ids, w)
    assert rel(got, want) < 2e-2


def test_grad_and_exact_modules_keep_the_per_expert_path(monkeypatch):
    monkeypatch.setenv("WCODEC_FIXED_TRITON", "1")
    calls = []
    monkeypatch.setattr(ex, "grouped_forward", lambda *a: calls.append(1))
    model = copy.deepcopy(dense_model("mixtral")).to(DEVICE)
    compress_all(model, exact=True)
    experts, x, ids, w = routed(model, 2, seed=4)
    with torch.no_grad():
        experts(x, ids, w)
    experts.__dict__["_wcodec_exact"] = False  # an input gradient to compute: the loop too
    experts(x.requires_grad_(True), ids, w).float().sum().backward()
    assert not calls and x.grad is not None


def test_packed_experts_read_the_module_buffer_without_a_copy(monkeypatch):
    """packed_experts: views of the packed buffer (same storage), offset table rows pointing at
    each expert's planes, every expert decoding bit-exact; bad offsets refused."""
    monkeypatch.setenv("WCODEC_FIXED_TRITON", "1")
    model = copy.deepcopy(dense_model("gpt_oss")).to(DEVICE)
    dense = model.model.layers[0].mlp.experts.down_proj.detach().clone()
    compress_all(model)
    experts = model.model.layers[0].mlp.experts
    weights = ex._weights(experts, "down_proj")
    g = weights.grouped
    assert g.lo.untyped_storage().data_ptr() == weights.packed.untyped_storage().data_ptr() and not g.stacked
    assert g.table.shape == (g.E, 5) and g.table[:, 0].tolist() == [o // 8 for o in weights.host[0][:-1]]
    got = fg.decode_experts(g)
    assert torch.equal(got.view(torch.int16), dense.transpose(1, 2).view(torch.int16))
    offsets, bases, n, k = weights.host
    ex._GROUPED.clear()  # the custom op rebuilds the views from the host lists when it finds none
    y = torch.ops.wcodec.grouped_fixed_linear(torch.ones(1, k, dtype=torch.bfloat16, device=DEVICE), weights.packed,
                                              g.table, g.bases, torch.zeros(2, dtype=torch.int64, device=DEVICE),
                                              torch.tensor([0, 0, 1, 2, 2], device=DEVICE), offsets, bases, n, k)
    assert y.shape == (2, n) and rel(y, dense[1:3].float().sum(1)) < 1e-2  # experts 1 and 2 times ones
    with pytest.raises(fg.InvalidInputError, match="do not split"):
        fg.packed_experts(weights.packed, [o + 8 for o in offsets], bases, n, k)
    with pytest.raises(fg.InvalidInputError, match="do not split"):
        fg.packed_experts(weights.packed, offsets, bases, n + 1, k)


def test_sort_routes_as_route():
    ids = torch.tensor([[3, 0], [1, 3], [0, 1], [3, 2]], device=DEVICE)
    perm, sorted_ids, offsets = fg.sort_routes(ids, 4)
    order, offs, choice = fg.route(ids, 4)
    assert offsets.tolist() == offs.tolist() == [0, 2, 4, 5, 8]
    for e in range(4):  # the same slots per expert (order within an expert may differ)
        a, b = offsets[e], offsets[e + 1]
        assert sorted(zip((perm[a:b] // 2).tolist(), (perm[a:b] % 2).tolist())) == \
            sorted(zip(order[a:b].tolist(), choice[a:b].tolist()))
        assert (sorted_ids[a:b] == e).all()
    perm, sorted_ids, offsets = fg.sort_routes(torch.tensor([[4, 0]], device=DEVICE), 4)
    assert offsets.tolist() == [0, 1, 1, 1, 1] and perm.tolist() == [1, 0]


def test_forward_compiles_whole(monkeypatch):
    """torch.compile(fullgraph=True) takes the grouped forward whole (no graph break, no host
    synchronisation: the routing by sort and searchsorted, the projections as the
    ``wcodec::grouped_fixed_linear`` custom op), with the same result as eager; gpt-oss: biases,
    transposed layout, its own gate."""
    monkeypatch.setenv("WCODEC_FIXED_TRITON", "1")
    torch._dynamo.reset()
    model = copy.deepcopy(dense_model("gpt_oss")).to(DEVICE)
    compress_all(model)
    experts, x, ids, w = routed(model, 3, seed=8)
    with torch.no_grad():
        want = experts(x, ids, w)
        got = torch.compile(lambda *a: experts(*a), backend="aot_eager", fullgraph=True)(x, ids, w)
    assert torch.equal(got, want)


@pytest.mark.parametrize("arch", ["mixtral", "gpt_oss"])
def test_load_time_warm_up_reaches_every_route_of_the_grouped_forward(monkeypatch, arch):
    """wcodec.hf.warmup keys a compressed experts module by its class and expert shapes and runs
    its own forward over token counts whose routed slots reach the GEMV, both tile launches and
    the decode + grouped_mm route (so that no Triton compile happens while serving a MoE model);
    the routes spread the slots over every expert; the module's state is not touched."""
    from wcodec.hf import warmup

    model = copy.deepcopy(dense_model(arch)).to(DEVICE)
    compress_all(model)
    experts = model.model.layers[0].mlp.experts
    keys = [k for k in warmup.distinct_weights(model) if k[0] == "experts"]
    assert len(keys) == 1 and keys[0][1] == type(experts).__name__
    assert [a for a, _ in keys[0][2]] == ex.compressed_attrs(experts)
    before = {k: v.clone() for k, v in experts.state_dict().items()}
    E, H = experts.num_experts, model.config.hidden_size
    seen = []

    def spy(self, x, ids, w):
        seen.append((tuple(x.shape), x.dtype, ids.clone(), w.clone()))
        return torch.zeros_like(x)

    with monkeypatch.context() as m:
        m.setattr(type(experts), "forward", spy)
        calls = warmup.warm_module(experts, torch.bfloat16)
    assert calls == len(seen) == len(warmup.expert_tokens(E, 2))
    tokens = [s[0][0] for s in seen]
    assert set(warmup.rows()) <= set(tokens) and all(s[0][1] == H and s[1] == torch.bfloat16 for s in seen)
    slots = [t * 2 for t in tokens]
    assert any(s <= fg.GEMV_MAX_SLOTS for s in slots)
    assert any(fg.GEMV_MAX_SLOTS < s <= fg.PREFILL_SLOTS * E for s in slots)
    assert any(fg.PREFILL_SLOTS * E < s <= fg.DECODE_SLOTS * E for s in slots)
    assert any(s > fg.DECODE_SLOTS * E for s in slots)
    for (t, _), _, ids, w in seen:
        assert ids.shape == (t, 2) and int(ids.max()) < E and torch.allclose(w.float().sum(-1), torch.ones(t, device=w.device))
        if t * 2 >= E:
            assert set(ids.flatten().tolist()) == set(range(E))
    assert warmup.warm_experts(experts, torch.bfloat16) == calls  # the real forward, every T
    assert all(torch.equal(before[k], v) for k, v in experts.state_dict().items())
