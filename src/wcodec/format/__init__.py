"""The .wcodec container: spec constants, streaming writer, validating reader, shards, inputs.

Normative description: docs/FORMAT.md. This package imports only the stdlib and numpy; codecs
(numba) are imported when a tensor is encoded or decoded.
"""

from .encode import Item, encode_into
from .reader import Reader
from .sharded import CheckpointReader, ShardedWriter, find_checkpoint
from .spec import ALIGN, FORMAT_VERSION, MAGIC
from .writer import Writer

__all__ = ["Reader", "Writer", "ShardedWriter", "CheckpointReader", "find_checkpoint", "Item",
           "encode_into", "FORMAT_VERSION", "MAGIC", "ALIGN"]
