"""keep_compressed=True on the fused kernels (wcodec.torch.linear.CompressedLinear; CPU fallback
here): stories260K in bf16 through both loaders gives the logits and greedy tokens of the bf16
model (dynamic and static cache), torch.compile sees no graph break once the embedding is not
decoded just in time, and LoRA adapters on the fused base train, save and reload."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch", reason="torch is needed for wcodec.hf")
transformers = pytest.importorskip("transformers", reason="transformers is needed for wcodec.hf")
pytest.importorskip("wcodec.torch.linear", reason="the fused kernels (wcodec.torch.linear) are not in this tree")
pytest.importorskip("safetensors", reason="safetensors writes the source folder")

from wcodec.hf import WCodecModel, WcodecConfig  # noqa: E402
from wcodec.torch.linear import CompressedLinear  # noqa: E402

IDS = torch.tensor([[1, 400, 300, 20, 17]])
BATCH = torch.tensor([[1, 400, 300, 20, 17, 88, 5, 260], [1, 33, 401, 7, 99, 12, 300, 2]])


@pytest.fixture(scope="module")
def folders(stories_folders):
    src, dst = stories_folders
    ref = transformers.AutoModelForCausalLM.from_pretrained(str(src), dtype=torch.bfloat16).eval()
    return ref, dst


def _static_tokens(ref):
    """The bf16 model's own greedy tokens with a static cache. Not its dynamic-cache tokens: with
    transformers 5.24 on CPU (sdpa, bf16) those differ for stories260K at the third new token,
    where two bf16 logits tie exactly (14.0 for ids 261 and 383) and SDPA over the static cache's
    padded length (prompt + 8 slots) rounds them apart; eager attention and fp32 give the same
    tokens on both caches. The static path is compared with itself, still bit for bit."""
    return ref.generate(IDS, max_new_tokens=8, do_sample=False, cache_implementation="static")


LOADERS = {
    "auto": lambda dst, **kw: transformers.AutoModelForCausalLM.from_pretrained(
        str(dst), dtype=torch.bfloat16, quantization_config=WcodecConfig(keep_compressed=True, **kw)),
    "wcodec": lambda dst, **kw: WCodecModel.from_pretrained(dst, dtype="bfloat16", keep_compressed=True, **kw),
}


@pytest.mark.parametrize("loader", sorted(LOADERS))
def test_fused_same_tokens_as_bf16(folders, loader):
    ref, dst = folders
    model = LOADERS[loader](dst)
    rep = model.wcodec_weights.report
    layers = ref.config.num_hidden_layers
    assert len(rep["fused"]) == 7 * layers + 1 and "lm_head.weight" in rep["fused"]
    assert rep["compressed"] == ["model.embed_tokens.weight"] and not rep["decoded"]
    assert isinstance(model.lm_head, CompressedLinear) and isinstance(model.model.layers[0].mlp.up_proj, CompressedLinear)
    with torch.no_grad():
        assert torch.equal(model(IDS).logits, ref(IDS).logits)
        g = ref.generate(IDS, max_new_tokens=8, do_sample=False)
        assert torch.equal(model.generate(IDS, max_new_tokens=8, do_sample=False), g)
        assert torch.equal(model.generate(IDS, max_new_tokens=8, do_sample=False, cache_implementation="static"),
                           _static_tokens(ref))


@pytest.mark.skipif(not torch.cuda.is_available(), reason="the fused kernels' GPU path needs a CUDA GPU (CI has none)")
def test_fused_kernels_on_gpu_follow_the_bf16_logits(folders):
    """On the GPU the fused kernels sum in another order than cuBLAS, so their logits match the
    bf16 model's to rounding, not bit for bit, and greedy decoding can part at a near-tie (seen
    on this model: one of 12 prompts after 8 tokens). Checked along the bf16 model's own greedy
    continuations, one prompt at a time (GEMV steps) and as a batch (the tiled kernel): the
    logits within 1 %, and the largest logit difference under half the bf16 top-2 margin (so
    the same argmax) at most positions; ``keep_compressed="jit"`` (decode, then cuBLAS) gives
    the bf16 tokens exactly."""
    import copy

    ref, dst = folders
    ref = copy.deepcopy(ref).to("cuda")
    fused = WCodecModel.from_pretrained(dst, dtype="bfloat16", keep_compressed=True, device="cuda")
    jit = WCodecModel.from_pretrained(dst, dtype="bfloat16", keep_compressed="jit", device="cuda")
    assert isinstance(fused.lm_head, CompressedLinear) and fused.lm_head.w_packed.is_cuda
    g = torch.Generator().manual_seed(0)
    prompts = [torch.randint(3, 512, (1, int(n)), generator=g).cuda() for n in torch.randint(4, 17, (12,), generator=g)]
    seqs = [(p, ref.generate(p, max_new_tokens=24, do_sample=False)) for p in prompts]
    batch = torch.cat([p[:, :4] for p in prompts])
    seqs.append((batch, ref.generate(batch, max_new_tokens=24, do_sample=False)))
    with torch.no_grad():
        for p, want in seqs:
            assert torch.equal(jit.generate(p, max_new_tokens=24, do_sample=False), want)
            a, b = fused(want).logits.float(), ref(want).logits.float()
            err = float((a - b).norm() / b.norm())
            top2 = b.topk(2, dim=-1).values
            safe = float(((top2[..., 0] - top2[..., 1]) > 2 * (a - b).abs().amax(-1)).float().mean())
            print(f"prompt {tuple(p.shape)}: logits rel. err {err:.2e}, "
                  f"argmax beyond rounding at {safe:.1%} of positions")
            assert err < 1e-2 and safe > 0.5


def test_fp32_model_keeps_linears_just_in_time(folders):
    _, dst = folders
    model = WCodecModel.from_pretrained(dst, dtype="float32", keep_compressed=True)
    rep = model.wcodec_weights.report
    assert not rep["fused"] and "bfloat16" in rep["kept"]["lm_head.weight"]


def test_compile_without_graph_breaks(folders):
    import torch._dynamo as dynamo

    ref, dst = folders
    model = LOADERS["auto"](dst, jit_embeddings=False)
    assert not model.wcodec_weights.report["compressed"]  # embedding decoded
    with torch.no_grad():
        explained = dynamo.explain(model)(IDS)
        assert explained.graph_break_count == 0, explained.break_reasons
        compiled = torch.compile(model, backend="eager", fullgraph=True)
        assert torch.equal(compiled(IDS).logits, ref(IDS).logits)


def test_lora_on_fused_base(folders, tmp_path):
    peft = pytest.importorskip("peft", reason="peft is not installed (pip install peft)")
    from wcodec.hf.lora import lora_config, register

    ref, dst = folders
    targets = ["q_proj", "v_proj", "down_proj"]

    def wrap(model, cfg):
        torch.manual_seed(0)
        return peft.get_peft_model(model, cfg(r=4, lora_alpha=8, target_modules=targets, init_lora_weights=False))

    plain = wrap(WCodecModel.from_pretrained(dst, dtype="bfloat16"), peft.LoraConfig)
    fused = wrap(LOADERS["auto"](dst), lora_config)
    for m in (plain, fused):
        m.train()
        m(BATCH, labels=BATCH).loss.backward()
    want = {n: p.grad for n, p in plain.named_parameters() if p.requires_grad}
    got = {n: p.grad for n, p in fused.named_parameters() if p.requires_grad}
    assert want.keys() == got.keys() and len(want) == 2 * len(targets) * ref.config.num_hidden_layers
    for n in want:  # the fused layer's input gradient is the decoded weight's, bit for bit
        assert torch.equal(got[n], want[n]), n
    opt = torch.optim.AdamW([p for p in fused.parameters() if p.requires_grad], lr=1e-2)
    losses = []
    for _ in range(4):
        loss = fused(BATCH, labels=BATCH).loss
        loss.backward()
        opt.step()
        opt.zero_grad()
        losses.append(loss.item())
    assert losses[-1] < losses[0], losses
    fused.eval()
    with torch.no_grad():
        want_logits = fused(BATCH).logits
    fused.save_pretrained(tmp_path / "adapter")
    again = peft.PeftModel.from_pretrained(LOADERS["auto"](dst), tmp_path / "adapter",
                                           config=register(peft.LoraConfig.from_pretrained(tmp_path / "adapter"))).eval()
    with torch.no_grad():
        assert torch.equal(again(BATCH).logits, want_logits)


@pytest.fixture(scope="module")
def untied(folders, tmp_path_factory):
    """stories260K with its own lm_head (untied): (bf16 reference model, wcodec folder)."""
    from wcodec.hf import convert_folder

    ref, _ = folders
    cfg = ref.config.to_dict()
    cfg["tie_word_embeddings"] = False
    model = transformers.AutoModelForCausalLM.from_config(type(ref.config).from_dict(cfg), dtype=torch.bfloat16)
    sd = {k: v.clone() for k, v in ref.state_dict().items()}
    sd["lm_head.weight"] = (sd["model.embed_tokens.weight"].float() * 0.5).to(torch.bfloat16)
    model.load_state_dict(sd)
    src = tmp_path_factory.mktemp("untied") / "hf"
    model.save_pretrained(src)
    dst = src.parent / "wc"
    convert_folder(src, dst)
    return model.eval(), dst


@pytest.mark.parametrize("loader", sorted(LOADERS))
def test_untied_embedding_fused_no_graph_break(untied, loader):
    import torch._dynamo as dynamo
    from wcodec.torch.embedding import CompressedEmbedding

    ref, dst = untied
    model = LOADERS[loader](dst)
    rep = model.wcodec_weights.report
    assert "model.embed_tokens.weight" in rep["fused"] and not rep["compressed"] and not rep["decoded"]
    assert isinstance(model.model.embed_tokens, CompressedEmbedding)
    with torch.no_grad():
        assert torch.equal(model(IDS).logits, ref(IDS).logits)
        assert torch.equal(model.generate(IDS, max_new_tokens=8, do_sample=False, cache_implementation="static"),
                           _static_tokens(ref))
        explained = dynamo.explain(model)(IDS)
        assert explained.graph_break_count == 0, explained.break_reasons
