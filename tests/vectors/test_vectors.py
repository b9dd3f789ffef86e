"""wcodec.vectors: annealing, residual codes, search, container round trip, CLI, backends."""

from __future__ import annotations

import argparse
import importlib.util

import numpy as np
import pytest

from wcodec.errors import WcodecError
from wcodec.vectors import AnnealingConfig, InvalidPointsError, compress, load
from wcodec.vectors.search import exact_search, recall_at_k

HAS_TORCH = importlib.util.find_spec("torch") is not None


@pytest.fixture(scope="module")
def real(shared_dir):
    base = np.load(shared_dir / "data" / "minilm_nltk_50k_f16.npy", mmap_mode="r")[:3000]
    queries = np.load(shared_dir / "data" / "minilm_nltk_queries_1k_f16.npy")[:100]
    return np.asarray(base), queries


def test_anchors_only_real(real):
    base, _ = real
    idx = compress(base, AnnealingConfig(m=32, max_iterations=8))
    assert idx.anchors.shape == (32, 384) and idx.assignments.shape == (3000,)
    assert 0 < idx.energy < 1.0 and 1 <= idx.iterations <= 8
    rec = idx.reconstruct()
    assert np.isclose(idx.mse(base), idx.energy, rtol=1e-4)
    assert np.array_equal(rec, idx.anchors[idx.assignments])
    assert idx.nbytes == sum(idx.nbytes_parts().values()) and idx.compression_ratio > 10
    # energy of the annealed anchors beats the random start by far
    assert idx.info["history"][-1] < 0.8 * idx.info["history"][0]


def test_residual_search_and_roundtrip(real, tmp_path):
    base, queries = real
    idx = compress(base, AnnealingConfig(m=16, max_iterations=6, bytes_per_vector=150, pq_iterations=4))
    assert idx.codes is not None and idx.bytes_per_vector <= 150
    assert idx.mse(base) < 0.5 * idx.energy
    truth = exact_search(base.astype(np.float32), queries.astype(np.float32), 10)
    dist, ids = idx.search(queries, 10)
    assert recall_at_k(ids, truth, 10) > 0.5
    rec = idx.reconstruct()
    exact = ((queries[:5, None, :].astype(np.float32) - rec[ids[:5]]) ** 2).sum(-1)
    np.testing.assert_allclose(dist[:5], exact, atol=1e-4)  # ADC = exact distance to the decoded vector
    path = tmp_path / "idx.wcodec"
    idx.save(path)
    back = load(path)
    assert np.array_equal(back.assignments, idx.assignments) and np.array_equal(back.codes, idx.codes)
    np.testing.assert_array_equal(back.reconstruct(), rec)
    assert back.search(queries, 10)[1].tolist() == ids.tolist()


def test_budget_too_small_gives_anchors_only():
    pts = np.random.default_rng(0).standard_normal((200, 8)).astype(np.float32)
    idx = compress(pts, AnnealingConfig(m=4, bytes_per_vector=1.0))
    assert idx.codes is None


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_non_finite_rejected(bad):
    pts = np.ones((10, 3), dtype=np.float32)
    pts[4, 1] = bad
    with pytest.raises(InvalidPointsError, match="row 4"):
        compress(pts, AnnealingConfig(m=2))
    assert issubclass(InvalidPointsError, WcodecError)


@pytest.mark.parametrize("bad", [np.zeros((0, 3)), np.zeros(5), np.zeros((3, 3), dtype=np.int32)])
def test_bad_shapes_rejected(bad):
    with pytest.raises(InvalidPointsError):
        compress(bad, AnnealingConfig(m=2))


def test_config_validation():
    with pytest.raises(ValueError):
        AnnealingConfig(cooling_rate=1.5)
    with pytest.raises(ValueError):
        AnnealingConfig(device="tpu")


def _cluster_data(n=3000, d=16, k=12, seed=1):
    rng = np.random.default_rng(seed)
    centres = 3 * rng.standard_normal((k, d))
    return (centres[rng.integers(0, k, n)] + 0.2 * rng.standard_normal((n, d))).astype(np.float32)


@pytest.mark.skipif(not HAS_TORCH, reason="torch not installed")
def test_torch_cpu_backend_matches_numpy():
    pts = _cluster_data()
    a = compress(pts, AnnealingConfig(m=24, device="cpu"))
    b = compress(pts, AnnealingConfig(m=24, device="torch-cpu"))
    assert abs(a.energy - b.energy) <= 0.01 * a.energy


@pytest.mark.gpu
@pytest.mark.skipif(not HAS_TORCH or not __import__("torch").cuda.is_available(), reason="no CUDA GPU")
def test_cuda_backend_matches_numpy():
    pts = _cluster_data(n=20000, d=64, k=40)
    a = compress(pts, AnnealingConfig(m=128, device="cpu"))
    b = compress(pts, AnnealingConfig(m=128, device="cuda"))
    assert abs(a.energy - b.energy) <= 0.01 * a.energy


def test_cli_compress_search(tmp_path, capsys):
    from wcodec.vectors import cli

    pts = _cluster_data(n=600, d=8)
    np.save(tmp_path / "emb.npy", pts)
    np.save(tmp_path / "q.npy", pts[:7])
    parser = argparse.ArgumentParser()
    cli.register(parser.add_subparsers(dest="cmd"))
    out = tmp_path / "out.wcodec"
    args = parser.parse_args(["vectors", "compress", str(tmp_path / "emb.npy"), str(out), "--anchors", "8",
                              "--bytes-per-vector", "40"])
    assert args.func(args) == 0 and out.exists()
    args = parser.parse_args(["vectors", "search", str(out), str(tmp_path / "q.npy"), "-k", "3",
                              "--out", str(tmp_path / "ids.npy"), "--truth", str(tmp_path / "emb.npy")])
    assert args.func(args) == 0
    assert np.load(tmp_path / "ids.npy").shape == (7, 3)
    assert "recall@3" in capsys.readouterr().out
    args = parser.parse_args(["vectors", "compress", str(tmp_path / "missing.npy"), str(out)])
    assert args.func(args) == 1
