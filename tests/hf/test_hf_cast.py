"""``model.to(dtype)`` on a model kept compressed computes as the
dense model cast the same way: fused layers, compressed embeddings and experts follow the cast
(their layout's values cast, as the dense model's cast weights hold), ``.weight`` reads in the
new dtype, and casting back gives bf16 again. Before, the compressed embedding kept returning
bf16, so a float32 model ran in bf16 without a word (and float16 failed in a matmul)."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
tf = pytest.importorskip("transformers")

import wcodec  # noqa: E402,F401  (registers the quantizer)
from wcodec.hf import WcodecConfig, convert_folder  # noqa: E402
from wcodec.torch.embedding import CompressedEmbedding  # noqa: E402
from wcodec.torch.linear import CompressedLinear  # noqa: E402

COMMON = dict(vocab_size=128, hidden_size=64, intermediate_size=64, num_attention_heads=4, num_key_value_heads=2,
              num_hidden_layers=2, max_position_embeddings=64)
CONFIGS = {"mixtral": lambda: tf.MixtralConfig(num_local_experts=4, num_experts_per_tok=2, **COMMON),
           "llama_tied": lambda: tf.LlamaConfig(tie_word_embeddings=True, **COMMON)}
IDS = torch.randint(0, 128, (2, 9), generator=torch.Generator().manual_seed(1))
# transformers refuses .float() / .half() on a quantized model (a ValueError); .to(dtype) it passes on
CASTS = {"float32": lambda m: m.to(torch.float32), "float16": lambda m: m.to(dtype=torch.float16),
         "float32 then bfloat16": lambda m: m.to(dtype=torch.float32).to(torch.bfloat16)}


@pytest.fixture(scope="module", params=sorted(CONFIGS))
def folders(request, tmp_path_factory):
    root = tmp_path_factory.mktemp(request.param)
    torch.manual_seed(0)
    tf.AutoModelForCausalLM.from_config(CONFIGS[request.param]()).to(torch.bfloat16).save_pretrained(root / "src")
    convert_folder(root / "src", root / "wc")
    convert_folder(root / "src", root / "fixed", codec="fixed")
    return root


@pytest.mark.parametrize("cast", sorted(CASTS))
@pytest.mark.parametrize("keep", [True, "jit"])
@pytest.mark.parametrize("folder", ["wc", "fixed"])
def test_cast_computes_as_the_dense_model_cast(folders, folder, keep, cast):
    dense = CASTS[cast](tf.AutoModelForCausalLM.from_pretrained(folders / "src")).eval()
    kept = tf.AutoModelForCausalLM.from_pretrained(folders / folder, quantization_config=WcodecConfig(keep_compressed=keep))
    kept = CASTS[cast](kept).eval()
    want = dense.dtype
    fused = [m for m in kept.modules() if isinstance(m, (CompressedLinear, CompressedEmbedding))]
    assert fused or keep == "jit"
    assert all(m.weight.dtype == want for m in fused)
    with torch.no_grad():
        got, ref = kept(input_ids=IDS).logits, dense(input_ids=IDS).logits
    assert got.dtype == ref.dtype == want
    assert torch.equal(got, ref)


@pytest.mark.parametrize("keep", [True, "jit"])
def test_cast_model_saves_in_its_dtype(folders, keep, tmp_path):
    """save_pretrained after .to(float32) records float32 in the config (as transformers does):
    a plain reload, and a kept-compressed one, is the float32 model."""
    dense = tf.AutoModelForCausalLM.from_pretrained(folders / "src").to(torch.float32)
    kept = tf.AutoModelForCausalLM.from_pretrained(folders / "fixed", quantization_config=WcodecConfig(keep_compressed=keep))
    kept.to(torch.float32).save_pretrained(tmp_path / "saved")
    with torch.no_grad():
        want = dense.eval()(input_ids=IDS).logits
        for again in (tf.AutoModelForCausalLM.from_pretrained(tmp_path / "saved"),
                      tf.AutoModelForCausalLM.from_pretrained(tmp_path / "saved",
                                                              quantization_config=WcodecConfig(keep_compressed=keep))):
            assert again.dtype == torch.float32 and torch.equal(again.eval()(input_ids=IDS).logits, want)


def test_layers_follow_the_cast():
    torch.manual_seed(0)
    lin = torch.nn.Linear(64, 32).to(torch.bfloat16)
    emb = torch.nn.Embedding(50, 64).to(torch.bfloat16)
    clin, cemb = CompressedLinear.from_linear(lin), CompressedEmbedding.from_embedding(emb)
    x, idx = torch.randn(3, 64), torch.tensor([[1, 7, 49]])
    for dtype in (torch.float32, torch.float16, torch.bfloat16):
        for m in (lin, emb, clin, cemb):
            m.to(dtype)
        assert clin.weight.dtype == cemb.weight.dtype == dtype and clin.bias.dtype == dtype
        assert torch.equal(clin.weight.data, lin.weight) and torch.equal(cemb.weight.data, emb.weight)
        assert torch.equal(cemb(idx), emb(idx))
        assert torch.equal(clin(x.to(dtype)), lin(x.to(dtype)))
        assert clin.to_linear().weight.dtype == dtype
    assert clin.w_packed.dtype == torch.uint8


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU (the fused kernels)")
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
def test_cuda_cast_runs_the_fused_kernels_in_the_new_dtype(folders, dtype):
    dense = tf.AutoModelForCausalLM.from_pretrained(folders / "src", device_map="cuda").to(dtype).eval()
    kept = tf.AutoModelForCausalLM.from_pretrained(folders / "fixed", device_map="cuda",
                                                   quantization_config=WcodecConfig(keep_compressed=True)).to(dtype)
    ids = IDS.cuda()
    with torch.no_grad():
        got, ref = kept.eval()(input_ids=ids).logits, dense(input_ids=ids).logits
    assert got.dtype == dtype and torch.isfinite(got).all()
    assert ((got.float() - ref.float()).norm() / ref.float().norm()).item() < 2e-2
