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
