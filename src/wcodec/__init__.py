"""wcodec: compress neural-network weights with video-codec techniques, decode them on the GPU.

``import wcodec`` is light: numba, torch, triton and CUDA are imported only when used.
"""

__version__ = "0.1.0"

from .errors import ChecksumError, CorruptDataError, FormatError, UnsupportedError, WcodecError

__all__ = ["WcodecError", "CorruptDataError", "FormatError", "ChecksumError", "UnsupportedError",
           "__version__"]
