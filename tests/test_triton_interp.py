"""tests/_triton_interp.py: a kernel's jit helpers no longer re-patch triton.language, the
kernel computes what it did, and the language is restored after the launch."""

from __future__ import annotations

import inspect
import os

import pytest

torch = pytest.importorskip("torch")
triton = pytest.importorskip("triton")
if os.environ.get("TRITON_INTERPRET") != "1":
    pytest.skip("the kernels run compiled here (TRITON_INTERPRET is not 1)", allow_module_level=True)

import triton.language as tl  # noqa: E402

import _triton_interp  # noqa: E402


@triton.jit
def _twice(x):
    return x * 2


@triton.jit
def _kernel(X, Y, N: tl.constexpr, CALLS: tl.constexpr):
    i = tl.arange(0, N)
    x = tl.load(X + i)
    for _ in tl.static_range(CALLS):
        x = _twice(x)
    tl.store(Y + i, x + 1)


def _launch(calls: int, monkeypatch) -> tuple[torch.Tensor, int]:
    """(output, inspect.getmembers calls: the cost of patching the language) of one launch."""
    count = [0]
    real = inspect.getmembers

    def counting(*a, **k):
        count[0] += 1
        return real(*a, **k)

    x = torch.arange(16, dtype=torch.int32)
    y = torch.empty_like(x)
    with monkeypatch.context() as m:
        m.setattr(inspect, "getmembers", counting)
        _kernel[(1,)](x, y, 16, calls)
    return y, count[0]


def test_helpers_skip_the_repatch_and_compute_the_same(monkeypatch):
    assert _triton_interp.install()
    load = tl.load
    one, patches_one = _launch(1, monkeypatch)
    eight, patches_eight = _launch(8, monkeypatch)
    x = torch.arange(16, dtype=torch.int32)
    assert torch.equal(one, 2 * x + 1) and torch.equal(eight, 256 * x + 1)
    assert patches_one > 0 and patches_eight == patches_one  # the launch's own patch only
    assert tl.load is load  # restored when the launch returned
    assert not _triton_interp._covered


def test_wrapped_when_first_imported_inside_a_test():
    """conftest's import hook wraps the interpreter the moment it is imported, also when that is
    inside a test body (after pytest_runtest_setup), as tests/hf/test_hf_llama.py does."""
    import subprocess
    import sys
    from pathlib import Path

    code = ("import sys, _triton_interp\n"
            "_triton_interp.install_on_import()\n"
            "assert 'triton.runtime.interpreter' not in sys.modules\n"
            "import triton.runtime.interpreter as interp\n"
            "print(getattr(interp, '_wcodec_tests_wrapped', False), interp.__loader__.get_source is not None)\n")
    env = {**os.environ, "TRITON_INTERPRET": "1", "PYTHONPATH": str(Path(__file__).parent)}
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)
    assert r.returncode == 0, r.stderr[-2000:]
    assert r.stdout.split() == ["True", "True"]
