"""CompressedLinear16 on the CPU path (numpy decode + F.linear): bit-identical to an fp16
nn.Linear forward and backward, its state dict round trip and hostile state dicts, ``.weight``."""

from __future__ import annotations

import copy
import io
import pickle

import pytest

torch = pytest.importorskip("torch")
from torch import nn  # noqa: E402

from wcodec.errors import CorruptDataError, UnsupportedError  # noqa: E402
from wcodec.torch.linear16 import CompressedLinear16, Fixed16WeightTensor  # noqa: E402


@pytest.fixture(autouse=True)
def _cpu_path(monkeypatch):
    monkeypatch.delenv("WCODEC_FIXED_TRITON", raising=False)


def fp16_linear(i=128, o=48, bias=True, seed=0):
    torch.manual_seed(seed)
    lin = nn.Linear(i, o, bias=bias).half()
    with torch.no_grad():
        lin.weight.normal_(0, 0.02)
        lin.weight.view(-1)[:4] = torch.tensor([float("nan"), float("inf"), -0.0, 6e-8]).half()
    return lin


@pytest.mark.parametrize("bias", [True, False])
def test_forward_backward_equal_dense(bias):
    lin = fp16_linear(bias=bias)
    cl = CompressedLinear16.from_linear(lin)
    x1 = torch.randn(2, 5, 128).half().requires_grad_(True)
    x2 = x1.detach().clone().requires_grad_(True)
    y1, y2 = lin(x1), cl(x2)
    assert torch.equal(y1.view(torch.int16), y2.view(torch.int16))
    y1.float().nan_to_num().square().sum().backward()
    y2.float().nan_to_num().square().sum().backward()
    assert torch.equal(x1.grad.view(torch.int16), x2.grad.view(torch.int16))
    if bias:
        assert torch.equal(lin.bias.grad.view(torch.int16), cl.bias.grad.view(torch.int16))
    assert cl.compressed_nbytes < lin.weight.numel() * 2 and "bits/weight" in repr(cl)


def test_weight_view_and_to_linear():
    lin = fp16_linear()
    cl = CompressedLinear16.from_linear(lin)
    w = cl.weight
    assert isinstance(w, Fixed16WeightTensor) and w.dtype == torch.float16 and w.shape == (48, 128)
    assert torch.equal(w.data.view(torch.int16), lin.weight.view(torch.int16))
    assert torch.equal(w.T.contiguous().view(torch.int16), lin.weight.T.contiguous().view(torch.int16))
    for other in (pickle.loads(pickle.dumps(w)), copy.deepcopy(w)):
        assert type(other) is Fixed16WeightTensor and torch.equal(other.dense().view(torch.int16),
                                                                   lin.weight.view(torch.int16))
    back = cl.to_linear()
    assert back.weight.dtype == torch.float16 and torch.equal(back.weight.view(torch.int16),
                                                              lin.weight.view(torch.int16))


def test_refuses_what_does_not_fit():
    with pytest.raises(UnsupportedError, match="float16"):
        CompressedLinear16.from_weight(torch.zeros(48, 64, dtype=torch.bfloat16))
    wide = (torch.rand(48, 64) * 30 - 20).exp2().half()
    with pytest.raises(UnsupportedError, match="would not save"):
        CompressedLinear16.from_weight(wide)


def test_state_dict_round_trip_through_torch_save():
    lin = fp16_linear()
    cl = CompressedLinear16.from_linear(lin)
    buf = io.BytesIO()
    torch.save(cl.state_dict(), buf)
    buf.seek(0)
    sd = torch.load(buf, weights_only=True)
    other = CompressedLinear16.from_linear(fp16_linear(seed=1))  # another escape count: another size
    other.load_state_dict(sd)
    x = torch.randn(3, 128).half()
    assert torch.equal(other(x).view(torch.int16), lin(x).view(torch.int16))


def _sd():
    return CompressedLinear16.from_linear(fp16_linear()).state_dict()


def _flip(sd, i, value=None):
    sd["w_packed"] = sd["w_packed"].clone()
    sd["w_packed"][i] = sd["w_packed"][i] ^ 0x40 if value is None else value
    return sd


@pytest.mark.parametrize("change,msg", [
    (lambda sd: _flip(sd, -20), "w_packed"),                                 # an escape's row / value
    (lambda sd: _flip(sd, 1536 + 6144 + 100, 0x77), "w_packed"),            # nibbles: escape codes, none listed
    (lambda sd: {**sd, "w_packed": sd["w_packed"][:-3]}, "w_packed"),        # truncated
    (lambda sd: {**sd, "w_packed": sd["w_packed"].int()}, "w_packed"),       # dtype
    (lambda sd: {**sd, "_extra_state": {**sd["_extra_state"], "base": 24}}, "base"),
    (lambda sd: {**sd, "_extra_state": {**sd["_extra_state"], "in_features": 64}}, "in_features"),
])
def test_hostile_state_dicts_are_refused(change, msg):
    target = CompressedLinear16.from_linear(fp16_linear())
    before = target.w_packed.clone()
    with pytest.raises(CorruptDataError, match=msg):
        target.load_state_dict(change(_sd()))
    assert torch.equal(target.w_packed, before)
    with pytest.raises(CorruptDataError, match="base"):
        target.set_extra_state({**target.get_extra_state(), "base": 30})


def test_warm_module_runs_the_fp16_layout():
    from wcodec.gpu import fixed16 as fx16
    from wcodec.hf.warmup import warm_module

    cl = CompressedLinear16.from_linear(fp16_linear())
    before = cl.w_packed.clone()
    assert warm_module(cl, torch.float16) == fx16.GEMV_MAX_M + 1
    assert torch.equal(cl.w_packed, before)


def test_compiles_as_one_op_without_graph_breaks():
    lin = fp16_linear()
    cl = CompressedLinear16.from_linear(lin)
    f = torch.compile(cl, fullgraph=True, backend="aot_eager")
    x1 = torch.randn(3, 128).half().requires_grad_(True)
    x2 = x1.detach().clone().requires_grad_(True)
    y1, y2 = f(x1), lin(x2)
    assert torch.equal(y1.view(torch.int16), y2.view(torch.int16))
    y1.float().nan_to_num().sum().backward()
    y2.float().nan_to_num().sum().backward()
    assert torch.equal(x1.grad.view(torch.int16), x2.grad.view(torch.int16))
    assert torch.equal(cl.bias.grad, lin.bias.grad)
