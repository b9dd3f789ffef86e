"""Triton's interpreter (TRITON_INTERPRET=1) without its redundant re-patching, for the tests.

Inside a kernel, every call of a ``@triton.jit`` helper re-patches ``triton.language`` through
``interpreter._patch_lang`` (an ``inspect.getmembers`` walk of four modules, ~1 ms) although the
kernel's own launch already patched those modules and keeps them patched until it returns. That
re-patching is a third of the interpreter's time in tests/gpu (cProfile of
test_pair_two_chunks_per_warp, triton 3.9). Here a helper's call skips it when the running
kernel already patched every language module the helper sees; any other call patches as before.
What the kernels compute is unchanged: the same patched functions are in place either way.
"""

from __future__ import annotations

import importlib.abc
import sys

_covered: list[set] = []  # per running kernel: ids of the language modules its launch patched


def install() -> bool:
    """Wrap the interpreter once it is imported; True when it is (or already was) wrapped.

    Leaves a Triton without the internals named here as it is (returns False)."""
    interp = sys.modules.get("triton.runtime.interpreter")
    if interp is None:
        return False
    if getattr(interp, "_wcodec_tests_wrapped", False):
        return True
    if not all(hasattr(interp, n) for n in ("_patch_lang", "_LangPatchScope", "GridExecutor", "tl")):
        return False
    tl, patch_lang, grid_call = interp.tl, interp._patch_lang, interp.GridExecutor.__call__

    def langs_of(fn) -> set:
        return {id(v) for v in fn.__globals__.values() if v is tl or v is tl.core}

    def patch_once(fn):
        langs = langs_of(fn)
        if _covered and _covered[-1] is not None and langs <= _covered[-1]:
            return interp._LangPatchScope()  # already patched by the running kernel: nothing to undo
        scope = patch_lang(fn)
        if _covered:  # the launch's own patch, or a helper's (never undone before the launch ends)
            _covered[-1] = langs if _covered[-1] is None else _covered[-1] | langs
        return scope

    def launch(self, *args, **kwargs):
        _covered.append(None)  # the launch's first _patch_lang call is its own
        try:
            return grid_call(self, *args, **kwargs)
        finally:
            _covered.pop()

    interp._patch_lang = patch_once
    interp.GridExecutor.__call__ = launch
    _index_from_one_element(interp)
    interp._wcodec_tests_wrapped = True
    return True


def _index_from_one_element(interp) -> None:
    """Triton 3.6's interpreter turns a scalar tensor into a Python int by ``int(data)``, which
    NumPy 2.4 refuses for its one-element 1-D arrays (``range(0, G)`` over a kernel argument:
    "only 0-dimensional arrays can be converted to Python scalars"); Triton 3.9 squeezes first.
    Set that after the interpreter's own patch (restored with it); no change where it squeezes."""
    patch_tensor = getattr(interp, "_patch_lang_tensor", None)
    if patch_tensor is None:
        return

    def patch_lang_tensor(tensor, scope):
        patch_tensor(tensor, scope)
        scope.set_attr(tensor, "__index__", lambda self: int(self.handle.data.squeeze()))

    interp._patch_lang_tensor = patch_lang_tensor


class _ThenInstall(importlib.abc.Loader):
    """The interpreter's own loader, then ``install()``; anything else asked goes to that loader."""

    def __init__(self, loader):
        self._loader = loader

    def __getattr__(self, name):
        return getattr(self._loader, name)

    def create_module(self, spec):
        return self._loader.create_module(spec)

    def exec_module(self, module):
        self._loader.exec_module(module)
        install()


class _InstallOnImport(importlib.abc.MetaPathFinder):
    """Wraps the interpreter as soon as anything imports it: tests that import triton inside
    their body (tests/hf/test_hf_llama.py) otherwise launch before pytest_runtest_setup saw it."""

    def find_spec(self, fullname, path, target=None):
        if fullname != "triton.runtime.interpreter":
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(fullname, path, target)
            if spec is not None and spec.loader is not None and hasattr(spec.loader, "exec_module"):
                spec.loader = _ThenInstall(spec.loader)
                return spec
        return None


def install_on_import() -> None:
    """Wrap the interpreter now if it is imported, else the moment it is (idempotent)."""
    if install() or any(isinstance(f, _InstallOnImport) for f in sys.meta_path):
        return
    sys.meta_path.insert(0, _InstallOnImport())
