"""Plain peft on models kept compressed (fused and just in time), with no wcodec call: a plain
``LoraConfig`` wraps the compressed layers, adapters save with the keys peft writes for nn.Linear
and reload with plain ``PeftModel.from_pretrained`` on a compressed or the bf16 base,
``merge_and_unload()`` gives the weights peft merges into the bf16 model (never the base's
outputs), and ``state_dict()`` of a just-in-time model holds the true weights, never the shared
decode scratch. On stories260K and on a tiny random Llama that transformers builds and saves."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch", reason="torch is needed for wcodec.hf")
transformers = pytest.importorskip("transformers", reason="transformers is needed for wcodec.hf")
peft = pytest.importorskip("peft", reason="peft is not installed (pip install peft)")
pytest.importorskip("safetensors", reason="safetensors writes the source folder")

from wcodec.errors import InvalidInputError  # noqa: E402
from wcodec.hf import WCodecModel, convert_folder  # noqa: E402
from wcodec.hf.lora import LoraCompressedLinear, LoraJitLinear  # noqa: E402
from wcodec.torch.linear import CompressedLinear, compress_model  # noqa: E402

IDS = torch.tensor([[1, 200, 100, 20, 17, 88, 5, 60], [1, 33, 201, 7, 99, 12, 100, 2]])
TARGETS = ["q_proj", "v_proj", "down_proj"]
MODES = [True, "jit"]
SRC = Path(__file__).resolve().parents[2] / "src"


def _lora(model, seed=0):
    """LoRA with random (non-zero) A and B, so that the adapter changes the outputs."""
    torch.manual_seed(seed)
    cfg = peft.LoraConfig(r=4, lora_alpha=8, target_modules=TARGETS, init_lora_weights=False)
    return peft.get_peft_model(model, cfg).eval()


def _logits(model):
    with torch.no_grad():
        return model(IDS).logits


def _rel(a, b):
    return float((a.float() - b.float()).norm() / b.float().norm())


def _lora_layer(mode):
    return LoraCompressedLinear if mode is True else LoraJitLinear


@pytest.fixture(scope="module")
def stories(stories_folders):
    """(bf16 reference model, a function building it again, wcodec folder) of stories260K."""
    src, dst = stories_folders
    bf16 = lambda: transformers.AutoModelForCausalLM.from_pretrained(str(src), dtype=torch.bfloat16)  # noqa: E731
    return bf16().eval(), bf16, dst


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    """A random bf16 Llama saved by transformers (untied head): (source folder, lossless wcodec
    folder, fixed-rate wcodec folder)."""
    cfg = transformers.LlamaConfig(vocab_size=256, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                                   num_attention_heads=4, num_key_value_heads=2, tie_word_embeddings=False,
                                   max_position_embeddings=64)
    torch.manual_seed(0)
    model = transformers.LlamaForCausalLM(cfg).to(torch.bfloat16)
    root = tmp_path_factory.mktemp("tiny_llama")
    model.save_pretrained(root / "hf")
    convert_folder(root / "hf", root / "lossless")
    convert_folder(root / "hf", root / "fixed", codec="fixed")
    return root / "hf", root / "lossless", root / "fixed"


def _load(dst, mode):
    return WCodecModel.from_pretrained(dst, dtype="bfloat16", keep_compressed=mode)


@pytest.mark.parametrize("mode", MODES)
def test_plain_lora_config_wraps_compressed_layers(stories, mode):
    ref, bf16, dst = stories
    model = _lora(_load(dst, mode))
    q = model.base_model.model.model.layers[0].self_attn.q_proj
    assert type(q) is _lora_layer(mode)
    assert isinstance(q.base_layer, CompressedLinear) == (mode is True)
    plain = _lora(bf16())
    assert model.state_dict().keys() - plain.state_dict().keys() <= _compressed_keys(model)
    got, want = _logits(model), _logits(plain)
    assert torch.equal(got, want) and not torch.equal(got, _logits(ref))


def _compressed_keys(model):
    """The state-dict keys of fused layers' buffers (w_packed, extra state), which nn.Linear has not."""
    return {k for k in model.state_dict() if k.endswith(("w_packed", "_extra_state"))}


@pytest.mark.parametrize("mode", MODES)
def test_adapter_reloads_with_plain_peft_on_compressed_and_bf16_bases(stories, mode, tmp_path):
    ref, bf16, dst = stories
    model = _lora(_load(dst, mode))
    want = _logits(model)
    model.save_pretrained(tmp_path)
    saved = peft.utils.load_peft_weights(str(tmp_path))
    plain = _lora(bf16())
    plain.save_pretrained(tmp_path / "plain")
    assert saved.keys() == peft.utils.load_peft_weights(str(tmp_path / "plain")).keys()
    for base in (_load(dst, mode), _load(dst, True if mode == "jit" else "jit"),
                 bf16()):
        again = peft.PeftModel.from_pretrained(base, str(tmp_path)).eval()
        assert torch.equal(_logits(again), want)


@pytest.mark.parametrize("mode", MODES)
def test_merge_and_unload_gives_peft_merged_weights(stories, mode):
    ref, bf16, dst = stories
    model = _lora(_load(dst, mode))
    plain = _lora(bf16())
    unmerged, base = _logits(model), _logits(ref)
    merged = model.merge_and_unload()
    want = plain.merge_and_unload()
    q = merged.model.layers[0].self_attn.q_proj
    assert type(q) is torch.nn.Linear and "_wcodec_jit" not in q.__dict__
    sd, wsd = merged.state_dict(), want.state_dict()
    for name in (n for n in wsd if any(t in n for t in TARGETS)):
        assert torch.equal(sd[name], wsd[name]), name  # base + delta, rounded to bf16 as peft does
    got = _logits(merged)
    assert torch.equal(got, _logits(want)) and not torch.equal(got, base)
    assert _rel(got, unmerged) < 0.1 * _rel(base, unmerged)  # the merge's bf16 rounding only
    if mode == "jit":  # the other layers still decode just in time; the merged ones do not
        cw = merged.wcodec_weights
        assert cw.key_of(merged.model.layers[0].self_attn.k_proj) is not None and cw.key_of(q) is None
    else:  # and back to the fused layout, losslessly
        assert compress_model(merged, min_features=1)["replaced"] == [f"model.layers.{i}.{t}" for i in range(
            ref.config.num_hidden_layers) for t in ("self_attn.q_proj", "self_attn.v_proj", "mlp.down_proj")]
        assert torch.equal(_logits(merged), got)


def test_jit_embedding_lora_merges_into_its_own_weight(stories):
    """The tied embedding decoded just in time (its lm_head shares the record): merging a LoRA on
    the embedding changes the embedding alone, to the weight peft merges on the bf16 model, and
    the outputs stay the adapter's (on the bf16 model the merge also changes the tied lm_head)."""
    ref, bf16, dst = stories
    cfg = dict(r=4, lora_alpha=8, target_modules=["embed_tokens"], init_lora_weights=False)
    torch.manual_seed(0)
    model = peft.get_peft_model(_load(dst, "jit"), peft.LoraConfig(**cfg)).eval()
    torch.manual_seed(0)
    plain = peft.get_peft_model(bf16(), peft.LoraConfig(**cfg)).eval()
    assert type(model.base_model.model.model.embed_tokens).__name__ == "LoraJitEmbedding"
    unmerged = _logits(model)
    assert torch.equal(unmerged, _logits(plain))
    merged, want = model.merge_and_unload(), plain.merge_and_unload()
    got = _logits(merged)
    assert torch.equal(merged.model.embed_tokens.weight, want.model.embed_tokens.weight)
    assert _rel(got, unmerged) < 0.1 * _rel(_logits(ref), unmerged)
    assert merged.wcodec_weights.key_of(merged.lm_head) is not None  # still decoded just in time


@pytest.mark.parametrize("mode", MODES)
def test_merge_then_unmerge_restores_the_base(stories, mode):
    ref, bf16, dst = stories
    model = _lora(_load(dst, mode))
    adapted, base = _logits(model), _logits(ref)
    model.merge_adapter()
    assert _rel(_logits(model), adapted) < 0.1 * _rel(base, adapted)
    model.unmerge_adapter()
    assert _rel(_logits(model), adapted) < 0.1 * _rel(base, adapted)
    with model.disable_adapter():  # the base again, now from a dense copy: to bf16 rounding
        assert _rel(_logits(model), base) < 0.1 * _rel(base, adapted)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("option", [{"use_dora": True}, {"init_lora_weights": "pissa"}])
def test_options_that_read_the_base_weight_get_a_dense_copy(stories, mode, option):
    """DoRA reads the base weight's norms in every forward, PiSSA reads and rewrites the weight at
    init: the wrapped layers turn dense (the others stay compressed) and compute what they
    compute on the bf16 model."""
    ref, bf16, dst = stories
    cfg = dict(r=4, lora_alpha=8, target_modules=["q_proj"], **option)
    torch.manual_seed(0)
    model = peft.get_peft_model(_load(dst, mode), peft.LoraConfig(**cfg)).eval()
    torch.manual_seed(0)
    plain = peft.get_peft_model(bf16(), peft.LoraConfig(**cfg)).eval()
    layers = model.base_model.model.model.layers
    assert type(layers[0].self_attn.q_proj.base_layer) is torch.nn.Linear
    assert "_wcodec_jit" not in layers[0].self_attn.q_proj.base_layer.__dict__
    k = layers[0].self_attn.k_proj
    assert isinstance(k, CompressedLinear) if mode is True else "_wcodec_jit" in k.__dict__
    for layer in (model, plain):  # the adapters differ from their init, so that the test can fail
        for n, p in layer.named_parameters():
            if "lora_B" in n:
                torch.nn.init.normal_(p, std=0.02, generator=torch.Generator().manual_seed(len(n)))
    got, want = _logits(model), _logits(plain)
    assert torch.equal(got, want) and not torch.equal(got, _logits(ref))


@pytest.mark.parametrize("codec,mode", [("lossless", True), ("lossless", "jit"), ("fixed", "jit")])
def test_tiny_llama_lora_round_trip(tiny, codec, mode, tmp_path):
    src, lossless, fixed = tiny
    dst = lossless if codec == "lossless" else fixed
    ref = transformers.AutoModelForCausalLM.from_pretrained(str(src)).eval()
    assert ref.dtype == torch.bfloat16
    model = _lora(_load(dst, mode))
    opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-2)
    model.train()
    loss = model(IDS, labels=IDS).loss
    loss.backward()
    opt.step()
    model.eval()
    want = _logits(model)
    model.save_pretrained(tmp_path)
    again = peft.PeftModel.from_pretrained(transformers.AutoModelForCausalLM.from_pretrained(str(src)), str(tmp_path))
    assert torch.equal(_logits(again.eval()), want)
    merged = model.merge_and_unload()
    got = _logits(merged)
    assert torch.equal(got, _logits(again.merge_and_unload())) and not torch.equal(got, _logits(ref))


def test_jit_state_dict_is_the_true_weights(stories_folders, tiny):
    for src, dst in [stories_folders, tiny[::2]]:
        ref = transformers.AutoModelForCausalLM.from_pretrained(str(src)).eval()
        model = WCodecModel.from_pretrained(dst, keep_compressed="jit")
        assert model.wcodec_weights.report["compressed"]
        sd, want = model.state_dict(), ref.state_dict()
        assert sd.keys() == want.keys()
        for name, t in want.items():
            assert sd[name].dtype == t.dtype and torch.equal(sd[name], t), name
        scratch = model.wcodec_weights.scratch.untyped_storage().data_ptr()
        assert all(t.untyped_storage().data_ptr() != scratch for t in sd.values())
        # the parameters are untouched: frozen scratch views (nothing decoded), which optimizers skip
        params = dict(model.named_parameters())
        jit = [n for n in model.wcodec_weights.report["compressed"] if n in params]
        assert jit and all(not params[n].requires_grad and params[n].untyped_storage().data_ptr() == scratch
                           for n in jit)
        model.load_state_dict(sd)  # its own weights load back
        assert torch.equal(_logits(model), _logits(ref))
        sd[jit[0]] = sd[jit[0]] + 1  # another value would be lost in the scratch: refused
        with pytest.raises(InvalidInputError, match=re.escape(jit[0])):
            model.load_state_dict(sd)


def test_registered_when_peft_comes_after_wcodec():
    """(This module imports peft first: the other order.) Nothing of peft, torch or the LoRA
    layers is imported until used."""
    code = (
        "import sys, wcodec\n"
        "assert 'peft' not in sys.modules and 'torch' not in sys.modules\n"
        "import peft, torch\n"
        "assert 'wcodec.hf.lora' not in sys.modules and 'wcodec.torch.linear' not in sys.modules\n"
        "from wcodec.torch.linear import CompressedLinear\n"
        "torch.manual_seed(0)\n"
        "net = torch.nn.Sequential(CompressedLinear.from_weight(torch.randn(32, 16).bfloat16(), torch.zeros(32)))\n"
        "cfg = peft.LoraConfig(r=2, target_modules=['0'], init_lora_weights=False)\n"
        "print(type(peft.get_peft_model(net, cfg).base_model.model[0]).__name__)\n"
    )
    env = {**os.environ, "PYTHONPATH": f"{SRC}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    assert r.stdout.split() == ["LoraCompressedLinear"]
