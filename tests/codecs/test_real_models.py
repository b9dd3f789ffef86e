"""Every tensor of the real checkpoints round-trips bit-exact (fp32, and rounded to bf16 and fp16)."""

import numpy as np

from tests._models import shared_model_tensors, to_bf16_bits
from wcodec.codecs import decode_tensor, encode_tensor


def _variants(a):
    if a.dtype == np.float32:
        yield "F32", a
        yield "BF16", to_bf16_bits(a)
        with np.errstate(over="ignore"):
            yield "F16", a.astype(np.float16)
    elif a.dtype == np.int64:
        yield "I64", a
    elif a.dtype == np.float64:
        yield "F64", a


def _check_model(tensors):
    for name, a in tensors.items():
        for dtype, x in _variants(np.ascontiguousarray(a)):
            rec = encode_tensor(x, dtype, name=name)
            out = decode_tensor(rec, name)
            assert out.shape == x.shape
            assert np.array_equal(out.reshape(-1).view(np.uint8), x.reshape(-1).view(np.uint8)), (name, dtype)


def test_shared_models_roundtrip(shared_models):
    for model, tensors in shared_model_tensors(shared_models).items():
        _check_model(tensors)


def test_minilm_roundtrip(minilm_path):
    from safetensors.numpy import load_file

    _check_model(load_file(minilm_path))


def test_chosen_modes_never_cost_more_than_none(shared_models):
    """For every real tensor quantized to int8, the chosen modes cost no more bits than NONE alone."""
    checked = 0
    for model, tensors in shared_model_tensors(shared_models).items():
        for name, a in tensors.items():
            if a.dtype != np.float32 or a.size < 256:
                continue
            rec = encode_tensor(a, "F32", mode="int8", name=name)
            none = encode_tensor(a, "F32", mode="int8", name=name, predict=False)
            assert rec.nbytes <= none.nbytes, (model, name)
            checked += 1
    assert checked > 50
