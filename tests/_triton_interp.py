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
    interp._wcodec_tests_wrapped = True
    return True
