"""Kernel configs shipped per GPU architecture (wcodec.gpu.shipped): the nearest-shape rule, the
off switch, and the glue in wcodec.gpu.fixed that turns an entry into a launch config and a
K-slice count without autotuning. The shipped files themselves name only parameters of the
kernels they are for."""

from __future__ import annotations

import json
import types

import pytest

from wcodec.gpu import shipped


def _entry(kind, mb, n, k, split=2, **kwargs):
    return dict(kind=kind, mb=mb, N=n, K=k, split=split,
                config=dict(kwargs=kwargs or dict(BM=64, BN=128, BI=8), num_warps=8, num_stages=3))


@pytest.fixture
def table(tmp_path, monkeypatch):
    """A shipped file sm90.json in a temporary folder, for the test to fill."""
    monkeypatch.setattr(shipped, "DIR", tmp_path)
    shipped.table.cache_clear()
    monkeypatch.delenv("WCODEC_SHIPPED_CONFIGS", raising=False)

    def write(entries):
        (tmp_path / "sm90.json").write_text(json.dumps({"arch": "sm90", "entries": entries}))
        shipped.table.cache_clear()
    yield write
    shipped.table.cache_clear()


def test_nearest_shape_within_the_ratio(table):
    table([_entry("mm_wide128", 128, 4096, 4096, split=4), _entry("mm_wide128", 128, 11008, 4096, split=1),
           _entry("mm_wide64", 64, 4096, 4096)])
    assert shipped.lookup("sm90", "mm_wide128", 128, 4096, 4096)["split"] == 4
    assert shipped.lookup("sm90", "mm_wide128", 128, 14336, 4096)["N"] == 11008  # nearer 11008 than 4096
    assert shipped.lookup("sm90", "mm_wide128", 128, 5000, 4096)["N"] == 4096
    far = int(shipped.MAX_RATIO * 4096)
    assert shipped.lookup("sm90", "mm_wide128", 128, 4096, far)["K"] == 4096  # MAX_RATIO: still served
    assert shipped.lookup("sm90", "mm_wide128", 128, 4096, far + 8) is None  # beyond it
    assert shipped.lookup("sm90", "mm_wide128", 64, 4096, 4096) is None  # other bucket
    assert shipped.lookup("sm90", "mma16", 128, 4096, 4096) is None  # other kernel
    assert shipped.lookup("sm80", "mm_wide128", 128, 4096, 4096) is None  # no file for that GPU
    assert shipped.lookup("sm90", "mm_wide128", 128, 0, 4096) is None


def test_turned_off(table, monkeypatch):
    table([_entry("gemv", 1, 4096, 4096)])
    assert shipped.lookup("sm90", "gemv", 1, 4096, 4096) is not None
    monkeypatch.setenv("WCODEC_SHIPPED_CONFIGS", "0")
    assert shipped.lookup("sm90", "gemv", 1, 4096, 4096) is None


def test_fixed_takes_the_config_and_split_without_tuning(table, monkeypatch):
    torch = pytest.importorskip("torch")
    pytest.importorskip("triton")
    from wcodec.gpu import fixed as fx
    from wcodec.gpu import fixed_kernels as fk
    table([_entry("mm_wide128", 128, 11008, 4096, split=2, BM=128, BN=256, BI=8)])
    monkeypatch.setattr(fx, "_arch", lambda device: "sm90")
    cuda = types.SimpleNamespace(type="cuda")
    cfg = fx._shipped_config("mm_wide128", (11008, 4096, 128, torch.bfloat16), fk.fixed_mm_kernel, cuda)
    assert cfg.kwargs == dict(BM=128, BN=256, BI=8) and (cfg.num_warps, cfg.num_stages) == (8, 3)
    assert fx._shipped_split("mm_wide128", 14336, 4096, 128, cuda) == 2
    assert fx._shipped_split("mm_wide128", 14336, 4096, 64, cuda) is None
    # a config naming a parameter the kernel lacks (a file from another version) is not used
    table([_entry("mm_wide128", 128, 11008, 4096, BM=128, BN=256, BLOCK_Q=8)])
    assert fx._shipped_config("mm_wide128", (11008, 4096, 128), fk.fixed_mm_kernel, cuda) is None
    assert fx._shipped_entry("mm_wide128", 11008, 4096, 128, torch.device("cpu")) is None  # the interpreter


def _kernel_args(kind: str):
    if kind.startswith(("mma", "wgmma", "ws", "ra")):
        name = "fixed_ws" if kind.startswith("ws") else {"m": "fixed_mma", "w": "fixed_wgmma", "r": "fixed_ra"}[kind[0]]
        mod = pytest.importorskip(f"wcodec.gpu.{name}", reason="the mma kernels need Triton's Gluon")
        return getattr(mod, f"{name}_kernel").arg_names
    from wcodec.gpu import fixed_kernels as fk
    return (fk.fixed_gemv_kernel if kind == "gemv" else fk.fixed_mm_kernel).arg_names


@pytest.mark.parametrize("path", sorted(shipped.DIR.glob("*.json")), ids=lambda p: p.name)
def test_shipped_files_fit_their_kernels(path):
    """Every entry names a kernel the routing launches, its parameters, a split in [1, 64] and the
    bucket its kind is keyed by."""
    pytest.importorskip("triton")
    doc = json.loads(path.read_text())
    assert doc["arch"] == path.stem and doc["entries"]
    for e in doc["entries"]:
        assert shipped.usable(e, _kernel_args(e["kind"])), e
        assert 1 <= e["split"] <= 64 and e["N"] > 0 and e["K"] > 0
        if e["kind"].startswith("mm_wide"):
            assert e["config"]["kwargs"]["BM"] == int(e["kind"][7:]) >= e["mb"] > 32
