"""Kernel configurations shipped per GPU architecture, so a fresh process runs the fused kernels
without autotuning them (issue 28: Triton's tuning during generation made the first process on
a fresh machine 3.5-9x slower than a warm one).

``configs/sm90.json`` (and one file per other architecture, ``sm<major><minor>.json``) is written
on the GPU by ``tools/tune_kernels.py``: one entry per (kernel kind, M bucket, N, K) with the
tile config the autotuner chose there and the K-slice count (``split``) that timed fastest.
:func:`lookup` answers for any weight shape from the entry of the same kind and bucket whose
shape is nearest (by log-distance in N and K, within a factor MAX_RATIO on each); beyond that,
or with no file for the GPU, it answers None and the kernels autotune as before.
``WCODEC_SHIPPED_CONFIGS=0`` turns the shipped files off (for comparisons). Pure Python: no
torch or triton import here.
"""

from __future__ import annotations

import json
import math
import os
from functools import lru_cache
from pathlib import Path

#: a shipped entry serves shapes within this factor of its own N and of its own K (16: the
#: 14336x4096 entries serve a 128256-row lm_head, which would otherwise tune at every first step)
MAX_RATIO = 16.0
DIR = Path(__file__).resolve().parent / "configs"


def enabled() -> bool:
    return os.environ.get("WCODEC_SHIPPED_CONFIGS", "1") != "0"


@lru_cache(maxsize=None)
def table(arch: str) -> dict:
    """{(kind, mb): [entry, ...]} of ``configs/<arch>.json`` (arch e.g. "sm90"), {} without one.
    An entry: dict with N, K, split and config {kwargs, num_warps, num_stages}."""
    path = DIR / f"{arch}.json"
    if not path.is_file():
        return {}
    out: dict = {}
    for e in json.loads(path.read_text())["entries"]:
        out.setdefault((e["kind"], int(e["mb"])), []).append(e)
    return out


def lookup(arch: str, kind: str, mb: int, n: int, k: int) -> dict | None:
    """The shipped entry for kernel ``kind`` at M bucket ``mb`` on an [n, k] weight: the one of
    the nearest shape within MAX_RATIO on both axes, else None (also when turned off)."""
    if not enabled() or n <= 0 or k <= 0:
        return None
    best, dist = None, math.inf
    for e in table(arch).get((kind, int(mb)), ()):
        dn, dk = abs(math.log(n / e["N"])), abs(math.log(k / e["K"]))
        if max(dn, dk) <= math.log(MAX_RATIO) and dn + dk < dist:
            best, dist = e, dn + dk
    return best


def usable(entry: dict, arg_names) -> bool:
    """Whether the entry's config names only parameters the kernel has (a file from another
    version of a kernel is skipped, not launched with unknown arguments)."""
    return set(entry["config"]["kwargs"]) <= set(arg_names)


__all__ = ["lookup", "table", "usable", "enabled", "MAX_RATIO"]
