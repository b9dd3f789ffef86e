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
    # ADC with stored norms = |q|^2 + |x|^2 - 2 |x| / |x_hat| q.x_hat, |x| as stored (8-bit)
    q5 = queries[:5].astype(np.float32)
    true = idx.stored_norms[ids[:5]]
    np.testing.assert_allclose(true, np.linalg.norm(base[ids[:5]].astype(np.float32), axis=-1), rtol=2e-3)
    dec = np.linalg.norm(rec[ids[:5]], axis=-1)
    want = (q5 ** 2).sum(1)[:, None] + true ** 2 - 2 * (true / dec) * np.einsum("qd,qkd->qk", q5, rec[ids[:5]])
    np.testing.assert_allclose(dist[:5], want, atol=1e-4)
    assert idx.nbytes_parts()["norms"] < 200  # normalised embeddings: one level, a fixed ~150 B
    path = tmp_path / "idx.wcodec"
    idx.save(path)
    back = load(path)
    assert np.array_equal(back.assignments, idx.assignments) and np.array_equal(back.codes, idx.codes)
    np.testing.assert_array_equal(back.reconstruct(), rec)
    np.testing.assert_array_equal(back.stored_norms, idx.stored_norms)
    assert back.nbytes == idx.nbytes
    assert back.search(queries, 10)[1].tolist() == ids.tolist()


def test_residual_without_norms_is_exact_decoded_distance(real):
    base, queries = real
    cfg = AnnealingConfig(m=16, max_iterations=6, bytes_per_vector=60, pq_iterations=4, store_norms=False,
                          opq_iterations=0)
    idx = compress(base, cfg)
    assert idx.norm_codes is None and idx.nbytes_parts()["norms"] == 0
    dist, ids = idx.search(queries, 10)
    rec = idx.reconstruct()
    exact = ((queries[:5, None, :].astype(np.float32) - rec[ids[:5]]) ** 2).sum(-1)
    np.testing.assert_allclose(dist[:5], exact, atol=1e-4)  # ADC = exact distance to the decoded vector


def test_coded_tables_and_truncated_rotation(real, tmp_path):
    base, queries = real
    common = dict(m=16, max_iterations=6, bytes_per_vector=120, pq_iterations=4, opq_iterations=1)
    fine = compress(base, AnnealingConfig(table_precision=0, residual_dims=0, **common))
    coarse = compress(base, AnnealingConfig(table_precision=16, residual_dims=0, **common))
    # same number of subspaces or more for the same budget; tables coded smaller; error barely moves
    assert coarse.books.nbytes < 0.85 * fine.books.nbytes
    assert coarse.codes.shape[1] >= fine.codes.shape[1]
    trunc = compress(base, AnnealingConfig(residual_dims=96, **common))
    assert trunc.books.rank == 96 and trunc.books.rotation_q.shape == (96, 384)
    assert trunc.books.sub_sizes.sum() == 96 and trunc.bytes_per_vector <= 120
    r = trunc.books.rotation
    np.testing.assert_allclose(r @ r.T, np.eye(96), atol=0.02)  # orthonormal rows (int8 steps)
    assert trunc.mse(base) < 0.7 * trunc.energy
    auto = compress(base, AnnealingConfig(**common))  # residual_dims=-1: water-filling rank
    assert auto.codes.shape[1] <= auto.books.rank < 384 and auto.bytes_per_vector <= 120
    assert auto.mse(base) < coarse.mse(base)
    path = tmp_path / "trunc.wcodec"
    trunc.save(path)
    back = load(path)
    np.testing.assert_array_equal(back.reconstruct(), trunc.reconstruct())
    assert back.search(queries, 5)[1].tolist() == trunc.search(queries, 5)[1].tolist()


def test_waterfill_rank():
    from wcodec.vectors.residual import waterfill_rank

    lam = 0.9 ** np.arange(100)
    ranks = [waterfill_rank(lam, m) for m in (1, 4, 16, 64, 100)]
    assert ranks == sorted(ranks) and ranks[-1] == 100  # more codes, more dimensions
    assert all(r >= m for r, m in zip(ranks, (1, 4, 16, 64, 100)))
    assert waterfill_rank(np.ones(10), 2) == 10  # a flat spectrum keeps every direction
    assert waterfill_rank(np.zeros(5), 1) == 5


def test_quantize_rows_precision():
    from wcodec.vectors.residual import quantize_rows

    mat = np.random.default_rng(0).standard_normal((8, 500)).astype(np.float32)
    mat[3] = 0.0
    mat[4, 0] = 50.0  # an outlier: the max-based step wins, nothing clips
    for p in (0.0, 4.0, 16.0):
        q, s = quantize_rows(mat, p)
        err = np.abs(q * s[:, None] - mat).max(axis=1)
        assert (err <= 0.5001 * s).all() and s[3] == 1.0
    q16, _ = quantize_rows(mat, 16.0)
    assert len(np.unique(q16[0])) < 130  # about +-4 RMS at 16 steps per RMS


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


@pytest.mark.skipif(not HAS_TORCH, reason="torch not installed")
def test_torch_cpu_residual_matches_numpy(real):
    base, queries = real
    cfg = dict(m=16, max_iterations=6, bytes_per_vector=120, pq_iterations=4, opq_iterations=1)
    a = compress(base[:1500], AnnealingConfig(device="cpu", **cfg))
    b = compress(base[:1500], AnnealingConfig(device="torch-cpu", **cfg))
    assert a.codes.shape == b.codes.shape and a.books.rank == b.books.rank
    assert abs(a.mse(base[:1500]) - b.mse(base[:1500])) <= 0.02 * a.mse(base[:1500])
