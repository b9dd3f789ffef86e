"""Which weights matter: per-row Fisher (Gauss-Newton) weights of a Hugging Face model's output,
and that output itself, for the lossy target search (:mod:`wcodec.lossy_target`).

The output o(x) compared between the original and the decoded model, per item:

- ``sentence-transformers`` folder (modules.json with Transformer, Pooling, Normalize modules):
  the pooled sentence embedding (the pooling mode of ``1_Pooling/config.json``);
- ``encoder`` (a transformers encoder such as BERT, RoBERTa, MiniLM, without modules.json): the
  mean-pooled last hidden state;
- ``causal-lm`` (an ``*ForCausalLM`` / ``*LMHeadModel`` architecture): the next-token logits
  at every token, centred (softmax ignores a shift), one item per token.

The quality figure is the cosine between o(x) and the decoded model's o'(x), averaged over
items. F_row = E_x sum_j |d u(x) / d w_rj|^2 / cols, u = o / |o|, estimated as the squared
gradient of <r, u(x)> for a random normal r drawn per item (E_r (r^T J d)^2 = |J d|^2), so
that 1 - cos(o, o') ~ |u - u'|^2 / 2 ~ sum_w F_w err_w^2 / 2. Needs torch and transformers
(the ``hf`` extra); sentence-transformers is not needed.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from ..errors import UnsupportedError

KINDS = ("sentence-transformers", "encoder", "causal-lm")
#: sentence-transformers modules this module reproduces (others, e.g. Dense, are refused)
_ST_MODULES = ("Transformer", "Pooling", "Normalize")
#: tokens per calibration item at most (longer lines are truncated)
MAX_TOKENS = 128
_SUPPORTED = ("supported: a Hugging Face folder (config.json + tokenizer) of a sentence-transformers model, "
              "a transformers text encoder (BERT-like) or a causal language model (*ForCausalLM)")


def _st_pooling(folder: Path) -> str | None:
    """The pooling mode of a sentence-transformers folder ("mean", "cls", "max"), None when the
    folder has no modules.json. Raises UnsupportedError for modules or pooling it cannot reproduce."""
    mj = folder / "modules.json"
    if not mj.is_file():
        return None
    try:
        mods = json.loads(mj.read_text(encoding="utf-8"))
        mods = [m for m in mods if isinstance(m, dict)]
    except (ValueError, TypeError):
        raise UnsupportedError(f"{mj}: not a sentence-transformers modules list") from None
    kinds = [str(m.get("type", "")).rsplit(".", 1)[-1] for m in mods]
    other = [k for k in kinds if k not in _ST_MODULES]
    if other or "Pooling" not in kinds or any(m.get("path") not in ("", None) for m in mods
                                                if str(m.get("type", "")).endswith("Transformer")):
        raise UnsupportedError(f"{folder}: sentence-transformers modules {kinds}: the lossy target search "
                               f"reproduces Transformer (at the folder's root), Pooling and Normalize only")
    pool = next(m for m in mods if str(m.get("type", "")).endswith("Pooling"))
    try:
        cfg = json.loads((folder / str(pool.get("path", "1_Pooling")) / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        raise UnsupportedError(f"{folder}: the Pooling module's config.json is missing or not JSON") from None
    if not isinstance(cfg, dict):
        raise UnsupportedError(f"{folder}: the Pooling module's config.json is not a JSON object")
    for key, mode in (("pooling_mode_mean_tokens", "mean"), ("pooling_mode_cls_token", "cls"),
                      ("pooling_mode_max_tokens", "max")):
        if cfg.get(key):
            return mode
    raise UnsupportedError(f"{folder}: pooling {cfg} is not supported (mean, cls or max tokens)")


def model_kind(folder) -> str:
    """One of KINDS for a model folder. Raises UnsupportedError naming what is supported."""
    from .model import read_config

    folder = Path(folder)
    if not folder.is_dir():
        raise UnsupportedError(f"'{folder}' is not a model folder; {_SUPPORTED}")
    try:
        cfg = read_config(folder)
    except FileNotFoundError:
        raise UnsupportedError(f"'{folder}' has no config.json; {_SUPPORTED}") from None
    if _st_pooling(folder) is not None:
        return "sentence-transformers"
    archs = [str(a) for a in cfg.get("architectures") or []]
    if any(a.endswith(("ForCausalLM", "LMHeadModel")) for a in archs):
        return "causal-lm"
    if cfg.get("is_encoder_decoder") or cfg.get("is_decoder"):
        archs_text = ", ".join(archs) or "no architectures"
        raise UnsupportedError(f"'{folder}': model type {cfg.get('model_type')!r} ({archs_text}) is not "
                               f"supported; {_SUPPORTED}")
    return "encoder"


class ModelOutput:
    """A model folder loaded in float32 on the CPU, with its output (see the module doc) and the
    map from its parameters to the checkpoint's tensor names.

    folder: a Hugging Face folder with weights, config.json and a tokenizer. Raises
    UnsupportedError (model type, no tokenizer), MissingDependencyError (no torch/transformers)."""

    def __init__(self, folder, checkpoint_names):
        import torch
        import transformers

        self.folder = Path(folder)
        self.kind = model_kind(self.folder)
        self.pooling = _st_pooling(self.folder) or "mean"
        try:
            self.tokenizer = transformers.AutoTokenizer.from_pretrained(str(self.folder))
        except (OSError, ValueError, TypeError) as e:
            raise UnsupportedError(f"'{self.folder}': no usable tokenizer ({str(e).splitlines()[0][:200]}); "
                                   f"{_SUPPORTED}") from None
        if self.tokenizer.pad_token is None:
            self.tokenizer.pad_token = self.tokenizer.eos_token or self.tokenizer.unk_token
        auto = transformers.AutoModelForCausalLM if self.kind == "causal-lm" else transformers.AutoModel
        self.model = auto.from_pretrained(str(self.folder), dtype=torch.float32, trust_remote_code=False).eval()
        self.params = dict(self.model.named_parameters(remove_duplicate=False))
        self.names = _checkpoint_names(self.params, set(checkpoint_names),
                                       getattr(self.model, "base_model_prefix", ""))
        self._orig = {n: p.detach().clone() for n, p in self.params.items() if n in self.names}
        self.mask = None  # [batch, tokens] attention mask of the last outputs() call

    # -- outputs ---------------------------------------------------------------------------------
    def _batch(self, sentences):
        # no longer than the model's position table (a small model may have fewer than MAX_TOKENS)
        most = min(MAX_TOKENS, int(getattr(self.model.config, "max_position_embeddings", None) or MAX_TOKENS))
        return self.tokenizer(list(sentences), padding=True, truncation=True, max_length=most, return_tensors="pt")

    def outputs(self, sentences):
        """[items, d] float32 torch tensor of o(x) (grad enabled when the caller enables it):
        one row per sentence (encoders) or per non-padding token (causal LMs)."""
        feats = self._batch(sentences)
        mask = self.mask = feats["attention_mask"]  # the tokens a forward hook should count (hf.hessian)
        if self.kind == "causal-lm":
            logits = self.model(**feats).logits
            logits = logits - logits.mean(dim=-1, keepdim=True)
            return logits[mask.bool()]
        hidden = self.model(**feats).last_hidden_state
        if self.pooling == "cls":
            return hidden[:, 0]
        m = mask.unsqueeze(-1).to(hidden.dtype)
        if self.pooling == "max":
            return hidden.masked_fill(m == 0, float("-inf")).max(dim=1).values
        return (hidden * m).sum(dim=1) / m.sum(dim=1).clamp(min=1.0)

    def embed(self, sentences, batch: int = 32) -> np.ndarray:
        """[items, d] float64 unit vectors o(x) / |o(x)| under the current weights."""
        import torch

        out = []
        with torch.no_grad():
            for i in range(0, len(sentences), batch):
                o = self.outputs(sentences[i:i + batch]).double()
                out.append((o / o.norm(dim=1, keepdim=True).clamp(min=1e-30)).numpy())
        return np.concatenate(out) if out else np.zeros((0, 0))

    # -- weights ---------------------------------------------------------------------------------
    def load_weights(self, tensors: dict) -> None:
        """Put decoded checkpoint tensors ({checkpoint name: torch tensor}) into the model (cast
        to float32); parameters without a decoded tensor get their original values back."""
        import torch

        with torch.no_grad():
            for n, p in self.params.items():
                k = self.names.get(n)
                if k is None:
                    continue
                src = tensors.get(k)
                p.copy_(self._orig[n] if src is None else src.reshape(p.shape).to(torch.float32))

    def restore(self) -> None:
        """The original weights back."""
        self.load_weights({})

    def input_embedding_name(self) -> str | None:
        """The checkpoint name of the word-embedding matrix when it is not tied to the output
        layer (its rows are then weighted by how often each token occurs), else None."""
        emb = self.model.get_input_embeddings()
        out = self.model.get_output_embeddings() if hasattr(self.model, "get_output_embeddings") else None
        if emb is None or (out is not None and out.weight is emb.weight):
            return None
        name = next((n for n, p in self.params.items() if p is emb.weight), None)
        return self.names.get(name) if name else None

    def input_table_names(self) -> list[str]:
        """Checkpoint names of the model's other lookup tables (``nn.Embedding`` weights besides
        the word embeddings: positions, token types), whose rows the input picks: longer or
        differently typed inputs than the calibration's use rows it saw rarely or never."""
        import torch

        word = self.model.get_input_embeddings()
        ids = {id(m.weight) for m in self.model.modules()
               if isinstance(m, torch.nn.Embedding) and m is not word and m.weight is not None}
        return [self.names[n] for n, p in self.params.items() if id(p) in ids and n in self.names]

    def token_counts(self, sentences) -> np.ndarray:
        """[vocab rows] float64 occurrences of each token id in ``sentences`` (padding excluded)."""
        rows = self.model.get_input_embeddings().weight.shape[0]
        feats = self._batch(sentences)
        ids = feats["input_ids"][feats["attention_mask"].bool()]
        return np.bincount(ids.numpy().astype(np.int64), minlength=rows)[:rows].astype(np.float64)


def _checkpoint_names(params: dict, keys: set, prefix: str) -> dict:
    """{parameter name: checkpoint tensor name} for the parameters the checkpoint holds, trying
    the name as is, with the model's base prefix added ("bert.") and with it removed."""
    out = {}
    for n in params:
        cands = [n, f"{prefix}.{n}" if prefix else n]
        if prefix and n.startswith(prefix + "."):
            cands.append(n[len(prefix) + 1:])
        k = next((c for c in cands if c in keys), None)
        if k is not None:
            out[n] = k
    return out


def fisher_rows(model: ModelOutput, sentences, batch: int = 16, seed: int = 0, progress=None) -> dict:
    """{checkpoint name: [rows] float64 F_row} of every matrix (ndim >= 2) of ``model`` over
    ``sentences`` (see the module doc; a tensor under two names, e.g. tied embeddings, gets the
    same rows under both). progress: a tqdm-like object advanced by sentences, or None.
    Deterministic for a seed. The word embeddings' rows are weighted by token counts by the
    caller (:func:`embedding_rows`)."""
    import torch

    mats = {n: p for n, p in model.params.items() if p.ndim >= 2 and n in model.names}
    acc = {n: torch.zeros(p.shape[0], dtype=torch.float64) for n, p in mats.items()}
    gen = torch.Generator().manual_seed(seed)
    model.model.zero_grad(set_to_none=True)
    with torch.enable_grad():
        for i in range(0, len(sentences), batch):
            chunk = sentences[i:i + batch]
            o = model.outputs(chunk)
            u = o / o.norm(dim=1, keepdim=True).clamp(min=1e-30)
            (u * torch.randn(u.shape, generator=gen)).sum().backward()
            for n, p in mats.items():
                if p.grad is not None:  # None: unused by the output (e.g. a pooler)
                    acc[n] += p.grad.double().pow(2).flatten(1).sum(dim=1)
            model.model.zero_grad(set_to_none=True)
            if progress is not None:
                progress.update(len(chunk))
    per_row = {n: (acc[n] / max(len(sentences), 1) / max(mats[n][0].numel(), 1)).numpy() for n in mats}
    return {model.names[n]: f for n, f in per_row.items()}


#: log-spaced bands of token ids whose mean count is the prior of each token in the band
ID_BANDS = 24
#: shape of the Gamma prior of a token's count (smaller: the sample's own count weighs more)
PRIOR_SHAPE = 0.5


def expected_counts(counts: np.ndarray, bands: int = ID_BANDS, shape: float = PRIOR_SHAPE) -> np.ndarray:
    """[rows] float64 > 0: each token's expected count in text like the sample's, shrunk towards
    the mean count of its band of token ids (empirical Bayes, a Gamma(shape, mean) prior per
    band and Poisson counts: (count + shape) / (1 + shape / band mean)).

    Why bands of ids: a tokenizer's vocabulary is ordered roughly by frequency (WordPiece and BPE
    ids by when the token was added; MiniLM's ids 2,000-3,000 occur ~10x as often per token as
    ids 3,000-6,000 and ~150x as often as ids past 20,000 in two unrelated corpora), so a token
    the sample never saw is likely frequent when its neighbours are. Where the ids carry no
    order, the band means come out flat: an even floor. The bands are log-spaced (1, 2, 4, ...:
    the frequent low ids are told apart) and each band's mean gets half a count (no band is
    zero). counts: [rows] >= 0 occurrences in the sample. Not modified."""
    c = np.asarray(counts, np.float64)
    n = c.size
    edges = np.unique(np.r_[0, np.geomspace(1, max(n, 1), bands).astype(np.int64), n])
    out = np.empty(n, np.float64)
    for lo, hi in zip(edges[:-1], edges[1:]):
        mean = (c[lo:hi].sum() + 0.5) / (hi - lo)
        out[lo:hi] = (c[lo:hi] + shape) / (1.0 + shape / mean)
    return out


#: word-embedding row weights go as expected count ** EMBEDDING_POWER (about their median): a
#: user's token frequencies differ from the calibration's, and a flatter weighting lost less on
#: text outside it. MiniLM at 5.45 bits/weight, 1 - cos on held-out calibration / nltk1k /
#: pydoc500 (benchmarks/HISTORY.md, lossy5): power 1 0.00104 / 0.00115 / 0.00100; 0.75 0.00101 /
#: 0.00112 / 0.00097; 0.6 0.00099 / 0.00107 / 0.00092; 0.5 0.00101 / 0.00110 / 0.00094
EMBEDDING_POWER = 0.6


def embedding_rows(fisher: np.ndarray, counts: np.ndarray, power: float = EMBEDDING_POWER) -> np.ndarray:
    """Word-embedding row weights from a sample: the Fisher weight per token occurrence times
    each token's expected count (:func:`expected_counts`: the sample's count shrunk towards its
    band of token ids, so that tokens the sample never saw are weighted by how frequent their
    neighbours are), flattened to ``median * (expected / median) ** power`` (power in (0, 1]; 1:
    proportional to the expected count). The sample's own rows are too sparse to use directly:
    250 sentences see ~1,400 of BERT's 30,522 tokens, and tokens they never saw are ~40% of
    another corpus's text. fisher, counts: [rows] float64. Returns [rows] float64 > 0 (fisher
    itself when the sample has no tokens). Raises ValueError for a power outside (0, 1]."""
    if not 0 < power <= 1:
        raise ValueError(f"power must be in (0, 1], got {power}")
    c = np.asarray(counts, np.float64)
    if not (c > 0).any():
        return np.asarray(fisher, np.float64).copy()
    per_occ = float(np.sum(fisher)) / float(np.sum(c))
    e = expected_counts(c)
    m = float(np.median(e))
    return per_occ * m * (e / m) ** power
