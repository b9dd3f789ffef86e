"""Byte-exact decode (issue 29): a checkpoint encoded from safetensors files decodes to the
same files, sha256 for sha256 (header bytes, key order, metadata, padding, bytes no tensor
covers), for MiniLM in three dtypes, files of other writers and a sharded HF folder; older
checkpoints without the stored layout still decode (tensors exact)."""

from __future__ import annotations

import hashlib
import json
import shutil
import struct
from pathlib import Path

import numpy as np
import pytest

import wcodec
from wcodec.cli import main


def _sha(p: Path) -> str:
    return hashlib.sha256(p.read_bytes()).hexdigest()


def _round_trip(src: Path, tmp: Path) -> Path:
    wcodec.encode_safetensors_to_wcodec(src, tmp / "x.wcodec")
    return wcodec.decode_to_safetensors(tmp / "x.wcodec", tmp / "back.safetensors")


@pytest.mark.slow
@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "float16"])
def test_minilm_round_trip_is_sha256_identical(minilm_path, tmp_path, dtype):
    torch = pytest.importorskip("torch")
    from safetensors.torch import load_file, save_file
    src = minilm_path
    if dtype != "float32":
        src = tmp_path / "m.safetensors"
        save_file({k: v.to(getattr(torch, dtype)) for k, v in load_file(minilm_path).items()}, src,
                  metadata={"format": "pt"})
    assert _sha(_round_trip(src, tmp_path)) == _sha(src)
    assert main(["verify", "-q", str(tmp_path / "x.wcodec"), "--against", str(src)]) == 0


def _raw_file(path: Path, header: dict, data: bytes, pad: int = 0) -> Path:
    """A safetensors file as another writer may make it: header keys in the given order, ``pad``
    extra spaces after the header, ``data`` verbatim (it may hold bytes no tensor covers)."""
    raw = json.dumps(header).encode() + b" " * pad
    path.write_bytes(struct.pack("<Q", len(raw)) + raw + data)
    return path


def test_files_of_other_writers_round_trip(tmp_path):
    a = np.arange(300, dtype=np.float32)
    b = (np.arange(64, dtype=np.float32) * 3.5).astype(np.float16)
    cases = {
        "unsorted": ({"z": {"dtype": "F16", "shape": [64], "data_offsets": [0, 128]},
                      "a": {"dtype": "F32", "shape": [300], "data_offsets": [128, 1328]},
                      "__metadata__": {"who": "another writer", "n": "1"}}, b.tobytes() + a.tobytes(), 0),
        "padded": ({"__metadata__": {}, "a": {"dtype": "F32", "shape": [300], "data_offsets": [0, 1200]}},
                   a.tobytes(), 13),
        "trailing": ({"a": {"dtype": "F32", "shape": [300], "data_offsets": [0, 1200]}}, a.tobytes() + b"tail!", 3),
        "hole": ({"a": {"dtype": "F32", "shape": [300], "data_offsets": [0, 1200]},
                  "z": {"dtype": "F16", "shape": [64], "data_offsets": [1208, 1336]}},
                 a.tobytes() + b"\x01" * 8 + b.tobytes(), 0),
    }
    for name, (header, data, pad) in cases.items():
        d = tmp_path / name
        d.mkdir()
        src = _raw_file(d / "m.safetensors", header, data, pad)
        assert _sha(_round_trip(src, d)) == _sha(src), name
        with wcodec.safe_open(d / "x.wcodec", framework="np") as f:  # the stored layout stays hidden
            meta = f.metadata() or {}
            assert "wcodec_source" not in meta and meta.get("who") == header.get("__metadata__", {}).get("who")


def test_sharded_folder_decodes_file_for_file(tmp_path):
    from safetensors.numpy import save_file
    src = tmp_path / "model"
    (src / "sub").mkdir(parents=True)
    r = np.random.default_rng(0)
    save_file({"l0.w": r.standard_normal((32, 32)).astype(np.float32)}, src / "model-00001-of-00002.safetensors")
    save_file({"l1.w": r.standard_normal((32, 32)).astype(np.float32), "l1.b": np.ones(32, np.float32)},
              src / "model-00002-of-00002.safetensors", metadata={"format": "pt"})
    (src / "model.safetensors.index.json").write_text(json.dumps(
        {"metadata": {"total_size": 8448}, "weight_map": {"l0.w": "model-00001-of-00002.safetensors",
                                                         "l1.w": "model-00002-of-00002.safetensors",
                                                         "l1.b": "model-00002-of-00002.safetensors"}}, indent=1))
    (src / "config.json").write_text('{"model_type": "toy",  "hidden": 32}\n')
    (src / "sub" / "tok.txt").write_text("a b c")
    assert main(["encode", "-q", str(src), str(tmp_path / "enc")]) == 0
    assert "quantization_config" in (tmp_path / "enc" / "config.json").read_text()
    assert main(["decode", "-q", str(tmp_path / "enc"), str(tmp_path / "back")]) == 0
    files = sorted(p.relative_to(src) for p in src.rglob("*") if p.is_file())
    assert files == sorted(p.relative_to(tmp_path / "back") for p in (tmp_path / "back").rglob("*") if p.is_file())
    for f in files:
        assert _sha(src / f) == _sha(tmp_path / "back" / f), f
    assert main(["verify", "-q", str(tmp_path / "enc"), "--against", str(src)]) == 0
    (src / "config.json").write_text("{}")
    assert main(["verify", "-q", str(tmp_path / "enc"), "--against", str(src)]) == 1


def test_checkpoints_without_a_layout_still_decode(tmp_path, capsys):
    tensors = {"b": np.ones((4, 4), np.float32), "a": np.arange(6, dtype=np.int64)}
    wcodec.save_file(tensors, tmp_path / "old.wcodec", metadata={"k": "v"})  # no source layout, as before
    out = wcodec.decode_to_safetensors(tmp_path / "old.wcodec", tmp_path / "o.safetensors")
    from safetensors.numpy import load_file
    back = load_file(out)
    assert back.keys() == tensors.keys() and all(np.array_equal(back[k], v) for k, v in tensors.items())
    from safetensors import safe_open
    with safe_open(out, "np") as f:
        assert f.metadata() == {"k": "v"}
    assert main(["decode", "-q", str(tmp_path / "old.wcodec"), str(tmp_path / "d") + "/"]) == 0
    assert (tmp_path / "d" / "model.safetensors").is_file() and not (tmp_path / "d").with_suffix("").is_file()
