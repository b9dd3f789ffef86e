"""Tensors of the real checkpoints in ../shared/models and all-MiniLM-L6-v2, as numpy arrays."""

from __future__ import annotations

from pathlib import Path

import numpy as np


def load_llama2c_bin(path: Path) -> dict:
    """stories260K.bin (llama2.c v0): 7 int32 header, then float32 tensors; returned whole."""
    raw = np.fromfile(path, dtype=np.float32, offset=28)
    return {"stories260K.all_weights": raw}


def shared_model_tensors(models_dir: Path) -> dict:
    """{model file name: {tensor name: numpy array}} for every model in ../shared/models."""
    from safetensors.numpy import load_file

    out = {"silero_vad_16k": load_file(models_dir / "silero_vad_16k.safetensors"),
           "stories260K": load_llama2c_bin(models_dir / "stories260K" / "stories260K.bin")}
    import torch

    for name in ("resnet56_cifar100.pt", "rwkv8_rosaqkv_l2.pth"):
        sd = torch.load(models_dir / name, map_location="cpu", weights_only=True)
        sd = sd.get("state_dict", sd) if isinstance(sd, dict) else sd
        out[name.split(".")[0]] = {k: v.detach().numpy() for k, v in sd.items() if hasattr(v, "numpy")}
    return out


def to_bf16_bits(a: np.ndarray) -> np.ndarray:
    from wcodec.codecs.quant import f32_to_bf16

    return f32_to_bf16(np.asarray(a, dtype=np.float32))
