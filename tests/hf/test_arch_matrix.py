"""The architecture matrix of issue 26 (must-have 7): tiny random-init models built and saved in
bf16 by transformers itself (tests/hf/_arch.py), converted lossless and with the fixed-rate
codec, loaded through plain ``AutoModelFor*.from_pretrained`` and with
``WcodecConfig(keep_compressed=True)``. Each cell: outputs exactly the original folder's, its
dtype, what stays compressed, save_pretrained + reload, a LoRA step that changes only the
adapter. Then the round trips (save / reload, adapter save / reload, merge, state_dict) on the
fused, just-in-time and plain paths. tools/arch_matrix.py prints the same as a table."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch", reason="torch is needed for wcodec.hf")
transformers = pytest.importorskip("transformers", reason="transformers is needed for wcodec.hf")
pytest.importorskip("safetensors", reason="safetensors writes the source folders")
pytest.importorskip("wcodec.torch.linear", reason="the fused kernels (wcodec.torch.linear) are not in this tree")

from . import _arch  # noqa: E402

CELLS = [(a, c, p) for a in _arch.ARCHS for c in _arch.CODECS for p in _arch.PATHS]
IDS = [f"{a}-{c}-{p}" for a, c, p in CELLS]
ROUND_TRIP_ARCH = "llama"


@pytest.fixture(scope="module")
def cell(tmp_path_factory):
    """cell(arch): that architecture's source folder, conversions and reference, built once."""
    built = {}

    def get(name):
        if name not in built:
            built[name] = _arch.make_cell(name, tmp_path_factory.mktemp(f"arch-{name}"))
        return built[name]

    return get


@pytest.mark.parametrize("arch,codec,path", CELLS, ids=IDS)
def test_loads_exactly(cell, arch, codec, path):
    _arch.check_load(cell(arch), codec, path)


@pytest.mark.parametrize("arch,codec,path", CELLS, ids=IDS)
def test_save_and_reload(cell, arch, codec, path, tmp_path):
    _arch.check_save_reload(cell(arch), codec, path, tmp_path / "saved")


@pytest.mark.parametrize("arch,codec,path", CELLS, ids=IDS)
def test_lora_step_changes_only_the_adapter(cell, arch, codec, path):
    pytest.importorskip("peft", reason="peft is not installed (pip install peft)")
    _arch.check_lora(cell(arch), codec, path)


@pytest.mark.parametrize("codec,path", [(c, p) for c in _arch.CODECS for p in _arch.PATHS])
def test_dtype_from_the_weights_without_config_dtype(cell, codec, path, tmp_path):
    _arch.check_dtype_from_weights(cell(ROUND_TRIP_ARCH), codec, path, tmp_path)


@pytest.mark.parametrize("op", _arch.ROUND_TRIPS)
@pytest.mark.parametrize("path", sorted(_arch.ROUND_TRIP_PATHS))
@pytest.mark.parametrize("codec", _arch.CODECS)
def test_round_trip(cell, codec, path, op, tmp_path):
    """Fixed records are saved as they are, lossless ones transcoded: both folders."""
    if op in ("adapter_reload", "merge"):
        pytest.importorskip("peft", reason="peft is not installed (pip install peft)")
    _arch.round_trip(cell(ROUND_TRIP_ARCH), codec, path, op, tmp_path / "rt")


def test_matrix_covers_the_issue():
    """The architectures issue 26 names, each built wide enough for compression."""
    want = {"llama", "qwen2", "qwen3", "mistral", "gemma2", "gemma3", "phi3", "gpt2", "gpt_neox", "mixtral",
            "qwen3_moe", "deepseek_v3", "gpt_oss", "bert", "t5", "vit", "whisper"}
    assert want <= set(_arch.ARCHS)
    for name, arch in _arch.ARCHS.items():
        cfg = arch.config.get("text_config", arch.config)
        width = cfg.get("hidden_size", cfg.get("d_model", cfg.get("n_embd")))
        assert width >= 64, name
