"""Loading through transformers' own machinery, and the promises around it: the checkpoint's
dtype without ``dtype``, checkpoint conversions (MoE expert merging, renamed keys), untrusted
folders (no code run, no stdin read, strict config.json, no allocation the checkpoint cannot
justify), save_pretrained / dequantize round trips of kept-compressed models."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch", reason="torch is needed for wcodec.hf")
transformers = pytest.importorskip("transformers", reason="transformers is needed for wcodec.hf")
pytest.importorskip("safetensors", reason="safetensors writes the source folder")

import wcodec  # noqa: E402  (registers with transformers)
from wcodec.errors import DeviceError, FormatError, UnsupportedError  # noqa: E402
from wcodec.hf import WCodecModel, WcodecConfig, convert_folder  # noqa: E402

SRC = Path(__file__).resolve().parents[2] / "src"
IDS = torch.tensor([[1, 40, 30, 20, 17, 99]])


def _tiny_llama(path: Path, tie: bool = False) -> Path:
    cfg = transformers.LlamaConfig(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                                   num_key_value_heads=2, vocab_size=128, tie_word_embeddings=tie)
    torch.manual_seed(0)
    model = transformers.LlamaForCausalLM(cfg).to(torch.bfloat16)
    model.save_pretrained(path)
    return path


@pytest.fixture(scope="module")
def bf16(tmp_path_factory):
    """(bf16 safetensors folder, its lossless wcodec folder, its fixed-rate wcodec folder)."""
    root = tmp_path_factory.mktemp("bf16")
    src = _tiny_llama(root / "src")
    convert_folder(src, root / "wc")
    convert_folder(src, root / "fixed", codec="fixed")
    return src, root / "wc", root / "fixed"


def _ref(src):
    return transformers.AutoModelForCausalLM.from_pretrained(str(src)).eval()


def test_checkpoint_dtype_without_dtype(bf16):
    src, wc, fixed = bf16
    ref = _ref(src)
    assert ref.dtype == torch.bfloat16
    for folder in (wc, fixed):
        for kw in ({}, {"quantization_config": WcodecConfig(keep_compressed=True)}):
            model = transformers.AutoModelForCausalLM.from_pretrained(str(folder), **kw).eval()
            assert model.dtype == torch.bfloat16, (folder.name, kw)
            with torch.no_grad():
                assert torch.equal(model(IDS).logits, ref(IDS).logits), (folder.name, kw)
        model = WCodecModel.from_pretrained(folder, keep_compressed=True)
        assert model.dtype == torch.bfloat16 and len(model.wcodec_weights.report["fused"]) == 7 * 2 + 2  # + embedding, lm_head


def test_keep_compressed_on_a_plain_safetensors_folder(bf16):
    """WcodecConfig(keep_compressed=True) on an ordinary bf16 folder compresses on load."""
    from wcodec.torch.linear import CompressedLinear

    src, _, _ = bf16
    ref = _ref(src)
    model = transformers.AutoModelForCausalLM.from_pretrained(
        str(src), quantization_config=WcodecConfig(keep_compressed=True)).eval()
    assert isinstance(model.model.layers[0].mlp.up_proj, CompressedLinear)
    with torch.no_grad():
        assert torch.equal(model(IDS).logits, ref(IDS).logits)


@pytest.mark.parametrize("keep", [True, "jit"])
def test_save_pretrained_round_trip_and_dequantize(bf16, tmp_path, keep):
    from wcodec.format import CheckpointReader
    from wcodec.hf import read_codec_config

    src, _, fixed = bf16
    ref = _ref(src)
    model = transformers.AutoModelForCausalLM.from_pretrained(
        str(fixed), quantization_config=WcodecConfig(keep_compressed=keep)).eval()
    with torch.no_grad():
        want = model(IDS).logits
    model.save_pretrained(tmp_path / "saved")
    q = read_codec_config(tmp_path / "saved")
    assert q is not None and q["mode"] == "lossless"
    assert not list((tmp_path / "saved").glob("*.safetensors"))
    with CheckpointReader(tmp_path / "saved") as r:
        if keep is True:  # fused weights stored as the fixed-rate records they are
            assert r.entry("model.layers.0.mlp.up_proj.weight")["codec"] == "fixed"
    state = wcodec.load_file(str(tmp_path / "saved"))
    ref_state = ref.state_dict()
    for n, t in ref_state.items():
        assert torch.equal(state[n], t), n
    again = transformers.AutoModelForCausalLM.from_pretrained(str(tmp_path / "saved")).eval()
    kept = transformers.AutoModelForCausalLM.from_pretrained(
        str(tmp_path / "saved"), quantization_config=WcodecConfig(keep_compressed=keep)).eval()
    with torch.no_grad():
        assert torch.equal(again(IDS).logits, ref(IDS).logits)
        assert torch.equal(kept(IDS).logits, want)
    plain = model.dequantize()
    assert not getattr(plain, "is_quantized", False)
    assert all(type(m).__module__.startswith("torch") or "wcodec" not in type(m).__module__ for m in plain.modules())
    for n, t in ref_state.items():
        assert torch.equal(plain.state_dict()[n], t), n


def test_renamed_checkpoint_keys_use_transformers_mapping(bf16, tmp_path):
    """``key_mapping`` (transformers' own renames) applies to a wcodec folder as to safetensors."""
    from safetensors.torch import load_file, save_file

    src, _, _ = bf16
    renamed = tmp_path / "renamed"
    renamed.mkdir()
    for f in src.iterdir():
        if f.suffix != ".safetensors":
            (renamed / f.name).write_bytes(f.read_bytes())
    sd = load_file(str(src / "model.safetensors"))
    save_file({k.replace("mlp.", "ffn."): v for k, v in sd.items()}, str(renamed / "model.safetensors"),
              metadata={"format": "pt"})
    convert_folder(renamed, tmp_path / "wc")
    ref = _ref(src)
    for kw in ({}, {"quantization_config": WcodecConfig(keep_compressed=True)}):
        model = transformers.AutoModelForCausalLM.from_pretrained(
            str(tmp_path / "wc"), key_mapping={r"\.ffn\.": ".mlp."}, **kw).eval()
        with torch.no_grad():
            assert torch.equal(model(IDS).logits, ref(IDS).logits), kw


def test_device_error_without_cuda(bf16):
    if torch.cuda.is_available():
        pytest.skip("CUDA is available here")
    with pytest.raises(DeviceError):
        WCodecModel.from_pretrained(bf16[1], device="cuda")


# -- untrusted folders ---------------------------------------------------------------------------
def _copy(folder: Path, to: Path) -> Path:
    to.mkdir()
    for f in folder.iterdir():
        (to / f.name).write_bytes(f.read_bytes())
    return to


def test_folder_code_never_runs_and_stdin_is_never_read(bf16, tmp_path):
    """A config.json with an ``auto_map``: transformers would ask on stdin (hanging a silent one)
    or, answered "y", import the folder's code. wcodec's loader passes trust_remote_code=False."""
    folder = _copy(bf16[1], tmp_path / "evil")
    marker = tmp_path / "ran"
    cfg = json.loads((folder / "config.json").read_text())
    cfg["auto_map"] = {"AutoConfig": "configuration_evil.EvilConfig", "AutoModelForCausalLM": "modeling_evil.Evil"}
    (folder / "config.json").write_text(json.dumps(cfg))
    code = f"open({str(marker)!r}, 'w').write('ran')\nfrom transformers import LlamaConfig as EvilConfig\n"
    (folder / "configuration_evil.py").write_text(code)
    (folder / "modeling_evil.py").write_text(code + "from transformers import LlamaForCausalLM as Evil\n")
    script = (f"import wcodec\nfrom wcodec.hf import WCodecModel\n"
              f"m = WCodecModel.from_pretrained({str(folder)!r})\nprint(type(m).__name__)")
    env = {**os.environ, "PYTHONPATH": f"{SRC}{os.pathsep}{os.environ.get('PYTHONPATH', '')}", "HF_HUB_OFFLINE": "1"}
    r = subprocess.run([sys.executable, "-c", script], input="y\ny\n", capture_output=True, text=True, env=env,
                       timeout=300)
    assert not marker.exists(), "code from the folder ran"
    assert r.returncode == 0 and r.stdout.split()[-1] == "LlamaForCausalLM", r.stderr[-2000:]
    with pytest.raises(UnsupportedError, match="trust_remote_code"):
        WCodecModel.from_pretrained(folder, trust_remote_code=True)


@pytest.mark.parametrize("case", ["deep", "nan", "duplicate", "symlink", "huge_vocab"])
def test_hostile_config_json(bf16, tmp_path, case):
    folder = _copy(bf16[1], tmp_path / "f")
    cfg_path = folder / "config.json"
    text = cfg_path.read_text()
    if case == "deep":
        cfg_path.write_text(text[:-2].rstrip().rstrip("}") + ', "x": ' + "[" * 100_000 + "]" * 100_000 + "}\n")
    elif case == "nan":
        cfg_path.write_text(text.replace('"rms_norm_eps": 1e-06', '"rms_norm_eps": NaN'))
        assert "NaN" in cfg_path.read_text()
    elif case == "duplicate":
        cfg_path.write_text(text.replace("{", '{"vocab_size": 7,', 1))
    elif case == "symlink":
        outside = tmp_path / "outside.json"
        outside.write_text(text)
        cfg_path.unlink()
        cfg_path.symlink_to(outside)
    elif case == "huge_vocab":
        cfg = json.loads(text)
        cfg["vocab_size"] = 2 ** 40
        cfg_path.write_text(json.dumps(cfg))
    with pytest.raises(FormatError):
        WCodecModel.from_pretrained(folder)
    if case == "huge_vocab":  # plain transformers goes through the same check (the quantizer's)
        with pytest.raises(FormatError, match="refusing to allocate"):
            transformers.AutoModelForCausalLM.from_pretrained(str(folder))
