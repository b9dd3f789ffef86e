"""The held-out sweep's generic shrinker (tools/arch_sweep.py) on per-stage pyramids and large
images: models whose size sat in per-stage lists (DaViT's widths and depths, VibeVoice's audio
tokenizer's channels), in a SAM encoder's ``mlp_dim`` or in a 1024 / 1540 pixel image timed out
at 120-150 s per row; shrunk, they build small with their ratios and divisibility kept."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

_TOOL = Path(__file__).resolve().parents[2] / "tools" / "arch_sweep.py"
_spec = importlib.util.spec_from_file_location("arch_sweep", _TOOL)
sweep = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(sweep)


def test_stage_widths_scale_by_one_power_of_two_keeping_heads_dividing():
    d = {"embed_dim": [128, 256, 512, 1024], "num_heads": [4, 8, 16, 32], "num_groups": [4, 8, 16, 32],
         "depths": [1, 1, 9, 1]}
    out = sweep.shrink(d)
    assert out["embed_dim"] == [32, 64, 128, 256]  # 1024 / 4 = STAGE_WIDTH_MAX, ratios 1:2:4:8 kept
    assert out["num_heads"] == d["num_heads"] and out["num_groups"] == d["num_groups"]
    assert all(w % h == 0 for w, h in zip(out["embed_dim"], out["num_heads"]))
    assert out["depths"] == [1, 1, 2, 1]
    assert d["embed_dim"] == [128, 256, 512, 1024]  # the input dict is not changed


def test_stage_widths_stop_where_a_head_count_would_no_longer_divide():
    # 96 / 4 = 24 is not a multiple of 16 heads: only halved, 48 / 16 = 3 per head
    out = sweep.shrink({"hidden_sizes": [96, 192, 384, 768], "num_heads": [16, 16, 16, 16]})
    assert out["hidden_sizes"] == [48, 96, 192, 384]
    # an odd width: left as it is
    assert sweep.shrink({"hidden_sizes": [99, 1000]})["hidden_sizes"] == [99, 1000]
    # already small: left as it is
    assert sweep.shrink({"hidden_sizes": [32, 64]})["hidden_sizes"] == [32, 64]


def test_large_images_shrink_to_a_grid_of_four_patches_multiples():
    assert sweep.shrink({"image_size": 1540, "patch_size": 14})["image_size"] == 224  # 16 x 16 patches
    assert sweep.shrink({"image_size": 1024, "patch_size": 16})["image_size"] == 256
    assert sweep.shrink({"image_size": 384, "patch_size": 14})["image_size"] == 384  # not large: kept
    assert sweep.shrink({"crop_size": [768, 768]})["crop_size"] == [256, 256]
    assert sweep.shrink({"mlp_dim": 3072})["mlp_dim"] == sweep.FFN
    assert sweep.shrink({"num_filters": 32})["num_filters"] == sweep.CHANNELS


@pytest.mark.parametrize("model_type", ["florence2", "vibevoice_asr", "got_ocr2"])
def test_timed_out_rows_build_small(model_type):
    """The tiny configs of three of the rows that timed out build with under 20 M parameters
    (at their default widths and depths florence2 has 498 M, a 90 M DaViT tower among them,
    GOT-OCR2 561 M, VibeVoice-ASR 12.2 G, 0.69 G in its two audio tokenizers; shrunk: 3.3 M,
    2.3 M, 16.9 M, the audio tokenizers keeping their 7 doubling stages)."""
    if model_type not in transformers.CONFIG_MAPPING:
        pytest.skip(f"this transformers has no {model_type}")
    config = transformers.AutoConfig.for_model(model_type, **sweep.tiny_config_overrides(model_type))
    with torch.device("meta"):
        model = transformers.AutoModel.from_config(config)
    n = sum(p.numel() for p in model.parameters())
    assert n < 20_000_000, f"{model_type}: {n} parameters"


def test_a_conv_pyramid_without_an_image_size_is_fed_a_small_image():
    """A vision config that names no image size but per-stage strides (Florence-2's DaViT:
    4 x 2 x 2 x 2) gets an image of 2 x 2 last-stage cells (64 px), not the 224 px default
    (25 s a bf16 forward on 2 CPU cores); one that names its size keeps it."""
    from . import _feeds

    if "florence2" not in transformers.CONFIG_MAPPING:
        pytest.skip("this transformers has no florence2")
    config = transformers.AutoConfig.for_model("florence2", **sweep.tiny_config_overrides("florence2"))
    assert _feeds.image_geometry(config)["size"] == (64, 64)
    vit = transformers.AutoConfig.for_model("vit", image_size=32, patch_size=8)
    assert _feeds.image_geometry(vit)["size"] == (32, 32)


def test_a_stage_shrink_transformers_cannot_build_is_retried_unshrunk(tmp_path):
    """CvT's drop-path table indexes stage i's rates by i (depth [1, 2, 10] shrunk to [1, 2, 2]
    raises IndexError in transformers' own __init__): the row is built from the config with
    its per-stage lists left as they are, and says so."""
    if "cvt" not in transformers.CONFIG_MAPPING:
        pytest.skip("this transformers has no cvt")
    import sys

    sys.path.insert(0, str(Path(__file__).resolve().parent))
    staged = sweep.tiny_config_overrides("cvt")
    assert staged["depth"] == [1, 2, 2]
    with pytest.raises(IndexError):
        transformers.AutoModelForImageClassification.from_config(transformers.AutoConfig.for_model("cvt", **staged))
    assert "depth" not in sweep.tiny_config_overrides("cvt", stages=False)
    folder, unstaged = sweep._build("cvt", "AutoModelForImageClassification", "image", tmp_path / "src")
    assert unstaged and any(folder.glob("*.safetensors"))
    built = transformers.AutoConfig.from_pretrained(folder)
    assert list(built.depth) == list(transformers.AutoConfig.for_model("cvt").depth) == [1, 2, 10]
    # a config that builds shrunk is not retried
    _, unstaged = sweep._build("bert", "AutoModelForMaskedLM", "masked", tmp_path / "bert")
    assert not unstaged


@pytest.mark.parametrize("model_type", ["layoutlm"])
def test_layout_models_get_a_box_per_token(model_type):
    """A forward that takes ``bbox`` gets one valid box a token, (x0, y0, x1, y1) with
    x0 <= x1, y0 <= y1 in 0..1000, and runs on it (LayoutLM's spatial embeddings then take
    part; BROS raised "You have to specify bbox", and with boxes fails in bf16 in its own
    sinusoid embedding: a float32 product into a bf16 Linear)."""
    if model_type not in transformers.CONFIG_MAPPING:
        pytest.skip(f"this transformers has no {model_type}")
    config = transformers.AutoConfig.for_model(model_type, **sweep.tiny_config_overrides(model_type))
    torch.manual_seed(0)
    model = transformers.AutoModelForTokenClassification.from_config(config, dtype=torch.bfloat16).eval()
    feed = sweep._inputs(model, "masked", model.dtype, config.vocab_size)
    box = feed["bbox"]
    assert box.shape == (2, 8, 4) and bool((box[..., 2:] >= box[..., :2]).all()) and int(box.max()) <= 1000
    with torch.no_grad():
        assert model(**feed).logits.shape[:2] == (2, 8)


def test_sequence_classifiers_get_a_pad_id_their_inputs_never_hold():
    """A sequence classifier pools the last non-pad token and refuses a batch of 2 without a
    pad id ("Cannot handle batch sizes > 1 if no padding token is defined": Arcee, counted as
    transformers' own failure): the sweep gives it the shrunk vocabulary's top id, which its
    inputs (ids in [6, vocab - 16)) never hold; a config with a pad id keeps it."""
    if "arcee" not in transformers.CONFIG_MAPPING:
        pytest.skip("this transformers has no arcee")
    over = sweep.tiny_config_overrides("arcee")
    assert sweep._pad_id("arcee", over) == {"pad_token_id": sweep.VOCAB - 1}
    assert sweep._pad_id("bert", sweep.tiny_config_overrides("bert")) == {}
    config = transformers.AutoConfig.for_model("arcee", **over, **sweep._pad_id("arcee", over))
    torch.manual_seed(0)
    model = transformers.AutoModelForSequenceClassification.from_config(config, dtype=torch.bfloat16).eval()
    feed = sweep._inputs(model, "masked", model.dtype, config.vocab_size)
    assert not bool((feed["input_ids"] == config.pad_token_id).any())
    with torch.no_grad():
        assert model(**feed).logits.shape == (2, config.num_labels)
