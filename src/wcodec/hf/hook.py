"""Register wcodec with transformers as soon as transformers can load models, without importing
it (``import wcodec`` stays light: stdlib only here).

:func:`install` (called by ``import wcodec``): if ``transformers.modeling_utils`` (where
``from_pretrained`` lives; it imports torch and the quantizer registry) is already imported,
register now; otherwise put a one-shot finder on ``sys.meta_path`` that registers right after
that module finishes importing, then removes itself. Either way the registration costs only the
import of :mod:`wcodec.hf.quantizer`, once torch and transformers are loaded anyway.
``WCODEC_NO_TRANSFORMERS=1`` turns it off; ``import wcodec.hf.quantizer`` then
``register()`` does it by hand.
"""

from __future__ import annotations

import os
import sys
import warnings

TARGET = "transformers.modeling_utils"


def _register() -> None:
    try:
        from .quantizer import register

        register()
    except Exception as e:  # never break the user's import of transformers
        warnings.warn(f"wcodec: could not register with transformers ({type(e).__name__}: {e}); "
                      f"load wcodec folders with wcodec.hf.WCodecModel.from_pretrained", RuntimeWarning, stacklevel=2)


class _Loader:
    """The real loader of TARGET, registering after it executed the module."""

    def __init__(self, loader):
        self._loader = loader

    def __getattr__(self, name):
        return getattr(self._loader, name)

    def create_module(self, spec):
        return self._loader.create_module(spec)

    def exec_module(self, module):
        self._loader.exec_module(module)
        _register()


class _Finder:
    """One-shot meta-path finder for TARGET: finds its spec with the other finders and wraps the loader."""

    def find_spec(self, name, path, target=None):
        if name != TARGET:
            return None
        uninstall()
        for finder in sys.meta_path:
            find = getattr(finder, "find_spec", None)
            spec = find(name, path, target) if find is not None else None
            if spec is not None:
                if spec.loader is not None and hasattr(spec.loader, "exec_module"):
                    spec.loader = _Loader(spec.loader)
                return spec
        return None


_FINDER = _Finder()


def install() -> None:
    """Register now if transformers is loaded, else when it is (see the module docstring)."""
    if os.environ.get("WCODEC_NO_TRANSFORMERS") == "1":
        return
    if TARGET in sys.modules:
        _register()
    elif _FINDER not in sys.meta_path:
        sys.meta_path.insert(0, _FINDER)


def uninstall() -> None:
    if _FINDER in sys.meta_path:
        sys.meta_path.remove(_FINDER)
