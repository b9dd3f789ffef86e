"""Annealing quality: k-means|| start, split/merge moves judged by energy, the seeds' API names."""

from __future__ import annotations

import argparse
import importlib.util

import numpy as np
import pytest

from wcodec.vectors import AnnealingConfig, compress
from wcodec.vectors.anneal import _loop
from wcodec.vectors.backends import NumpyBackend
from wcodec.vectors.moves import metropolis, propose, split_two
from wcodec.vectors.seeding import greedy_kmeanspp, kmeans_parallel

HAS_TORCH = importlib.util.find_spec("torch") is not None


def _clusters(centres, per, sigma, seed=0):
    rng = np.random.default_rng(seed)
    c = np.asarray(centres, np.float32)
    labels = np.repeat(np.arange(len(c)), per)
    return (c[labels] + sigma * rng.standard_normal((labels.size, c.shape[1]))).astype(np.float32), labels


def _stuck_start():
    """Four clusters on a line at 0, 10, 20, 30 (sigma 0.5); the start puts two anchors in the
    first cluster and one between the last two: a Lloyd fixed point far from the optimum."""
    pts, _ = _clusters([[0, 0], [10, 0], [20, 0], [30, 0]], 200, 0.5)
    anchors = np.array([[-0.3, 0], [0.3, 0], [10, 0], [25, 0]], np.float32)
    return pts, anchors


def test_split_and_merge_where_they_should():
    pts, anchors = _stuck_start()
    b = NumpyBackend()
    labels, d2, second = b.assign2(pts, anchors, b.sqnorms(pts))
    moves = propose(b, pts, anchors, labels, d2, second, 0.0, 4, np.random.default_rng(0))
    assert len(moves) == 1  # one pair: the two clusters under anchor 3 split, one of the pair in cluster 0 freed
    assert moves[0].split == 3 and moves[0].merged in (0, 1) and moves[0].delta < 0
    halves = sorted(float(anchors[k, 0]) for k in (3, moves[0].merged))
    assert abs(halves[0] - 20) < 0.3 and abs(halves[1] - 30) < 0.3


def test_annealing_leaves_the_basin_plain_lloyd_stays():
    pts, start = _stuck_start()
    b = NumpyBackend()
    cfg = AnnealingConfig(m=4, max_iterations=20)
    lloyd = _loop(pts, start.copy(), cfg, b, None, 0.0, 20, 0)  # no moves: stuck
    annealed = _loop(pts, start.copy(), cfg, b, None, 0.6, 20, 4)
    floor = 2 * 0.25
    assert lloyd.energy > 20 * floor  # 25 sits between two clusters 10 apart
    assert annealed.energy < 1.1 * floor and annealed.splits == annealed.merges == 1
    assert annealed.moves[0].split == 3 and annealed.rejected == 0


def test_bad_batch_is_reverted():
    """A move that raises the energy is undone at T = 0 (Metropolis) and counted as rejected."""
    pts, _ = _clusters([[0, 0], [10, 0], [20, 0], [30, 0]], 200, 0.5)
    b = NumpyBackend()
    good = np.array([[0, 0], [10, 0], [20, 0], [30, 0]], np.float32)
    labels, d2, second = b.assign2(pts, good, b.sqnorms(pts))
    # at a very high temperature the only (bad) candidate pair is accepted by the proposal...
    moves = propose(b, pts, good.copy(), labels, d2, second, 1e6, 1, np.random.default_rng(0))
    assert len(moves) == 1 and moves[0].delta > 0
    # ...but the loop judges batches by the settled energy and keeps the best anchors
    # (T = 1e6 for the first iteration only, its over-relaxed step 1e-6 * (1 + T) = Lloyd's)
    res = _loop(pts, good.copy(), AnnealingConfig(m=4, cooling_rate=0.0, lr=1e-6), b, None, 1e6, 12, 1)
    assert res.rejected == 1 and res.splits == 0 and res.log[1]["rejected"] == 1
    assert res.energy <= 1.0001 * float(d2.mean())


def test_metropolis_rule():
    rng = np.random.default_rng(1)
    assert metropolis(-1.0, 0.0, rng) and not metropolis(1e-9, 0.0, rng)
    rate = np.mean([metropolis(1.0, 1.0, rng) for _ in range(4000)])
    assert abs(rate - np.exp(-1.0)) < 0.03


def test_split_two_finds_the_gap():
    pts, _ = _clusters([[0, 0, 0], [0, 6, 0]], 100, 0.3)
    gain, c1, c2 = split_two(pts)
    assert gain > 0.8 * 100 * 2 * 9  # most of the between-cluster spread (2 x 100 points at 3)
    assert sorted([round(float(c1[1])), round(float(c2[1]))]) == [0, 6]
    assert split_two(pts[:1])[1] is None and split_two(np.ones((5, 3), np.float32))[1] is None


def test_kmeans_parallel_covers_clusters():
    rng = np.random.default_rng(0)
    centres = 20 * rng.standard_normal((30, 8))
    pts, _ = _clusters(centres, 50, 0.5)
    b = NumpyBackend()
    idx = kmeans_parallel(pts, b.sqnorms(pts), 30, 0, b)
    assert idx.size == 30 and np.unique(idx).size == 30
    hit = np.unique(np.argmin(((pts[idx][:, None] - centres[None].astype(np.float32)) ** 2).sum(-1), 1))
    assert hit.size >= 27  # D^2 sampling lands in nearly every cluster (random: ~19 of 30)
    w = np.ones(5)
    x = np.array([[0.0], [0.0001], [5.0], [10.0], [10.0001]], np.float32)
    assert sorted(greedy_kmeanspp(x, w, 3, np.random.default_rng(0)).tolist()) in ([0, 2, 3], [0, 2, 4], [1, 2, 3], [1, 2, 4])


def test_beats_plain_lloyd_on_a_mixture():
    rng = np.random.default_rng(2)
    pts, _ = _clusters(6 * rng.standard_normal((40, 16)), 60, 1.0, seed=2)
    plain = compress(pts, AnnealingConfig(m=40, init="random", maintenance_interval=0, initial_temp=0.0,
                                          max_iterations=50))
    ours = compress(pts, AnnealingConfig(m=40))
    floor = 16.0
    assert ours.energy < 0.9 * plain.energy
    assert ours.energy < 1.02 * floor


def test_seed_api_names_and_log():
    cfg = AnnealingConfig(m=8, initial_temp=0.3, lr=0.8, momentum=0.5)
    assert cfg.initial_temperature == 0.3 and cfg.initial_temp == 0.3
    assert AnnealingConfig(initial_temperature=0.2).initial_temp == 0.2
    with pytest.raises(ValueError):
        AnnealingConfig(initial_temp=0.3, initial_temperature=0.2)
    with pytest.raises(ValueError):
        AnnealingConfig(momentum=1.0)
    with pytest.raises(ValueError):
        AnnealingConfig(lr=0.0)
    pts, _ = _clusters([[0, 0], [5, 5], [9, 0], [0, 9]] * 2, 50, 0.3)
    lines = []
    idx = compress(pts, cfg, log=lines.append)
    assert idx.energy < 0.3  # momentum and a short lr still converge (noise floor 0.18)
    it_lines = [s for s in lines if s.startswith("Iter ")]
    assert it_lines and all(k in it_lines[0] for k in ("T=", "E=", "delta_E=", "Changes="))
    log = idx.info["log"]
    assert log[0]["changes"] == 400 and {"T", "E", "delta_E", "changes"} <= set(log[1])
    assert abs(idx.compression_percent * idx.compression_ratio - 100) < 1e-6
    var = idx.info["variances"]  # the reduce step's per-anchor variance (plain: robust_clip = 0)
    d2 = ((pts - idx.anchors[idx.assignments]) ** 2).sum(1)
    k = int(idx.assignments[0])
    assert var.shape == (idx.m,) and abs(var[k] - d2[idx.assignments == k].mean()) < 0.05 * var[k] + 1e-3
    blob = np.vstack([pts[:100], [[200.0, 200.0]]]).astype(np.float32)  # one cluster + an outlier, one anchor
    robust = compress(blob, AnnealingConfig(m=1, robust_clip=2.0))
    plain = compress(blob, AnnealingConfig(m=1))
    assert robust.info["variances"].max() < 0.5 * plain.info["variances"].max()  # the outlier is down-weighted


def test_cli_test_cuda(monkeypatch, capsys):
    from wcodec.vectors import cli

    monkeypatch.setattr(cli, "HARNESS_SHAPES", [(400, 8, 6)])
    parser = argparse.ArgumentParser()
    cli.register(parser.add_subparsers(dest="cmd"))
    args = parser.parse_args(["vectors", "test-cuda"])
    assert args.func(args) == 0
    out = capsys.readouterr().out
    assert "400 points in 8D with 6 anchors" in out and "CPU (cpu)" in out and "% (" in out
    if HAS_TORCH:
        import torch
        if not torch.cuda.is_available():
            assert "no CUDA GPU" in out
        assert "speedup" in out and "energy difference" in out


@pytest.mark.skipif(not HAS_TORCH, reason="torch not installed")
def test_greedy_kmeanspp_torch_matches_host():
    import torch

    from wcodec.vectors.seeding import greedy_kmeanspp_torch

    rng = np.random.default_rng(4)
    x = (10 * rng.standard_normal((300, 6))).astype(np.float32)
    w = rng.integers(1, 5, 300).astype(np.float64)
    host = greedy_kmeanspp(x, w, 20, np.random.default_rng(9))
    dev = greedy_kmeanspp_torch(torch.from_numpy(x), torch.from_numpy(w), 20, np.random.default_rng(9))
    assert dev.size == 20 and np.unique(dev).size == 20

    def potential(idx):
        return float((w * ((x[:, None] - x[idx][None]) ** 2).sum(-1).min(1)).sum())
    assert potential(dev) <= 1.3 * potential(host)  # same algorithm, different draws
