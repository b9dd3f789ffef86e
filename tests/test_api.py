"""The Python API: save_file / load_file / safe_open / conversion / torch.load-style loading."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest

import wcodec

torch = pytest.importorskip("torch")


def _state_dict():
    g = torch.Generator().manual_seed(0)
    emb = torch.randn(300, 16, generator=g).bfloat16()
    return {
        "emb": emb,
        "head": emb,                                   # tied: stored once
        "w16": torch.randn(20, 30, generator=g).half(),
        "wT": torch.randn(30, 20, generator=g).t(),     # not contiguous
        "q": torch.randint(-128, 127, (64, 8), dtype=torch.int8, generator=g),
        "steps": torch.tensor(12345),
        "empty": torch.zeros(0, 5),
        "flag": torch.tensor([True, False]),
    }


def test_import_is_light():
    code = "import sys, json, wcodec; print(json.dumps(sorted(sys.modules)))"
    mods = set(json.loads(subprocess.check_output([sys.executable, "-c", code])))
    heavy = {"numba", "torch", "triton", "transformers", "wcodec.codecs", "wcodec.api"}
    assert not heavy & mods, heavy & mods


def test_save_load_round_trip_and_inputs_untouched(tmp_path):
    sd = _state_dict()
    before = {k: v.clone() for k, v in sd.items()}
    path = tmp_path / "m.wcodec"
    wcodec.save_file(sd, path, metadata={"arch": "toy"})
    for k in sd:
        assert torch.equal(sd[k], before[k]) and sd[k].dtype == before[k].dtype, k
    assert sd["wT"].stride() == before["wT"].stride()
    out = wcodec.load_file(path)
    assert list(out) == sorted(sd)  # name order, as safetensors loads
    for k, v in sd.items():
        assert out[k].dtype == v.dtype and torch.equal(out[k], v), k
    assert out["head"] is out["emb"]
    with wcodec.safe_open(path, framework="pt") as f:
        assert f.keys() == sorted(sd) and f.metadata() == {"arch": "toy"}
        assert torch.equal(f.get_tensor("wT"), sd["wT"])
        rec = f.record("emb")
        assert rec.codec == "float" and rec.dtype == "BF16"
        assert f.span("emb")[0] % 64 == 0


def test_numpy_flavour_and_read_only_inputs(tmp_path):
    arrays = {"a": np.arange(1000, dtype=np.float32).reshape(10, 100), "b": np.array([1, 2], dtype=">i4")}
    for a in arrays.values():
        a.flags.writeable = False
    wcodec.numpy.save_file(arrays, tmp_path / "n.wcodec")
    out = wcodec.numpy.load_file(tmp_path / "n.wcodec")
    assert np.array_equal(out["a"], arrays["a"]) and out["b"].tolist() == [1, 2]
    assert wcodec.load_file(tmp_path / "n.wcodec", framework="np")["a"].dtype == np.float32
    with pytest.raises(wcodec.UnsupportedError):
        wcodec.save_file({"c": np.zeros(3, np.complex128)}, tmp_path / "c.wcodec")  # C64 is stored
    assert not (tmp_path / "c.wcodec").exists()


def test_int8_mode_is_lossy_but_close(tmp_path):
    w = torch.randn(256, 64, generator=torch.Generator().manual_seed(3))
    wcodec.save_file({"w": w}, tmp_path / "q.wcodec", mode="int8")
    out = wcodec.load_file(tmp_path / "q.wcodec")["w"]
    snr = 10 * torch.log10((w ** 2).sum() / ((w - out) ** 2).sum())
    assert out.dtype == w.dtype and 35 < snr < 60
    wcodec.load_file(tmp_path / "q.wcodec", verify=True)  # decoded checksum covers lossy output


def test_cuda_goes_through_the_gpu_loader(tmp_path, monkeypatch):
    sd = _state_dict()
    wcodec.save_file(sd, tmp_path / "m.wcodec")
    seen = {}

    def fake_load_records(items, device, crcs=None):
        seen["names"], seen["device"] = [n for n, _ in items], device
        from wcodec.codecs import decode_tensor
        from wcodec.loading import to_torch as _to_torch
        return {n: _to_torch(decode_tensor(rec, n), rec.dtype) for n, rec in items}

    monkeypatch.setattr(wcodec.loading, "_gpu_load_records", lambda: fake_load_records)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)  # past the device check
    out = wcodec.load_wcodec_checkpoint(tmp_path / "m.wcodec", map_location="cuda")
    assert seen["device"] == torch.device("cuda") and "head" not in seen["names"]
    assert all(torch.equal(out[k], v) for k, v in sd.items()) and out["head"] is out["emb"]


def test_cuda_load_checks_section_crcs_in_the_loader(tmp_path, monkeypatch):
    # the GPU path reads records unverified and hands the section crcs to the loader, which checks
    # them while staging (or, without a GPU, before its CPU fallback decodes)
    from wcodec.errors import ChecksumError
    from wcodec.format.reader import Reader
    from wcodec.gpu import loader

    sd = _state_dict()
    path = tmp_path / "m.wcodec"
    wcodec.save_file(sd, path)
    with Reader(path) as r:
        want = {n: {k: v["crc32"] for k, v in r.entry(n)["sections"].items()} for n in r.keys()
                if not r.alias_of(n)}
        off = max((s for s in r.entry("emb")["sections"].values()), key=lambda s: s["size"])["offset"]
    seen = {}

    def spy(items, device, crcs=None):
        seen["crcs"] = crcs
        if has_cuda:
            return loader.load_records(items, device, crcs=crcs)
        return loader.load_records(items, "cpu", crcs=crcs)  # the same checks, no GPU needed

    monkeypatch.setattr(wcodec.loading, "_gpu_load_records", lambda: spy)
    has_cuda = torch.cuda.is_available()
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)  # past the device check
    out = wcodec.load_file(path, device="cuda")
    assert seen["crcs"] == want and torch.equal(out["emb"].cpu(), sd["emb"])
    wcodec.load_file(path, device="cuda", verify=False)
    assert seen["crcs"] is None
    data = bytearray(path.read_bytes())
    data[off + 3] ^= 0x40
    path.write_bytes(bytes(data))
    with pytest.raises(ChecksumError, match="emb"):
        wcodec.load_file(path, device="cuda")


def test_convert_folder_copies_side_files(tmp_path):
    from safetensors.torch import save_file as st_save

    src = tmp_path / "hf"
    (src / "1_Pooling").mkdir(parents=True)
    sd = {k: v.contiguous() for k, v in _state_dict().items() if k != "head"}
    part1, part2 = dict(list(sd.items())[:3]), dict(list(sd.items())[3:])
    st_save(part1, src / "model-00001-of-00002.safetensors", metadata={"format": "pt"})
    st_save(part2, src / "model-00002-of-00002.safetensors")
    wm = {k: "model-00001-of-00002.safetensors" for k in part1} | {k: "model-00002-of-00002.safetensors" for k in part2}
    (src / "model.safetensors.index.json").write_text(json.dumps({"weight_map": wm}))
    (src / "config.json").write_text("{}")
    (src / "tokenizer.json").write_text("{}")
    (src / "1_Pooling" / "config.json").write_text("{}")
    paths = wcodec.encode_safetensors_to_wcodec(src, tmp_path / "out")
    names = sorted(str(p.relative_to(tmp_path / "out")) for p in paths)
    assert names == ["1_Pooling/config.json", "config.json", "model.wcodec", "tokenizer.json"]
    out = wcodec.load_wcodec_checkpoint(tmp_path / "out")
    assert sorted(out) == sorted(sd) and all(torch.equal(out[k], v) for k, v in sd.items())
    assert wcodec.safe_open(tmp_path / "out" / "model.wcodec").metadata()["wcodec_mode"] == "lossless"


def test_sharded_output_and_decode_to_safetensors(tmp_path):
    from safetensors.torch import load_file as st_load
    sd = _state_dict()
    torch.save(sd, tmp_path / "sd.pt")
    paths = wcodec.encode_safetensors_to_wcodec(tmp_path / "sd.pt", tmp_path / "out", max_shard_size=2000)
    assert (tmp_path / "out" / "model.wcodec.index.json") in paths
    out = wcodec.load_wcodec_checkpoint(tmp_path / "out" / "model.wcodec.index.json")
    assert all(torch.equal(out[k], v) for k, v in sd.items()) and out["head"] is out["emb"]
    wcodec.decode_to_safetensors(tmp_path / "out", tmp_path / "dec.safetensors")
    dec = st_load(tmp_path / "dec.safetensors")
    assert all(torch.equal(dec[k], v) for k, v in sd.items())


def test_torch_load_refuses_pickled_code(tmp_path):
    torch.save({"a": torch.ones(2), "f": print}, tmp_path / "evil.pt")  # unpicklable under weights_only
    with pytest.raises(wcodec.WcodecError):
        wcodec.encode_safetensors_to_wcodec(tmp_path / "evil.pt", tmp_path / "x.wcodec")
    assert not (tmp_path / "x.wcodec").exists()
