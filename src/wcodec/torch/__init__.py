"""torch integration: tensors from decoded records, and weights kept compressed that decode just
in time (forward pre-hooks sharing one scratch buffer).

Imported only on use (``import wcodec`` never imports torch). Entry points:

- :class:`CompressedWeights` (``wcodec.torch.jit``): Linear / Embedding weights kept as encoded
  records on a device, each decoded into a shared scratch buffer just before its module runs.
- :func:`from_numpy`, :func:`torch_dtype` (``wcodec.torch.tensors``).
"""

from __future__ import annotations

from .jit import CompressedWeights
from .tensors import from_numpy, torch_dtype

__all__ = ["CompressedWeights", "from_numpy", "torch_dtype"]
