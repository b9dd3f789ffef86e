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


class NotFoundError(WcodecError, FileNotFoundError):
    """A file or folder the caller named does not exist (a checkpoint to read, the folder to
    write into, a model folder without weights). A FileNotFoundError as Python raises it, and a
    WcodecError so that one ``except`` catches every input problem."""

    def __init__(self, path, what: str = "file", message: str | None = None):
        import errno

        super().__init__(errno.ENOENT, message or f"{what} '{path}' does not exist", str(path))
        self.what, self.message = what, message

    def __reduce__(self):
        return type(self), (self.filename, self.what, self.message)

    def __str__(self) -> str:  # without OSError's "[Errno 2]" prefix
        return self.strerror


class NoDataError(UnsupportedError, NotImplementedError):
    """A tensor without data (a torch meta tensor) was given to be stored; a
    NotImplementedError (so a RuntimeError) as safetensors and torch raise it."""


class SliceIndexError(WcodecError, IndexError):
    """A ``get_slice`` index out of the tensor's bounds (an IndexError, as safetensors raises)."""
