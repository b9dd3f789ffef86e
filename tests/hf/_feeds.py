"""Generic model inputs without a processor: what a model's ``forward`` takes (its signature's
names) and its config say, for text, image, image-text, audio, video and time-series models.

Used by tools/arch_sweep.py (every model_type of transformers' Auto mappings) and
tests/hf/_arch.py. Everything is found by config field and forward-argument names; the few
layouts that a name does not tell are documented fallbacks below (Qwen-VL's flattened patches
with ``image_grid_thw``, Pix2Struct's ``flattened_patches``, Fuyu's ``image_patches``,
channels-first mel features for Whisper-like configs). The number of placeholder tokens
(image / video / audio) a model expects is guessed from its config and then asked of the model
itself: transformers' ``get_placeholder_mask`` raises "... features and ... tokens do not match,
tokens: T, features: F" and the next try places F.

Batch 2, a fixed seed; token ids in [6, vocab - 16) and never a special id of the config (the
sweep's shrinker moves special ids past its vocabulary to the top 16); float inputs in the
model's dtype.
"""

from __future__ import annotations

import inspect
import re

import torch

BATCH, TEXT, DECODER = 2, 8, 4
SEED = 0
_PROBES = 6  # forward passes at most while finding the placeholder counts

# placeholder token fields, by modality (the config's or its text config's)
_TOKEN_FIELDS = {
    "image": ("image_token_id", "image_token_index", "image_token", "img_token_id", "image_pad_token_id"),
    "video": ("video_token_id", "video_token_index", "video_token"),
    "audio": ("audio_token_id", "audio_token_index", "audio_token"),
}
# fields that say how many placeholders one image / video / audio takes (a first guess only)
_COUNT_FIELDS = ("image_seq_length", "mm_tokens_per_image", "num_image_tokens", "image_token_count",
                 "num_query_tokens", "tokens_per_image", "image_seq_len", "num_queries")


def _sub_configs(config) -> list:
    """config and every nested config (depth first), the config first."""
    out, todo = [], [config]
    while todo:
        c = todo.pop(0)
        if c is None or any(c is o for o in out):
            continue
        out.append(c)
        for k in getattr(c, "sub_configs", {}) or {}:
            todo.append(getattr(c, k, None))
        for k, v in vars(c).items():
            if hasattr(v, "to_dict") and hasattr(v, "model_type") and not any(v is o for o in todo):
                todo.append(v)
    return out


def _field(configs, names, kind=int):
    """The first value of one of ``names`` (in order) over ``configs`` that is a ``kind``."""
    for n in names:
        for c in configs:
            v = getattr(c, n, None)
            if isinstance(v, kind) and not isinstance(v, bool):
                return v
    return None


def _vision_configs(config) -> list:
    """The nested configs that describe the image encoder first (vision_config, vision tower...),
    then the others: image_size / patch_size are read from the first that has them."""
    subs = _sub_configs(config)
    vision = [c for c in subs if c is not config and any(w in (getattr(c, "model_type", "") or "") + " "
              + type(c).__name__.lower() for w in ("vision", "vit", "image", "visual", "clip", "siglip"))]
    return vision + [c for c in subs if not any(c is v for v in vision)]


def _pair(v):
    if isinstance(v, (list, tuple)) and v:
        return (int(v[0]), int(v[-1])) if len(v) >= 2 else (int(v[0]), int(v[0]))
    if isinstance(v, dict):
        h, w = v.get("height", v.get("shortest_edge")), v.get("width", v.get("shortest_edge"))
        return (int(h), int(w)) if h and w else None
    return (int(v), int(v)) if isinstance(v, int) and not isinstance(v, bool) and v > 0 else None


def image_geometry(config) -> dict:
    """{"size": (H, W), "channels", "patch": (ph, pw)} of a model's image input, from its (nested)
    config; 224 pixels, 3 channels, patch 16 where it says nothing."""
    vis = _vision_configs(config)
    size = None
    for c in vis:
        for n in ("image_size", "img_size", "input_size", "image_resolution", "vision_image_size", "crop_size"):
            size = size or _pair(getattr(c, n, None))
        if size:
            break
    patch = None
    for c in vis:
        for n in ("patch_size", "patch_sizes", "spatial_patch_size", "vision_patch_size"):
            patch = patch or _pair(getattr(c, n, None))
        if patch:
            break
    ch = _field(vis, ("num_channels", "in_channels", "in_chans", "input_channels", "image_channels")) or 3
    if size is None:  # a conv pyramid's per-stage strides: a 2 x 2 last stage (bf16 convs on CPU are slow:
        for c in vis:  # Florence-2's DaViT at 224 px took 25 s a forward on 2 cores)
            strides = next((v for n in _STAGE_STRIDES if _ints(v := getattr(c, n, None))), None)
            if strides:
                total = 1
                for s in strides:
                    total *= s
                size = (2 * total, 2 * total)
                break
    return {"size": size or (224, 224), "channels": ch, "patch": patch or (16, 16)}


_STAGE_STRIDES = ("patch_stride", "strides", "stage_strides", "downsampling_rates")


def _ints(v) -> bool:
    return isinstance(v, (list, tuple)) and len(v) > 1 and all(isinstance(i, int) and not isinstance(i, bool)
                                                                and i > 0 for i in v)


def special_ids(config) -> set:
    """Every token id named by a config field (``*_token_id``, ``*_token_index``, ``*_token_ids``)."""
    ids = set()
    for c in _sub_configs(config):
        for k, v in vars(c).items():
            if k.endswith(("token_id", "token_index")) and isinstance(v, int) and not isinstance(v, bool):
                ids.add(v)
            elif k.endswith("token_ids") and isinstance(v, (list, tuple)):
                ids.update(i for i in v if isinstance(i, int))
    return ids


def _placeholder(config, modality: str):
    configs = [config] + [c for c in _sub_configs(config) if c is not config and "text" in type(c).__name__.lower()]
    return _field(configs, _TOKEN_FIELDS[modality])


class _Feeder:
    def __init__(self, model, dtype, vocab):
        self.model, self.config, self.dtype = model, model.config, dtype
        params = inspect.signature(model.forward).parameters
        self.names = set(params)
        self.required = {n for n, p in params.items() if p.default is inspect.Parameter.empty
                         and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)}
        self.g = torch.Generator().manual_seed(SEED)
        text = self.config.get_text_config() if hasattr(self.config, "get_text_config") else self.config
        vocab = vocab or getattr(text, "vocab_size", None) or getattr(self.config, "vocab_size", None) or 512
        specials = special_ids(self.config)
        self.dropped: set = set()  # modalities left out (a model that runs without them, see inputs())
        self.extras: set = set()  # optional inputs given after a first failure (see inputs())
        self.allowed = torch.tensor([i for i in range(6, max(7, vocab - 16)) if i not in specials] or [6])

    def ids(self, n: int, rows: int = BATCH) -> torch.Tensor:
        pick = torch.randint(0, len(self.allowed), (rows, n), generator=self.g)
        return self.allowed[pick]

    def _grid_patches(self, feed: dict, pixels: str, grid: str, vis, ch: int, ph: int, pw: int) -> int:
        """Qwen-VL-style flattened patches (``pixels``) and their (t, h, w) grid (``grid``), one
        frame of 2 x merge patches a side per sample; returns the placeholder tokens per sample."""
        tp = _field(vis, ("temporal_patch_size", "patch_temporal")) or 1
        merge = _field(vis, ("spatial_merge_size", "merge_size")) or 1
        gh = gw = 2 * merge
        feed[pixels] = self.floats(BATCH * gh * gw, ch * tp * ph * pw)
        feed[grid] = torch.tensor([[1, gh, gw]] * BATCH)
        return gh * gw // (merge * merge)

    def floats(self, *shape) -> torch.Tensor:
        return torch.randn(*shape, generator=self.g).to(self.dtype)

    # -- images ----------------------------------------------------------------------------
    def absent(self, modality: str) -> bool:
        """Whether the config says the model has no ``modality`` encoder (``vision_config=None``)."""
        names = {"image": ("vision_config", "image_config"), "video": ("vision_config", "video_config"),
                 "audio": ("audio_config",)}[modality]
        return any(n in vars(self.config) and getattr(self.config, n) is None for n in names)

    def images(self, feed: dict) -> int | None:
        """Adds the image inputs the forward takes; returns the placeholder count per image guessed
        (None: no guess)."""
        if self.absent("image"):
            return None
        geo = image_geometry(self.config)
        (h, w), ch, (ph, pw) = geo["size"], geo["channels"], geo["patch"]
        vis = _vision_configs(self.config)
        grid = next((n for n in ("image_grid_thw", "grid_thw") if n in self.names), None)
        flat = next((n for n in ("pixel_values", "hidden_states") if n in self.names), None)
        if grid and flat:  # fallback: Qwen-VL's flattened patches and their grid (a vision tower alone:
            return self._grid_patches(feed, flat, grid, vis, ch, ph, pw)  # hidden_states, grid_thw)
        if "flattened_patches" in self.names:  # fallback: Pix2Struct (row, column, then the patch)
            n = _field(vis, ("max_patches", "seq_len")) or 16
            n = min(n, 16)
            rows = torch.arange(n) // 4 + 1
            patches = self.floats(BATCH, n, ch * ph * pw)
            pos = torch.stack([rows, torch.arange(n) % 4 + 1], -1).to(self.dtype).expand(BATCH, n, 2)
            feed["flattened_patches"] = torch.cat([pos, patches], -1)
            feed["attention_mask"] = torch.ones(BATCH, n, dtype=torch.long)
            return None
        if "image_patches" in self.names:  # fallback: Fuyu (patches as tokens, one list per sample)
            n = (h // ph) * (w // pw)
            feed["image_patches"] = self.floats(BATCH, n, ch * ph * pw)
            return n
        if "pixel_values" not in self.names:
            return None
        pinpoints = next((getattr(c, "image_grid_pinpoints") for c in _sub_configs(self.config)
                          if getattr(c, "image_grid_pinpoints", None)), None)
        if pinpoints and "image_sizes" in self.names:  # fallback: LLaVA-NeXT's "anyres" crops + the base
            feed["pixel_values"] = self.floats(BATCH, _anyres_crops((h, w), pinpoints, h), ch, h, w)
            feed["image_sizes"] = torch.tensor([[h, w]] * BATCH)
            return None
        if self.names & {"pixel_attention_mask", "image_attention_mask"}:  # (batch, images, C, H, W): Idefics
            feed["pixel_values"] = self.floats(BATCH, 1, ch, h, w)
            if "pixel_attention_mask" in self.names:  # every pixel real (no padding)
                feed["pixel_attention_mask"] = torch.ones(BATCH, 1, h, w, dtype=torch.bool)
        else:
            feed["pixel_values"] = self.floats(BATCH, ch, h, w)
        if "image_sizes" in self.names and "image_sizes" in self.extras:
            feed["image_sizes"] = torch.tensor([[h, w]] * BATCH)
        for name in sorted(self.names):  # a second image input at another resolution (high_res_pixel_values)
            prefix = name[:-len("_pixel_values")] if name.endswith("_pixel_values") else None
            sub = getattr(self.config, f"{prefix}_vision_config", None) if prefix else None
            if sub is not None:
                g = image_geometry(sub)
                feed[name] = self.floats(BATCH, g["channels"], *g["size"])
        count = _field([self.config] + vis, _COUNT_FIELDS)
        return count or (h // ph) * (w // pw)

    def videos(self, feed: dict) -> int | None:
        if "pixel_values_videos" not in self.names or self.absent("video") or "video" in self.dropped:
            return None
        (h, w), ch, (ph, pw) = image_geometry(self.config).values()
        vis = _vision_configs(self.config)
        if "video_grid_thw" in self.names:
            return self._grid_patches(feed, "pixel_values_videos", "video_grid_thw", vis, ch, ph, pw)
        frames = _field(vis, ("num_frames", "frames_per_video")) or 2
        feed["pixel_values_videos"] = self.floats(BATCH, frames, ch, h, w)
        return frames * (h // ph) * (w // pw)

    # -- audio -----------------------------------------------------------------------------
    def audio(self, feed: dict) -> None:
        if self.absent("audio") or "audio" in self.dropped:
            return
        c = self.config
        subs = _sub_configs(c)
        try:  # an encoder-decoder's audio input is its encoder's (SpeechEncoderDecoder takes either)
            main = self.model.get_encoder().main_input_name
        except Exception:  # noqa: BLE001  (no encoder: the model's own)
            main = getattr(self.model, "main_input_name", None)
        both = {"input_features", "input_values"} <= self.names
        if "input_features" in self.names and not (both and main == "input_values"):
            mel = _field(subs, ("num_mel_bins",))
            if mel is not None and "frames first" not in self.extras:  # channels first (Whisper); its
                frames = 2 * (_field(subs, ("max_source_positions",)) or 32)  # encoder wants 2 x its positions
                feed["input_features"] = self.floats(BATCH, mel, frames)
            elif mel is not None:  # fallback: mel bins last (LASR's encoder)
                feed["input_features"] = self.floats(BATCH, 64, mel)
            else:  # frames first, feature_size (Speech2Text, SeamlessM4T...)
                f = _field(subs, ("feature_projection_input_dim",))  # stacked frames (Wav2Vec2-BERT)
                if f is None:
                    f = _field(subs, ("input_feat_per_channel", "feature_size", "input_dim", "num_features")) or 80
                    f *= _field(subs, ("input_channels",)) or 1
                feed["input_features"] = self.floats(BATCH, 64, f)
        if "input_values" in self.names and not (both and main != "input_values"):
            mel = _field(subs, ("num_mel_bins",))
            if mel is not None and _field(subs, ("max_length",)):  # a spectrogram (AST)
                feed["input_values"] = self.floats(BATCH, _field(subs, ("max_length",)), mel)
            elif "channels" in self.extras:  # fallback: (batch, channels, samples), audio codecs (EnCodec, DAC)
                hop = _field(subs, ("hop_length",))  # two frames of the codec (DAC: 512 samples each), at most 4000
                feed["input_values"] = self.floats(BATCH, _field(subs, ("audio_channels",)) or 1,
                                                   min(4000, 2 * hop) if hop else 4000)
            else:  # raw samples
                feed["input_values"] = self.floats(BATCH, 4000)

    # -- time series -----------------------------------------------------------------------
    def time_series(self, feed: dict) -> None:
        if "past_values" not in self.names:
            return
        c = self.config
        ctx = getattr(c, "context_length", None) or 16
        lags = getattr(c, "lags_sequence", None) or [0]
        n = ctx + max(lags)
        size = getattr(c, "input_size", None) or getattr(c, "num_input_channels", None) or 1
        shape = (BATCH, n) if size == 1 and getattr(c, "num_input_channels", None) is None else (BATCH, n, size)
        feed["past_values"] = self.floats(*shape)
        if "past_observed_mask" in self.names:
            feed["past_observed_mask"] = torch.ones(shape, dtype=torch.bool if "patch" in c.model_type else self.dtype)
        tf = getattr(c, "num_time_features", None)
        if tf is not None and "past_time_features" in self.names:
            feed["past_time_features"] = self.floats(BATCH, n, tf)
            pred = getattr(c, "prediction_length", None) or 4
            if "future_time_features" in self.names:
                feed["future_time_features"] = self.floats(BATCH, pred, tf)

    # -- the whole feed ----------------------------------------------------------------------
    def build(self, counts: dict) -> dict:
        """The feed with ``counts[modality]`` placeholders in row i of input_ids (a list per row)."""
        self.g.manual_seed(SEED)
        feed: dict = {}
        guess = {"image": self.images(feed), "video": self.videos(feed)}
        self.audio(feed)
        self.time_series(feed)
        c = self.config
        if "input_ids" in self.names:
            rows = []
            body = self.ids(TEXT)
            for i in range(BATCH):
                parts = []
                for m in ("image", "video", "audio"):
                    tok = _placeholder(c, m)
                    n = counts.get(m, [guess.get(m)] * BATCH)[i] if tok is not None else None
                    if tok is not None and n and (m in feed_keys(feed)):
                        parts.append(torch.full((n,), tok))
                rows.append(torch.cat([*parts, body[i]]))
            width = max(len(r) for r in rows)
            pad = getattr(c.get_text_config() if hasattr(c, "get_text_config") else c, "pad_token_id", None)
            pad = pad if isinstance(pad, int) and pad >= 0 else 0
            ids = torch.full((BATCH, width), pad)
            mask = torch.zeros(BATCH, width, dtype=torch.long)
            for i, r in enumerate(rows):  # left padding, as generation pads
                ids[i, width - len(r):], mask[i, width - len(r):] = r, 1
            feed["input_ids"] = ids
            kinds = torch.zeros_like(ids)  # 0 text, 1 image, 2 video, 3 audio (the processors' mm_token_type_ids)
            for code, m in enumerate(("image", "video", "audio"), 1):
                tok = _placeholder(c, m)
                if tok is not None:
                    kinds[ids == tok] = code
            if "mm_token_type_ids" in self.names and bool(kinds.any()):
                feed["mm_token_type_ids"] = kinds
            if "image_attention_mask" in self.names and "image" in feed_keys(feed):  # every token sees the image
                feed["image_attention_mask"] = torch.ones(BATCH, width, 1, dtype=torch.long)
            if not bool(mask.all()) and "attention_mask" in self.names:
                feed["attention_mask"] = mask
        if getattr(c, "is_encoder_decoder", False) and "decoder_input_ids" in self.names:
            feed["decoder_input_ids"] = self.ids(DECODER)
        for name in sorted(self.required - set(feed)):  # another text input it needs (InstructBLIP's qformer_input_ids)
            if name.endswith("input_ids"):
                feed[name] = self.ids(TEXT)
        return feed


def _placed(feed: dict, config, modality: str) -> int:
    tok = _placeholder(config, modality)
    return int((feed["input_ids"] == tok).sum()) if tok is not None and "input_ids" in feed else 0


def _anyres_crops(size, pinpoints, crop: int) -> int:
    """Crops of one image of ``size`` in LLaVA-NeXT's "anyres" layout: the base image plus the
    tiles of the best grid resolution (transformers' own select_best_resolution)."""
    from transformers.image_processing_utils import select_best_resolution

    bh, bw = select_best_resolution(size, [list(p) for p in pinpoints])
    return 1 + (bh // crop) * (bw // crop)


def feed_keys(feed: dict) -> set:
    """The modalities present in ``feed`` (by their input names)."""
    have = set()
    if any(k in feed for k in ("pixel_values", "image_patches", "flattened_patches")):
        have.add("image")
    if "pixel_values_videos" in feed:
        have.add("video")
    if any(k in feed for k in ("input_features", "input_values")):
        have.add("audio")
    return have


_MISMATCH = re.compile(r"(image|video|audio|multimodal|placeholder)\w*\s.*?features:?\s*\(?\s*(\d+)", re.I | re.S)
_TOKENS = re.compile(r"tokens:?\s*\(?\s*(\d+)", re.I)


def inputs(model, dtype: torch.dtype | None = None, vocab: int | None = None) -> dict:
    """Inputs (batch 2) that ``model`` (a transformers PreTrainedModel, in eval mode) runs on,
    derived from its forward signature and config; float inputs in ``dtype`` (default: the
    model's). Placeholder counts are asked of the model (at most a few forward passes, no grad).
    Raises ValueError when the forward takes no input this module knows, or the exception of the
    model's last try when the placeholder counts cannot be found."""
    f = _Feeder(model, dtype or model.dtype, vocab)
    try:
        return _other_layout(model, f, _probe(model, f))
    except Exception:
        # fallbacks, the first failure raised when none runs: image_sizes, optional in the
        # signature, that some models need (Mistral3's Pixtral tower; LLaVA's breaks on it);
        # then a model that takes images with videos / audio may run on images alone
        if "image_sizes" in f.names:
            f.extras.add("image_sizes")
            try:
                return _probe(model, f)
            except Exception:  # noqa: BLE001
                f.extras.discard("image_sizes")
        for drop in ("video", "audio"):
            f.dropped.add(drop)
            try:
                return _probe(model, f)
            except Exception:  # noqa: BLE001
                pass
        raise


def _other_layout(model, f: _Feeder, feed: dict) -> dict:
    """``feed``, or, when its audio does not run and another layout does, that feed instead: raw
    samples (batch, samples) given a channel axis (audio codecs: EnCodec, Mimi, DAC), mel
    features (batch, mel bins, frames) given frames first (LASR's encoder)."""
    x, mel = feed.get("input_values"), feed.get("input_features")
    bins = _field(_sub_configs(f.config), ("num_mel_bins",))
    layout = "channels" if x is not None and x.dim() == 2 else "frames first" if (
        mel is not None and mel.dim() == 3 and mel.shape[1] == bins) else None
    if layout is None:
        return feed
    try:
        with torch.no_grad():
            model(**feed)
        return feed
    except Exception:  # noqa: BLE001  (the first layout's own error is the run's to report)
        f.extras.add(layout)
        other = f.build({})
        try:
            with torch.no_grad():
                model(**other)
        except Exception:  # noqa: BLE001
            f.extras.discard(layout)
            return feed
        return other


def _probe(model, f: _Feeder) -> dict:
    counts: dict = {}
    feed = f.build(counts)
    if not feed:
        raise ValueError(f"{type(model).__name__}: no known input among {sorted(f.names)[:12]}")
    if not any(_placeholder(model.config, m) is not None for m in feed_keys(feed)) or "input_ids" not in feed:
        return feed
    tried: dict = {}  # modality -> placeholder totals tried
    text = model.config.get_text_config() if hasattr(model.config, "get_text_config") else model.config
    hidden = getattr(text, "hidden_size", None)
    for _ in range(_PROBES):
        try:
            with torch.no_grad():
                model(**feed)
            return feed
        except Exception as e:  # noqa: BLE001  (the model says what count it wants, or this is raised)
            m = _MISMATCH.search(str(e))
            if not m:
                raise
            word = m.group(1).lower()
            modality = word if word in ("image", "video", "audio") else next(iter(feed_keys(feed) & {"image"}), "image")
            features = int(m.group(2))
            placed = _placed(feed, model.config, modality)
            told = _TOKENS.search(str(e))
            told = int(told.group(1)) if told else 0
            # the features figure is a count, or elements (count x the text width: LLaVA's
            # shape[0] * shape[1]), and the tokens one may count elements too (units: told / placed)
            candidates = [features]
            if placed and told > placed and told % placed == 0:
                candidates.append(features * placed // told)
            if hidden and features % hidden == 0:
                candidates.append(features // hidden)
            seen = tried.setdefault(modality, {placed})
            total = next((c for c in candidates if c > 0 and c not in seen), None)
            if total is None:
                raise
            seen.add(total)
            counts[modality] = [total // BATCH + (1 if i < total % BATCH else 0) for i in range(BATCH)]
            feed = f.build(counts)
    return feed

