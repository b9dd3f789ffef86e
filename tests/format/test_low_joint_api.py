"""Format version 2 from the public API: ``low_joint=True`` of save_file / save / the torch and
numpy flavours / encode_safetensors_to_wcodec / ``wcodec encode --low-joint`` stores F32 tensors'
two low mantissa bytes as one joint plane where that is smaller, bit-exact; off (the default) the
bytes are version 1's, as before the option existed."""

from __future__ import annotations

import numpy as np
import pytest

import wcodec
import wcodec.numpy as wnp
from wcodec.errors import InvalidInputError
from wcodec.format import Reader

torch = pytest.importorskip("torch")


def _tensors() -> dict:
    rng = np.random.default_rng(7)
    w = rng.standard_normal((256, 512)).astype(np.float32) * 0.05
    w[:160] = w[:160].astype(np.float16).astype(np.float32)  # low 13 bits zero: the joint plane pays
    u = rng.standard_normal((64, 512)).astype(np.float32)  # uniform low bytes: version 1's layout stays
    return {"w": torch.from_numpy(w), "u": torch.from_numpy(u),
            "b": torch.from_numpy(u).to(torch.bfloat16),  # no low bytes: unaffected
            "v": torch.from_numpy(w[0, :100].copy()),  # small: stored raw
            "i": torch.arange(4096, dtype=torch.int32).reshape(64, 64)}


def _version(data: bytes) -> int:
    return int.from_bytes(data[8:12], "little")


def _same(a: dict, b: dict) -> None:
    assert a.keys() == b.keys()
    for k in a:
        assert a[k].dtype == b[k].dtype and a[k].shape == b[k].shape, k
        assert a[k].contiguous().view(torch.uint8).equal(b[k].contiguous().view(torch.uint8)), k


def test_save_file_low_joint_round_trip_version_2(tmp_path):
    t = _tensors()
    keep = {k: v.clone() for k, v in t.items()}
    v1, v2 = tmp_path / "v1.wcodec", tmp_path / "v2.wcodec"
    wcodec.save_file(t, v1)
    wcodec.save_file(t, v2, low_joint=True)
    _same(t, keep)  # inputs untouched
    assert _version(v1.read_bytes()) == 1 and _version(v2.read_bytes()) == 2
    assert v2.stat().st_size < v1.stat().st_size
    _same(wcodec.load_file(v2), t)
    with Reader(v1) as r1, Reader(v2) as r2:
        assert "low_joint" in r2.entry("w")["params"] and "low_joint" not in r1.entry("w")["params"]
        for k in ("u", "b", "v", "i"):  # the others stored as without the option
            assert r2.entry(k)["codec"] == r1.entry(k)["codec"]
            assert r2.entry(k).get("params") == r1.entry(k).get("params"), k
            assert "low_joint" not in r2.entry(k).get("params", {}), k


def test_off_by_default_and_every_flavour_gives_the_same_bytes(tmp_path):
    t = _tensors()
    assert wcodec.save(t) == wcodec.save(t, low_joint=False)
    assert _version(wcodec.save(t)) == 1
    data = wcodec.save(t, low_joint=True)
    wcodec.save_file(t, tmp_path / "a.wcodec", low_joint=True)
    assert (tmp_path / "a.wcodec").read_bytes() == data
    assert wcodec.torch.save(t, low_joint=True) == data
    wcodec.torch.save_file(t, tmp_path / "b.wcodec", low_joint=True)
    assert (tmp_path / "b.wcodec").read_bytes() == data
    only_np = {k: v.numpy() for k, v in t.items() if v.dtype != torch.bfloat16}  # numpy has no bf16
    d_np = wnp.save(only_np, low_joint=True)
    _same(wcodec.torch.load(d_np), {k: t[k] for k in only_np})
    assert _version(d_np) == 2


@pytest.mark.parametrize("bad", ["no", 1, None])
def test_low_joint_must_be_a_bool(tmp_path, bad):
    out = tmp_path / "x.wcodec"
    with pytest.raises(InvalidInputError, match="low_joint"):
        wcodec.save_file(_tensors(), out, low_joint=bad)
    assert not out.exists()


def test_int8_mode_keeps_vectors_exact_with_the_option(tmp_path):
    t = _tensors()
    out = tmp_path / "q.wcodec"
    wcodec.save_file(t, out, mode="int8", low_joint=True)
    back = wcodec.load_file(out)
    assert back["v"].equal(t["v"]) and back["i"].equal(t["i"])  # stored lossless
    assert torch.allclose(back["w"], t["w"], atol=0.02)


def test_cli_encode_low_joint_decodes_byte_for_byte(tmp_path):
    from safetensors.torch import save_file as st_save

    from wcodec.cli import main

    t = _tensors()
    src = tmp_path / "m.safetensors"
    st_save(t, src)
    enc1, enc2 = tmp_path / "m1.wcodec", tmp_path / "m2.wcodec"
    assert main(["encode", "-q", str(src), str(enc1)]) == 0
    assert main(["encode", "-q", "--low-joint", str(src), str(enc2)]) == 0
    assert _version(enc1.read_bytes()) == 1 and _version(enc2.read_bytes()) == 2
    assert enc2.stat().st_size < enc1.stat().st_size
    back = tmp_path / "back.safetensors"
    assert main(["decode", "-q", str(enc2), str(back)]) == 0
    assert back.read_bytes() == src.read_bytes()
    assert main(["verify", str(enc2)]) == 0


def test_convert_folder_low_joint(tmp_path):
    import json

    from safetensors.torch import save_file as st_save

    from wcodec.hf import convert_folder

    src = tmp_path / "model"
    src.mkdir()
    t = {"w": _tensors()["w"]}
    st_save(t, src / "model.safetensors")
    (src / "config.json").write_text(json.dumps({"model_type": "bert"}))
    paths = convert_folder(src, tmp_path / "out", low_joint=True)
    (shard,) = [p for p in paths if p.suffix == ".wcodec"]
    assert _version(shard.read_bytes()) == 2
    _same(wcodec.load_file(tmp_path / "out"), t)
