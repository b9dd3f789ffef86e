"""wcodec.vectors: compress embedding collections by annealing (the seeds' VLC), and search them.

N x d vectors become m anchors plus one assignment per vector, found by annealing (a k-means||
start; assign to the nearest anchor, reduce robust per-anchor statistics, move anchors by a
cooling temperature; every few iterations split/merge moves accepted by energy at temperature T,
the Metropolis rule; stop on converged energy), on the CPU (numpy) or the GPU (torch).
Collections larger than memory or than one GPU: ``wcodec.vectors.stream`` (memory-mapped blocks,
pinned GPU batches, torch.distributed ranks). With a bytes-per-vector budget, residual codes (a truncated PCA/OPQ rotation + product
codebooks, tables and codes entropy coded with wcodec's rANS, plus each vector's 8-bit norm)
make the index searchable by asymmetric distances::

    from wcodec.vectors import AnnealingConfig, compress, load
    index = compress(points, AnnealingConfig(m=256, bytes_per_vector=21, device="cuda"))
    distances, ids = index.search(queries, k=10)
    index.save("emb.wcodec"); index = load("emb.wcodec")

Importing this package imports numpy only (torch and numba load when used).
"""

from .config import AnnealingConfig, InvalidPointsError
from .index import CompressedIndex, compress

__all__ = ["AnnealingConfig", "CompressedIndex", "InvalidPointsError", "compress", "load"]


def load(path) -> CompressedIndex:
    """Read a CompressedIndex saved with ``CompressedIndex.save`` (see storage.read_index)."""
    from .index import load_index
    return load_index(path)
