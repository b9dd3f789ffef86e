"""wcodec: compress neural-network weights with video-codec techniques, decode them on the GPU.

``import wcodec`` is light: numba, torch, triton and CUDA are imported only when used. The API
(``save_file``, ``load_file``, ``safe_open``, ...) is loaded on first attribute access.
"""

__version__ = "0.1.0"

from .errors import ChecksumError, CorruptDataError, FormatError, UnsupportedError, WcodecError
from .errors import ClosedError, DeviceError, InvalidInputError, MissingDependencyError, TensorNotFoundError
from .errors import NoDataError, NotFoundError, SharedTensorsError, SliceIndexError

# name -> module holding it; imported on first access (PEP 562) to keep `import wcodec` light
_LAZY = {
    "save_file": "wcodec.api", "load_file": "wcodec.api", "safe_open": "wcodec.api",
    "encode_safetensors_to_wcodec": "wcodec.api", "load_wcodec_checkpoint": "wcodec.api",
    "decode_to_safetensors": "wcodec.api", "decode_to_folder": "wcodec.api",
    "Reader": "wcodec.format", "Writer": "wcodec.format", "CheckpointReader": "wcodec.format",
    "save": "wcodec.api", "load": "wcodec.api", "WCodecCheckpoint": "wcodec.seeds",
    # safetensors' low-level names (its top-level module has them too)
    "TensorSpec": "wcodec.rawspec", "serialize": "wcodec.rawspec", "serialize_file": "wcodec.rawspec",
    "_safe_open_handle": "wcodec.safeopen",
}
_SUBMODULES = ("api", "numpy", "format", "codecs", "rans", "cli", "torch", "gpu")

__all__ = ["WcodecError", "CorruptDataError", "FormatError", "ChecksumError", "UnsupportedError",
           "InvalidInputError", "ClosedError", "TensorNotFoundError", "DeviceError", "MissingDependencyError",
           "SharedTensorsError", "NotFoundError", "NoDataError", "SliceIndexError",
           "__version__", *(k for k in _LAZY if not k.startswith("_"))]


def __getattr__(name):
    import importlib

    if name in _LAZY:
        value = getattr(importlib.import_module(_LAZY[name]), name)
    elif name in _SUBMODULES:
        value = importlib.import_module(f"wcodec.{name}")
    else:
        raise AttributeError(f"module 'wcodec' has no attribute {name!r}")
    globals()[name] = value
    return value


def __dir__():
    return sorted(set(globals()) | set(_LAZY) | set(_SUBMODULES))

# transformers loads wcodec folders (quant_method "wcodec") once it is imported: see wcodec.hf.hook
from .hf.hook import install as _install_hf_hook  # noqa: E402

_install_hf_hook()
