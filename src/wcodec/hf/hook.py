"""Register wcodec with transformers as soon as transformers can load models, and with peft as
soon as peft can wrap layers, without importing either (``import wcodec`` stays light: stdlib
only here).

:func:`install` (called by ``import wcodec``): if ``transformers.modeling_utils`` (where
``from_pretrained`` lives; it imports torch and the quantizer registry) is already imported,
register now; otherwise put a one-shot finder on ``sys.meta_path`` that registers right after
that module finishes importing, then removes itself. Either way the registration costs only the
import of :mod:`wcodec.hf.quantizer`, once torch and transformers are loaded anyway.
``WCODEC_NO_TRANSFORMERS=1`` turns it off; ``import wcodec.hf.quantizer`` then
``register()`` does it by hand. peft is watched the same way (:mod:`wcodec.hf.peft_hook`, on
``peft.tuners.lora.model``; the same switch turns it off).
"""

from __future__ import annotations

import importlib
import os
import sys
import warnings

TARGET = "transformers.modeling_utils"
PEFT_TARGET = "peft.tuners.lora.model"


def _registration(module: str, library: str, fallback: str):
    """A callback that imports ``wcodec.hf.<module>`` and calls its ``register()``; a failure
    is a RuntimeWarning naming ``fallback``, never an error in the user's import of ``library``."""
    def register() -> None:
        try:
            importlib.import_module(f"{__package__}.{module}").register()
        except Exception as e:  # never break the user's import of the library
            warnings.warn(f"wcodec: could not register with {library} ({type(e).__name__}: {e}); "
                          f"{fallback}", RuntimeWarning, stacklevel=2)
    return register


_register = _registration("quantizer", "transformers",
                          "load wcodec folders with wcodec.hf.WCodecModel.from_pretrained")
_register_peft = _registration("peft_hook", "peft", "build LoRA configs with wcodec.hf.lora.lora_config")


class _Loader:
    """The real loader of a watched module, calling ``on_load`` after it executed the module."""

    def __init__(self, loader, on_load):
        self._loader, self._on_load = loader, on_load

    def __getattr__(self, name):
        return getattr(self._loader, name)

    def create_module(self, spec):
        return self._loader.create_module(spec)

    def exec_module(self, module):
        self._loader.exec_module(module)
        self._on_load()


class _Finder:
    """One-shot meta-path finder for one module: finds its spec with the other finders and wraps
    the loader."""

    def __init__(self, target: str, on_load):
        self.target, self.on_load = target, on_load

    def find_spec(self, name, path, target=None):
        if name != self.target:
            return None
        if self in sys.meta_path:
            sys.meta_path.remove(self)
        for finder in sys.meta_path:
            find = getattr(finder, "find_spec", None)
            spec = find(name, path, target) if find is not None else None
            if spec is not None:
                if spec.loader is not None and hasattr(spec.loader, "exec_module"):
                    spec.loader = _Loader(spec.loader, self.on_load)
                return spec
        return None


_FINDERS = (_Finder(TARGET, _register), _Finder(PEFT_TARGET, _register_peft))


def install() -> None:
    """Register now with what is loaded, else when it is (see the module docstring)."""
    if os.environ.get("WCODEC_NO_TRANSFORMERS") == "1":
        return
    for finder in _FINDERS:
        if finder.target in sys.modules:
            finder.on_load()
        elif finder not in sys.meta_path:
            sys.meta_path.insert(0, finder)


def uninstall() -> None:
    for finder in _FINDERS:
        if finder in sys.meta_path:
            sys.meta_path.remove(finder)
