"""Exceptions raised by wcodec.

Every problem with input data (a corrupt, truncated or foreign file, a malformed record, an
unsupported tensor) raises a subclass of :class:`WcodecError`, so that callers can catch one type.
"""


class WcodecError(Exception):
    """Base class of every error wcodec raises on bad input."""


class CorruptDataError(WcodecError):
    """Compressed data fails validation: bad offsets, sizes, tables or checksums."""


class FormatError(WcodecError):
    """The file is not a .wcodec container, or uses a format version this reader does not know."""


class ChecksumError(CorruptDataError):
    """A checksum of compressed bytes or of decoded bytes does not match."""


class UnsupportedError(WcodecError):
    """The input (dtype, shape, codec id, option) is valid but not supported here."""


class InvalidInputError(WcodecError, ValueError, TypeError):
    """An argument is not what the API takes (a non-tensor value, metadata that is not a
    str -> str dict, an unknown framework). A ValueError as in safetensors, and a TypeError for
    callers of earlier wcodec versions."""


class ClosedError(WcodecError, ValueError):
    """A ``safe_open`` handle (or a slice of it) was used after it was closed."""


class TensorNotFoundError(WcodecError, KeyError):
    """No tensor of that name in the checkpoint."""

    def __str__(self) -> str:  # KeyError would repr() the message
        return str(self.args[0]) if self.args else ""


class DeviceError(WcodecError, RuntimeError):
    """The device asked for is not available (e.g. CUDA with a CPU-only torch or no GPU)."""


class MissingDependencyError(WcodecError, ImportError):
    """An optional dependency is not installed; the message names the extra to install."""


class SharedTensorsError(WcodecError, RuntimeError):
    """Tensors share memory in a way that cannot be stored once (safetensors raises
    RuntimeError for it): none of them covers the whole shared storage."""
