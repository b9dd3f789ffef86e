"""A bf16 MoE checkpoint whose config names float32 (Ergo's folders record float32: float32
embeddings first) loads in float32: its experts, bf16 values held in float32, stay compressed
(the bf16 fixed layout, decoded for each call), outputs equal the dense float32 model's bit for
bit, and a kept-compressed save reloads the same. Trained float32 experts stay dense, with the
reason in the report (sweep 5.25, causal ergo: "2 weights not kept compressed")."""

from __future__ import annotations

import json

import pytest

torch = pytest.importorskip("torch")
tf = pytest.importorskip("transformers")

import wcodec  # noqa: E402,F401  (registers the quantizer)
from wcodec.hf import WcodecConfig, convert_folder  # noqa: E402

SMALL = dict(vocab_size=128, hidden_size=64, intermediate_size=64, num_attention_heads=4, num_key_value_heads=2,
             num_hidden_layers=2, num_local_experts=4, num_experts_per_tok=2, max_position_embeddings=64)
EXPERTS = ("model.layers.0.mlp.experts.gate_up_proj", "model.layers.0.mlp.experts.down_proj")


def _folder(tmp_path, bf16_values: bool):
    torch.manual_seed(0)
    model = tf.MixtralForCausalLM(tf.MixtralConfig(**SMALL)).eval()
    if bf16_values:
        model = model.to(torch.bfloat16)
    src = tmp_path / "src"
    model.save_pretrained(src)
    cfg = json.loads((src / "config.json").read_text())
    cfg["dtype"] = "float32"
    (src / "config.json").write_text(json.dumps(cfg))
    return src


def _logits(model):
    ids = torch.randint(0, 128, (2, 9), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        return model(input_ids=ids).logits


@pytest.mark.parametrize("codec", [None, "fixed"])
def test_bf16_values_in_float32_kept_compressed(tmp_path, codec):
    # Mixtral's folder stores experts one by one (merged on load): encoded in the bf16 layout as
    # loaded; stored [E, N, K] records are taken as they are (test_hf_experts_own_forward)
    src = _folder(tmp_path, bf16_values=True)
    dst = tmp_path / "wc"
    convert_folder(src, dst, codec=codec)
    ref = tf.AutoModelForCausalLM.from_pretrained(src).eval()
    kept = tf.AutoModelForCausalLM.from_pretrained(dst, quantization_config=WcodecConfig(keep_compressed=True)).eval()
    assert ref.dtype == kept.dtype == torch.float32
    report = kept.wcodec_weights.report
    for name in EXPERTS:
        assert name.replace("layers.0", "layers.1") in report["compressed"] and name in report["compressed"]
    experts = kept.model.layers[0].mlp.experts
    assert experts.gate_up_proj.dtype == torch.float32
    want = _logits(ref)
    assert torch.equal(_logits(kept).view(torch.int32), want.view(torch.int32))
    saved = tmp_path / "saved"
    kept.save_pretrained(saved)
    again = tf.AutoModelForCausalLM.from_pretrained(saved, quantization_config=WcodecConfig(keep_compressed=True))
    assert all(n in again.wcodec_weights.report["compressed"] for n in EXPERTS)
    assert torch.equal(_logits(again.eval()).view(torch.int32), want.view(torch.int32))


def test_float32_values_stay_dense_with_the_reason(tmp_path):
    src = _folder(tmp_path, bf16_values=False)
    dst = tmp_path / "wc"
    convert_folder(src, dst)
    ref = tf.AutoModelForCausalLM.from_pretrained(src).eval()
    kept = tf.AutoModelForCausalLM.from_pretrained(dst, quantization_config=WcodecConfig(keep_compressed=True)).eval()
    report = kept.wcodec_weights.report
    for name in EXPERTS:
        assert name in report["decoded"] and "bfloat16 does not hold" in report["kept"][name]
    assert torch.equal(_logits(kept).view(torch.int32), _logits(ref).view(torch.int32))
