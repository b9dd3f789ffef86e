"""A transformers experts module whose eager forward computes its own way (OpenAI Privacy Filter:
its per-expert loop in float32, where the generic eager loop multiplies in bfloat16) kept
compressed on the CPU gives the dense model's logits bit for bit: the CPU path runs the module's
own forward over the decoded experts for "eager" too (held-out sweep, token mapping: 0.0039 off)."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
tf = pytest.importorskip("transformers")

import wcodec  # noqa: E402,F401  (registers the quantizer)
from wcodec.hf import WcodecConfig, convert_folder  # noqa: E402

SMALL = dict(vocab_size=128, hidden_size=64, intermediate_size=64, head_dim=16, num_attention_heads=4,
             num_key_value_heads=2, num_hidden_layers=2, num_local_experts=4, num_experts_per_tok=2,
             pad_token_id=127, eos_token_id=127, num_labels=3)


@pytest.mark.parametrize("implementation", ["eager", None])
def test_float32_experts_loop_kept_compressed_exact(tmp_path, implementation):
    try:
        config = tf.AutoConfig.for_model("openai_privacy_filter", **SMALL)
        cls = tf.AutoModelForTokenClassification._model_mapping[type(config)]
    except (ValueError, KeyError):
        pytest.skip("this transformers has no openai_privacy_filter token classifier")
    torch.manual_seed(0)
    dense = cls(config).to(torch.bfloat16).eval()
    with torch.no_grad():  # experts whose bf16 and fp32 products differ visibly
        for p in dense.parameters():
            if p.dim() == 3:
                p.copy_(torch.randn_like(p, dtype=torch.float32).mul(0.5).to(p.dtype))
    if implementation:
        dense.set_experts_implementation(implementation)
    src, dst = tmp_path / "bf16", tmp_path / "wc"
    dense.save_pretrained(src)
    convert_folder(src, dst)
    kwargs = {"experts_implementation": implementation} if implementation else {}
    ref = cls.from_pretrained(src, dtype=torch.bfloat16, **kwargs).eval()
    kept = cls.from_pretrained(dst, dtype=torch.bfloat16, quantization_config=WcodecConfig(keep_compressed=True),
                               **kwargs).eval()
    experts = [m for m in kept.modules() if type(m).__name__.startswith("Compressed")]
    assert experts, "the experts were not kept compressed"
    ids = torch.randint(0, 127, (2, 9))
    with torch.no_grad():
        assert torch.equal(kept(input_ids=ids).logits, ref(input_ids=ids).logits)
