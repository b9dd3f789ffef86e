"""The llama2.c v0 reader and the Hugging Face folder export (the shipped stories260K model)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from wcodec.demo import MODEL_PATH
from wcodec.demo.llama2c import hf_config, load_checkpoint, permute_rotary, to_hf_folder
from wcodec.demo.model import apply_rotary, rotary_tables


@pytest.fixture(scope="module")
def checkpoint():
    return load_checkpoint()


def test_config_and_shapes(checkpoint):
    cfg, t = checkpoint
    assert (cfg.dim, cfg.hidden_dim, cfg.n_layers, cfg.n_heads, cfg.n_kv_heads, cfg.vocab_size,
            cfg.seq_len, cfg.shared_classifier) == (64, 172, 5, 8, 4, 512, 512, True)
    assert len(t) == 2 + 9 * cfg.n_layers and "lm_head.weight" not in t
    assert t["model.embed_tokens.weight"].shape == (512, 64)
    assert t["model.norm.weight"].shape == (64,)
    expect = {"input_layernorm": (64,), "post_attention_layernorm": (64,),
              "self_attn.q_proj": (64, 64), "self_attn.k_proj": (32, 64),
              "self_attn.v_proj": (32, 64), "self_attn.o_proj": (64, 64),
              "mlp.gate_proj": (172, 64), "mlp.up_proj": (172, 64), "mlp.down_proj": (64, 172)}
    for i in range(cfg.n_layers):
        for name, shape in expect.items():
            w = t[f"model.layers.{i}.{name}.weight"]
            assert w.shape == shape and w.dtype == np.float32 and w.flags.c_contiguous
    assert sum(w.size for w in t.values()) == 260_032


def test_stored_rope_tables_match_ours():
    # the file's freq_cis (skipped by the loader) is what rotary_tables recomputes
    flat = np.fromfile(MODEL_PATH, dtype="<f4", offset=28)
    real, imag = flat[-4096:-2048].reshape(512, 4), flat[-2048:].reshape(512, 4)
    cos, sin = rotary_tables(512, 8, 10000.0)
    np.testing.assert_allclose(real, cos, atol=1e-6)
    np.testing.assert_allclose(imag, sin, atol=1e-6)


def test_permute_rotary_turns_interleaved_rope_into_rotate_half():
    rng = np.random.default_rng(0)
    heads, hs, dim, T = 4, 8, 16, 5
    w = rng.standard_normal((heads * hs, dim)).astype(np.float32)
    x = rng.standard_normal((T, dim)).astype(np.float32)
    cos, sin = rotary_tables(T, hs, 10000.0)
    # llama2.c: rotate adjacent pairs (2i, 2i+1) of each head with frequency i
    q = (x @ w.T).reshape(T, heads, hs // 2, 2)
    c, s = cos[:, None, :], sin[:, None, :]
    ref = np.stack([q[..., 0] * c - q[..., 1] * s, q[..., 0] * s + q[..., 1] * c], axis=-1)
    ref = permute_rotary(ref.reshape(T, heads * hs).T, heads).T  # same row order as HF's
    got = apply_rotary((x @ permute_rotary(w, heads).T).reshape(T, heads, hs), cos, sin)
    np.testing.assert_allclose(got.reshape(T, -1), ref, rtol=1e-6, atol=1e-6)


def test_truncated_file_is_rejected(tmp_path):
    bad = tmp_path / "short.bin"
    bad.write_bytes(MODEL_PATH.read_bytes()[:-4])
    with pytest.raises(ValueError, match="bytes"):
        load_checkpoint(bad)


def test_to_hf_folder(tmp_path, checkpoint):
    from safetensors.numpy import load_file

    cfg, t = checkpoint
    dst = to_hf_folder(tmp_path / "hf", cfg, t)
    conf = json.loads((dst / "config.json").read_text())
    assert conf == hf_config(cfg)
    assert conf["architectures"] == ["LlamaForCausalLM"] and conf["tie_word_embeddings"] is True
    assert (conf["max_position_embeddings"], conf["rms_norm_eps"], conf["rope_theta"]) \
        == (512, 1e-5, 10000.0)
    back = load_file(str(dst / "model.safetensors"))
    assert back.keys() == t.keys() and all(np.array_equal(back[k], t[k]) for k in t)
    assert (dst / "tok512.bin").exists() and (dst / "TOKENIZER.md").exists()
