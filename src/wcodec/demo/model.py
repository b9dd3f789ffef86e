"""A Llama forward pass in numpy float32 with a KV cache, and greedy / seeded generation.

Weights are Hugging Face-named [out, in] float32 arrays in HF's rotary layout (as
:func:`wcodec.demo.llama2c.load_checkpoint` returns them), so RoPE here is HF's ``rotate_half``
form; on llama2.c's original interleaved rows it computes exactly what llama2.c's run.c does.
RMSNorm, GQA (n_kv_heads <= n_heads) and a SwiGLU MLP, everything in float32. The dimensions are
a :class:`LlamaConfig` (read from a llama2.c header by :mod:`.llama2c`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np

from .tokenizer import BOS


@dataclass(frozen=True)
class LlamaConfig:
    """Dimensions of a llama2.c model (norm eps and rope theta are llama2.c's fixed values)."""

    dim: int
    hidden_dim: int
    n_layers: int
    n_heads: int
    n_kv_heads: int
    vocab_size: int
    seq_len: int
    shared_classifier: bool = True
    norm_eps: float = 1e-5
    rope_theta: float = 10000.0

    @property
    def head_size(self) -> int:
        return self.dim // self.n_heads

    @property
    def kv_dim(self) -> int:
        return self.n_kv_heads * self.head_size


def rms_norm(x: np.ndarray, weight: np.ndarray, eps: float) -> np.ndarray:
    """x: [T, dim] float32, weight: [dim]; x / sqrt(mean(x^2) + eps) * weight."""
    inv = 1.0 / np.sqrt(np.mean(x * x, axis=-1, keepdims=True, dtype=np.float32) + np.float32(eps))
    return (x * inv.astype(np.float32)) * weight


def rotary_tables(seq_len: int, head_size: int, theta: float) -> tuple[np.ndarray, np.ndarray]:
    """cos, sin: [seq_len, head_size // 2] float32; frequency i is theta^(-2i / head_size)."""
    inv_freq = 1.0 / theta ** (np.arange(0, head_size, 2, dtype=np.float32) / head_size)
    angles = np.arange(seq_len, dtype=np.float32)[:, None] * inv_freq[None, :].astype(np.float32)
    return np.cos(angles).astype(np.float32), np.sin(angles).astype(np.float32)


def apply_rotary(x: np.ndarray, cos: np.ndarray, sin: np.ndarray) -> np.ndarray:
    """x: [T, heads, head_size]; cos/sin: [T, head_size // 2]. Rotates (i, i + head_size/2)."""
    half = x.shape[-1] // 2
    x1, x2 = x[..., :half], x[..., half:]
    c, s = cos[:, None, :], sin[:, None, :]
    return np.concatenate([x1 * c - x2 * s, x2 * c + x1 * s], axis=-1)


class Llama:
    """A Llama decoder over numpy weights, keeping a KV cache of config.seq_len positions.

    tensors: Hugging Face-named float32 arrays (``lm_head.weight`` optional: tied to the
    embedding when absent). Arrays are used as given, not copied.
    """

    def __init__(self, config: LlamaConfig, tensors: dict[str, np.ndarray]):
        c = self.config = config
        get = lambda name: np.asarray(tensors[name], dtype=np.float32)  # noqa: E731
        self.embed = get("model.embed_tokens.weight")
        self.classifier = get("lm_head.weight") if "lm_head.weight" in tensors else self.embed
        self.final_norm = get("model.norm.weight")
        names = ("input_layernorm", "self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj",
                 "self_attn.o_proj", "post_attention_layernorm", "mlp.gate_proj", "mlp.up_proj",
                 "mlp.down_proj")
        self.layers = [tuple(get(f"model.layers.{i}.{n}.weight") for n in names)
                       for i in range(c.n_layers)]
        self.cos, self.sin = rotary_tables(c.seq_len, c.head_size, c.rope_theta)
        cache_shape = (c.n_layers, c.seq_len, c.n_kv_heads, c.head_size)
        self.k_cache = np.zeros(cache_shape, np.float32)
        self.v_cache = np.zeros(cache_shape, np.float32)
        self.pos = 0  # number of positions already in the cache

    def reset(self) -> None:
        """Forget the cached positions (the next forward starts at position 0)."""
        self.pos = 0

    def forward(self, tokens: Sequence[int]) -> np.ndarray:
        """Run tokens at positions pos..pos+T-1 (causal, after the cached ones).

        Returns logits [T, vocab_size] float32 and advances the cache by T.
        """
        c, p0, T = self.config, self.pos, len(tokens)
        if T == 0 or p0 + T > c.seq_len:
            raise ValueError(f"{T} tokens at position {p0} do not fit seq_len {c.seq_len}")
        hs, group = c.head_size, c.n_heads // c.n_kv_heads
        cos, sin = self.cos[p0:p0 + T], self.sin[p0:p0 + T]
        # key s is visible to query t iff s <= p0 + t
        mask = np.arange(p0 + T)[None, :] > (p0 + np.arange(T))[:, None]
        scale = np.float32(1.0 / np.sqrt(hs))
        x = self.embed[np.asarray(tokens)]  # [T, dim]
        for li, (n1, wq, wk, wv, wo, n2, w1, w3, w2) in enumerate(self.layers):
            h = rms_norm(x, n1, c.norm_eps)
            q = apply_rotary((h @ wq.T).reshape(T, c.n_heads, hs), cos, sin)
            self.k_cache[li, p0:p0 + T] = apply_rotary((h @ wk.T).reshape(T, c.n_kv_heads, hs),
                                                       cos, sin)
            self.v_cache[li, p0:p0 + T] = (h @ wv.T).reshape(T, c.n_kv_heads, hs)
            keys, values = self.k_cache[li, :p0 + T], self.v_cache[li, :p0 + T]  # [S, kv, hs]
            # GQA: query head j uses kv head j // group. [kv, group, T, hs] @ [kv, 1, hs, S]
            qg = q.reshape(T, c.n_kv_heads, group, hs).transpose(1, 2, 0, 3)
            scores = (qg @ keys.transpose(1, 2, 0)[:, None]) * scale
            scores[..., mask] = -np.inf
            scores = np.exp(scores - scores.max(axis=-1, keepdims=True))
            scores /= scores.sum(axis=-1, keepdims=True)
            att = scores @ values.transpose(1, 0, 2)[:, None]  # [kv, group, T, hs]
            x = x + att.transpose(2, 0, 1, 3).reshape(T, c.dim) @ wo.T
            h = rms_norm(x, n2, c.norm_eps)
            gate = h @ w1.T
            x = x + ((gate / (1.0 + np.exp(-gate))) * (h @ w3.T)) @ w2.T  # silu(w1 h) * w3 h
        self.pos += T
        return rms_norm(x, self.final_norm, c.norm_eps) @ self.classifier.T


def _sample(logits: np.ndarray, temperature: float, top_p: float, rng: np.random.Generator) -> int:
    """One token from softmax(logits / temperature), restricted to the top-p nucleus if top_p < 1."""
    z = logits.astype(np.float64) / temperature
    probs = np.exp(z - z.max())
    probs /= probs.sum()
    order = np.argsort(-probs, kind="stable")
    if 0.0 < top_p < 1.0:
        keep = int(np.searchsorted(np.cumsum(probs[order]), top_p)) + 1
        order = order[:keep]
    cdf = np.cumsum(probs[order])
    return int(order[min(int(np.searchsorted(cdf, rng.random() * cdf[-1], side="right")),
                         len(order) - 1)])


def generate(model: Llama, prompt: Sequence[int], steps: int, temperature: float = 0.0,
             top_p: float = 0.9, seed: int = 0) -> list[int]:
    """Up to ``steps`` new token ids after prompt (which starts with BOS), from a fresh cache.

    temperature 0 is greedy (argmax); otherwise sampling with a numpy Generator seeded by seed,
    so equal logits give equal tokens. Stops early at BOS (end of story) or at seq_len.
    """
    model.reset()
    rng = np.random.default_rng(seed)
    logits = model.forward(list(prompt))[-1]
    out: list[int] = []
    while len(out) < steps:
        tok = int(np.argmax(logits)) if temperature <= 0 else _sample(logits, temperature, top_p, rng)
        if tok == BOS:
            break
        out.append(tok)
        if model.pos >= model.config.seq_len or len(out) == steps:
            break
        logits = model.forward([tok])[0]
    return out
