"""Weights decoded just in time (wcodec.torch.jit) read outside their module's forward: model code
that takes ``module.weight`` directly (BridgeTower's ``position_embedding.weight.unsqueeze(0)``,
Falcon-Mamba's ``dt_proj.weight @ x``) read whichever weight the shared scratch held last
(wrong outputs, NaN), and a view of the scratch taken then changed with the next decode."""

from __future__ import annotations

import copy

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from wcodec.codecs import encode_tensor  # noqa: E402
from wcodec.torch import CompressedWeights  # noqa: E402
from wcodec.torch.jit import JitWeight  # noqa: E402


def _record(w: torch.Tensor):
    return encode_tensor(w.view(torch.int16).numpy().view(np.uint16), "BF16")


class _Model(torch.nn.Module):
    """An embedding read as a table (no call), a Linear whose weight meets a matmul outside its
    forward, and a Linear called as usual between them (it overwrites the shared scratch)."""

    def __init__(self):
        super().__init__()
        self.pos = torch.nn.Embedding(6, 32)
        self.dt = torch.nn.Linear(32, 16, bias=False)
        self.proj = torch.nn.Linear(32, 32)

    def forward(self, x):
        table = self.pos.weight.unsqueeze(0)  # a view taken before another weight decodes
        h = self.proj(x)
        h = h + table[:, : x.shape[1]]
        return (self.dt.weight @ h.transpose(1, 2)).transpose(1, 2)


def _compressed(dense):
    model = copy.deepcopy(dense)
    cw = CompressedWeights("cpu")
    for name in ("pos", "dt", "proj"):
        cw.add(name, name, _record(getattr(dense, name).weight.detach()), torch.bfloat16)
    views = cw.allocate()
    for name in ("pos", "dt", "proj"):
        mod = getattr(model, name)
        mod.weight = torch.nn.Parameter(views[name], requires_grad=False)
        cw.attach(mod, name)
    return model, cw


def test_weights_read_outside_their_forward_are_their_own():
    torch.manual_seed(0)
    dense = _Model().to(torch.bfloat16)
    model, cw = _compressed(dense)
    x = torch.randn(2, 5, 32, dtype=torch.bfloat16)
    with torch.no_grad():
        want = dense(x)
        assert torch.equal(model(x), want)
        assert torch.equal(model(x), want)  # again: the scratch held the last weight of the first call
    assert isinstance(model.pos.weight, JitWeight) and isinstance(model.pos.weight, torch.nn.Parameter)


def test_a_view_of_a_weight_is_a_copy_and_metadata_decodes_nothing():
    torch.manual_seed(0)
    dense = _Model().to(torch.bfloat16)
    model, cw = _compressed(dense)
    t = model.pos.weight.T  # decodes pos; a copy, not the scratch
    assert t.data_ptr() != cw.scratch.data_ptr() and type(t) is torch.Tensor
    model.proj(torch.randn(1, 32, dtype=torch.bfloat16))  # the scratch now holds proj
    assert torch.equal(t, dense.pos.weight.T) and cw.holding == "proj"
    w = model.dt.weight
    assert (w.shape, w.dtype, w.device, w.requires_grad, w.dim()) == ((16, 32), torch.bfloat16, torch.device("cpu"),
                                                                      False, 2)
    assert w.data_ptr() == cw.scratch.data_ptr() and cw.holding == "proj"  # metadata: no decode
    assert torch.equal(w.float(), dense.dt.weight.float())
    assert torch.equal(copy.deepcopy(model.dt.weight), dense.dt.weight)
    assert set(model.state_dict()) == set(dense.state_dict())
    assert all(torch.equal(v, dense.state_dict()[k]) for k, v in model.state_dict().items())


def test_tied_modules_share_one_weight():
    torch.manual_seed(0)
    emb, head = torch.nn.Embedding(64, 32).to(torch.bfloat16), torch.nn.Linear(32, 64, bias=False)
    cw = CompressedWeights("cpu")
    cw.add("e", "e", _record(emb.weight.detach()), torch.bfloat16)
    views = cw.allocate()
    p = torch.nn.Parameter(views["e"], requires_grad=False)
    emb2, head2 = torch.nn.Embedding(64, 32), torch.nn.Linear(32, 64, bias=False)
    emb2.weight = head2.weight = p
    cw.attach(emb2, "e")
    cw.attach(head2, "e")
    assert emb2.weight is head2.weight
    ids = torch.tensor([[1, 2, 3]])
    with torch.no_grad():
        assert torch.equal(head2(emb2(ids)), torch.nn.functional.linear(emb(ids), emb.weight))


def test_two_weights_of_one_scratch_in_one_op():
    torch.manual_seed(0)
    dense = _Model().to(torch.bfloat16)
    model, cw = _compressed(dense)
    got = torch.cat([model.proj.weight, model.dt.weight])
    assert torch.equal(got, torch.cat([dense.proj.weight, dense.dt.weight]))
