"""Held-out architectures: every ``model_type`` of transformers' Auto mappings (causal LM first;
masked LM, seq2seq, image classification, image-text-to-text, audio classification, CTC, speech
seq2seq, time series, token / sequence classification, base models on request) built TINY and
random-init from its default config by one generic shrinker (size fields found by name, nested
configs alike, no per-model table), saved in bf16 safetensors, converted with
``wcodec.hf.convert_folder`` (lossless and ``codec="fixed"``), loaded with plain
``AutoModelFor*.from_pretrained(folder)``, with ``WcodecConfig(keep_compressed=True)`` and with
``keep_compressed="jit"``, outputs compared exactly with the original folder's (tests/hf/_arch.py's
helpers), and the kept-compressed model's ``save_pretrained`` reloaded. Inputs other than text come
from tests/hf/_feeds.py (the forward's signature and the config: images, placeholder tokens,
audio, video, time series).

A model transformers itself cannot build, save, load back or run (or whose own folder does not
give the same outputs twice) is a skip with the reason: then it is not ours. Each model runs in
its own subprocess with a timeout, so a crash or a hang is a row. Prints a Markdown table (pass,
or the first failing check's exception class and first line, or the skip reason) and the counts;
progress on stderr.

    PYTHONPATH=src python tools/arch_sweep.py [--mapping causal masked ...] [--only llama gpt2]
        [--timeout 300] [--json rows.json]
"""

from __future__ import annotations

import argparse
import contextlib
import inspect
import io
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "hf"))

# mapping -> (transformers' *_MAPPING_NAMES, Auto class, input kind of tests/hf/_arch.py)
MAPPINGS = {
    "causal": ("MODEL_FOR_CAUSAL_LM_MAPPING_NAMES", "AutoModelForCausalLM", "text"),
    "masked": ("MODEL_FOR_MASKED_LM_MAPPING_NAMES", "AutoModelForMaskedLM", "masked"),
    "seq2seq": ("MODEL_FOR_SEQ_TO_SEQ_CAUSAL_LM_MAPPING_NAMES", "AutoModelForSeq2SeqLM", "seq2seq"),
    "image": ("MODEL_FOR_IMAGE_CLASSIFICATION_MAPPING_NAMES", "AutoModelForImageClassification", "image"),
    "image_text": ("MODEL_FOR_IMAGE_TEXT_TO_TEXT_MAPPING_NAMES", "AutoModelForImageTextToText", "image_text"),
    "audio": ("MODEL_FOR_AUDIO_CLASSIFICATION_MAPPING_NAMES", "AutoModelForAudioClassification", "feeds"),
    "ctc": ("MODEL_FOR_CTC_MAPPING_NAMES", "AutoModelForCTC", "feeds"),
    "speech_seq2seq": ("MODEL_FOR_SPEECH_SEQ_2_SEQ_MAPPING_NAMES", "AutoModelForSpeechSeq2Seq", "feeds"),
    "time_series": ("MODEL_FOR_TIME_SERIES_PREDICTION_MAPPING_NAMES", "AutoModelForTimeSeriesPrediction", "feeds"),
    "token": ("MODEL_FOR_TOKEN_CLASSIFICATION_MAPPING_NAMES", "AutoModelForTokenClassification", "masked"),
    "sequence": ("MODEL_FOR_SEQUENCE_CLASSIFICATION_MAPPING_NAMES", "AutoModelForSequenceClassification", "masked"),
    "base": ("MODEL_MAPPING_NAMES", "AutoModel", "feeds"),
}

# loading paths (tests/hf/_arch.KEEP): plain, keep_compressed=True, keep_compressed="jit"
PATHS = ("plain", "keep", "jit")

# ---- the generic shrinker: target sizes by field name (only ever shrinks) ----
WIDTH, FFN, MOE_FFN, LAYERS, HEADS, KV_HEADS, HEAD_DIM, VOCAB = 64, 128, 64, 2, 4, 2, 16, 512
_WIDTH = {"hidden_size", "d_model", "n_embd", "embed_dim", "model_dim", "dim", "word_embed_proj_dim",
          "embedding_size", "n_embed", "d_embed", "hidden_dim", "projection_dim",
          "out_hidden_size", "text_hidden_size", "vision_output_dim"}
_FFN = {"intermediate_size", "ffn_dim", "d_ff", "n_inner", "encoder_ffn_dim", "decoder_ffn_dim",
        "ffn_hidden_size", "ffn_intermediate_size", "dense_intermediate_size", "inner_hidden_size", "mlp_dim"}
_MOE_FFN = {"moe_intermediate_size", "shared_expert_intermediate_size", "expert_intermediate_size",
            "moe_ffn_hidden_size", "ffn_hidden_size_moe", "shared_intermediate_size"}
_LAYERS = {"num_hidden_layers", "num_layers", "n_layer", "n_layers", "encoder_layers", "decoder_layers",
           "num_decoder_layers", "num_encoder_layers", "depth"}
_HEADS = {"num_attention_heads", "n_head", "num_heads", "encoder_attention_heads", "decoder_attention_heads",
          "n_heads", "num_attention_heads_per_layer"}
_KV_HEADS = {"num_key_value_heads", "num_kv_heads", "n_head_kv", "multi_query_group_num", "n_kv_heads",
             "num_key_value_groups_heads"}
_HEAD_DIM = {"head_dim", "d_kv", "attention_head_dim", "kv_channels", "v_head_dim", "d_head", "qk_rope_head_dim",
             "qk_nope_head_dim", "rotary_dim", "rotary_emb_dim", "index_head_dim", "qk_head_dim"}
_SMALL = {"q_lora_rank": 32, "kv_lora_rank": 32, "o_lora_rank": 32,
          "num_local_experts": 4, "num_experts": 4, "n_routed_experts": 4, "moe_num_experts": 4,
          "num_routed_experts": 4, "n_experts": 4, "num_moe_experts": 4,
          "num_experts_per_tok": 2, "moe_topk": 2, "moe_top_k": 2, "moe_k": 2, "top_k": 2, "num_selected_experts": 2,
          "num_experts_per_token": 2, "n_activated_experts": 2, "router_top_k": 2, "num_activated_experts": 2,
          "n_shared_experts": 1, "num_shared_experts": 1, "n_group": 1, "topk_group": 1,
          "first_k_dense_replace": 1, "index_n_heads": 4, "index_topk": 8, "index_kpool": 8}
_VOCAB = {"vocab_size", "padded_vocab_size", "n_vocab"}
# other widths (kept out of _WIDTH's lookups): audio codecs' decoders (DAC: 1536), the backbone's
# that a depth decoder's embedding is tied to (CSM)
_OTHER_WIDTH = {"decoder_hidden_size", "backbone_hidden_size"}
# conv encoders' base channel count (doubled per stage: VibeVoice's audio tokenizer, 32 -> 2048)
CHANNELS = 8
_CHANNELS = {"num_filters", "base_channels", "base_filters"}
# per-stage lists (vision / audio pyramids: DaViT, ConvNeXt, VibeVoice): widths scaled down by one
# power of two (their ratios, and their heads / groups dividing them, kept), block counts capped
_STAGE_WIDTHS = {"embed_dim", "hidden_sizes", "embed_dims", "dims", "hidden_dims", "channels_list"}
_STAGE_DIVISORS = {"num_heads", "num_groups", "num_attention_heads", "heads"}
_STAGE_DEPTHS = {"depths", "depth", "num_blocks", "encoder_depths", "decoder_depths", "layers_per_stage"}
STAGE_WIDTH_MAX = 256
# image sizes past this are shrunk (their pixels set the sequence: Pixtral 1540 px = 12100 patches)
IMAGE_MAX, IMAGE_MIN = 512, 224
_IMAGE_SIZES = {"image_size", "img_size", "crop_size", "vision_image_size", "image_resolution"}
_PER_LAYER_LISTS = ("layer_types", "layers_block_type", "block_types", "attention_layers", "mlp_only_layers")


def _shrink_value(key: str, v, orig_heads):
    """The shrunk value of one int field (None: leave it)."""
    if not isinstance(v, int) or isinstance(v, bool):
        return None
    for names, target in ((_WIDTH, WIDTH), (_OTHER_WIDTH, WIDTH), (_FFN, FFN), (_MOE_FFN, MOE_FFN), (_LAYERS, LAYERS),
                          (_HEADS, HEADS), (_HEAD_DIM, HEAD_DIM), (_VOCAB, VOCAB)):
        if key in names:
            return min(v, target) if v > 0 else None
    if key in _KV_HEADS:
        if v <= 0:
            return None
        return min(v, HEADS) if orig_heads is not None and v >= orig_heads else min(v, KV_HEADS)
    if key in _SMALL:
        return min(v, _SMALL[key]) if v > 0 else None
    if key in _CHANNELS:
        return min(v, CHANNELS) if v > 0 else None
    if v > 0 and key.endswith("_head_dim"):  # linear_head_dim, mamba_head_dim...
        return min(v, HEAD_DIM)
    if v > 0 and (key.endswith("_num_heads") or key.endswith("_n_heads")):
        return min(v, HEADS)
    return None


def shrink(d: dict, stages: bool = True, widths: frozenset = frozenset()) -> dict:
    """A copy of a config dict (``PretrainedConfig.to_dict()``) with its size fields shrunk:
    width 64, FFN 128 (experts 64), 2 layers, 4 heads / 2 KV heads (MHA stays MHA), head_dim 16,
    vocab 512, 4 experts top-2; per-layer lists cut to the new depth, layer indices past it
    dropped, special token ids past the new vocabulary moved to its top; per-stage pyramids
    (``stages``: widths by a power of two, 2 blocks a stage), conv base channels 8, images past
    512 px to about 224; nested configs alike. ``widths``: original widths (``widths_of``) that
    other ``*hidden_size`` / ``*_dim`` fields equal to one shrink with (a head's copy of the
    backbone's width that a validator compares: PocketTTS's condition_dim)."""
    out = dict(d)
    heads = next((d[k] for k in _HEADS if isinstance(d.get(k), int)), None)
    layers = next((d[k] for k in _LAYERS if isinstance(d.get(k), int)), None)
    for k, v in d.items():
        if not isinstance(k, str):  # a {size: size} table (Aria's patches -> queries): not a config
            continue
        if isinstance(v, dict) and not k.startswith("rope") and k not in ("id2label", "label2id"):
            out[k] = shrink(v, stages, widths)
            continue
        new = _shrink_value(k, v, heads)
        if new is None and k.endswith(("hidden_size", "_dim")) and _int(v) and v in widths:
            new = min(v, WIDTH)
        if new is not None:
            out[k] = new
    # head sizes equal in the original (DeepSeek's head_dim == qk_rope_head_dim) stay equal
    for k in _HEAD_DIM:
        for k2 in _HEAD_DIM:
            if k != k2 and isinstance(d.get(k), int) and d.get(k) == d.get(k2) and k in out and k2 in out:
                out[k] = out[k2] = min(out[k], out[k2])
    width = next((d[k] for k in sorted(_WIDTH) if _int(d.get(k))), None)
    new_width = next((out[k] for k in sorted(_WIDTH) if _int(out.get(k))), None)
    for k, v in d.items():  # convolutions grouped over the whole width (Mimi's upsample_groups = hidden_size)
        if k.endswith("groups") and _int(v) and v == width and new_width != width:
            out[k] = new_width
    _shrink_rope_sections(d, out)
    if stages:
        _shrink_stages(d, out)
    _shrink_image_size(d, out)
    new_layers = next((out[k] for k in _LAYERS if isinstance(out.get(k), int)), None)
    keep = _kept_layers(d, layers, new_layers)
    for k, v in d.items():  # per-layer lists (length == depth) cut; index lists filtered
        if not isinstance(v, list) or new_layers is None or layers is None:
            if new_layers is not None and isinstance(v, int) and not isinstance(v, bool) and v > 0:
                if k.endswith("_layer_period"):  # hybrids (Jamba...): every kind of layer within the new depth
                    out[k] = min(v, new_layers)
                elif k.endswith("_layer_offset"):
                    out[k] = min(v, new_layers - 1)
            continue
        if len(v) == layers and layers != new_layers:
            out[k] = [v[i] for i in keep]
        elif "layer" in k and v and all(isinstance(i, int) and not isinstance(i, bool) for i in v):
            out[k] = sorted({min(i, new_layers - 1) for i in v})  # layer indices: each kind stays
    for k, v in d.items():  # {layer index: ...}: indices past the new depth folded onto its last layer
        if new_layers is not None and "layer" in str(k) and isinstance(v, dict) and v and all(
                str(i).isdigit() for i in v):
            folded: dict = {}
            for i, x in v.items():
                folded.setdefault(type(i)(min(int(i), new_layers - 1)), x)
            out[k] = folded
    vocab = next((out[k] for k in _VOCAB if isinstance(out.get(k), int)), None)
    if vocab is None:  # a multimodal config: its placeholder ids index the text model's vocabulary
        vocab = next((v[k] for n, v in out.items() if isinstance(v, dict) and "text" in n for k in _VOCAB
                      if isinstance(v.get(k), int)), None)
    if vocab is not None:
        moved: dict = {}
        for k, v in d.items():
            if (k.endswith("token_id") or k.endswith("token_index")) and isinstance(v, int) and v >= vocab:
                out[k] = moved.setdefault(v, vocab - 1 - len(moved))
            elif k.endswith("token_ids") and isinstance(v, list) and any(isinstance(i, int) and i >= vocab for i in v):
                out[k] = [moved.setdefault(i, vocab - 1 - len(moved)) if isinstance(i, int) and i >= vocab else i
                          for i in v]
    return out


def _int(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and v > 0


def _ints(v) -> bool:
    return isinstance(v, list) and bool(v) and all(isinstance(i, int) and not isinstance(i, bool) and i > 0 for i in v)


def _shrink_stages(d: dict, out: dict) -> None:
    """Per-stage lists, in place in ``out``: block counts capped at ``LAYERS`` each; widths
    divided by the smallest power of two that brings the widest to ``STAGE_WIDTH_MAX`` and still
    divides every width and leaves it divisible by its stage's heads / groups (same-length lists)."""
    for k, v in d.items():
        if k in _STAGE_DEPTHS and _ints(v):
            out[k] = [min(i, LAYERS) for i in v]
    divisors = [v for k, v in d.items() if k in _STAGE_DIVISORS and _ints(v)]
    for k, v in d.items():
        if k not in _STAGE_WIDTHS or not _ints(v) or max(v) <= STAGE_WIDTH_MAX:
            continue
        f = 1
        while max(v) // f > STAGE_WIDTH_MAX:
            g = 2 * f
            if any(i % g for i in v) or any(len(h) == len(v) and any((w // g) % n for w, n in zip(v, h))
                                           for h in divisors):
                break
            f = g
        if f > 1:
            out[k] = [i // f for i in v]


def _shrink_image_size(d: dict, out: dict) -> None:
    """Image sizes past ``IMAGE_MAX`` pixels, in place in ``out``: the smallest multiple of 4
    patches (merges and 2x downsamplings still divide the grid) of at least ``IMAGE_MIN``."""
    patch = d.get("patch_size")
    patch = patch if isinstance(patch, int) and not isinstance(patch, bool) and patch > 0 else 16
    step = 4 * patch
    for k, v in d.items():
        if k in _IMAGE_SIZES and isinstance(v, int) and not isinstance(v, bool) and v > IMAGE_MAX:
            out[k] = max(step, -(-IMAGE_MIN // step) * step)
        elif k in _IMAGE_SIZES and _ints(v) and len(v) == 2 and max(v) > IMAGE_MAX:
            out[k] = [max(step, -(-IMAGE_MIN // step) * step)] * 2


def _head_dim(d: dict):
    hd = next((d[k] for k in ("head_dim", "attention_head_dim") if isinstance(d.get(k), int)), None)
    width = next((d[k] for k in _WIDTH if isinstance(d.get(k), int)), None)
    heads = next((d[k] for k in _HEADS if isinstance(d.get(k), int)), None)
    return hd or (width // heads if width and heads else None)


def _shrink_rope_sections(d: dict, out: dict) -> None:
    """Multimodal RoPE's per-axis sections (``mrope_section``, summing to half the head size)
    scaled to the shrunk head size, in place in ``out``'s rope dicts."""
    old, new = _head_dim(d), _head_dim(out)
    if not old or not new or old == new:
        return
    for k, v in d.items():
        if not (k.startswith("rope") and isinstance(v, dict)):
            continue
        for sk, sec in v.items():
            if "section" in sk and isinstance(sec, list) and sec and all(isinstance(i, int) for i in sec):
                total = sum(sec)
                scaled = [max(1, i * new // old) for i in sec]
                scaled[-1] += max(0, total * new // old - sum(scaled))
                out[k] = {**out.get(k, v), sk: scaled}


_MROPE_DEFAULT = [16, 24, 24]  # Qwen-VL's code default when a config leaves mrope_section out (head size 128)


def _default_rope_sections(config, d: dict, small: dict) -> None:
    """Fallback: a config class that takes ``mrope_section`` (its ``ignore_keys_at_rope_validation``
    says so) but whose default leaves it to the model code's default (for head size 128) gets
    that default scaled to the shrunk head size, in its text config or itself."""
    for key, sub, c in [(None, small, config)] + [(k, small[k], getattr(config, k, None)) for k in small
                                                  if isinstance(small[k], dict) and hasattr(getattr(config, k, None), "to_dict")]:
        if "mrope_section" not in getattr(type(c), "ignore_keys_at_rope_validation", ()) or not isinstance(
                sub.get("rope_parameters"), dict) or "mrope_section" in sub["rope_parameters"]:
            continue
        head = _head_dim(sub)
        if head and head != 128:
            half = int(head * sub["rope_parameters"].get("partial_rotary_factor", 1.0)) // 2
            sec = [max(1, i * half // 64) for i in _MROPE_DEFAULT]
            sec[-1] += half - sum(sec)
            sub["rope_parameters"] = {**sub["rope_parameters"], "mrope_section": sec}


def _kept_layers(d: dict, layers, new_layers) -> list:
    """Which of the ``layers`` layers the shrunk model keeps: the first ``new_layers``, or, when a
    per-layer list mixes kinds (hybrid attention: sliding / full, linear / full, mamba / attention),
    the first layer of each of its first ``new_layers`` kinds, so that the tiny model keeps them."""
    if not layers or not new_layers or new_layers >= layers:
        return list(range(layers or 0))
    for v in d.values():
        if isinstance(v, list) and len(v) == layers and all(isinstance(x, str) for x in v):
            first = sorted({x: i for i, x in reversed(list(enumerate(v)))}.values())
            if len(first) > 1:
                picked = first[:new_layers]
                rest = [i for i in range(layers) if i not in picked]
                return sorted(picked + rest[:new_layers - len(picked)])
    return list(range(new_layers))


_META = ("model_type", "transformers_version", "architectures", "_name_or_path", "dtype", "torch_dtype")


def widths_of(d: dict) -> frozenset:
    """Every width (a ``_WIDTH`` field's int value) of a config dict and its nested configs."""
    out = set()
    for k, v in d.items():
        if isinstance(v, dict):
            out |= widths_of(v)
        elif k in _WIDTH and _int(v):
            out.add(v)
    return frozenset(out)


def tiny_config_overrides(model_type: str, stages: bool = True, tie: bool = False) -> dict:
    """Overrides for ``AutoConfig.for_model(model_type, **overrides)``: the default config shrunk
    (``stages=False``: its per-stage lists left as they are; ``tie``: fields equal to a width
    shrink with it, see ``shrink``)."""
    import transformers

    config = transformers.AutoConfig.for_model(model_type)
    d = config.to_dict()
    small = shrink(d, stages, widths_of(d) if tie else frozenset())
    _default_rope_sections(config, d, small)
    return {k: v for k, v in small.items() if k not in _META and v != d.get(k) or isinstance(v, dict)}


# ---- one model, in the child process ----


class Skip(Exception):
    """transformers itself cannot build, save, load or run this model: not ours."""


def _stage(what: str, fn, *args):
    """fn(*args); any exception becomes a Skip naming the stage (transformers' own failure)."""
    import _arch

    try:
        return fn(*args)
    except Exception as e:  # noqa: BLE001  (every failure of transformers' own is a skip row)
        raise Skip(f"{what}: {_arch.describe(e)}") from e


def _inputs(model, kind: str, dtype, vocab: int) -> dict:
    """Fixed inputs (batch 2) of ``kind``; token ids in [6, vocab - 16) (special ids moved to the top).
    Kinds other than text / masked / seq2seq: tests/hf/_feeds.py (from the forward's signature and
    the config, placeholder counts asked of the model)."""
    import torch
    import _arch
    import _feeds

    if kind not in ("text", "masked", "seq2seq"):
        return _feeds.inputs(model, dtype, vocab)
    g = torch.Generator().manual_seed(_arch.SEED)
    hi = max(7, min(vocab, VOCAB) - 16)
    feed = {"input_ids": torch.randint(6, hi, (2, 8), generator=g)}
    if kind == "seq2seq":
        feed["decoder_input_ids"] = torch.randint(6, hi, (2, 4), generator=g)
    if "bbox" in inspect.signature(model.forward).parameters:  # layout models (BROS needs it): a box a token,
        corner = torch.randint(0, 500, (2, 8, 2), generator=g)  # (x0, y0, x1, y1) in 0..1000, x0 <= x1
        feed["bbox"] = torch.cat([corner, corner + torch.randint(0, 500, (2, 8, 2), generator=g)], -1)
    return feed


def _same_when_copied(model, feed: dict, want: dict) -> None:
    """The original's outputs with every weight copied to a new allocation: CPU bf16 GEMMs on a
    non-contiguous input round differently by the weight's address alignment (LLaVA-OneVision's
    projector, Ovis2's vision attention: 0.0039 off, the original's own weights cloned); such a
    model's outputs cannot be compared exactly with any other load of it."""
    import torch
    import _arch

    with torch.no_grad():
        for p in model.parameters():
            p.data = p.data.clone()
    _arch.assert_same_outputs(_arch.outputs(model, feed), want, "the original with its weights copied")


def _check_cell(cell, codec: str, path: str) -> dict:
    """tests/hf/_arch.check_load without its own bf16 precondition (a sweep row says what the
    original folder loads as): same dtype, outputs exactly, kept compressed where it must."""
    import _arch

    keep = path in ("keep", "jit")
    model = _arch.cell_model(cell, codec, path)
    assert model.dtype == cell.ref.dtype, f"model dtype {model.dtype}, the original folder gives {cell.ref.dtype}"
    _arch.assert_same_outputs(_arch.outputs(model, cell.feed), cell.want, "outputs")
    rep = _arch.report(model)
    if keep:
        _arch._assert_kept(cell, rep)
    return rep


def _pad_id(model_type: str, over: dict) -> dict:
    """{"pad_token_id": the top id of the shrunk vocabulary} when the default config has none
    (transformers' sequence classifiers refuse a batch > 1 without one), else {}."""
    import transformers

    config = transformers.AutoConfig.for_model(model_type, **over)
    if getattr(config, "pad_token_id", 0) is not None or not isinstance(getattr(config, "vocab_size", None), int):
        return {}
    return {"pad_token_id": config.vocab_size - 1}


# retries of a shrunk config that transformers cannot build: (stages, tie, the row's note)
_RETRIES = ((False, False, "per-stage lists unshrunk (the shrunk config does not build)"),
            (True, True, "fields equal to a width shrunk with it (the shrunk config does not build)"))


def _build(model_type: str, auto: str, kind: str, folder: Path):
    """The tiny model built and saved into ``folder`` (tests/hf/_arch.build_source); a shrunk
    config that transformers cannot build is retried with its per-stage lists unshrunk (CvT's
    drop-path table wants stage i deeper than i), then with the fields equal to a width shrunk
    with it (a validator comparing a head's copy of the width: PocketTTS, Nemotron diarization).
    Returns (folder, the retry's note or None); raises Skip with the first failure when
    transformers builds none."""
    import _arch

    def overrides(stages=True, tie=False):
        over = _stage("config", tiny_config_overrides, model_type, stages, tie)
        if auto == "AutoModelForSequenceClassification":  # it pools the last non-pad token: batch > 1
            over = {**over, **_stage("config", _pad_id, model_type, over)}  # needs a pad id (never in our inputs)
        return over

    first = overrides()
    _arch.ARCHS["_sweep"] = _arch.Arch(model_type, auto, first, kind)
    try:
        return _arch.build_source("_sweep", folder), None
    except Exception as e:  # noqa: BLE001  (transformers' own failure: a skip unless a retry builds)
        error = e
    tried = [first]
    for stages, tie, note in _RETRIES:
        over = overrides(stages, tie)
        if over in tried:
            continue
        tried.append(over)
        _arch.ARCHS["_sweep"] = _arch.Arch(model_type, auto, over, kind)
        try:
            return _arch.build_source("_sweep", folder), note
        except Exception:  # noqa: BLE001  (the first failure is the row's)
            pass
    raise Skip(f"build: {_arch.describe(error)}") from error


def _takes_fixed(folder: Path) -> bool:
    """Whether the folder's safetensors hold a BF16 or F16 tensor of at least the fixed codecs'
    256 weights (``wcodec.codecs.MIN_CODED_NUMEL``)."""
    from safetensors import safe_open
    from wcodec.codecs import MIN_CODED_NUMEL

    for path in Path(folder).glob("*.safetensors"):
        with safe_open(str(path), "pt") as f:
            for name in f.keys():
                s = f.get_slice(name)
                n = 1
                for d in s.get_shape():
                    n *= d
                if s.get_dtype() in ("BF16", "F16") and n >= MIN_CODED_NUMEL:
                    return True
    return False


def _refused(src: Path, dst: Path, codec: str) -> None:
    """``codec`` on a checkpoint with no tensor it takes: refused with UnsupportedError, nothing written."""
    import _arch
    from wcodec.errors import UnsupportedError

    try:
        _arch.convert(src, dst, codec)
    except UnsupportedError:
        assert not any(Path(dst).glob("*.wcodec")), f"refused codec {codec!r}, yet wrote {dst}"
        return
    raise AssertionError(f"codec {codec!r} was not refused on a checkpoint with no tensor it takes")


def run_one(model_type: str, mapping: str, root: Path) -> dict:
    """Every check of one model; returns its row."""
    import torch
    import transformers
    import _arch

    _, auto, kind = MAPPINGS[mapping]
    row = {"model_type": model_type, "mapping": mapping, "auto": auto, "status": "pass", "checks": {}}
    try:
        src, retry = _build(model_type, auto, kind, root / "src")
        if retry:
            row["retry"] = retry
        ref = _stage("load original", _arch.load, "_sweep", src)
        cfg = getattr(ref.config, "text_config", None) or ref.config
        vocab = getattr(cfg, "vocab_size", None) or VOCAB
        feed = _stage("inputs", _inputs, ref, kind, ref.dtype, vocab)
        want = _stage("run original", _arch.outputs, ref, feed)
        twice = _stage("load original again", _arch.load, "_sweep", src)
        again = _stage("run original again", _arch.outputs, twice, feed)
        _stage("original twice", _arch.assert_same_outputs, again, want, "the original folder loaded twice")
        _stage("original, weights copied", _same_when_copied, twice, feed, want)
        del twice
        row["ref_dtype"] = str(ref.dtype).replace("torch.", "")
    except Skip as e:
        row.update(status="skip", reason=str(e))
        return row
    cell = _arch.Cell("_sweep", src, {}, ref, feed, want)
    checks = row["checks"]

    def check(name, fn, *args):
        t = time.perf_counter()
        try:
            value = fn(*args)
            checks[name] = "pass"
        except Exception as e:  # noqa: BLE001  (every failure is a cell of the row)
            value = None
            checks[name] = _arch.describe(e)
        print(f"  {model_type} {name}: {checks[name]} ({time.perf_counter() - t:.1f} s)", file=sys.stderr, flush=True)
        return value

    for codec in _arch.CODECS:
        if codec != "lossless" and not _takes_fixed(src):  # every weight under 256 (PatchTSMixer, tiny)
            check(f"convert {codec} refused (no tensor it takes)", _refused, src, root / codec, codec)
            continue
        folder = check(f"convert {codec}", _arch.convert, src, root / codec, codec)
        if folder is None:
            continue
        cell.converted[codec] = folder
        for path in PATHS:
            rep = check(f"{codec} {path}", _check_cell, cell, codec, path)
            if path == "keep" and rep is not None:
                row[f"kept {codec}"] = _arch.summary(rep)
        check(f"{codec} keep save+reload", _arch.check_save_reload, cell, codec, "keep", root / f"{codec}-saved")
        cell.loaded.clear()
    bad = [f"{k}: {v}" for k, v in checks.items() if v != "pass"]
    if bad:
        row.update(status="fail", reason=bad[0], failed=len(bad))
    return row


def child(model_type: str, mapping: str, out: Path) -> int:
    from arch_matrix import _quiet  # tools/ (this script's folder)

    _quiet()
    t = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="wcodec-sweep-") as tmp:
        with contextlib.redirect_stdout(io.StringIO()):
            row = run_one(model_type, mapping, Path(tmp))
    row["seconds"] = round(time.perf_counter() - t, 1)
    out.write_text(json.dumps(row) + "\n", encoding="utf-8")
    return 0


# ---- the parent: one subprocess per model ----


def model_types(mapping: str) -> list[str]:
    from transformers.models.auto import modeling_auto

    return sorted(getattr(modeling_auto, MAPPINGS[mapping][0]))


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def sweep_one(model_type: str, mapping: str, timeout: float) -> dict:
    with tempfile.TemporaryDirectory(prefix="wcodec-sweep-row-") as tmp:
        out = Path(tmp) / "row.json"
        cmd = [sys.executable, str(Path(__file__).resolve()), "--child", model_type, "--mapping", mapping,
               "--child-out", str(out)]
        t = time.perf_counter()
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=os.environ.copy())
        except subprocess.TimeoutExpired:
            return {"model_type": model_type, "mapping": mapping, "status": "fail",
                    "reason": f"timeout: no result in {timeout:.0f} s", "seconds": round(time.perf_counter() - t, 1)}
        if out.exists():
            row = json.loads(out.read_text(encoding="utf-8"))
        else:
            tail = (proc.stderr.strip().splitlines() or ["(no output)"])[-1]
            row = {"model_type": model_type, "mapping": mapping, "status": "fail",
                   "reason": f"crash (exit {proc.returncode}): {tail[:160]}"}
        row.setdefault("seconds", round(time.perf_counter() - t, 1))
        row["stderr_tail"] = proc.stderr[-2000:]
        return row


def table(rows: list) -> str:
    lines = ["| mapping | model_type | result | detail | kept (fixed, keep) | s |", "|---|---|---|---|---|---|"]
    for r in rows:
        detail = r.get("reason", "") + (f" (+{r['failed'] - 1} more)" if r.get("failed", 0) > 1 else "")
        lines.append(f"| {r['mapping']} | {r['model_type']} | {r['status']} | {_cell(detail)} | "
                     f"{r.get('kept fixed', '')} | {r.get('seconds', '')} |")
    return "\n".join(lines)


def not_fed(row: dict) -> bool:
    """A skip row whose inputs tests/hf/_feeds.py could not give: no input it knows, or the
    forward missing a required argument (the model itself builds and loads)."""
    reason = row.get("reason", "")
    return row["status"] == "skip" and (reason.startswith("inputs:") or (
        reason.startswith("run original: TypeError:") and "required positional argument" in reason))


def counts(rows: list) -> str:
    n = {s: sum(r["status"] == s for r in rows) for s in ("pass", "fail", "skip")}
    fed = sum(not_fed(r) for r in rows)
    return (f"tried {len(rows)}: transformers can't {n['skip'] - fed}, not fed {fed}, pass {n['pass']}, "
            f"fail {n['fail']} (of {n['pass'] + n['fail']} that transformers builds and runs)")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--mapping", nargs="+", choices=list(MAPPINGS), default=["causal"])
    ap.add_argument("--only", nargs="+", help="these model_types only")
    ap.add_argument("--skip", nargs="+", default=[], help="leave these model_types out")
    ap.add_argument("--timeout", type=float, default=300.0, help="seconds per model (default 300)")
    ap.add_argument("--json", type=Path, help="write every row as JSON here (rewritten after each model)")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    ap.add_argument("--child-out", type=Path, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        return child(args.child, args.mapping[0], args.child_out)
    rows, start = [], time.perf_counter()
    todo = [(mt, m) for m in args.mapping for mt in model_types(m)
            if (not args.only or mt in args.only) and mt not in args.skip]
    for i, (mt, m) in enumerate(todo, 1):
        row = sweep_one(mt, m, args.timeout)
        rows.append(row)
        print(f"[{i}/{len(todo)}] {m} {mt}: {row['status']} {row.get('reason', '')[:140]} ({row['seconds']} s)",
              file=sys.stderr, flush=True)
        if args.json:
            Path(args.json).write_text(json.dumps(rows, indent=1) + "\n", encoding="utf-8")
    print(table(rows))
    print(f"\n{counts(rows)}; {time.perf_counter() - start:.0f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
