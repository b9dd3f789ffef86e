"""benchmarks/tp.py --quick under torchrun (2 ranks, gloo, CPU): every variant loads under
``tp_plan="auto"``, gives bf16's greedy tokens on each rank, the kept-compressed ranks hold less
than bf16's, and from a fixed folder no weight is decoded."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")
if not (torch.distributed.is_available() and torch.distributed.is_gloo_available()):
    pytest.skip("torch.distributed with the gloo backend is unavailable in this torch build", allow_module_level=True)

REPO = Path(__file__).resolve().parents[1]


def test_tp_benchmark_quick(tmp_path):
    out = tmp_path / "tp.json"
    env = {**os.environ, "PYTHONPATH": f"{REPO / 'src'}{os.pathsep}{os.environ.get('PYTHONPATH', '')}",
           "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1"}
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2",
           str(REPO / "benchmarks" / "tp.py"), "--quick", "--work", str(tmp_path / "work"), "--json", str(out)]
    p = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    assert "same tokens" in p.stdout
    res = json.loads(out.read_text())
    rows = {per_rank[0]["variant"]: per_rank for per_rank in res["rows"]}
    assert set(rows) == {"bf16", "plain_rans", "fused", "fused_rans"} and res["world"] == 2
    for variant, per_rank in rows.items():
        assert [r["same_tokens"] for r in per_rank] == [True, True], variant
    for r, bf in zip(rows["fused"], rows["bf16"]):
        assert 0 < r["held"]["compressed"] and sum(r["held"].values()) < 0.85 * bf["held"]["dense"]
        assert r["decoded"] < 0.01 * bf["held"]["dense"]  # norms only: the weights are cut from the file
    assert all(r["decoded"] >= bf["held"]["dense"] for r, bf in zip(rows["plain_rans"], rows["bf16"]))
