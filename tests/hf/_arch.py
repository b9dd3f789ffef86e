"""The architecture matrix (issue 26): tiny random-init models that transformers itself builds and
saves in bf16, their wcodec conversions, and the checks of one cell. Shared by
tests/hf/test_arch_matrix.py and tools/arch_matrix.py; each check raises AssertionError (or what
the code under test raises) and returns what it found.

A cell is architecture x codec ("lossless", "fixed") x loading path: "plain"
(``AutoModelFor*.from_pretrained(folder)`` after ``import wcodec``) or "keep"
(``quantization_config=WcodecConfig(keep_compressed=True)``). Round trips (save / reload, adapter
save / reload, merge, state_dict) run on one architecture through three paths: "fused"
(keep_compressed=True), "jit" (keep_compressed="jit") and "plain" (decoded).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

import torch
import transformers

import wcodec  # noqa: F401  (registers the quantizer with transformers)
from wcodec.hf import WcodecConfig, convert_folder

CODECS = ("lossless", "fixed")
PATHS = ("plain", "keep")
KEEP = {"plain": None, "keep": True, "jit": "jit"}  # loading path -> keep_compressed (None: no quantization_config)
ROUND_TRIP_PATHS = {"fused": True, "jit": "jit", "plain": None}  # None: no quantization_config
ROUND_TRIPS = ("save_reload", "adapter_reload", "merge", "state_dict")
SEED = 0

# decoder-only text models: 64 wide (Linear layers eligible for compression), 4 heads, 2 KV heads
_DEC = dict(vocab_size=512, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
            num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128,
            pad_token_id=0, bos_token_id=1, eos_token_id=2)
_QKV = ["q_proj", "v_proj"]


@dataclass(frozen=True)
class Arch:
    """One architecture: transformers ``model_type``, Auto class, config overrides, input kind
    ("text", "masked", "seq2seq", "image", "image_text", "audio") and the Linear names LoRA targets."""

    model_type: str
    auto: str
    config: dict
    inputs: str
    lora: list = field(default_factory=lambda: list(_QKV))


ARCHS = {
    "llama": Arch("llama", "AutoModelForCausalLM", _DEC, "text"),
    "qwen2": Arch("qwen2", "AutoModelForCausalLM", _DEC, "text"),
    "qwen3": Arch("qwen3", "AutoModelForCausalLM", {**_DEC, "head_dim": 16}, "text"),
    "mistral": Arch("mistral", "AutoModelForCausalLM", {**_DEC, "head_dim": 16, "sliding_window": None}, "text"),
    "gemma2": Arch("gemma2", "AutoModelForCausalLM", {**_DEC, "head_dim": 16, "query_pre_attn_scalar": 16,
                                                        "sliding_window": 32}, "text"),
    "gemma3": Arch("gemma3_text", "AutoModelForCausalLM", {**_DEC, "head_dim": 16, "query_pre_attn_scalar": 16,
                                                             "sliding_window": 32}, "text"),
    # the multimodal model (4B and up): its checkpoint names (language_model.model.*) renamed on load
    "gemma3_vlm": Arch("gemma3", "AutoModelForImageTextToText",
                       dict(text_config={**_DEC, "head_dim": 16, "query_pre_attn_scalar": 16, "sliding_window": 32},
                            vision_config=dict(hidden_size=64, intermediate_size=128, num_hidden_layers=1,
                                               num_attention_heads=4, image_size=32, patch_size=8),
                            mm_tokens_per_image=4, image_token_index=5, boi_token_index=3, eoi_token_index=4),
                       "image_text"),
    "phi3": Arch("phi3", "AutoModelForCausalLM", _DEC, "text", ["qkv_proj", "o_proj"]),
    "gpt2": Arch("gpt2", "AutoModelForCausalLM",
                 dict(vocab_size=512, n_embd=64, n_layer=2, n_head=4, n_positions=128, bos_token_id=1,
                      eos_token_id=2), "text", ["c_attn", "c_proj"]),
    "gpt_neox": Arch("gpt_neox", "AutoModelForCausalLM", {**_DEC, "num_key_value_heads": 4}, "text",
                     ["query_key_value", "dense"]),
    "mixtral": Arch("mixtral", "AutoModelForCausalLM", {**_DEC, "num_local_experts": 4, "num_experts_per_tok": 2},
                    "text"),
    "qwen3_moe": Arch("qwen3_moe", "AutoModelForCausalLM",
                      {**_DEC, "head_dim": 16, "num_experts": 4, "num_experts_per_tok": 2,
                       "moe_intermediate_size": 64, "decoder_sparse_step": 1, "mlp_only_layers": []}, "text"),
    "deepseek_v3": Arch("deepseek_v3", "AutoModelForCausalLM",
                        {**_DEC, "num_key_value_heads": 4, "moe_intermediate_size": 64, "n_routed_experts": 4,
                         "num_experts_per_tok": 2, "n_shared_experts": 1, "first_k_dense_replace": 1,
                         "n_group": 1, "topk_group": 1, "q_lora_rank": 32, "kv_lora_rank": 32,
                         "qk_rope_head_dim": 8, "qk_nope_head_dim": 8, "v_head_dim": 16},
                        "text", ["q_b_proj", "kv_b_proj", "o_proj"]),
    "gpt_oss": Arch("gpt_oss", "AutoModelForCausalLM",
                    {**_DEC, "head_dim": 16, "intermediate_size": 64, "num_local_experts": 4,
                     "num_experts_per_tok": 2, "sliding_window": 32,
                     "max_position_embeddings": 131072}, "text"),  # the YaRN factor's context (no table)
    "bert": Arch("bert", "AutoModelForMaskedLM",
                 dict(vocab_size=512, hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                      intermediate_size=128, max_position_embeddings=128), "masked", ["query", "value"]),
    "t5": Arch("t5", "AutoModelForSeq2SeqLM",
               dict(vocab_size=512, d_model=64, d_kv=16, d_ff=128, num_layers=2, num_decoder_layers=2,
                    num_heads=4, decoder_start_token_id=0, pad_token_id=0, eos_token_id=1), "seq2seq", ["q", "v"]),
    # transformers 5.24 loads ViT's attention query / value (their checkpoint names) as q_proj / v_proj
    "vit": Arch("vit", "AutoModelForImageClassification",
                dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, intermediate_size=128,
                     image_size=32, patch_size=8, num_labels=4), "image"),
    "whisper": Arch("whisper", "AutoModelForSpeechSeq2Seq",
                    dict(vocab_size=512, d_model=64, encoder_layers=2, decoder_layers=2, encoder_attention_heads=4,
                         decoder_attention_heads=4, encoder_ffn_dim=128, decoder_ffn_dim=128, num_mel_bins=80,
                         max_source_positions=32, max_target_positions=64, pad_token_id=0, bos_token_id=1,
                         eos_token_id=2, decoder_start_token_id=1, suppress_tokens=[], begin_suppress_tokens=[]),
                    "audio", _QKV),
}


def auto_class(arch: Arch):
    return getattr(transformers, arch.auto)


def build_source(name: str, folder: Path) -> Path:
    """Random-init ``name`` (fixed seed) built by transformers from its config class, saved with
    ``save_pretrained`` in bf16 safetensors into ``folder``; returns ``folder``."""
    arch = ARCHS[name]
    config = transformers.AutoConfig.for_model(arch.model_type, **arch.config)
    torch.manual_seed(SEED)
    model = auto_class(arch).from_config(config, dtype=torch.bfloat16)
    with torch.no_grad():  # zero-initialised (Gemma3's image projection, gpt-oss expert biases): random,
        for p in model.parameters():  # else no gradient reaches what feeds them (the vision tower)
            if p.dim() >= 2 and not p.any():
                p.normal_(0.0, 0.02)
    model.save_pretrained(folder)
    assert any(Path(folder).glob("*.safetensors")), f"{name}: save_pretrained wrote no safetensors"
    return Path(folder)


def convert(src: Path, dst: Path, codec: str) -> Path:
    """``wcodec.hf.convert_folder`` of ``src``: lossless, or lossless with the fixed-rate codec."""
    convert_folder(src, dst, mode="lossless", codec=None if codec == "lossless" else codec)
    return Path(dst)


def load(name: str, folder: Path, keep=None):
    """``AutoModelFor*.from_pretrained(folder)`` in eval mode, no dtype given;
    ``keep`` not None: with ``quantization_config=WcodecConfig(keep_compressed=keep)``."""
    kw = {} if keep is None else {"quantization_config": WcodecConfig(keep_compressed=keep)}
    return auto_class(ARCHS[name]).from_pretrained(str(folder), **kw).eval()


def inputs(name: str, config, dtype: torch.dtype) -> dict:
    """Fixed inputs of the right kind for ``name`` (batch of 2); float inputs in ``dtype``."""
    g = torch.Generator().manual_seed(SEED)
    kind = ARCHS[name].inputs

    def ids(n):
        return torch.randint(6, getattr(config, "text_config", config).vocab_size, (2, n), generator=g)

    if kind in ("text", "masked"):
        return {"input_ids": ids(8)}
    if kind == "seq2seq":
        return {"input_ids": ids(8), "decoder_input_ids": ids(4)}
    if kind in ("image", "image_text"):
        size = getattr(config, "vision_config", config).image_size
        pixels = {"pixel_values": torch.randn(2, 3, size, size, generator=g).to(dtype)}
        if kind == "image":
            return pixels
        image = [config.boi_token_index, *[config.image_token_index] * config.mm_tokens_per_image, config.eoi_token_index]
        return {"input_ids": torch.cat([torch.tensor([[1, *image]] * 2), ids(4)], dim=1), **pixels}
    frames = 2 * config.max_source_positions  # the encoder's two convolutions halve the frames
    return {"input_features": torch.randn(2, config.num_mel_bins, frames, generator=g).to(dtype),
            "decoder_input_ids": ids(4)}


def outputs(model, feed: dict) -> dict:
    """Every tensor of the model's output (logits, hidden states...; caches left out), no grad."""
    with torch.no_grad():
        out = model(**feed)
    return {k: v for k, v in out.items() if isinstance(v, torch.Tensor)}


def assert_same_outputs(got: dict, want: dict, what: str) -> None:
    assert got.keys() == want.keys(), f"{what}: outputs {sorted(got)} != {sorted(want)}"
    for k in want:
        assert got[k].dtype == want[k].dtype and torch.equal(got[k], want[k]), \
            f"{what}: output {k!r} differs (dtype {got[k].dtype} vs {want[k].dtype}, " \
            f"max abs diff {(got[k].float() - want[k].float()).abs().max().item():.3g})"


def assert_same_weights(model, ref, what: str) -> None:
    got, want = model.state_dict(), ref.state_dict()
    assert got.keys() == want.keys(), f"{what}: state_dict keys differ: only in reloaded " \
        f"{sorted(got.keys() - want.keys())[:4]}, only in original {sorted(want.keys() - got.keys())[:4]}"
    bad = [k for k in want if got[k].dtype != want[k].dtype or not torch.equal(got[k], want[k])]
    assert not bad, f"{what}: {len(bad)} of {len(want)} weights differ: {bad[:4]}"


def report(model) -> dict:
    """What the loader says it kept: {"fused", "compressed" (just in time), "decoded": [names],
    "kept": {name: why}}, merged over devices; {} when the model exposes no report."""
    cws = getattr(model, "wcodec_weights", None)
    out: dict = {}
    for cw in cws if isinstance(cws, list) else [] if cws is None else [cws]:
        for k, v in getattr(cw, "report", {}).items():
            if isinstance(v, dict):
                out.setdefault(k, {}).update(v)
            else:
                out.setdefault(k, []).extend(v)
    return out


def must_stay_compressed(ref) -> list[str]:
    """Names of the weights that keep_compressed=True must keep compressed: every nn.Linear weight
    (bf16, both sides >= 64 or at least the fixed codec's 256 weights) and every 3-D experts
    parameter (issue 26, must-haves 1-2)."""
    from wcodec.codecs import MIN_CODED_NUMEL

    names = []
    for mname, m in ref.named_modules(remove_duplicate=False):
        if isinstance(m, torch.nn.Linear) and m.weight.numel() >= MIN_CODED_NUMEL:
            names.append(f"{mname}.weight")
        for pname, p in m.named_parameters(prefix=mname, recurse=False):
            if p.dim() == 3 and "experts" in pname:
                names.append(pname)
    return sorted(set(names))


def must_be_reported(ref) -> list[str]:
    """Names of the other matrix weights (transformers' Conv1D: GPT-2's attention and MLP) that
    keep_compressed=True must keep compressed or name in its report (issue 26, must-have 4:
    never silently dense)."""
    from transformers.pytorch_utils import Conv1D

    return sorted(f"{n}.weight" for n, m in ref.named_modules(remove_duplicate=False) if isinstance(m, Conv1D))


@dataclass
class Cell:
    """One architecture's folders and reference: the source (bf16 safetensors), its conversions
    {codec: folder}, the reference model loaded from the source without dtype, its inputs, and
    the models loaded from the conversions that checks share ({(codec, path): model})."""

    name: str
    src: Path
    converted: dict
    ref: object
    feed: dict
    want: dict
    loaded: dict = field(default_factory=dict)


def cell_model(cell: Cell, codec: str, path: str, take: bool = False):
    """The model of ``cell``'s ``codec`` folder on loading ``path``, loaded once for the checks
    that leave it as loaded (outputs, report, save_pretrained): loading is most of a cell's time.
    ``take=True`` hands it over to a check that changes it (LoRA wraps it); the next caller loads
    afresh."""
    key = (codec, path)
    model = cell.loaded.pop(key, None) if take else cell.loaded.get(key)
    if model is None:
        model = load(cell.name, cell.converted[codec], KEEP.get(path))
        if not take:
            cell.loaded[key] = model
    return model


def make_cell(name: str, root: Path) -> Cell:
    root = Path(root)
    src = build_source(name, root / "src")
    converted = {c: convert(src, root / c, c) for c in CODECS}
    ref = load(name, src)
    feed = inputs(name, ref.config, ref.dtype)
    return Cell(name, src, converted, ref, feed, outputs(ref, feed))


def check_load(cell: Cell, codec: str, path: str) -> dict:
    """The cell's model gives the reference's outputs exactly, has its dtype (none passed) and,
    kept compressed, keeps every Linear / experts weight compressed. Returns the report."""
    keep = True if path == "keep" else None
    model = cell_model(cell, codec, path)
    assert cell.ref.dtype == torch.bfloat16, f"reference loaded as {cell.ref.dtype}, not the saved bf16"
    assert model.dtype == cell.ref.dtype, f"model dtype {model.dtype}, the original folder gives {cell.ref.dtype}"
    assert_same_outputs(outputs(model, cell.feed), cell.want, "outputs")
    rep = report(model)
    if keep:
        _assert_kept(cell, rep)
    return rep


def _assert_kept(cell: Cell, rep: dict) -> None:
    kept = set(rep.get("fused", [])) | set(rep.get("compressed", []))
    must = must_stay_compressed(cell.ref)
    dense = [n for n in must if n not in kept]
    # a Linear weight tied to one outside that list (IBert's lm_head.decoder to its QuantEmbedding
    # table) and reported dense with it is that very tensor: compressing it would add memory
    ties: dict = {}
    for n, p in cell.ref.named_parameters(remove_duplicate=False):
        ties.setdefault(id(p), []).append(n)
    partners = {n: group for group in ties.values() for n in group}
    decoded = set(rep.get("decoded", []))
    dense = [n for n in dense if not (n in decoded and any(o not in must and o in decoded for o in partners.get(n, [])))]
    # a model with no Linear / experts weight (EnCodec: convolutions and an LSTM) has none to keep
    assert (kept or not must) and not dense, f"{len(dense)} weights not kept compressed: {dense[:4]}" \
        f"{' (reason: ' + str(rep.get('kept', {}).get(dense[0])) + ')' if dense else ''}"
    told = kept | set(rep.get("kept", {})) | set(rep.get("decoded", []))
    silent = [n for n in must_be_reported(cell.ref) if n not in told]
    assert not silent, f"{len(silent)} matrices left dense without a word in the report: {silent[:4]}"


def without_config_dtype(folder: Path, dst: Path) -> Path:
    """A copy of ``folder`` whose config.json names no dtype (as configs from before transformers
    recorded one): the dtype then comes from the stored weights."""
    import shutil

    shutil.copytree(folder, dst)
    cfg = json.loads((dst / "config.json").read_text(encoding="utf-8"))
    for k in ("dtype", "torch_dtype"):
        cfg.pop(k, None)
        cfg.get("text_config", {}).pop(k, None)
    (dst / "config.json").write_text(json.dumps(cfg, indent=2), encoding="utf-8")
    return dst


def check_dtype_from_weights(cell: Cell, codec: str, path: str, tmp: Path) -> None:
    """With no dtype in config.json and none passed, the wcodec folder loads in the dtype the
    original folder loads in (the stored one), with its outputs; kept compressed, the Linear /
    experts weights still stay compressed (issue 26: fp32 and every Linear dense)."""
    src = without_config_dtype(cell.src, Path(tmp) / "src")
    dst = without_config_dtype(cell.converted[codec], Path(tmp) / "wc")
    keep = True if path == "keep" else None
    ref, model = load(cell.name, src), load(cell.name, dst, keep)
    assert ref.dtype == cell.ref.dtype, f"the original folder without a config dtype loads as {ref.dtype}"
    assert model.dtype == ref.dtype, f"model dtype {model.dtype}, the original folder gives {ref.dtype}"
    assert_same_outputs(outputs(model, cell.feed), cell.want, "outputs")
    if keep:
        _assert_kept(cell, report(model))


def check_save_reload(cell: Cell, codec: str, path: str, tmp: Path) -> None:
    """save_pretrained, then plain from_pretrained (decoded) gives the original's weights and
    outputs exactly; a kept-compressed model saves a wcodec folder (issue 26, must-have 5)."""
    from wcodec.hf import read_codec_config

    keep = True if path == "keep" else None
    model = cell_model(cell, codec, path)
    model.save_pretrained(tmp)
    is_wcodec = read_codec_config(tmp) is not None
    if keep:
        assert is_wcodec, "a kept-compressed model did not save as a wcodec folder"
    again = load(cell.name, tmp, False if is_wcodec else None)
    assert_same_weights(again, cell.ref, "reloaded")
    assert_same_outputs(outputs(again, cell.feed), cell.want, "reloaded outputs")


def lora_model(model, targets):
    """peft's plain LoraConfig on ``targets`` (random A and B, so both get gradients), seed fixed."""
    import peft

    torch.manual_seed(SEED)
    return peft.get_peft_model(model, peft.LoraConfig(r=4, lora_alpha=8, target_modules=targets,
                                                      init_lora_weights=False))


def _loss(model, feed) -> torch.Tensor:
    out = model(**feed)
    first = next(v for v in out.values() if isinstance(v, torch.Tensor))
    return first.float().square().mean()


def lora_step(model, feed) -> None:
    """One SGD step of the adapters (eval mode: no dropout, deterministic routing)."""
    params = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.SGD(params, lr=0.5)
    _loss(model, feed).backward()
    opt.step()
    opt.zero_grad()


def check_lora(cell: Cell, codec: str, path: str) -> None:
    """A plain LoraConfig on the arch's linear names trains one step and changes only the
    adapter: every trainable parameter is an adapter's, each adapter tensor moved, and with the
    adapter disabled the outputs are the base's exactly."""
    model = cell_model(cell, codec, path, take=True)
    base = outputs(model, cell.feed)
    pm = lora_model(model, ARCHS[cell.name].lora)
    trainable = {n: p.detach().clone() for n, p in pm.named_parameters() if p.requires_grad}
    assert trainable and all("lora_" in n for n in trainable), \
        f"trainable beyond the adapter: {[n for n in trainable if 'lora_' not in n][:4]}"
    lora_step(pm, cell.feed)
    now = dict(pm.named_parameters())
    still = [n for n in trainable if torch.equal(now[n].detach(), trainable[n])]
    assert not still, f"{len(still)} of {len(trainable)} adapter tensors unchanged by the step: {still[:3]}"
    with pm.disable_adapter():
        assert_same_outputs(outputs(pm, cell.feed), base, "base outputs after the step")
    with_adapter = outputs(pm, cell.feed)
    assert any(not torch.equal(with_adapter[k], base[k]) for k in base), "the adapter does not change the outputs"


# ---- round trips (one architecture, three paths) ----


def _adapted(cell: Cell, codec: str, keep):
    model = load(cell.name, cell.converted[codec], keep)
    pm = lora_model(model, ARCHS[cell.name].lora)
    lora_step(pm, cell.feed)
    return pm


def round_trip(cell: Cell, codec: str, path: str, op: str, tmp: Path) -> None:
    """One round trip of issue 26 (``ROUND_TRIPS``) on loading path ``path`` of ``ROUND_TRIP_PATHS``."""
    import peft

    keep = ROUND_TRIP_PATHS[path]
    if op == "save_reload":
        from wcodec.hf import read_codec_config

        model = load(cell.name, cell.converted[codec], keep)
        model.save_pretrained(tmp)
        if keep:
            assert read_codec_config(tmp) is not None, "a kept-compressed model did not save as a wcodec folder"
        for again_keep in (False, keep) if keep else (None,):
            again = load(cell.name, tmp, again_keep)
            if not again_keep:
                assert_same_weights(again, cell.ref, "reloaded")
            assert_same_outputs(outputs(again, cell.feed), cell.want, f"reloaded (keep_compressed={again_keep})")
    elif op == "adapter_reload":
        pm = _adapted(cell, codec, keep)
        want = outputs(pm, cell.feed)
        pm.save_pretrained(tmp)
        again = peft.PeftModel.from_pretrained(load(cell.name, cell.converted[codec], keep), str(tmp)).eval()
        assert_same_outputs(outputs(again, cell.feed), want, "reloaded adapter")
    elif op == "merge":
        _check_merge(cell, codec, keep)
    elif op == "state_dict":
        _check_state_dict(cell, codec, keep)
    else:
        raise ValueError(f"unknown round trip {op!r}")


def _check_merge(cell: Cell, codec: str, keep) -> None:
    """merge_and_unload gives the outputs of the same adapter merged by peft into the original
    bf16 model, or raises a WcodecError; never the base's outputs (a silently dropped adapter)."""
    from wcodec.errors import WcodecError

    pm = _adapted(cell, codec, keep)
    adapter = {n: p.detach().clone() for n, p in pm.named_parameters() if "lora_" in n}
    ref = lora_model(load(cell.name, cell.src), ARCHS[cell.name].lora)
    refp = dict(ref.named_parameters())
    lacks = sorted(adapter.keys() - refp.keys())
    assert not lacks, f"adapter tensors the bf16 model lacks: {lacks[:3]}"
    with torch.no_grad():
        for n, t in adapter.items():
            refp[n].copy_(t)
    want = outputs(ref.merge_and_unload(), cell.feed)
    try:
        merged = pm.merge_and_unload()
    except WcodecError:
        return  # a clear refusal is allowed (issue 26, must-have 6)
    got = outputs(merged, cell.feed)
    assert any(not torch.equal(got[k], cell.want[k]) for k in got), "merge dropped the adapter silently"
    assert_same_outputs(got, want, "merged")


def _check_state_dict(cell: Cell, codec: str, keep) -> None:
    """Every state_dict entry under an original name, shape and dtype holds the original's
    tensor (true weights, never a decode scratch); an original name may be missing only when
    the report says that weight is kept compressed."""
    model = load(cell.name, cell.converted[codec], keep)
    outputs(model, cell.feed)  # a forward pass first: just-in-time scratch then holds some weight
    got, want = model.state_dict(), cell.ref.state_dict()
    rep = report(model)
    kept = set(rep.get("fused", [])) | set(rep.get("compressed", []))
    bad = [k for k in want if k in got and got[k].shape == want[k].shape and got[k].dtype == want[k].dtype
           and not torch.equal(got[k], want[k])]
    assert not bad, f"{len(bad)} of {len(want)} state_dict tensors are not the weights: {bad[:4]}"
    missing = [k for k in want if k not in got and k not in kept]
    assert not missing, f"state_dict lacks {missing[:4]} (not reported kept compressed)"


def describe(exc: BaseException) -> str:
    """Exception class and the first line of its message (the failure table's cell text)."""
    first = (str(exc).strip().splitlines() or [""])[0]
    return f"{type(exc).__name__}: {first[:160]}"


def summary(rep: dict) -> str:
    """'F fused, J jit, D decoded, K kept' counts of a report ('-' when there is none)."""
    if not rep:
        return "-"
    return (f"{len(rep.get('fused', []))} fused, {len(rep.get('compressed', []))} jit, "
            f"{len(rep.get('decoded', []))} decoded")


def write_json(path: Path, rows: list) -> None:
    Path(path).write_text(json.dumps(rows, indent=1) + "\n", encoding="utf-8")
