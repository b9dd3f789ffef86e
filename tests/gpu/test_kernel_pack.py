"""The kernel pack (wcodec.gpu.kernel_pack): built from a Triton cache, read with every member
checked, installed through Triton's own cache manager so that Triton finds the entries; packs
that cannot apply are skipped, never raised. CPU: the GPU's part is tools/device_kernel_pack.sh."""

from __future__ import annotations

import base64
import hashlib
import io
import json
import os
import shutil
import tarfile
import warnings

import pytest

from wcodec.gpu import fixed as fx
from wcodec.gpu import kernel_pack as kp


def _entry(cache, key_hex, name, base32=True, cubin=True):
    d = cache / (base64.b32encode(bytes.fromhex(key_hex)).decode().rstrip("=") if base32 else key_hex)
    d.mkdir(parents=True)
    (d / f"{name}.json").write_text(json.dumps({"name": name}))
    if cubin:
        (d / f"{name}.cubin").write_bytes(b"\x7fELF" + key_hex.encode())
    (d / f"{name}.ptx").write_text("// not packed")
    (d / f"__grp__{name}.json").write_text(json.dumps({"child_paths": {}}))
    return d


def _key(i):
    return hashlib.sha256(str(i).encode()).hexdigest()


@pytest.fixture()
def cache(tmp_path):
    c = tmp_path / "cache"
    _entry(c, _key(0), "fixed_gemv_kernel")
    _entry(c, _key(1), "fixed_gemv_kernel", base32=False)  # older Triton: the hex key itself
    _entry(c, _key(2), "ws_kernel")
    _entry(c, _key(3), "half_done", cubin=False)  # a compile cut short: left out
    (c / "not_a_key").mkdir()
    (c / "not_a_key" / "__grp__x.json").write_text("{}")
    return c


def test_build_then_read_gives_each_complete_entry_under_its_key(cache, tmp_path):
    out = tmp_path / "p.tar.xz"
    man = kp.build(cache, out, triton_version="3.6.0", arch="sm90", device="H200")
    assert man["kernels"] == 3 and man["names"] == {"fixed_gemv_kernel": 2, "ws_kernel": 1}
    assert man["sources"] == kp.sources_hash() and man["triton"] == "3.6.0" and man["arch"] == "sm90"
    got, entries = kp.read(out)
    assert got == man and set(entries) == {_key(0), _key(1), _key(2)}
    assert entries[_key(2)] == {"ws_kernel.json": json.dumps({"name": "ws_kernel"}).encode(),
                                "ws_kernel.cubin": b"\x7fELF" + _key(2).encode()}
    again = tmp_path / "q.tar.xz"  # no dates or owners inside: the same cache gives the same bytes
    kp.build(cache, again, triton_version="3.6.0", arch="sm90", device="H200")
    assert kp.read(again)[1] == entries
    with pytest.raises(ValueError, match="no compiled kernel"):
        kp.build(tmp_path / "empty", tmp_path / "e.tar.xz", triton_version="3.6.0", arch="sm90")
    assert not (tmp_path / "e.tar.xz").exists()


def test_cache_key_of_directory_names():
    k = _key(7)
    assert kp.cache_key(k) == k
    assert kp.cache_key(base64.b32encode(bytes.fromhex(k)).decode().rstrip("=")) == k
    assert kp.cache_key("..") is None and kp.cache_key("ABC") is None and kp.cache_key(k.upper()) is None


def _tar(path, members):
    with tarfile.open(path, "w:xz") as tar:
        for name, data, kind in members:
            info = tarfile.TarInfo(name)
            if kind == "link":
                info.type, info.linkname = tarfile.SYMTYPE, "/etc/passwd"
                tar.addfile(info)
            else:
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))


MANIFEST = (kp.MANIFEST, json.dumps({"format": kp.FORMAT}).encode(), "file")


@pytest.mark.parametrize("members, problem", [
    ([MANIFEST, (f"../{_key(0)}/k.json", b"{}", "file")], "unexpected member"),
    ([MANIFEST, (f"{_key(0)}/k.json", b"", "link")], "not a regular file"),
    ([MANIFEST, (f"{_key(0)}/k.so", b"", "file")], "unexpected member"),
    ([MANIFEST, (f"{_key(0)}/k.json", b"{}", "file")], "not one kernel's"),
    ([MANIFEST, (f"{_key(0)}/k.json", b"{}", "file"), (f"{_key(0)}/j.cubin", b"", "file")], "not one kernel's"),
    ([(f"{_key(0)}/k.json", b"{}", "file"), (f"{_key(0)}/k.cubin", b"", "file")], "no manifest"),
    ([(kp.MANIFEST, b"\xff\xfe", "file")], "kernel pack bad.tar.xz"),
])
def test_read_rejects_foreign_members(tmp_path, members, problem):
    path = tmp_path / "bad.tar.xz"
    _tar(path, members)
    with pytest.raises(ValueError, match=problem):
        kp.read(path)


def test_read_rejects_damaged_bytes(cache, tmp_path):
    out = tmp_path / "p.tar.xz"
    kp.build(cache, out, triton_version="3.6.0", arch="sm90")
    data = out.read_bytes()
    for cut in (data[: len(data) // 2], b"not xz at all", data[:40] + bytes(len(data) - 40)):
        out.write_bytes(cut)
        with pytest.raises(ValueError, match="kernel pack p.tar.xz"):
            kp.read(out)


def test_sources_hash_follows_the_kernel_modules_and_configs(tmp_path):
    root = tmp_path / "gpu"
    shutil.copytree(kp.GPU_DIR, root, ignore=shutil.ignore_patterns("__pycache__", "packs"))
    h = kp.sources_hash(root)
    assert h == kp.sources_hash()
    (root / "plan.py").write_text((root / "plan.py").read_text() + "\n# no kernel here\n")
    assert kp.sources_hash(root) == h
    (root / "fixed_kernels.py").write_text((root / "fixed_kernels.py").read_text() + "\n# an edit\n")
    h2 = kp.sources_hash(root)
    assert h2 != h
    (root / "configs" / "sm90.json").write_text((root / "configs" / "sm90.json").read_text() + " ")
    assert kp.sources_hash(root) != h2


def test_install_entries_are_found_by_triton(cache, tmp_path, monkeypatch):
    pytest.importorskip("triton")
    from triton.runtime.cache import get_cache_manager

    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path / "triton"))
    out = tmp_path / "p.tar.xz"
    kp.build(cache, out, triton_version="x", arch="sm90")
    entries = kp.read(out)[1]
    assert kp.install_entries(entries) == (3, 0)
    assert kp.install_entries(entries) == (0, 3)  # present: left as they are
    grp = get_cache_manager(_key(2)).get_group("ws_kernel.json")
    assert set(grp) == {"ws_kernel.json", "ws_kernel.cubin"}
    with open(grp["ws_kernel.cubin"], "rb") as f:
        assert f.read() == b"\x7fELF" + _key(2).encode()


def test_install_on_the_cpu_or_turned_off_is_a_no_op(monkeypatch):
    torch = pytest.importorskip("torch")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)  # as on the CPU, on a GPU machine too
    rep = kp.install()
    assert rep["installed"] == 0 and rep["skipped"] == "no CUDA device"
    monkeypatch.undo()
    monkeypatch.setenv("WCODEC_KERNEL_PACK", "0")
    assert kp.install()["skipped"] == "WCODEC_KERNEL_PACK=0"


@pytest.fixture()
def fake_gpu(monkeypatch, tmp_path):
    """install()'s view of a CUDA device of capability 9.0 (nothing runs on it)."""
    torch = pytest.importorskip("torch")
    triton = pytest.importorskip("triton")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.version, "cuda", "12.8")
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: (9, 0))
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    monkeypatch.setattr(fx, "_ARCH", {})
    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path / "triton"))
    monkeypatch.setattr(kp, "_DONE", {})
    return tmp_path / "packs", kp.pack_name(triton.__version__, "sm90")


def test_install_writes_a_current_pack_once_per_process(cache, fake_gpu):
    packs, name = fake_gpu
    packs.mkdir()
    kp.build(cache, packs / name, triton_version="t", arch="sm90")
    rep = kp.install(pack_dir=packs)
    assert (rep["pack"], rep["kernels"], rep["installed"], rep["present"], rep["skipped"]) == (name, 3, 3, 0, None)
    assert rep["ready"]
    again = kp.install(pack_dir=packs)
    assert again["skipped"] == "installed earlier in this process" and again["ready"] and again["installed"] == 0


def test_install_skips_stale_unreadable_and_missing_packs(cache, fake_gpu, monkeypatch):
    packs, name = fake_gpu
    assert kp.install(pack_dir=packs)["skipped"] == f"no pack {name} shipped"
    packs.mkdir()
    kp.build(cache, packs / name, triton_version="t", arch="sm90")
    monkeypatch.setattr(kp, "sources_hash", lambda root=kp.GPU_DIR: "0" * 64)  # kernels edited since the build
    rep = kp.install(pack_dir=packs)
    assert rep["skipped"].startswith("stale") and rep["installed"] == 0
    monkeypatch.setattr(kp, "_DONE", {})
    (packs / name).write_bytes(b"garbage")
    with pytest.warns(UserWarning, match="the kernels compile instead"):
        assert kp.install(pack_dir=packs)["skipped"] == "unreadable"
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # warned once per process
        assert kp.install(pack_dir=packs)["skipped"] == "unreadable"


def test_install_into_a_read_only_cache_warns_and_returns(cache, fake_gpu, monkeypatch):
    packs, name = fake_gpu
    packs.mkdir()
    kp.build(cache, packs / name, triton_version="t", arch="sm90")

    def refuse(entries):
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(kp, "install_entries", refuse)
    with pytest.warns(UserWarning, match="cannot write Triton's cache"):
        rep = kp.install(pack_dir=packs)
    assert rep["skipped"] == "cache not writable (PermissionError)"


def test_shipped_packs_are_built_from_these_sources():
    """A pack is shipped only as built from the kernel sources and configurations of this tree
    (rebuild with tools/device_kernel_pack.sh on the GPU after editing them, or delete it)."""
    packs = sorted(kp.DIR.glob("*.tar.xz"))
    if not packs:
        pytest.skip("no kernel pack shipped")
    for path in packs:
        man, entries = kp.read(path)
        assert path.name == kp.pack_name(man["triton"], man["arch"]) and man["kernels"] == len(entries)
        assert man["sources"] == kp.sources_hash(), f"{path.name} is stale: rebuild it on the GPU"
        assert os.path.getsize(path) < 16 << 20
