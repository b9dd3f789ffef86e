"""``.weight`` of CompressedLinear / CompressedEmbedding (a FixedWeightTensor): metadata without
decoding, bit-exact values through any op, state_dict untouched, copies, torch.compile, and a
model that reads ``.weight`` in its forward (T5)."""

from __future__ import annotations

import copy
import io

import pytest

torch = pytest.importorskip("torch")
from torch import nn  # noqa: E402

from wcodec.torch.embedding import CompressedEmbedding  # noqa: E402
from wcodec.torch.linear import CompressedLinear, compress_model  # noqa: E402
from wcodec.torch.weight_view import FixedWeightTensor  # noqa: E402


@pytest.fixture(autouse=True)
def _cpu_path(monkeypatch):
    monkeypatch.delenv("WCODEC_FIXED_TRITON", raising=False)


def bits(t):
    return t.view(torch.int16)


def linear(i=40, o=24, seed=0):
    torch.manual_seed(seed)
    lin = nn.Linear(i, o).to(torch.bfloat16)
    lin.weight.data.view(-1)[:3] = torch.tensor([float("nan"), -0.0, 3e38]).to(torch.bfloat16)  # escapes
    return lin


def test_linear_weight_reads_like_nn_linear():
    lin = linear()
    cl = CompressedLinear.from_linear(lin)
    w = cl.weight
    assert isinstance(w, torch.Tensor) and isinstance(w, FixedWeightTensor)
    assert (w.dtype, w.device, w.shape, w.ndim, w.numel()) == (torch.bfloat16, torch.device("cpu"), (24, 40), 2, 960)
    assert not w.requires_grad and cl.weight is w  # cached
    assert (cl.in_features, cl.out_features, cl.bias.shape) == (40, 24, (24,))
    for got, want in ((w.data, lin.weight), (w.T, lin.weight.T), (w.detach().clone(), lin.weight),
                      (w.float(), lin.weight.float())):
        assert type(got) is torch.Tensor and got.shape == want.shape
        assert torch.equal(got.view(torch.int16) if got.dtype == torch.bfloat16 else got.view(torch.int32),
                           want.view(torch.int16) if want.dtype == torch.bfloat16 else want.view(torch.int32))
    x = torch.randn(3, 40, dtype=torch.bfloat16)
    assert torch.equal(bits(nn.functional.linear(x, w, cl.bias)), bits(cl(x)))
    assert w.to("cpu") is w and w.to(torch.bfloat16) is w  # no-op moves do not decode


def test_state_dict_and_parameters_do_not_gain_a_weight():
    cl = CompressedLinear.from_linear(linear())
    cl.weight  # noqa: B018 (fills the cache)
    assert set(cl.state_dict()) == {"w_packed", "bias", "_extra_state"}
    assert [n for n, _ in cl.named_parameters()] == ["bias"]
    assert [n for n, _ in cl.named_buffers()] == ["w_packed"]
    with pytest.raises(AttributeError):
        cl.weight = torch.zeros(24, 40, dtype=torch.bfloat16)  # frozen: a plain tensor does not replace it


def test_a_tied_parameter_is_registered_as_tie_weights_does():
    lin = linear()
    cl = CompressedLinear.from_linear(lin)
    x = torch.randn(2, 40, dtype=torch.bfloat16)
    y = cl(x)
    tied = nn.Parameter(lin.weight.detach().clone())
    cl.weight = tied  # transformers' tie_weights: setattr(lm_head, "weight", embed_tokens.weight)
    assert cl.weight is tied and "weight" in cl.state_dict()
    assert torch.equal(bits(cl(x)), bits(y))  # forward still reads the compressed layout


def test_view_follows_moves_loads_copies_and_pickles():
    lin = linear()
    cl = CompressedLinear.from_linear(lin)
    first = cl.weight
    cl.to(torch.float32)  # casts the bias and the dtype the layer computes in; drops the cached view
    assert cl.weight is not first and cl.weight._packed is cl.w_packed
    assert cl.weight.dtype == torch.float32  # the layout's values cast (NaN payloads too)
    assert torch.equal(cl.weight.data.view(torch.int32), lin.weight.detach().float().view(torch.int32))
    other = CompressedLinear.from_linear(linear(seed=1))
    other.weight  # noqa: B018
    other.load_state_dict(cl.state_dict())
    assert torch.equal(bits(other.weight.data), bits(lin.weight))
    for dup in (copy.deepcopy(cl), _pickled(cl)):
        assert dup.weight._packed is dup.w_packed and dup.w_packed is not cl.w_packed
        assert dup.weight.dtype == torch.float32 and torch.equal(bits(dup.weight.data.bfloat16()), bits(lin.weight))
    assert torch.equal(bits(copy.deepcopy(cl.weight).bfloat16()), bits(lin.weight))
    cl.to(torch.bfloat16)
    assert torch.equal(bits(cl.weight.data), bits(lin.weight))


def _pickled(module):
    buf = io.BytesIO()
    torch.save(module, buf)
    buf.seek(0)
    return torch.load(buf, weights_only=False)


def test_embedding_weight_and_attributes():
    torch.manual_seed(0)
    emb = nn.Embedding(30, 16, padding_idx=2).to(torch.bfloat16)
    ce = CompressedEmbedding.from_embedding(emb)
    assert (ce.num_embeddings, ce.embedding_dim, ce.padding_idx) == (30, 16, 2)
    assert (ce.max_norm, ce.sparse, ce.scale_grad_by_freq) == (None, False, False)
    assert ce.weight.shape == (30, 16) and ce.weight.dtype == torch.bfloat16
    assert torch.equal(bits(ce.weight.data), bits(emb.weight))
    assert set(ce.state_dict()) == {"w_packed", "_extra_state"}


def test_compile_reads_weight_metadata_without_graph_break():
    class Reader(nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = CompressedLinear.from_linear(linear())

        def forward(self, x):
            if x.dtype != self.lin.weight.dtype:  # as T5's feed-forward does
                x = x.to(self.lin.weight.dtype)
            return self.lin(x) * self.lin.weight.shape[0]

    m = Reader()
    x = torch.randn(2, 40)
    explained = torch._dynamo.explain(m)(x)
    assert explained.graph_break_count == 0 and explained.graph_count == 1
    torch._dynamo.reset()
    assert torch.equal(bits(torch.compile(m, fullgraph=True, backend="eager")(x)), bits(m(x)))


def test_t5_reading_weight_dtype_runs_compressed_and_exact():
    transformers = pytest.importorskip("transformers")
    cfg = transformers.T5Config(vocab_size=64, d_model=32, d_kv=8, d_ff=48, num_layers=1, num_decoder_layers=1,
                                num_heads=2, decoder_start_token_id=0, pad_token_id=0)
    torch.manual_seed(0)
    dense = transformers.T5ForConditionalGeneration(cfg).to(torch.bfloat16).eval()
    model = copy.deepcopy(dense)
    report = compress_model(model, min_features=8)
    assert any(n.endswith("DenseReluDense.wo") for n in report["replaced"])
    ids = torch.randint(1, 64, (2, 7))
    with torch.no_grad():
        want = dense(input_ids=ids, decoder_input_ids=ids[:, :3]).logits
        got = model(input_ids=ids, decoder_input_ids=ids[:, :3]).logits
        assert torch.equal(got, want)
        assert torch.equal(model.generate(ids, max_new_tokens=2, do_sample=False),
                           dense.generate(ids, max_new_tokens=2, do_sample=False))


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_weight_on_cuda():
    lin = linear().cuda()
    cl = CompressedLinear.from_linear(lin)
    assert cl.weight.device == lin.weight.device and torch.equal(bits(cl.weight.data), bits(lin.weight))
    cl.cpu()
    assert cl.weight.device.type == "cpu" and torch.equal(bits(cl.weight.data), bits(lin.weight.cpu()))
