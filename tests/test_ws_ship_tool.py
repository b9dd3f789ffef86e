"""tools/ws_ship.py: the shipped entry per shape and M bucket is the warp-specialised kernel's
config and split of least time, summed over Gaussian and Student-t weights where heavy-tailed
weights route to the kernel (M <= fixed.WS_ANY_MAX_M), Gaussian alone above; a config that failed
or was wrong on either is not shipped; other kernels' entries are kept."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

pytest.importorskip("triton", reason="triton is not installed (pip install triton)")
from wcodec.gpu import fixed as fx  # noqa: E402

if not fx._gluon_available(hopper=True, ws=True):
    pytest.skip("this Triton's Gluon lacks warp_specialize or the Hopper ops", allow_module_level=True)

REPO = Path(__file__).resolve().parents[1]
spec = importlib.util.spec_from_file_location("ws_ship", REPO / "tools" / "ws_ship.py")
ws_ship = importlib.util.module_from_spec(spec)
spec.loader.exec_module(ws_ship)


def test_best_sums_both_weights_and_skips_failures():
    normal = {"c0s1": 30.0, "c0s2": 20.0, "c1s2": 19.0, "c2s2": 18.0, "cublas": 15.0}
    heavy = {"c0s1": 40.0, "c0s2": 30.0, "c1s2": 35.0, "c2s2": "BAD 0.1"}
    assert ws_ship.best(normal, None) == (2, 2, 18.0)
    assert ws_ship.best(normal, heavy) == (0, 2, 20.0)  # 50 against c1's 54; c2 wrong on heavy weights
    assert ws_ship.best({"cublas": 1.0}, None) is None


def test_writes_entries_keeps_others(tmp_path):
    rows = [dict(N=4096, K=4096, M=64, dist="normal", cublas=15.0, c0s2=22.0, c1s2=21.0),
            dict(N=4096, K=4096, M=64, dist="t3", cublas=15.0, c0s2=30.0, c1s2=33.0),
            dict(N=4096, K=4096, M=128, dist="normal", cublas=16.0, c0s1=40.0, c1s2=29.0),
            dict(N=4096, K=4096, M=128, dist="t3", cublas=16.0, c0s1=50.0, c1s2=90.0)]
    res = tmp_path / "ws_kernel.json"
    res.write_text(json.dumps(rows))
    other = {"kind": "mma16", "mb": 16, "N": 4096, "K": 4096, "split": 4, "config": {}}
    old = {"kind": "ws64", "mb": 64, "N": 4096, "K": 4096, "split": 1, "config": {}}
    cfg = tmp_path / "sm90.json"
    cfg.write_text(json.dumps({"arch": "sm90", "entries": [other, old]}))
    assert ws_ship.main([str(res), str(cfg)]) == 0
    got = {(e["kind"], e["N"], e["K"]): e for e in json.loads(cfg.read_text())["entries"]}
    assert got[("mma16", 4096, 4096)] == other
    ws64, ws128 = got[("ws64", 4096, 4096)], got[("ws128", 4096, 4096)]
    from wcodec.gpu.fixed_ws import configs
    # M = 64: c0 (22 + 30) beats c1 (21 + 33); M = 128: Gaussian alone, c1 at split 2
    assert (ws64["split"], ws64["us"], ws64["config"]["kwargs"]) == (2, 22.0, configs(64)[0].kwargs)
    assert (ws128["split"], ws128["us"], ws128["config"]["kwargs"]) == (2, 29.0, configs(128)[1].kwargs)
    assert ws64["config"]["num_warps"] == 4 and ws128["cublas_us"] == 16.0


def test_register_a_kernel_entries(tmp_path):
    """--kernel ra: ra_kernel.json's rows (under "rows"), heavy-tailed rows summed at every M,
    variants outside fixed_ra.configs (names beyond c<i>s<split>) never shipped."""
    pytest.importorskip("wcodec.gpu.fixed_ra", reason="the register-A kernel needs Gluon's linear layouts")
    from wcodec.gpu.fixed_ra import configs
    rows = [dict(N=4096, K=4096, M=32, dist="normal", cublas=13.0, c0s4=15.0, c1s4=14.0, c1ds2=10.0),
            dict(N=4096, K=4096, M=32, dist="t3", cublas=13.0, c0s4=19.0, c1s4=21.0)]
    res = tmp_path / "ra_kernel.json"
    res.write_text(json.dumps({"bad": [], "rows": rows, "regs": {}}))
    cfg = tmp_path / "sm90.json"
    cfg.write_text(json.dumps({"arch": "sm90", "entries": []}))
    assert ws_ship.main([str(res), str(cfg), "--kernel", "ra", "--ms", "32"]) == 0
    (e,) = json.loads(cfg.read_text())["entries"]
    assert (e["kind"], e["mb"], e["split"], e["us"]) == ("ra32", 32, 4, 15.0)  # 15 + 19 against 14 + 21
    assert e["config"]["kwargs"] == configs(32)[0].kwargs
