"""Tensor parallel over wcodec folders: transformers' ``tp_plan="auto"`` on 2 ranks over gloo (CPU),
launched as torchrun does (two processes, RANK / WORLD_SIZE / MASTER_ADDR / MASTER_PORT), one run
for every check below (tests/hf/_tp_worker.py is a rank).

Tiny Llama, Qwen3-MoE (experts under transformers' ``moe_tp_experts`` plan) and Gemma3 (tied
embedding and head), each from a lossless and a ``--codec fixed`` folder, against the safetensors
folder under the same plan: a plain load gives each rank exactly transformers' shards and decodes
(from a fixed folder) only them; kept compressed, each rank holds its shards compressed and the
logits and greedy tokens are the bf16 model's, bit for bit (the CPU path decodes and multiplies
as nn.Linear does)."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")
if not (torch.distributed.is_available() and torch.distributed.is_gloo_available()):
    pytest.skip("torch.distributed with the gloo backend is unavailable in this torch build", allow_module_level=True)
try:
    import transformers.distributed  # noqa: F401  (the DTensor tensor-parallel loader, transformers 5.x)
except ImportError:
    pytest.skip("this transformers has no transformers.distributed (tp_plan loading)", allow_module_level=True)

from wcodec.hf.checkpoint import region_of  # noqa: E402

from . import _arch  # noqa: E402
from ._tp_worker import compressed_bytes  # noqa: E402

SRC = str(Path(__file__).resolve().parents[2] / "src")
WORKER = str(Path(__file__).with_name("_tp_worker.py"))
CASES = {"llama": "wc:none,fx:none,wc:true,fx:true,fx:jit,wc:jit", "qwen3_moe": "fx:none,fx:true,wc:true",
         "gemma3": "fx:true"}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def tp(tmp_path_factory):
    """({model: {case: what rank r saw} per rank}, {model: {tensor: compressed bytes of a load
    without a plan}})."""
    root = tmp_path_factory.mktemp("tp")
    unsplit = {}
    for name in CASES:
        src = _arch.build_source(name, root / name / "st")
        _arch.convert(src, root / name / "wc", "lossless")
        fx = _arch.convert(src, root / name / "fx", "fixed")
        from wcodec.hf.tp import held_bytes

        model = _arch.load(name, fx, keep=True)
        unsplit[name] = compressed_bytes(model)
        assert sum(unsplit[name].values()) == held_bytes(model)["compressed"], name  # every buffer is named
    env = {**os.environ, "PYTHONPATH": f"{SRC}{os.pathsep}{os.environ.get('PYTHONPATH', '')}", "WORLD_SIZE": "2",
           "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(_free_port()), "OMP_NUM_THREADS": "1",
           "HF_HUB_OFFLINE": "1"}
    out = str(root / "rank-RANK.json")
    args = [sys.executable, WORKER, out, str(root), *[f"{n}:{c}" for n, c in CASES.items()]]
    procs = [subprocess.Popen(args, env={**env, "RANK": str(r), "LOCAL_RANK": str(r)}, stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True) for r in range(2)]
    logs = [p.communicate(timeout=600)[0] for p in procs]
    for r, p in enumerate(procs):
        assert p.returncode == 0, f"rank {r} failed:\n{logs[r][-4000:]}"
    return [json.loads(Path(out.replace("RANK", str(r))).read_text()) for r in range(2)], unsplit


def _cases(ranks, keep):
    return [(r, name, case, row) for r, res in enumerate(ranks) for name, rows in res.items()
            for case, row in rows.items() if case != "ref" and case.endswith(keep)]


def test_plain_load_gives_each_rank_transformers_shards(tp):
    ranks, _ = tp
    for r, name, case, row in _cases(ranks, ":none"):
        assert row["shards_equal"], f"rank {r} {name} {case}: local tensors differ from the safetensors shards"
        assert row["logits_equal"] and row["tokens_equal"], f"rank {r} {name} {case}"
        assert "CompressedLinear" not in row["classes"]


def test_plain_load_of_a_fixed_folder_decodes_only_the_shards(tp):
    """A fixed record's block decodes alone: each rank decodes exactly the bytes of the tensors it
    holds (its shards, and the replicated tensors whole)."""
    ranks, _ = tp
    for r, res in enumerate(ranks):
        for name, rows in res.items():
            if "fx:none" in rows:
                assert sum(rows["fx:none"]["decoded"].values()) == rows["ref"]["local_bytes"], (r, name)


def test_kept_compressed_gives_the_bf16_models_tokens_under_the_plan(tp):
    ranks, _ = tp
    for r, name, case, row in _cases(ranks, ":true") + _cases(ranks, ":jit"):
        assert row["logits_equal"] and row["tokens_equal"], f"rank {r} {name} {case}"
    for r, name, case, row in _cases(ranks, ":true"):
        assert "CompressedLinear" in row["classes"], (r, name, case)
        if name == "qwen3_moe":
            assert "CompressedQwen3MoeExperts" in row["classes"], (r, case)


def test_each_rank_holds_only_its_compressed_shards(tp):
    """Each rank holds of every compressed tensor its part under the plan transformers applied:
    the unsplit load's bytes for that tensor times the part of it the dense reference's rank
    holds under the same plan (its shard's elements over the tensor's; 1 where the plan
    replicates it: transformers 5.17's plan replicates Llama's embedding, 5.24's splits it by
    rows), within 10% + 128 bytes (each shard pads and indexes its own rows: at most 5.2%
    measured). A rank holding a whole tensor where the plan gives it half is off by 100%."""
    ranks, unsplit = tp
    for name in CASES:
        for r in range(2):
            part = ranks[r][name]["ref"]["fractions"]
            assert set(unsplit[name]) <= set(part), (name, sorted(set(unsplit[name]) - set(part)))
            assert any(part[k] < 1 for k in unsplit[name]), (name, "the plan splits no compressed tensor")
            held = ranks[r][name]["fx:true"]["held_by_tensor"]
            assert set(held) == set(unsplit[name]), (name, r, sorted(set(held) ^ set(unsplit[name])))
            for k, n in unsplit[name].items():
                assert abs(held[k] - part[k] * n) <= 0.1 * part[k] * n + 128, (name, r, k, held[k], part[k], n)
            assert sum(held.values()) == ranks[r][name]["fx:true"]["held"]["compressed"], (name, r)


def test_kept_compressed_from_a_fixed_folder_decodes_no_weight_matrix(tp):
    """Cut from the file as stored, the tied head of Gemma3 from its embedding's record too: only
    vectors (norms) and the matrices held dense (MoE routers, named in the report) are decoded,
    and MoE experts, whose shards are strided in the stored [E, N*K] record (decoded and encoded
    for the rank)."""
    ranks, _ = tp
    for r, res in enumerate(ranks):
        for name, rows in res.items():
            row = rows["fx:true"]
            decoded = set(row["decoded"]) - set(rows["ref"]["vectors"]) - set(row["dense"])
            assert all(".experts." in k for k in decoded), (r, name, sorted(decoded))


@pytest.mark.parametrize("index, region", [
    ((slice(0, 2), slice(None)), [(0, 2), (0, 5)]),
    ((slice(1, 3),), [(1, 3), (0, 5)]),
    ((Ellipsis, slice(2, 4)), [(0, 4), (2, 4)]),
    ((slice(3, 1), slice(None)), [(3, 3), (0, 5)]),
    (Ellipsis, [(0, 4), (0, 5)]),
    ((0, slice(None)), None),
    ((slice(0, 4, 2),), None),
])
def test_region_of_the_indices_transformers_reads_shards_with(index, region):
    assert region_of(index, [4, 5]) == region


def test_a_tensor_parallel_model_kept_compressed_refuses_to_save():
    from wcodec.errors import UnsupportedError
    from wcodec.hf.tp import refuse_sharded

    class Split:
        tp_size = 2

    with pytest.raises(UnsupportedError, match="tensor-parallel ranks"):
        refuse_sharded(Split(), "save_pretrained")
    refuse_sharded(type("One", (), {"tp_size": None})(), "save_pretrained")
