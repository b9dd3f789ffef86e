"""CompressedLinear and compress_model on the CPU path (decode + F.linear): bit-identical to
nn.Linear forward and backward, frozen weight, adapters train, state_dict, torch.compile."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
from torch import nn  # noqa: E402

from wcodec.errors import UnsupportedError  # noqa: E402
from wcodec.torch.linear import CompressedLinear, compress_model  # noqa: E402


@pytest.fixture(autouse=True)
def _cpu_path(monkeypatch):
    monkeypatch.delenv("WCODEC_FIXED_TRITON", raising=False)


def bf16_linear(i, o, bias=True, seed=0):
    torch.manual_seed(seed)
    return nn.Linear(i, o, bias=bias).to(torch.bfloat16)


@pytest.mark.parametrize("bias", [True, False])
def test_forward_backward_equal_dense(bias):
    lin = bf16_linear(70, 33, bias)
    cl = CompressedLinear.from_linear(lin)
    x1 = torch.randn(2, 5, 70, dtype=torch.bfloat16, requires_grad=True)
    x2 = x1.detach().clone().requires_grad_(True)
    y1, y2 = lin(x1), cl(x2)
    assert torch.equal(y1, y2)
    y1.float().square().sum().backward()
    y2.float().square().sum().backward()
    assert torch.equal(x1.grad, x2.grad)
    if bias:
        assert torch.equal(lin.bias.grad, cl.bias.grad)
    assert all(not b.requires_grad for b in cl.buffers())  # the weight is frozen


def test_to_linear_state_dict_and_repr():
    lin = bf16_linear(64, 48)
    lin.weight.data.view(-1)[:4] = torch.tensor([float("nan"), float("inf"), -0.0, 1e-40]).to(torch.bfloat16)
    cl = CompressedLinear.from_linear(lin)
    back = cl.to_linear()
    assert torch.equal(back.weight.view(torch.int16), lin.weight.view(torch.int16))
    cl2 = CompressedLinear.from_weight(torch.zeros(48, 64, dtype=torch.bfloat16), torch.zeros(48, dtype=torch.bfloat16))
    cl2.load_state_dict(cl.state_dict())
    assert torch.equal(cl2.decoded_weight().view(torch.int16), lin.weight.view(torch.int16))
    assert "bits/weight" in repr(cl) and cl.compressed_nbytes < lin.weight.numel() * 2


def test_refuses_non_bf16():
    with pytest.raises(UnsupportedError):
        CompressedLinear.from_linear(nn.Linear(8, 8))


def test_adapter_trains_on_frozen_compressed_base():
    base = CompressedLinear.from_linear(bf16_linear(32, 32))
    lora_a = nn.Parameter(torch.randn(4, 32, dtype=torch.bfloat16) * 0.1)
    lora_b = nn.Parameter(torch.zeros(32, 4, dtype=torch.bfloat16))
    opt = torch.optim.SGD([lora_a, lora_b], lr=0.5)
    x = torch.randn(16, 32, dtype=torch.bfloat16)
    target = torch.randn(16, 32, dtype=torch.bfloat16)
    losses = []
    for _ in range(5):
        y = base(x) + (x @ lora_a.T) @ lora_b.T
        loss = (y.float() - target.float()).square().mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    assert losses[-1] < losses[0]


def test_compress_model_report():
    model = nn.Sequential(bf16_linear(64, 128), nn.ReLU(), bf16_linear(128, 64), nn.Linear(64, 64), bf16_linear(64, 8))
    x = torch.randn(3, 64, dtype=torch.bfloat16)
    ref = model[:3](x)
    report = compress_model(model, min_features=16, skip=("4",))
    assert report["replaced"] == ["0", "2"]
    assert set(report["kept"]) == {"3", "4"} and "float32" in report["kept"]["3"]
    assert isinstance(model[0], CompressedLinear) and isinstance(model[3], nn.Linear)
    assert torch.equal(model[:3](x), ref)
    assert report["compressed_bytes"] < report["dense_bytes"]


def test_torch_compile_fullgraph():
    cl = CompressedLinear.from_linear(bf16_linear(32, 16))
    x = torch.randn(4, 32, dtype=torch.bfloat16, requires_grad=True)
    fn = torch.compile(cl, backend="aot_eager", fullgraph=True)
    y = fn(x)
    assert torch.equal(y, cl(x))
    y.float().sum().backward()
    assert x.grad is not None and x.grad.shape == x.shape


def test_state_dict_is_one_packed_buffer_and_the_old_six_buffer_layout_loads():
    from wcodec.gpu import fixed as fx
    lin = bf16_linear(64, 48)
    lin.weight.data.view(-1)[:9] = 0  # escapes
    cl = CompressedLinear.from_linear(lin)
    sd = cl.state_dict()
    assert [k for k in sd if k != "_extra_state"] == ["bias", "w_packed"] and sd["w_packed"].dtype == torch.uint8
    fw = cl.fixed_weight
    old = {"bias": cl.bias.detach(), "_extra_state": sd["_extra_state"],
           **{name: getattr(fw, field).clone() for field, name in
              {"lo": "w_lo", "nib": "w_nib", "eptr": "esc_ptr", "ecol": "esc_col", "eval": "esc_val",
               "erow": "esc_row"}.items()}}
    kept = {k: v.clone() for k, v in old.items() if k != "_extra_state"}
    other = CompressedLinear.from_weight(torch.zeros(48, 64, dtype=torch.bfloat16), torch.zeros(48, dtype=torch.bfloat16))
    other.load_state_dict(old)
    assert torch.equal(other.decoded_weight().view(torch.int16), lin.weight.view(torch.int16))
    assert all(torch.equal(old[k], v) for k, v in kept.items())  # the caller's dict and tensors untouched
    assert isinstance(other.fixed_weight, fx.FixedWeight) and other.fixed_weight.ecol.numel() == 9
