"""Streamed blocks from a .npy memmap, and the torch.distributed path on CPU (gloo, 2 ranks)."""

from __future__ import annotations

import importlib.util

import numpy as np
import pytest

from wcodec.vectors import AnnealingConfig, InvalidPointsError, compress
from wcodec.vectors.cli import synthetic
from wcodec.vectors.stream import compress_stream, fit_anchors, shard

HAS_TORCH = importlib.util.find_spec("torch") is not None


@pytest.fixture(scope="module")
def npy(tmp_path_factory):
    pts = synthetic(6000, 16, 24, seed=3)
    path = tmp_path_factory.mktemp("stream") / "pts.npy"
    np.save(path, pts)
    return path, pts


def _energy(pts, anchors, labels):
    return float(((pts.astype(np.float32) - anchors[labels]) ** 2).sum(1).mean())


@pytest.mark.parametrize("device", ["cpu"] + (["torch-cpu"] if HAS_TORCH else []))
def test_stream_matches_in_memory(npy, device):
    path, pts = npy
    cfg = AnnealingConfig(m=24, device=device, subsample=32)
    idx = compress_stream(path, cfg, block_rows=700)  # blocks of 700 rows, not a divisor of 6000
    ref = compress(pts, AnnealingConfig(m=24, device=device))
    assert idx.assignments.shape == (6000,) and idx.anchors.shape == (24, 16)
    assert np.isclose(idx.energy, _energy(pts, idx.anchors, idx.assignments), rtol=1e-4)
    assert idx.energy <= 1.01 * ref.energy  # same optimum as the in-memory run
    assert idx.energy <= 1.05 * 0.09 * 16  # the noise floor of the clustered data
    assert len(idx.info["passes"]) >= 1 and idx.info["world"] == 1


def test_stream_rejects_bad_points(tmp_path):
    bad = synthetic(500, 4, 4).astype(np.float32)
    bad[-1, 0] = np.nan  # outside the sample: caught by the pass
    np.save(tmp_path / "bad.npy", bad)
    with pytest.raises(InvalidPointsError):
        compress_stream(tmp_path / "bad.npy", AnnealingConfig(m=4, subsample=2), block_rows=100)
    with pytest.raises(InvalidPointsError):
        compress_stream(np.zeros((3, 3), np.int32), AnnealingConfig(m=2))


def test_shard_covers_rows():
    for n, w in [(10, 3), (7, 2), (1, 2), (100, 4)]:
        spans = [shard(n, r, w) for r in range(w)]
        assert spans[0][0] == 0 and spans[-1][1] == n
        assert all(a[1] == b[0] for a, b in zip(spans, spans[1:]))


def _worker(rank, world, rdv, path, out):
    import torch.distributed as dist

    dist.init_process_group("gloo", init_method=f"file://{rdv}", rank=rank, world_size=world)
    try:
        # 700-row blocks: a shard of 3000 rows ends inside a block, which must stop at the shard
        anchors, labels, energy, info = fit_anchors(path, AnnealingConfig(m=24, subsample=32), block_rows=700)
        np.savez(f"{out}_{rank}.npz", anchors=anchors, labels=labels, energy=energy, world=info["world"])
    finally:
        dist.destroy_process_group()


@pytest.mark.skipif(not HAS_TORCH, reason="torch not installed")
def test_distributed_gloo_two_ranks(npy, tmp_path):
    import torch.multiprocessing as mp

    path, pts = npy
    out = str(tmp_path / "rank")
    mp.start_processes(_worker, args=(2, str(tmp_path / "rdv"), str(path), out), nprocs=2, start_method="spawn")
    r0, r1 = (np.load(f"{out}_{r}.npz") for r in range(2))
    assert int(r0["world"]) == 2
    np.testing.assert_array_equal(r0["anchors"], r1["anchors"])  # every rank ends with the same anchors
    assert float(r0["energy"]) == float(r1["energy"])
    labels = np.concatenate([r0["labels"], r1["labels"]])  # each rank labelled its own shard
    assert labels.shape == (6000,) and r0["labels"].shape == (shard(6000, 0, 2)[1],)
    assert np.isclose(float(r0["energy"]), _energy(pts, r0["anchors"], labels), rtol=1e-4)
    single = compress_stream(path, AnnealingConfig(m=24, subsample=32), block_rows=500)
    assert float(r0["energy"]) <= 1.02 * single.energy


def test_cli_compress_stream(npy, tmp_path, capsys):
    import argparse

    from wcodec.vectors import cli, load

    path, pts = npy
    parser = argparse.ArgumentParser()
    cli.register(parser.add_subparsers(dest="cmd"))
    out = tmp_path / "s.wcodec"
    args = parser.parse_args(["vectors", "compress", str(path), str(out), "--anchors", "24", "--stream"])
    assert args.func(args) == 0
    back = load(out)
    assert back.assignments.shape == (6000,) and "% of the original" in capsys.readouterr().out
    assert np.isclose(back.energy, _energy(pts, back.anchors, back.assignments), rtol=1e-3)
    args = parser.parse_args(["vectors", "compress", str(path), str(out), "--stream", "--bytes-per-vector", "9"])
    assert args.func(args) == 1
