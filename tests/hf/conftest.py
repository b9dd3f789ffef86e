"""Shared by the Hugging Face tests: stories260K exported as an HF Llama folder and its wcodec
conversion, built once per session (the tests only read them)."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="session")
def stories_folders(tmp_path_factory):
    """(source HF folder, wcodec folder) of the shipped stories260K model."""
    pytest.importorskip("torch", reason="torch is needed for wcodec.hf")
    pytest.importorskip("transformers", reason="transformers is needed for wcodec.hf")
    pytest.importorskip("safetensors", reason="safetensors writes the source folder")
    from wcodec.demo.llama2c import to_hf_folder
    from wcodec.hf import convert_folder

    src = to_hf_folder(tmp_path_factory.mktemp("st260") / "hf")
    dst = tmp_path_factory.mktemp("st260w") / "wc"
    convert_folder(src, dst)
    return src, dst
