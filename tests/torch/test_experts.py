"""Compressed MoE experts (wcodec.torch.experts) on tiny random Mixtral, Qwen3-MoE, DeepSeek-V3
and gpt-oss models: outputs and input gradients bit-identical to the dense eager forward on
the CPU, state_dict round trip, decompression, the refusals."""

from __future__ import annotations

import copy

import pytest

torch = pytest.importorskip("torch")
tf = pytest.importorskip("transformers")

from wcodec.errors import WcodecError  # noqa: E402
from wcodec.torch.experts import (ExpertsKeptDenseError, FixedExpertsTensor, compress_expert_param,  # noqa: E402
                                  compressed_attrs, decodes_per_call, decompress_experts, is_expert_param,
                                  load_compressed_experts, register_implementation)

COMMON = dict(vocab_size=64, hidden_size=32, num_hidden_layers=1, num_attention_heads=2, num_key_value_heads=1,
              max_position_embeddings=64)


def config(arch):
    if arch == "mixtral":
        return tf.MixtralConfig(intermediate_size=24, num_local_experts=4, num_experts_per_tok=2, **COMMON)
    if arch == "qwen3_moe":
        return tf.Qwen3MoeConfig(intermediate_size=48, moe_intermediate_size=24, num_experts=4, num_experts_per_tok=2,
                                 head_dim=16, **COMMON)
    if arch == "deepseek_v3":
        return tf.DeepseekV3Config(intermediate_size=48, moe_intermediate_size=24, n_routed_experts=4,
                                   num_experts_per_tok=2, n_group=1, topk_group=1, first_k_dense_replace=0,
                                   q_lora_rank=None, kv_lora_rank=16, qk_rope_head_dim=8, qk_nope_head_dim=8,
                                   v_head_dim=8, **{**COMMON, "num_key_value_heads": 2})
    return tf.GptOssConfig(intermediate_size=24, num_local_experts=4, num_experts_per_tok=2, head_dim=16, **COMMON)


ARCHS = ["mixtral", "qwen3_moe", "deepseek_v3", "gpt_oss"]


def dense_model(arch):
    torch.manual_seed(0)
    model = tf.AutoModelForCausalLM.from_config(config(arch), dtype=torch.bfloat16, experts_implementation="eager")
    with torch.no_grad():  # wide values (escapes) in every expert tensor and bias
        for name, p in model.named_parameters():
            if ".experts." in name:
                p.copy_(torch.randn_like(p, dtype=torch.float32).mul(0.1).exp2().mul(torch.randn_like(p)).to(p.dtype))
    return model.eval()


def compress_all(model, exact: bool = False):
    names = []
    for mname, mod in model.named_modules():
        for attr in list(mod._parameters):
            if is_expert_param(mod, attr):
                value = mod._parameters[attr].detach()
                before = value.clone()
                compress_expert_param(mod, attr, value, exact=exact)
                assert torch.equal(value, before)  # the caller's tensor is not touched
                names.append(f"{mname}.{attr}")
    return names


def bits(t):
    return t.view(torch.int16)


@pytest.mark.parametrize("arch", ARCHS)
def test_outputs_and_input_gradient_equal_dense_eager(arch):
    dense = dense_model(arch)
    model = copy.deepcopy(dense)
    names = compress_all(model)
    assert len(names) == 2 and not any(n.endswith("_bias") for n in names)
    experts = model.model.layers[0].mlp.experts
    assert compressed_attrs(experts) and not any(p.dim() == 3 for p in experts.parameters())
    ids = torch.randint(0, 64, (2, 9), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        assert torch.equal(bits(model(ids).logits), bits(dense(ids).logits))
    for m in (dense, model):
        m.requires_grad_(False)
    e1 = dense.get_input_embeddings()(ids).detach().requires_grad_(True)
    e2 = e1.detach().clone().requires_grad_(True)
    dense(inputs_embeds=e1).logits.float().square().mean().backward()
    model(inputs_embeds=e2).logits.float().square().mean().backward()
    assert e2.grad is not None and torch.equal(bits(e1.grad), bits(e2.grad))


@pytest.mark.parametrize("arch", ["mixtral", "gpt_oss"])
def test_state_dict_reload_view_and_decompress(arch):
    dense = dense_model(arch)
    model = copy.deepcopy(dense)
    compress_all(model)
    sd = model.state_dict()
    prefix = "model.layers.0.mlp.experts."
    up = "gate_up_proj"
    assert {f"{prefix}{up}_{s}" for s in ("packed", "offsets", "bases", "shape")} <= set(sd)
    assert f"{prefix}{up}" not in sd and sd[f"{prefix}{up}_packed"].dtype == torch.uint8
    # a fresh dense model takes the compressed tensors as they are
    fresh = dense_model(arch)
    with torch.no_grad():
        for p in fresh.parameters():
            p.zero_()
    experts = fresh.model.layers[0].mlp.experts
    assert load_compressed_experts(experts, sd, prefix) == [up, "down_proj"]
    fresh.load_state_dict(sd, strict=True)
    ids = torch.randint(0, 64, (1, 7))
    with torch.no_grad():
        assert torch.equal(bits(fresh(ids).logits), bits(dense(ids).logits))
    # module.gate_up_proj still reads: metadata free, one expert or all decoded on use
    orig = dense.model.layers[0].mlp.experts
    view = experts.gate_up_proj
    assert isinstance(view, FixedExpertsTensor) and view.shape == orig.gate_up_proj.shape
    assert view.dtype == torch.bfloat16 and torch.equal(bits(view[2]), bits(orig.gate_up_proj[2]))
    assert torch.equal(bits(view.data), bits(orig.gate_up_proj))
    decompress_experts(experts)
    assert type(experts) is type(orig) and not compressed_attrs(experts)
    for name, p in orig.named_parameters():
        assert torch.equal(bits(getattr(experts, name)), bits(p)), name
    with torch.no_grad():
        assert torch.equal(bits(fresh(ids).logits), bits(dense(ids).logits))


@pytest.mark.parametrize("arch", ["mixtral", "gpt_oss"])
def test_float32_model_with_bf16_values(arch):
    """A bf16 checkpoint loaded in float32 (its config's dtype): the experts are stored in the
    bf16 layout, read back in float32, decoded for each call; outputs, state_dict reload,
    decompression and module.to(dtype) stay the dense model's bit for bit."""
    dense = dense_model(arch).float()
    model = copy.deepcopy(dense)
    names = compress_all(model)
    experts = model.model.layers[0].mlp.experts
    assert len(names) == 2 and decodes_per_call(experts)
    ids = torch.randint(0, 64, (2, 9), generator=torch.Generator().manual_seed(3))
    with torch.no_grad():
        want = dense(ids).logits
        assert torch.equal(model(ids).logits.view(torch.int32), want.view(torch.int32))
    orig = dense.model.layers[0].mlp.experts
    view = experts.down_proj
    assert view.dtype == torch.float32 and "float32" in repr(view)
    assert torch.equal(view[1].view(torch.int32), orig.down_proj[1].view(torch.int32))
    fresh = copy.deepcopy(dense)
    fresh.load_state_dict(model.state_dict(), strict=False)  # the dense experts take the compressed buffers
    fexp = fresh.model.layers[0].mlp.experts
    assert load_compressed_experts(fexp, model.state_dict(), "model.layers.0.mlp.experts.")
    assert fexp.down_proj.dtype == torch.float32 and decodes_per_call(fexp)
    with torch.no_grad():
        assert torch.equal(fresh(ids).logits.view(torch.int32), want.view(torch.int32))
    # the dense dtype follows module.to(dtype)
    model.to(torch.bfloat16)
    assert experts.down_proj.dtype == torch.bfloat16 and not decodes_per_call(experts)  # the cause is gone
    with torch.no_grad():
        assert torch.equal(bits(model(ids).logits), bits(dense.to(torch.bfloat16)(ids).logits))
    model.float()
    assert decodes_per_call(experts)
    decompress_experts(experts, ["gate_up_proj"])  # the float32 one left keeps the per-call decode
    assert compressed_attrs(experts) == ["down_proj"] and decodes_per_call(experts)
    decompress_experts(experts)
    assert not compressed_attrs(experts) and experts.down_proj.dtype == torch.float32
    assert torch.equal(experts.down_proj.view(torch.int32), orig.float().down_proj.view(torch.int32))


def test_refusals_leave_the_module_dense():
    model = dense_model("mixtral")
    experts = model.model.layers[0].mlp.experts
    assert is_expert_param(experts, "gate_up_proj") and not is_expert_param(experts, "act_fn")
    assert not is_expert_param(model.model.layers[0].self_attn.q_proj, "weight")
    w = experts.gate_up_proj.detach()
    for module, attr, value, match in ((experts, "gate_up_proj", w.float() + 2 ** -20, "float32 values that bfloat16"),
                                       (experts, "gate_up_proj", w.to(torch.float8_e4m3fn), "float8"),
                                       (experts, "gate_up_proj", w[:2], r"\[4, N, K\]"),
                                       (experts, "down_proj", w, "module holds"),
                                       (experts, "bias", w, "not an expert projection"),
                                       (model.model.layers[0].self_attn.q_proj, "weight", w, "not a transformers")):
        with pytest.raises(ExpertsKeptDenseError, match=match) as err:
            compress_expert_param(module, attr, value)
        assert isinstance(err.value, WcodecError)
    assert not compressed_attrs(experts) and experts.gate_up_proj.dtype == torch.bfloat16


def test_registered_implementation_runs_dense_modules_eagerly():
    register_implementation()
    dense = dense_model("qwen3_moe")
    other = copy.deepcopy(dense)
    other.set_experts_implementation("wcodec")  # no parameter compressed: the module's eager forward
    ids = torch.randint(0, 64, (2, 5))
    with torch.no_grad():
        assert torch.equal(bits(other(ids).logits), bits(dense(ids).logits))


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize("arch", ARCHS)
def test_cuda_fused_path_matches_dense(arch):
    dense = dense_model(arch).cuda()
    model = copy.deepcopy(dense)
    compress_all(model)  # encoded on the GPU, where the values are
    experts = model.model.layers[0].mlp.experts
    assert all(b.is_cuda for b in experts.buffers())
    ids = torch.randint(0, 64, (3, 11), device="cuda")
    with torch.no_grad():
        want, got = dense(ids).logits.float(), model(ids).logits.float()
    assert torch.isfinite(got).all() and ((got - want).norm() / want.norm()).item() < 2e-2
    model.requires_grad_(False)
    emb = model.get_input_embeddings()(ids).detach().requires_grad_(True)
    model(inputs_embeds=emb).logits.float().square().mean().backward()
    assert emb.grad is not None and torch.isfinite(emb.grad).all() and emb.grad.abs().sum() > 0


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize("arch", ARCHS)
def test_cuda_exact_experts_equal_dense(arch):
    """exact=True (keep_compressed="jit"): on CUDA too the experts decode and multiply as the
    dense module does, under its configured implementation: logits bit-identical."""
    dense = dense_model(arch).cuda()
    model = copy.deepcopy(dense)
    compress_all(model, exact=True)
    experts = model.model.layers[0].mlp.experts
    assert compressed_attrs(experts) and all(b.is_cuda for b in experts.buffers())
    ids = torch.randint(0, 64, (3, 11), device="cuda")
    with torch.no_grad():
        assert torch.equal(bits(model(ids).logits), bits(dense(ids).logits))


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize("arch", ["mixtral", "gpt_oss"])
def test_cuda_float32_experts_with_bf16_values_equal_dense(arch):
    """Experts held in float32 with bf16 values decode per call on CUDA too (not the bf16 fused
    kernels): logits bit-identical to the dense float32 model's, eager and compiled."""
    dense = dense_model(arch).float().cuda()
    model = copy.deepcopy(dense)
    compress_all(model)
    assert decodes_per_call(model.model.layers[0].mlp.experts)
    ids = torch.randint(0, 64, (3, 11), device="cuda")
    with torch.no_grad():
        want = dense(ids).logits.view(torch.int32)
        assert torch.equal(model(ids).logits.view(torch.int32), want)
        # compiled: the experts still decode (outside the graph) and multiply in float32, so only
        # the graph's own fusions differ (the fused kernels would round to bf16: ~1e-2)
        got, ref = torch.compile(model)(ids).logits, dense(ids).logits
        assert ((got - ref).norm() / ref.norm()).item() < 1e-4


def _record(t):
    """codec "fixed" record of a bf16 tensor, as a folder stores it."""
    import numpy as np

    from wcodec.codecs.fixed import FixedCodec

    return FixedCodec().encode(t.detach().contiguous().view(torch.int16).numpy().view(np.uint16), "BF16")


def test_stored_fixed_record_taken_as_stored():
    """A stored [E, N, K] fixed record becomes the experts' buffers without a decode: the experts
    read back bit-exact, the model's outputs equal the dense model's, and the buffers hold what
    compress_expert_param holds apart from the window base."""
    from wcodec.torch.experts import load_expert_record, stored_record_fits

    dense = dense_model("mixtral")
    model = copy.deepcopy(dense)
    experts, orig = model.model.layers[0].mlp.experts, dense.model.layers[0].mlp.experts
    up, down = _record(orig.gate_up_proj), _record(orig.down_proj)
    def fits(module, attr, rec):
        return stored_record_fits(module, attr, rec.codec, rec.dtype, rec.shape)

    assert fits(experts, "gate_up_proj", up)  # [4, 48, 32]: K a multiple of 16
    assert not fits(experts, "down_proj", down)  # [4, 32, 24]: rows padded per expert
    assert not fits(experts, "down_proj", up)  # another shape
    assert up.info["escape_fraction"] > 0  # the escapes are re-indexed per expert
    load_expert_record(experts, "gate_up_proj", up, "cpu", name="gate_up_proj")
    compress_expert_param(experts, "down_proj", orig.down_proj.detach())
    assert compressed_attrs(experts) == ["gate_up_proj", "down_proj"]
    for e in range(4):
        assert torch.equal(bits(experts.gate_up_proj[e]), bits(orig.gate_up_proj[e]))
    ids = torch.randint(0, 64, (1, 9))
    with torch.no_grad():
        assert torch.equal(bits(model(ids).logits), bits(dense(ids).logits))
    other = copy.deepcopy(dense).model.layers[0].mlp.experts
    compress_expert_param(other, "gate_up_proj", orig.gate_up_proj.detach())
    assert experts.gate_up_proj_packed.numel() == other.gate_up_proj_packed.numel()
    # gpt-oss multiplies x @ P[e]: its experts are P[e].T, not rows of the record
    oss = dense_model("gpt_oss").model.layers[0].mlp.experts
    assert not fits(oss, "gate_up_proj", _record(oss.gate_up_proj))


def test_corrupt_stored_record_raises_and_leaves_the_module_dense():
    from wcodec.errors import CorruptDataError
    from wcodec.torch.experts import load_expert_record

    model = dense_model("mixtral")
    experts = model.model.layers[0].mlp.experts
    rec = _record(experts.gate_up_proj)
    nib = rec.sections["nib"].copy()
    nib[nib & 0x07 != 0x07] |= 0x07  # escape nibbles where no escape is listed
    rec.sections["nib"] = nib
    with pytest.raises(CorruptDataError, match="tensor 'layers.0.up'.*nib"):
        load_expert_record(experts, "gate_up_proj", rec, "cpu", name="layers.0.up")
    assert not compressed_attrs(experts) and isinstance(experts._parameters["gate_up_proj"], torch.nn.Parameter)


def test_compressed_experts_refuse_writes_and_initialisation_skips_them():
    from wcodec.errors import UnsupportedError

    init = pytest.importorskip("transformers.initialization")

    dense = dense_model("mixtral")
    model = copy.deepcopy(dense)
    compress_all(model)
    experts = model.model.layers[0].mlp.experts
    with pytest.raises(UnsupportedError, match="read-only"):
        experts.gate_up_proj.mul_(2)
    init.normal_(experts.gate_up_proj)  # transformers' initialisers leave loaded weights alone
    assert torch.equal(bits(experts.gate_up_proj), bits(dense.model.layers[0].mlp.experts.gate_up_proj))
