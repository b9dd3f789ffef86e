"""llama2.c checkpoints (v0 raw format) as Hugging Face-named numpy tensors, and their export.

The v0 file is a 7 x int32 header (dim, hidden_dim, n_layers, n_heads, n_kv_heads, vocab_size,
seq_len; a negative vocab_size means the classifier is not shared with the embedding) followed by
fp32 tensors in a fixed order (see :data:`_LAYOUT`). :func:`load_checkpoint` returns them under
Hugging Face Llama names, with q/k rows already permuted to HF's "rotate_half" rotary layout, so
that the same dict feeds :class:`wcodec.demo.model.Llama`, ``wcodec.save_file`` and
:func:`to_hf_folder` unchanged.

The tokenizer, forward pass and generation live in :mod:`.tokenizer` and :mod:`.model`; they are
re-exported here so that ``wcodec.demo.llama2c`` is the one entry point for the format.
"""

from __future__ import annotations

import json
import shutil
import struct
from pathlib import Path

import numpy as np

from . import MODEL_PATH, TOKENIZER_PATH
from .model import Llama, LlamaConfig, generate  # noqa: F401  (re-exported)
from .tokenizer import BOS, EOS, Tokenizer  # noqa: F401  (re-exported)

_HEADER = struct.Struct("<7i")


def _layout(c: LlamaConfig) -> list[tuple[str, tuple]]:
    """(llama2.c name, shape) of each tensor in file order; shapes are (out, in) like HF's."""
    L, d, h, kv = c.n_layers, c.dim, c.hidden_dim, c.kv_dim
    rope = (c.seq_len, c.head_size // 2)
    out = [("token_embedding_table", (c.vocab_size, d)), ("rms_att_weight", (L, d)),
           ("wq", (L, d, d)), ("wk", (L, kv, d)), ("wv", (L, kv, d)), ("wo", (L, d, d)),
           ("rms_ffn_weight", (L, d)), ("w1", (L, h, d)), ("w2", (L, d, h)), ("w3", (L, h, d)),
           ("rms_final_weight", (d,)), ("freq_cis_real", rope), ("freq_cis_imag", rope)]
    return out if c.shared_classifier else out + [("wcls", (c.vocab_size, d))]


# llama2.c per-layer tensor -> Hugging Face name (w1 = gate, w3 = up, w2 = down: silu(w1 x) * w3 x)
_HF_LAYER_NAMES = {
    "rms_att_weight": "input_layernorm", "wq": "self_attn.q_proj", "wk": "self_attn.k_proj",
    "wv": "self_attn.v_proj", "wo": "self_attn.o_proj", "rms_ffn_weight": "post_attention_layernorm",
    "w1": "mlp.gate_proj", "w2": "mlp.down_proj", "w3": "mlp.up_proj",
}


def permute_rotary(w: np.ndarray, n_heads: int) -> np.ndarray:
    """Reorder q/k projection rows from llama2.c's rotary layout to Hugging Face's.

    llama2.c rotates adjacent pairs (2i, 2i+1) within each head; HF's ``rotate_half`` pairs
    (i, i + head_size/2). Same permutation as HF's convert_llama_weights_to_hf. w: [n_heads *
    head_size, in] float32; returns a new array of the same shape.
    """
    rows, cols = w.shape
    return np.ascontiguousarray(
        w.reshape(n_heads, rows // n_heads // 2, 2, cols).transpose(0, 2, 1, 3).reshape(rows, cols))


def read_config(header: bytes) -> LlamaConfig:
    """Parse the 28-byte v0 header; raises ValueError on impossible dimensions."""
    dim, hidden, layers, heads, kv_heads, vocab, seq_len = _HEADER.unpack(header[:_HEADER.size])
    cfg = LlamaConfig(dim, hidden, layers, heads, kv_heads, abs(vocab), seq_len,
                      shared_classifier=vocab > 0)
    if min(dim, hidden, layers, heads, kv_heads, abs(vocab), seq_len) <= 0 \
            or dim % heads or heads % kv_heads or cfg.head_size % 2:
        raise ValueError(f"not a llama2.c v0 checkpoint header: {cfg}")
    return cfg


def load_checkpoint(path: str | Path = MODEL_PATH) -> tuple[LlamaConfig, dict[str, np.ndarray]]:
    """Read a llama2.c v0 checkpoint.

    Returns (config, tensors): tensors maps Hugging Face Llama names (``model.embed_tokens.weight``,
    ``model.layers.{i}.self_attn.q_proj.weight`` [dim, dim], ..., ``model.norm.weight`` [dim],
    ``lm_head.weight`` only when the classifier is not shared) to C-contiguous float32 arrays
    [out, in], q/k rows in HF rotary layout. The stored RoPE tables are skipped (recomputed).
    """
    buf = Path(path).read_bytes()
    cfg = read_config(buf)
    layout = _layout(cfg)
    expected = _HEADER.size + 4 * sum(int(np.prod(s)) for _, s in layout)
    if len(buf) != expected:
        raise ValueError(f"{path}: {len(buf)} bytes, a llama2.c v0 file of {cfg} has {expected}")
    flat = np.frombuffer(buf, dtype="<f4", offset=_HEADER.size)
    raw, pos = {}, 0
    for name, shape in layout:
        n = int(np.prod(shape))
        raw[name] = flat[pos:pos + n].reshape(shape)
        pos += n

    out = {"model.embed_tokens.weight": raw["token_embedding_table"].copy()}
    for i in range(cfg.n_layers):
        for src, dst in _HF_LAYER_NAMES.items():
            w = raw[src][i]
            if src in ("wq", "wk"):
                w = permute_rotary(w, cfg.n_heads if src == "wq" else cfg.n_kv_heads)
            out[f"model.layers.{i}.{dst}.weight"] = np.array(w, dtype=np.float32)
    out["model.norm.weight"] = raw["rms_final_weight"].copy()
    if not cfg.shared_classifier:
        out["lm_head.weight"] = raw["wcls"].copy()
    return cfg, out


def hf_config(cfg: LlamaConfig) -> dict:
    """config.json of the equivalent ``LlamaForCausalLM`` (transformers 4.x and 5.x keys)."""
    return {
        "architectures": ["LlamaForCausalLM"], "model_type": "llama",
        "hidden_size": cfg.dim, "intermediate_size": cfg.hidden_dim,
        "num_hidden_layers": cfg.n_layers, "num_attention_heads": cfg.n_heads,
        "num_key_value_heads": cfg.n_kv_heads, "head_dim": cfg.head_size,
        "vocab_size": cfg.vocab_size, "max_position_embeddings": cfg.seq_len,
        "hidden_act": "silu", "rms_norm_eps": cfg.norm_eps,
        "rope_theta": cfg.rope_theta,
        "rope_parameters": {"rope_type": "default", "rope_theta": cfg.rope_theta},
        "tie_word_embeddings": cfg.shared_classifier,
        "attention_bias": False, "mlp_bias": False, "attention_dropout": 0.0,
        "bos_token_id": BOS, "eos_token_id": EOS, "torch_dtype": "float32", "use_cache": True,
    }


_TOKENIZER_NOTE = """# Tokenizer

This model uses llama2.c's 512-token BPE tokenizer, copied here as `tok512.bin` (llama2.c
format: int32 max_token_length, then per token float32 score, int32 length, bytes). There is no
Hugging Face tokenizer file: encode and decode with `wcodec.demo.tokenizer.Tokenizer`
(BOS = 1, EOS = 2, a leading-space dummy prefix as llama2.c's run.c does), e.g.

    from wcodec.demo.tokenizer import Tokenizer
    ids = Tokenizer.load("tok512.bin").encode("Once upon a time")
"""


def to_hf_folder(dst: str | Path, config: LlamaConfig | None = None,
                 tensors: dict[str, np.ndarray] | None = None,
                 tokenizer_path: str | Path = TOKENIZER_PATH) -> Path:
    """Write a Hugging Face folder: model.safetensors, config.json, tok512.bin + TOKENIZER.md.

    config/tensors default to the shipped demo model (as :func:`load_checkpoint` returns them).
    Loadable with ``transformers.LlamaForCausalLM.from_pretrained(dst)``. Returns dst.
    """
    from safetensors.numpy import save_file  # a core dependency, imported when used

    if (config is None) != (tensors is None):
        raise ValueError("give both config and tensors, or neither")
    if config is None:
        config, tensors = load_checkpoint()
    dst = Path(dst)
    dst.mkdir(parents=True, exist_ok=True)
    save_file({k: np.ascontiguousarray(v) for k, v in tensors.items()},
              str(dst / "model.safetensors"), metadata={"format": "pt"})
    (dst / "config.json").write_text(json.dumps(hf_config(config), indent=2) + "\n")
    shutil.copyfile(tokenizer_path, dst / "tok512.bin")
    (dst / "TOKENIZER.md").write_text(_TOKENIZER_NOTE)
    return dst
