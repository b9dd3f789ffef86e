"""peft's ``target_parameters`` (LoRA on an nn.Parameter: an experts module's ``gate_up_proj`` /
``down_proj``) on a MoE model kept compressed: the targeted expert parameters become dense
parameters again (peft parametrizes nn.Parameters only), with a warning and the load report
updated, the others stay compressed; outputs and gradients equal the same adapter's on the dense
model, and the adapter saved on the compressed base loads on the dense one. Before, peft found
nothing to adapt ("no `target_parameters` found")."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
tf = pytest.importorskip("transformers")
peft = pytest.importorskip("peft")
if not hasattr(peft.LoraConfig(), "target_parameters"):
    pytest.skip("this peft has no target_parameters (peft >= 0.17)", allow_module_level=True)

import wcodec  # noqa: E402,F401  (registers the quantizer and the peft steps)
from wcodec.hf import WcodecConfig, convert_folder  # noqa: E402
from wcodec.torch.experts import compressed_attrs  # noqa: E402

SMALL = dict(vocab_size=128, hidden_size=64, intermediate_size=64, num_attention_heads=4, num_key_value_heads=2,
             num_hidden_layers=2, num_local_experts=4, num_experts_per_tok=2, max_position_embeddings=64)
IDS = torch.randint(0, 128, (2, 9), generator=torch.Generator().manual_seed(1))


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    root = tmp_path_factory.mktemp("moe")
    torch.manual_seed(0)
    tf.MixtralForCausalLM(tf.MixtralConfig(**SMALL)).to(torch.bfloat16).save_pretrained(root / "src")
    convert_folder(root / "src", root / "wc")
    return root / "src", root / "wc"


def _adapted(model, targets):
    torch.manual_seed(7)
    cfg = peft.LoraConfig(r=4, lora_alpha=8, target_modules=[], target_parameters=targets, init_lora_weights=False)
    return peft.get_peft_model(model, cfg)


def _run(model):
    model.zero_grad()
    out = model(input_ids=IDS).logits
    out.float().square().mean().backward()
    grads = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
    return out.detach(), grads


@pytest.mark.parametrize("keep", [True, "jit"])
@pytest.mark.parametrize("targets", [["mlp.experts.gate_up_proj", "mlp.experts.down_proj"], ["experts.down_proj"]])
def test_lora_on_compressed_experts_equals_dense(folders, keep, targets, tmp_path):
    src, wc = folders
    dense = _adapted(tf.AutoModelForCausalLM.from_pretrained(src), targets)
    kept = tf.AutoModelForCausalLM.from_pretrained(wc, quantization_config=WcodecConfig(keep_compressed=keep))
    with pytest.warns(UserWarning, match="LoRA target_parameters on .* compressed expert parameter"):
        kept = _adapted(kept, targets)
    attrs = [t.rpartition(".")[2] for t in targets]
    experts = kept.base_model.model.model.layers[0].mlp.experts.get_base_layer()
    assert compressed_attrs(experts) == [a for a in ("gate_up_proj", "down_proj") if a not in attrs]
    report = kept.base_model.model.wcodec_weights.report
    name = "model.layers.1.mlp.experts.down_proj"
    assert name in report["decoded"] and "target_parameters" in report["kept"][name]
    assert name not in report.get("fused", []) + report.get("compressed", [])
    want, want_grads = _run(dense)
    got, got_grads = _run(kept)
    assert torch.equal(got, want)
    assert want_grads and set(got_grads) == set(want_grads)
    assert all(torch.equal(got_grads[n], want_grads[n]) for n in want_grads)
    # the adapter saved on the compressed base loads on the dense one, and on a compressed one
    kept.save_pretrained(tmp_path / "adapter")
    again = peft.PeftModel.from_pretrained(tf.AutoModelForCausalLM.from_pretrained(src), tmp_path / "adapter")
    base = tf.AutoModelForCausalLM.from_pretrained(wc, quantization_config=WcodecConfig(keep_compressed=keep))
    with pytest.warns(UserWarning, match="LoRA target_parameters"):
        onto = peft.PeftModel.from_pretrained(base, tmp_path / "adapter")
    with torch.no_grad():
        assert torch.equal(again(input_ids=IDS).logits, want)
        assert torch.equal(onto(input_ids=IDS).logits, want)


def test_other_targets_leave_the_experts_compressed(folders):
    _, wc = folders
    kept = tf.AutoModelForCausalLM.from_pretrained(wc, quantization_config=WcodecConfig(keep_compressed=True))
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)
        torch.manual_seed(7)
        kept = peft.get_peft_model(kept, peft.LoraConfig(r=4, target_modules=["q_proj"]))
    experts = kept.base_model.model.model.layers[0].mlp.experts
    assert compressed_attrs(experts) == ["gate_up_proj", "down_proj"]
