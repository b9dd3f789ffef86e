"""tests/hf/_feeds.py, the sweep's generic input builder: inputs a tiny model runs on, derived
from its forward signature and config alone, placeholder counts asked of the model."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from . import _feeds  # noqa: E402

_TEXT = dict(vocab_size=512, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
             num_key_value_heads=2, pad_token_id=0)
_VISION = dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4, image_size=32,
               patch_size=8)


def _model(model_type, auto, **config):
    if model_type not in transformers.CONFIG_MAPPING:
        pytest.skip(f"this transformers has no {model_type}")
    torch.manual_seed(0)
    cfg = transformers.AutoConfig.for_model(model_type, **config)
    return getattr(transformers, auto).from_config(cfg, dtype=torch.bfloat16).eval()


def test_image_placeholders_are_counted_by_the_model():
    """LLaVA's default strategy drops the CLS feature: 16 patches, 16 placeholders per image (the
    first guess, (32 / 8)^2 + nothing, is corrected by the model's own mismatch message)."""
    model = _model("llava", "AutoModelForImageTextToText", text_config=_TEXT, vision_config=_VISION,
                   image_token_index=500, projector_hidden_act="gelu")
    feed = _feeds.inputs(model)
    assert feed["pixel_values"].shape == (2, 3, 32, 32) and feed["pixel_values"].dtype == torch.bfloat16
    assert (feed["input_ids"] == 500).sum(1).tolist() == [16, 16]
    assert not set(feed["input_ids"][feed["input_ids"] != 500].tolist()) & _feeds.special_ids(model.config)
    with torch.no_grad():
        assert model(**feed).logits.shape[:2] == feed["input_ids"].shape


def test_a_wrong_first_guess_is_corrected():
    model = _model("llava", "AutoModelForImageTextToText", text_config=_TEXT, vision_config=_VISION,
                   image_token_index=500, image_seq_length=3, vision_feature_select_strategy="full")
    feed = _feeds.inputs(model)  # 3 guessed from the config; the model wants 17 (CLS kept)
    assert (feed["input_ids"] == 500).sum(1).tolist() == [17, 17]


def test_audio_features_follow_the_config():
    model = _model("whisper", "AutoModelForSpeechSeq2Seq", vocab_size=512, d_model=64, encoder_layers=1,
                   decoder_layers=1, encoder_attention_heads=4, decoder_attention_heads=4, encoder_ffn_dim=128,
                   decoder_ffn_dim=128, num_mel_bins=16, max_source_positions=8, decoder_start_token_id=1,
                   pad_token_id=0, bos_token_id=1, eos_token_id=2)
    feed = _feeds.inputs(model)
    assert feed["input_features"].shape == (2, 16, 16) and feed["decoder_input_ids"].shape == (2, 4)
    with torch.no_grad():
        model(**feed)
