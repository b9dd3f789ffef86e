"""The seed's ``GPUDecoder(use_gpu=True).decode_layer(...)``: a thin, documented front for the
batched Triton decoder (:func:`wcodec.gpu.decode_records`) with the CPU decoder beside it."""

from __future__ import annotations


class GPUDecoder:
    """Decode encoded layers to torch tensors, on the GPU (Triton) or the CPU.

    Args:
        use_gpu: decode with the Triton kernels on ``device`` (default "cuda"). When CUDA is
            absent this raises DeviceError unless ``fallback=True`` (then the CPU decoder runs and
            ``self.use_gpu`` is False). use_gpu=False: the CPU (numba) decoder.
        device: where tensors go (default "cuda" with use_gpu, else "cpu"). Under
            TRITON_INTERPRET=1 ``use_gpu=True, device="cpu"`` runs the kernels in the interpreter.
    Raises: DeviceError, MissingDependencyError (no torch / triton).
    """

    def __init__(self, use_gpu: bool = True, device=None, fallback: bool = False):
        from ..api import torch_device
        from ..errors import DeviceError, MissingDependencyError
        from . import triton_available
        self.use_gpu = bool(use_gpu)
        if self.use_gpu and not triton_available():
            raise MissingDependencyError("the GPU decoder needs triton: pip install 'wcodec[gpu]'")
        try:
            self.device = torch_device(device if device is not None else ("cuda" if use_gpu else "cpu"))
        except DeviceError:
            if not fallback:
                raise
            self.use_gpu, self.device = False, torch_device("cpu")

    def decode_layers(self, items) -> dict:
        """items: [(name, EncodedTensor)] -> {name: torch.Tensor on self.device}, one batch."""
        items = list(items)
        if self.use_gpu:
            from .decode import decode_records
            return decode_records(items, self.device)
        from .loader import _cpu_fallback
        return _cpu_fallback(items, self.device)

    def decode_layer(self, record, name: str = "layer"):
        """One EncodedTensor (e.g. ``safe_open(path).record(name)``) -> torch.Tensor of its dtype
        and shape on ``self.device``. Raises CorruptDataError naming ``name``."""
        return self.decode_layers([(name, record)])[name]
