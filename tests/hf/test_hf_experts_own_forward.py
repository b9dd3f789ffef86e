"""Experts modules with a forward of their own (Llama-4's Llama4TextExperts bmm, JetMoE's
JetMoeParallelExperts split by expert sizes, Inkling's shared experts' bmm; not transformers'
``use_experts_implementation`` modules) kept compressed: recognised structurally, decoded for
each call, outputs and input gradients bit-identical to the dense model; the same through
``from_pretrained`` with keep_compressed True and "jit", save_pretrained reloading. And
FalconMamba kept compressed giving the dense model's logits (transformers' ``_is_quantized``
flag cleared where every layer's ``.weight`` reads as itself)."""

from __future__ import annotations

import copy

import pytest

torch = pytest.importorskip("torch")
tf = pytest.importorskip("transformers")

import wcodec  # noqa: E402,F401  (registers the quantizer)
from wcodec.hf import WcodecConfig, convert_folder  # noqa: E402
from wcodec.torch.experts import (FixedExpertsTensor, compress_expert_param, compressed_attrs,  # noqa: E402
                                  decompress_experts, is_expert_param, load_compressed_experts)

_SMALL = dict(vocab_size=128, hidden_size=64, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2)
CONFIGS = {
    "llama4_text": dict(_SMALL, intermediate_size=64, intermediate_size_mlp=128, head_dim=16, num_local_experts=4,
                        moe_layers=[0, 1], no_rope_layers=[1, 0], layer_types=["chunked_attention", "full_attention"]),
    "jetmoe": dict(_SMALL, kv_channels=16, intermediate_size=64, num_local_experts=4),
    "inkling_text": dict(_SMALL, head_dim=16, swa_head_dim=16, layer_types=["hybrid_sliding", "hybrid"],
                         mlp_layer_types=["sparse", "sparse"], intermediate_size=64, moe_intermediate_size=32,
                         n_routed_experts=4, num_experts_per_tok=2, n_shared_experts=2),
}
#: the experts modules of each with a forward of their own (the only 3-D parameters but convolutions')
OWN = {"llama4_text": "Llama4TextExperts", "jetmoe": "JetMoeParallelExperts", "inkling_text": "InklingSharedExperts"}


def dense_model(arch):
    config = tf.AutoConfig.for_model(arch, **CONFIGS[arch])
    torch.manual_seed(0)
    model = tf.AutoModelForCausalLM.from_config(config, dtype=torch.bfloat16)
    with torch.no_grad():  # wide values (escapes, several exponent windows) in every 3-D tensor
        for p in model.parameters():
            if p.dim() == 3 or not p.any():
                p.copy_(torch.randn_like(p, dtype=torch.float32).mul(0.1).exp2().mul(torch.randn_like(p)).to(p.dtype))
    return model.eval()


def own_forward_params(model):
    return sorted(f"{n}.{a}" for n, m in model.named_modules() for a, p in m._parameters.items()
                  if p is not None and p.dim() == 3 and type(m).__name__.endswith(tuple(OWN.values())))


def compress_all(model):
    """Every expert parameter of ``model`` compressed (the caller's tensors untouched); their names."""
    found = [(n, m, a) for n, m in model.named_modules() for a in list(m._parameters) if is_expert_param(m, a)]
    for _, m, a in found:
        value = m._parameters[a].detach()
        before = value.clone()
        compress_expert_param(m, a, value)
        assert torch.equal(value, before)
    return sorted(f"{n}.{a}" for n, _, a in found)


def bits(t):
    return t.view(torch.int16)


IDS = torch.randint(0, 128, (2, 9), generator=torch.Generator().manual_seed(1))


@pytest.mark.parametrize("arch", sorted(CONFIGS))
def test_outputs_gradients_state_dict_equal_dense(arch):
    dense = dense_model(arch)
    want = own_forward_params(dense)
    assert want and all(dense.get_parameter(n).shape[0] > 1 for n in want)  # E > 1: several experts per call
    model = copy.deepcopy(dense)
    names = compress_all(model)  # every one found; besides, only transformers experts modules (Inkling's routed)
    assert [n for n in names if n in want] == want
    assert all(hasattr(model.get_submodule(n.rpartition(".")[0]), "has_gate") for n in names if n not in want)
    assert not any(p.dim() == 3 and "expert" in n for n, p in model.named_parameters())
    with torch.no_grad():
        assert torch.equal(bits(model(IDS).logits), bits(dense(IDS).logits))
    experts = [m for m in model.modules() if compressed_attrs(m)]
    assert experts and all(a not in m.__dict__ for m in experts for a in compressed_attrs(m))  # nothing held
    assert isinstance(getattr(experts[0], compressed_attrs(experts[0])[0]), FixedExpertsTensor)

    for m in (dense, model):
        m.requires_grad_(False)
    grads = []
    for m in (dense, model):  # the input gradient through the decoded experts (autograd saved them)
        e = dense.get_input_embeddings()(IDS).detach().requires_grad_(True)
        m(inputs_embeds=e).logits.float().square().sum().backward()
        grads.append(e.grad)
    assert grads[0].abs().sum() > 0 and torch.equal(bits(grads[1]), bits(grads[0]))

    sd = model.state_dict()
    assert not any(k in sd for k in want) and all(f"{k}_packed" in sd for k in want)
    fresh = copy.deepcopy(dense)
    for mname, mod in fresh.named_modules():
        load_compressed_experts(mod, sd, f"{mname}." if mname else "")
    fresh.load_state_dict(sd)
    with torch.no_grad():
        assert torch.equal(bits(fresh(IDS).logits), bits(dense(IDS).logits))

    for m in model.modules():
        decompress_experts(m)
    assert {n for n, _ in model.named_parameters()} == {n for n, _ in dense.named_parameters()}
    for n in want:
        assert type(model.get_submodule(n.rpartition(".")[0])).__name__ in OWN.values()
        assert torch.equal(bits(model.get_parameter(n)), bits(dense.get_parameter(n)))


class _Einsum(torch.nn.Module):
    """Not a transformers class: experts by an int attribute naming them and its own forward."""

    def __init__(self, n_experts=3):
        super().__init__()
        self.n_experts = n_experts
        self.w = torch.nn.Parameter(torch.randn(n_experts, 48, 32).to(torch.bfloat16))
        self.scale = torch.nn.Parameter(torch.randn(n_experts, 1, 48).to(torch.bfloat16))  # [E, 1, N]: an expert's too

    def forward(self, x):  # x [E, T, 32]
        return torch.einsum("etk,enk->etn", x, self.w) * self.scale


def test_structural_rule_and_other_modules(monkeypatch):
    """Generic: any module naming its experts count by an int attribute; a 3-D tensor of a module
    that names none (a Conv1d, RecurrentGemma's per-head gates) is no expert. With the Triton
    decode (interpreter) the module gives the dense outputs as well."""
    torch.manual_seed(0)
    m = _Einsum()
    assert is_expert_param(m, "w") and is_expert_param(m, "scale")
    assert not is_expert_param(torch.nn.Conv1d(4, 4, 3), "weight")

    class Heads(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.num_heads = 4
            self.gate = torch.nn.Parameter(torch.zeros(4, 16, 16))
    assert not is_expert_param(Heads(), "gate")
    m.n_experts = 2  # the count no longer matches the first dimension
    assert not is_expert_param(m, "w")
    m.n_experts = 3

    x = torch.randn(3, 5, 32).to(torch.bfloat16)
    want = m(x)
    for triton in (False, True):
        if triton:  # the Triton encoder and decoder (under TRITON_INTERPRET=1 here, CUDA in use)
            monkeypatch.setenv("WCODEC_FIXED_TRITON", "1")
        c = copy.deepcopy(m)
        compress_expert_param(c, "w", c.w.detach())
        compress_expert_param(c, "scale", c.scale.detach())
        assert compressed_attrs(c) == ["w", "scale"] and not list(c.parameters())
        assert torch.equal(bits(c(x)), bits(want))


def test_refusals_leave_the_module_dense():
    from wcodec.torch.experts import ExpertsKeptDenseError

    m = _Einsum()
    with pytest.raises(ExpertsKeptDenseError, match="bfloat16"):
        compress_expert_param(m, "w", m.w.detach().float() + 2 ** -20)
    with pytest.raises(ExpertsKeptDenseError, match=r"\[3, N, K\]"):
        compress_expert_param(m, "w", m.w.detach()[:2])
    assert isinstance(m._parameters["w"], torch.nn.Parameter) and not compressed_attrs(m)


# ---- through from_pretrained ----

def _folder(arch, tmp_path):
    src = tmp_path / "src"
    dense_model(arch).save_pretrained(src)
    return src


def _convert(src, dst, codec):
    convert_folder(src, dst, mode="lossless", codec=None if codec == "lossless" else codec)
    return dst


@pytest.mark.parametrize("codec,keep", [("fixed", True), ("lossless", "jit")])
@pytest.mark.parametrize("arch", sorted(CONFIGS))
def test_from_pretrained_kept_compressed(arch, codec, keep, tmp_path, monkeypatch):
    """keep_compressed=True from a codec "fixed" folder (each expert's rows taken from the stored
    record, never decoded) and "jit" from a lossless one: the experts held compressed, listed
    "compressed", outputs equal the dense model's; save_pretrained writes a wcodec folder that
    loads back to the dense weights."""
    from wcodec.torch import experts as ex

    src = _folder(arch, tmp_path)
    ref = tf.AutoModelForCausalLM.from_pretrained(src).eval()
    wc = _convert(src, tmp_path / "wc", codec)
    taken, load_record = [], ex.load_expert_record
    monkeypatch.setattr(ex, "load_expert_record", lambda m, a, *args, **kw: (taken.append(kw.get("name")),
                                                                              load_record(m, a, *args, **kw)))
    model = tf.AutoModelForCausalLM.from_pretrained(wc, quantization_config=WcodecConfig(keep_compressed=keep)).eval()
    rep = model.wcodec_weights.report
    want = own_forward_params(ref)
    assert set(want) <= set(taken) if codec == "fixed" else not taken  # the stored fixed records as they are
    assert not [n for n in want if n not in rep["compressed"]], rep["kept"]
    assert not any(p.dim() == 3 and "expert" in n for n, p in model.named_parameters())
    with torch.no_grad():
        assert torch.equal(bits(model(IDS).logits.to(torch.bfloat16)), bits(ref(IDS).logits.to(torch.bfloat16)))
        assert torch.equal(model(IDS).logits, ref(IDS).logits)
    if keep is True:
        model.save_pretrained(tmp_path / "saved")
        again = tf.AutoModelForCausalLM.from_pretrained(tmp_path / "saved").eval()
        for n in want:
            assert torch.equal(bits(again.get_parameter(n)), bits(ref.get_parameter(n)))
        with torch.no_grad():
            assert torch.equal(again(IDS).logits, ref(IDS).logits)


@pytest.mark.parametrize("arch", sorted(CONFIGS))
def test_float32_config_takes_the_stored_bf16_records(arch, tmp_path, monkeypatch):
    """A bf16 folder whose config names float32 loads in float32: each expert parameter's stored
    bf16 fixed record is taken as it is, held in float32 (decoded for each call), outputs equal
    the dense float32 model's bit for bit."""
    import json

    from wcodec.torch import experts as ex

    src = _folder(arch, tmp_path)
    cfg = json.loads((src / "config.json").read_text())
    (src / "config.json").write_text(json.dumps({**cfg, "dtype": "float32"}))
    ref = tf.AutoModelForCausalLM.from_pretrained(src).eval()
    assert ref.dtype == torch.float32
    wc = _convert(src, tmp_path / "wc", "fixed")
    taken, load_record = [], ex.load_expert_record
    monkeypatch.setattr(ex, "load_expert_record", lambda m, a, *args, **kw: (taken.append(kw.get("name")),
                                                                              load_record(m, a, *args, **kw)))
    model = tf.AutoModelForCausalLM.from_pretrained(wc, quantization_config=WcodecConfig(keep_compressed=True)).eval()
    want = own_forward_params(ref)
    assert set(want) <= set(taken) and not [n for n in want if n not in model.wcodec_weights.report["compressed"]]
    assert model.dtype == torch.float32 and all(
        getattr(model.get_submodule(n.rpartition(".")[0]), n.rpartition(".")[2]).dtype == torch.float32 for n in want)
    with torch.no_grad():
        assert torch.equal(model(IDS).logits.view(torch.int32), ref(IDS).logits.view(torch.int32))


# ---- FalconMamba: transformers' _is_quantized flag ----

FALCON_MAMBA = dict(vocab_size=128, hidden_size=64, num_hidden_layers=2, state_size=8, expand=2, conv_kernel=4,
                    time_step_rank=8, use_mambapy=False)


@pytest.fixture(scope="module")
def falcon_mamba(tmp_path_factory):
    root = tmp_path_factory.mktemp("falcon_mamba")
    torch.manual_seed(0)
    config = tf.AutoConfig.for_model("falcon_mamba", **FALCON_MAMBA)
    tf.AutoModelForCausalLM.from_config(config, dtype=torch.bfloat16).save_pretrained(root / "src")
    convert_folder(root / "src", root / "wc", mode="lossless")
    return root / "src", root / "wc"


def test_falcon_mamba_kept_compressed_exact(falcon_mamba):
    """transformers sets ``config._is_quantized`` on a model loaded with a quantizer; FalconMamba's
    mixer then computes ``dt_proj(x) - bias`` instead of ``dt_proj.weight @ x`` (another bf16
    rounding). A fused dt_proj's ``.weight`` decodes, so the flag is cleared: the dense logits,
    bit for bit. With the flag set by hand the kept model gives the dense model's flagged logits,
    which differ (the test can fail)."""
    src, wc = falcon_mamba
    ref = tf.AutoModelForCausalLM.from_pretrained(src).eval()
    model = tf.AutoModelForCausalLM.from_pretrained(wc, quantization_config=WcodecConfig(keep_compressed=True)).eval()
    assert "backbone.layers.0.mixer.dt_proj.weight" in model.wcodec_weights.report["fused"]
    assert not hasattr(model.config, "_is_quantized") and model.is_quantized
    with torch.no_grad():
        want = ref(IDS).logits
        assert torch.equal(model(IDS).logits, want)
        model.config._is_quantized = ref.config._is_quantized = True
        flagged = ref(IDS).logits
        assert not torch.equal(flagged, want) and torch.equal(model(IDS).logits, flagged)


def test_falcon_mamba_jit_exact_and_dequantize_drops_the_flag(falcon_mamba):
    """keep_compressed="jit": dt_proj's ``.weight`` is a JitWeight (read outside its forward, as
    the mixer's ``dt_proj.weight @ x`` does, it decodes first), so the flag is cleared and the
    logits are the dense model's; a just-in-time Linear holding a plain view of the shared
    scratch keeps the flag (clear_quantized_flag says why); dequantize() drops it."""
    from wcodec.hf.quantizer import clear_quantized_flag
    from wcodec.torch.jit import JitWeight

    src, wc = falcon_mamba
    ref = tf.AutoModelForCausalLM.from_pretrained(src).eval()
    model = tf.AutoModelForCausalLM.from_pretrained(wc, quantization_config=WcodecConfig(keep_compressed="jit")).eval()
    dt = model.backbone.layers[0].mixer.dt_proj
    assert isinstance(dt._parameters["weight"], JitWeight) and not hasattr(model.config, "_is_quantized")
    with torch.no_grad():
        assert torch.equal(model(IDS).logits, ref(IDS).logits)
    jw = dt._parameters["weight"]
    dt._parameters["weight"] = torch.nn.Parameter(jw._wcodec_cw.weights[jw._wcodec_key].view, requires_grad=False)
    model.config._is_quantized = True  # as transformers leaves it; the plain scratch view keeps it
    kept = clear_quantized_flag(model)  # the model and its backbone, one config
    assert {type(m).__name__ for m, _ in kept} == {"FalconMambaForCausalLM", "FalconMambaModel"}
    assert all("just in time" in why for _, why in kept) and model.config._is_quantized
    model.dequantize()
    assert not hasattr(model.config, "_is_quantized")
    with torch.no_grad():
        assert torch.equal(model(IDS).logits, ref(IDS).logits)
    plain = tf.AutoModelForCausalLM.from_pretrained(wc).eval()  # a plain load: no quantizer left, no flag
    assert not hasattr(plain.config, "_is_quantized")


def test_a_dtype_transformers_chose_is_kept():
    """A tensor that stays dense comes back in the dtype transformers handed it where that is not
    the load dtype (its keep-in-float32 plan: transformers 5.17 casts Inkling's short convolutions
    to float32 while the model still holds bfloat16), and in the model's own dtype otherwise (a
    float32 head in a bfloat16 load)."""
    from wcodec.hf.keep import KeepState, keep_tensor

    state = KeepState(True)
    state.load_dtype = torch.bfloat16
    conv = torch.nn.Sequential(torch.nn.Conv1d(4, 4, 3, groups=4, bias=False)).to(torch.bfloat16)
    planned = torch.randn(4, 1, 3)
    out = keep_tensor(state, conv, "0.weight", planned, None)
    assert out.dtype == torch.float32 and torch.equal(out, planned)
    wide = torch.nn.Sequential(torch.nn.Conv1d(4, 4, 3, groups=4, bias=False))  # float32 in a bf16 load
    loaded = planned.to(torch.bfloat16)
    out = keep_tensor(state, wide, "0.weight", loaded, None)
    assert out.dtype == torch.float32 and torch.equal(out, loaded.float())
