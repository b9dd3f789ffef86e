"""The seed's ``WCodecCheckpoint``: a thin, documented handle over :class:`wcodec.safe_open`."""

from __future__ import annotations

from .safeopen import safe_open


class WCodecCheckpoint:
    """A .wcodec checkpoint (file, sharded folder or index) loaded layer by layer.

    ``ckpt = wcodec.WCodecCheckpoint(path, device="cpu")``; ``ckpt.keys()``, ``name in ckpt``,
    ``len(ckpt)``, ``ckpt.load_layer(name, device="cuda")`` (or ``ckpt[name]``),
    ``ckpt.state_dict(device=...)``, ``ckpt.metadata`` (dict, empty when none was saved).
    device: as torch.load's map_location. Tensors are torch tensors (needs torch).
    Raises FormatError / CorruptDataError (bad file), TensorNotFoundError, DeviceError.
    """

    def __init__(self, path, device="cpu", verify: bool = True):
        self.path = path
        self._f = safe_open(path, framework="pt", device=device, verify=verify)
        self.device = device

    @property
    def metadata(self) -> dict:
        return self._f.metadata() or {}

    def keys(self) -> list[str]:
        return self._f.keys()

    def __contains__(self, name) -> bool:
        return name in self._f.keys()

    def __len__(self) -> int:
        return len(self._f.keys())

    def __iter__(self):
        return iter(self._f.keys())

    def load_layer(self, name: str, device=None):
        """Decode one tensor onto ``device`` (default: the checkpoint's)."""
        return self._f.get_tensor(name, device=device)

    __getitem__ = load_layer

    def state_dict(self, device=None) -> dict:
        """Every tensor, decoded in parallel (GPU: one batched decoder); tied names share one tensor."""
        return self._f.get_tensors(device=device)

    def close(self) -> None:
        self._f.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
