"""``torch.save(model)`` (pickle) and ``copy.deepcopy`` of a model kept compressed: fused layers and
compressed experts (whose classes are made at run time) pickle and come back with the same
outputs, still compressed, their ``save_pretrained`` bound to the new model; a model whose
weights decode just in time refuses to pickle with an UnsupportedError naming what to do (the
shared decode state does not pickle), and keeps working. Before, the three failed with a
PicklingError / AttributeError from deep inside pickle."""

from __future__ import annotations

import copy
import io

import pytest

torch = pytest.importorskip("torch")
tf = pytest.importorskip("transformers")

import wcodec  # noqa: E402,F401  (registers the quantizer)
from wcodec.errors import UnsupportedError  # noqa: E402
from wcodec.hf import WcodecConfig, convert_folder, read_codec_config  # noqa: E402
from wcodec.torch.experts import compressed_attrs  # noqa: E402
from wcodec.torch.linear import CompressedLinear  # noqa: E402

COMMON = dict(vocab_size=128, hidden_size=64, intermediate_size=64, num_attention_heads=4, num_key_value_heads=2,
              num_hidden_layers=2, max_position_embeddings=64)
CONFIGS = {"mixtral": lambda: tf.MixtralConfig(num_local_experts=4, num_experts_per_tok=2, **COMMON),
           "llama": lambda: tf.LlamaConfig(**COMMON)}
IDS = torch.randint(0, 128, (2, 9), generator=torch.Generator().manual_seed(1))


@pytest.fixture(scope="module", params=sorted(CONFIGS))
def folder(request, tmp_path_factory):
    root = tmp_path_factory.mktemp(request.param)
    torch.manual_seed(0)
    tf.AutoModelForCausalLM.from_config(CONFIGS[request.param]()).to(torch.bfloat16).save_pretrained(root / "src")
    convert_folder(root / "src", root / "wc", codec="fixed")
    return root / "wc"


def _load(folder, keep):
    return tf.AutoModelForCausalLM.from_pretrained(folder, quantization_config=WcodecConfig(keep_compressed=keep)).eval()


def _pickled(model):
    buf = io.BytesIO()
    torch.save(model, buf)
    buf.seek(0)
    return torch.load(buf, weights_only=False)


def _logits(model):
    with torch.no_grad():
        return model(input_ids=IDS).logits


def test_fused_model_pickles_and_deep_copies(folder, tmp_path):
    model = _load(folder, True)
    want = _logits(model)
    for dup in (_pickled(model), copy.deepcopy(model)):
        assert torch.equal(_logits(dup), want)
        assert any(isinstance(m, CompressedLinear) for m in dup.modules())
        experts = [m for m in dup.modules() if compressed_attrs(m)]
        assert all(type(m).__name__.startswith("Compressed") for m in experts)
        assert not any(p.dim() == 3 for p in dup.parameters())
    dup.save_pretrained(tmp_path / "saved")  # bound to the copy, and still a wcodec folder
    assert read_codec_config(tmp_path / "saved") is not None
    assert torch.equal(_logits(_load(tmp_path / "saved", True)), want)


def test_jit_model_refuses_to_pickle_and_keeps_working(folder):
    model = _load(folder, "jit")
    want = _logits(model)
    with pytest.raises(UnsupportedError, match="does not pickle: save it with save_pretrained"):
        torch.save(model, io.BytesIO())
    assert torch.equal(_logits(model), want)
    assert torch.equal(_logits(copy.deepcopy(model)), want)
