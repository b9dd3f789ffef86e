"""Real checkpoints round-trip bit-exactly through .wcodec (and MiniLM embeds identically)."""

from __future__ import annotations

import os
import time

import numpy as np
import pytest

import wcodec

torch = pytest.importorskip("torch")

MODEL_FILES = ["silero_vad_16k.safetensors", "resnet56_cifar100.pt", "rwkv8_rosaqkv_l2.pth"]


def _original(path):
    if path.suffix == ".safetensors":
        from safetensors.torch import load_file
        return load_file(path)
    return torch.load(path, map_location="cpu", weights_only=True)


@pytest.mark.parametrize("fname", MODEL_FILES)
def test_shared_model_round_trip(shared_models, tmp_path, fname):
    src = shared_models / fname
    wcodec.encode_safetensors_to_wcodec(src, tmp_path / "m.wcodec")
    ref, out = _original(src), wcodec.load_wcodec_checkpoint(tmp_path / "m.wcodec")
    assert sorted(out) == sorted(ref)
    for k, v in ref.items():
        assert out[k].dtype == v.dtype and torch.equal(out[k], v), k
    assert os.path.getsize(tmp_path / "m.wcodec") < os.path.getsize(src)


def test_shared_model_int8(shared_models, tmp_path):
    src = shared_models / "rwkv8_rosaqkv_l2.pth"
    wcodec.encode_safetensors_to_wcodec(src, tmp_path / "q.wcodec", mode="int8")
    ref, out = _original(src), wcodec.load_wcodec_checkpoint(tmp_path / "q.wcodec")
    for k, v in ref.items():
        if v.numel() >= 4096:
            snr = 10 * torch.log10((v.double() ** 2).sum() / ((v.double() - out[k].double()) ** 2).sum())
            assert snr > 30, (k, float(snr))


def test_llama2c_bin_is_refused_cleanly(shared_models, tmp_path):
    with pytest.raises(wcodec.WcodecError):
        wcodec.encode_safetensors_to_wcodec(shared_models / "stories260K" / "stories260K.bin", tmp_path / "s.wcodec")


@pytest.mark.slow
def test_minilm_round_trip_and_embeddings(minilm_path, tmp_path, monkeypatch):
    from safetensors.numpy import load_file

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    model_dir = minilm_path.parent
    t = time.perf_counter()
    wcodec.encode_safetensors_to_wcodec(model_dir, tmp_path / "enc")
    t_enc = time.perf_counter() - t
    assert (tmp_path / "enc" / "config.json").exists() and (tmp_path / "enc" / "1_Pooling" / "config.json").exists()
    t = time.perf_counter()
    wcodec.decode_to_safetensors(tmp_path / "enc", tmp_path / "enc" / "model.safetensors")
    t_dec = time.perf_counter() - t
    print(f"MiniLM encode {t_enc:.2f} s, decode to safetensors {t_dec:.2f} s")
    ref, dec = load_file(minilm_path), load_file(tmp_path / "enc" / "model.safetensors")
    assert sorted(dec) == sorted(ref) and all(np.array_equal(dec[k], ref[k]) for k in ref)

    from sentence_transformers import SentenceTransformer

    sentences = ["wcodec compresses weights", "A man is eating food.", "Ein Satz auf Deutsch."]
    want = SentenceTransformer(str(model_dir), device="cpu").encode(sentences)
    (tmp_path / "enc" / "model.wcodec").unlink()  # the folder now holds decoded safetensors only
    got = SentenceTransformer(str(tmp_path / "enc"), device="cpu").encode(sentences)
    assert np.array_equal(want, got)

    # and straight from the state dict
    model = SentenceTransformer(str(model_dir), device="cpu")
    wcodec.save_file(model[0].auto_model.state_dict(), tmp_path / "sd.wcodec")
    sd = wcodec.load_wcodec_checkpoint(tmp_path / "sd.wcodec")
    model[0].auto_model.load_state_dict(sd)
    assert np.array_equal(model.encode(sentences), want)
