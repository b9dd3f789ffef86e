"""What the held-out architecture sweep (tools/arch_sweep.py) found: an ``nn.Linear`` subclass
with a forward of its own (DeepSeek-V4's grouped output projection, Dory's float32 LM head) kept
just in time lost that forward, and a model whose bfloat16 weights are all held compressed
reported the dtype of a float32 norm (``model.dtype`` is the first floating parameter's)."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from wcodec.codecs import encode_tensor  # noqa: E402
from wcodec.torch import CompressedWeights  # noqa: E402

from . import _arch  # noqa: E402


class _Grouped(torch.nn.Linear):
    """A Linear whose forward is not F.linear: block-diagonal groups through bmm (the shape of
    DeepseekV4GroupedLinear), saving its weight for the backward."""

    def __init__(self, k, n, groups):
        super().__init__(k, n * groups, bias=False)
        self.groups = groups

    def forward(self, x):
        w = self.weight.view(self.groups, -1, x.shape[-1]).transpose(1, 2)
        return torch.bmm(x.transpose(0, 1), w).transpose(0, 1).reshape(x.shape[0], -1)


def _record(w: torch.Tensor):
    return encode_tensor(w.view(torch.int16).numpy().view(np.uint16), "BF16")


def test_linear_subclass_keeps_its_forward_and_gradients():
    torch.manual_seed(0)
    grouped, other = _Grouped(8, 16, 4).to(torch.bfloat16), torch.nn.Linear(32, 64).to(torch.bfloat16)
    dense = _Grouped(8, 16, 4).to(torch.bfloat16)
    dense.load_state_dict(grouped.state_dict())
    cw = CompressedWeights("cpu")
    cw.add("g", "g", _record(grouped.weight.detach()), torch.bfloat16)
    cw.add("o", "o", _record(other.weight.detach()), torch.bfloat16)
    views = cw.allocate()
    for mod, key in ((grouped, "g"), (other, "o")):
        mod.weight = torch.nn.Parameter(views[key], requires_grad=False)
        cw.attach(mod, key)
    x = torch.randn(5, 4, 8, dtype=torch.bfloat16)
    with torch.no_grad():
        assert torch.equal(grouped(x), dense(x))  # its own forward, not F.linear
        other(torch.randn(5, 32, dtype=torch.bfloat16))
    xg, xd = x.clone().requires_grad_(), x.clone().requires_grad_()
    y = grouped(xg)
    other(torch.randn(5, 32, dtype=torch.bfloat16))  # the shared scratch now holds another weight
    y.float().square().sum().backward()
    dense(xd).float().square().sum().backward()
    assert torch.equal(xg.grad, xd.grad)
    assert grouped.weight.data_ptr() == views["g"].data_ptr()  # back on its scratch view after the call


def _tiny(model_type, tmp_path, auto=None, **config):
    """(reference, kept-compressed model, inputs) of a tiny random ``model_type`` converted lossless
    (``auto``: its Auto class, AutoModelForCausalLM by default)."""
    if model_type not in transformers.CONFIG_MAPPING:
        pytest.skip(f"this transformers has no {model_type}")
    from wcodec.hf import WcodecConfig, convert_folder

    config = dict(vocab_size=512, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                  pad_token_id=0, bos_token_id=1, eos_token_id=2, **config)
    auto = auto or transformers.AutoModelForCausalLM
    torch.manual_seed(0)
    auto.from_config(transformers.AutoConfig.for_model(model_type, **config),
                     dtype=torch.bfloat16).save_pretrained(tmp_path / "src")
    convert_folder(tmp_path / "src", tmp_path / "wc")
    ref = auto.from_pretrained(tmp_path / "src").eval()
    model = auto.from_pretrained(
        tmp_path / "wc", quantization_config=WcodecConfig(keep_compressed=True)).eval()
    feed = {"input_ids": torch.randint(6, 500, (2, 8), generator=torch.Generator().manual_seed(0))}
    return ref, model, feed


def test_deepseek_v4_kept_compressed(tmp_path):
    """Grouped projections stay theirs, float32 norms and sinks do not become the model's dtype."""
    ref, model, feed = _tiny(
        "deepseek_v4", tmp_path, moe_intermediate_size=64, head_dim=16, q_lora_rank=32, qk_rope_head_dim=8,
        o_groups=2, o_lora_rank=32, num_experts_per_tok=2, n_routed_experts=4, index_n_heads=4, index_head_dim=16,
        index_topk=8, layer_types=["heavily_compressed_attention", "compressed_sparse_attention"],
        mlp_layer_types=["hash_moe", "moe"])
    assert ref.dtype == torch.bfloat16 and model.dtype == torch.bfloat16 and model.model.dtype == torch.bfloat16
    try:
        want = _arch.outputs(ref, feed)
    except RuntimeError as e:  # transformers 5.17's own dense model: a float32 input to a bf16 Linear
        pytest.skip(f"transformers {transformers.__version__} cannot run its own tiny deepseek_v4: {e}")
    _arch.assert_same_outputs(_arch.outputs(model, feed), want, "outputs")
    assert "model.layers.0.self_attn.o_a_proj.weight" in _arch.report(model)["compressed"]
    assert type(model.model.layers[0].self_attn.o_a_proj) is type(ref.model.layers[0].self_attn.o_a_proj)


def test_float32_tensors_of_a_bfloat16_model_keep_their_precision(tmp_path):
    """OLMo-Hybrid holds A_log in float32: handed to the quantize operation it was rounded to
    bfloat16 first (logits 0.005 off)."""
    ref, model, feed = _tiny("olmo_hybrid", tmp_path, num_key_value_heads=4, linear_key_head_dim=16,
                             linear_value_head_dim=16, layer_types=["linear_attention", "full_attention"])
    from wcodec.hf.checkpoint import StoredTensor

    a_log = model.model.layers[0].linear_attn.A_log
    assert a_log.dtype == torch.float32 and torch.equal(a_log, ref.model.layers[0].linear_attn.A_log)
    assert not isinstance(a_log, StoredTensor)  # loaded, not a record decoded at every use
    _arch.assert_same_outputs(_arch.outputs(model, feed), _arch.outputs(ref, feed), "outputs")
    model.save_pretrained(tmp_path / "saved")  # a record left in the model: "expected a ... tensor"
    again = transformers.AutoModelForCausalLM.from_pretrained(tmp_path / "saved").eval()
    _arch.assert_same_weights(again, ref, "reloaded")


def test_a_model_without_parameters_left_has_dtype_and_device(tmp_path):
    """OLMo's norms have no weights: kept compressed, the model has no parameter at all."""
    ref, model, feed = _tiny("olmo", tmp_path, num_key_value_heads=4)
    assert not list(model.parameters())
    assert model.dtype == ref.dtype == torch.bfloat16 and model.device == torch.device("cpu")
    _arch.assert_same_outputs(_arch.outputs(model, feed), _arch.outputs(ref, feed), "outputs")


def test_an_empty_linear_saves_and_reloads(tmp_path):
    """MobileBERT's LM head has a [0, vocab] Linear when its embedding size is its width: fused, it
    saved a fixed record that did not read back ("kpad 512 is not 0 for 0 columns")."""
    ref, model, feed = _tiny("mobilebert", tmp_path, auto=transformers.AutoModelForMaskedLM, embedding_size=64,
                             num_feedforward_networks=1, intra_bottleneck_size=32)
    assert ref.cls.predictions.dense.weight.numel() == 0
    _arch.assert_same_outputs(_arch.outputs(model, feed), _arch.outputs(ref, feed), "outputs")
    model.save_pretrained(tmp_path / "saved")
    again = transformers.AutoModelForMaskedLM.from_pretrained(tmp_path / "saved").eval()
    _arch.assert_same_weights(again, ref, "reloaded")


@pytest.mark.parametrize("keep", [True, "jit"])
def test_weights_read_outside_their_module_stay_theirs(tmp_path, keep):
    """BridgeTower's vision tower is read by weight, not by call: nn.MultiheadAttention hands
    ``out_proj.weight`` to F.multi_head_attention_forward, the embeddings take
    ``position_embedding.weight.unsqueeze(0)``. Decoded just in time, those were whichever weight
    the shared scratch held last: NaN outputs kept compressed (True), off by up to 0.9 ("jit")."""
    from wcodec.hf import WcodecConfig, convert_folder

    from . import _feeds

    if "bridgetower" not in transformers.CONFIG_MAPPING:
        pytest.skip("this transformers has no bridgetower")
    width = dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, intermediate_size=128)
    config = transformers.AutoConfig.for_model(
        "bridgetower", hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
        text_config=dict(width, vocab_size=512, pad_token_id=0), vision_config=dict(width, image_size=64, patch_size=16))
    torch.manual_seed(0)
    transformers.AutoModel.from_config(config, dtype=torch.bfloat16).save_pretrained(tmp_path / "src")
    convert_folder(tmp_path / "src", tmp_path / "wc")
    ref = transformers.AutoModel.from_pretrained(tmp_path / "src").eval()
    model = transformers.AutoModel.from_pretrained(
        tmp_path / "wc", quantization_config=WcodecConfig(keep_compressed=keep)).eval()
    feed = _feeds.inputs(ref)
    jit = _arch.report(model)["compressed"]
    assert "vision_model.visual.transformer.resblocks.0.attn.out_proj.weight" in jit
    assert keep is True or "vision_model.visual.embeddings.position_embedding.weight" in jit
    _arch.assert_same_outputs(_arch.outputs(model, feed), _arch.outputs(ref, feed), "outputs")


def test_a_linear_tied_to_a_weight_kept_dense_is_reported_with_it(tmp_path):
    """IBert's lm_head.decoder is tied to its QuantEmbedding table, which stays dense: under "jit"
    the decoder is that same dense tensor, and the report says so (never silently dense)."""
    if "ibert" not in transformers.CONFIG_MAPPING:
        pytest.skip("this transformers has no ibert")
    from wcodec.hf import WcodecConfig, convert_folder

    auto = transformers.AutoModelForMaskedLM
    cfg = transformers.AutoConfig.for_model("ibert", vocab_size=512, hidden_size=64, intermediate_size=128,
                                            num_hidden_layers=1, num_attention_heads=4)
    torch.manual_seed(0)
    auto.from_config(cfg, dtype=torch.bfloat16).save_pretrained(tmp_path / "src")
    convert_folder(tmp_path / "src", tmp_path / "wc")
    model = auto.from_pretrained(tmp_path / "wc", quantization_config=WcodecConfig(keep_compressed="jit")).eval()
    assert model.lm_head.decoder.weight is model.ibert.embeddings.word_embeddings.weight
    rep = _arch.report(model)
    why = rep["kept"]["lm_head.decoder.weight"]
    assert why.startswith("tied to ibert.embeddings.word_embeddings.weight, kept dense: QuantEmbedding")
    assert "lm_head.decoder.weight" in rep["decoded"]
