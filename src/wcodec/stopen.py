"""A .safetensors file behind ``wcodec.safe_open``'s interface, so that a checkpoint set mixing
both formats goes through one call. Tensors come from the safetensors library; dtypes numpy
lacks (BF16, FP8) are read by wcodec's own schema-checked parser for ``framework="np"``, as the
unsigned integers of their width (wcodec's numpy convention; safetensors raises TypeError).
"""

from __future__ import annotations

from .errors import ClosedError, InvalidInputError, TensorNotFoundError, UnsupportedError

_NP_MISSING = {"BF16", "F8_E4M3", "F8_E5M2", "F8_E4M3FNUZ", "F8_E5M2FNUZ", "F8_E8M0", "F4"}


class SafetensorsFile:
    """An open .safetensors file with :class:`wcodec.safe_open`'s methods: ``keys()`` (sorted),
    ``offset_keys()`` (file order), ``metadata()``, ``get_tensor``, ``get_tensors``,
    ``get_slice`` (safetensors' slice: ``get_shape()``, ``get_dtype()``, ``[index]``),
    ``close()`` and the ``with`` protocol. Made by ``wcodec.safe_open`` for such files.

    framework: "pt" or "np"; device: as safetensors takes it; backend: "mmap" or "pread".
    Raises the safetensors library's errors for a malformed file (as ``safetensors.safe_open``),
    MissingDependencyError without safetensors installed, TensorNotFoundError, ClosedError.
    """

    def __init__(self, filename, framework: str = "pt", device="cpu", backend: str = "mmap"):
        try:  # the compiled module itself: a shim named safetensors (name-mapping test suites) may hide the package
            from safetensors._safetensors_rust import safe_open as st_open
        except ImportError:
            st_open = None
        try:
            if st_open is None:
                from safetensors import safe_open as st_open
        except ImportError:
            from .errors import MissingDependencyError
            raise MissingDependencyError("reading .safetensors files needs the safetensors package: "
                                         "pip install safetensors") from None
        self.filename, self.device = filename, device
        self.framework = "np" if framework in ("np", "numpy") else "pt"
        if self.framework == "pt":
            from .loading import torch_device
            device = str(torch_device(device))  # DeviceError as for .wcodec files
        self._f = st_open(str(filename), framework=self.framework, device=device, backend=backend)
        self._dtypes: dict | None = None

    @property
    def closed(self) -> bool:
        return self._f is None

    def _open(self):
        if self._f is None:
            raise ClosedError("the safe_open handle is closed (used after its `with` block)")
        return self._f

    def _check(self, name: str):
        f = self._open()
        if name not in self._names():
            raise TensorNotFoundError(f"no tensor named {name!r} in {self.filename}")
        return f

    def _names(self) -> set:
        if self._dtypes is None:
            f = self._open()
            self._dtypes = {n: f.get_slice(n).get_dtype() for n in f.keys()}
        return self._dtypes

    def keys(self) -> list[str]:
        """Tensor names, sorted (as safetensors)."""
        return self._open().keys()

    def offset_keys(self) -> list[str]:
        """Tensor names in the order of their bytes in the file."""
        return self._open().offset_keys()

    def metadata(self) -> dict[str, str] | None:
        return self._open().metadata()

    def get_tensor(self, name: str, device=None):
        """One tensor (torch or numpy per ``framework``); ``device`` overrides the handle's."""
        f = self._check(name)
        if self.framework == "np" and self._names()[name] in _NP_MISSING:
            from .format.sources import read_safetensors_tensor
            return read_safetensors_tensor(self.filename, name)
        t = f.get_tensor(name)
        if device is not None and self.framework == "pt":
            from .loading import torch_device
            t = t.to(torch_device(device))
        return t

    def get_tensors(self, names=None, device=None) -> dict:
        """{name: tensor} for ``names`` (default all, sorted)."""
        return {n: self.get_tensor(n, device) for n in (self.keys() if names is None else names)}

    def get_slice(self, name: str):
        return self._check(name).get_slice(name)

    def get_strided_slice(self, name: str, dim: int, intervals):
        """As :meth:`wcodec.safe_open.get_strided_slice`, over the safetensors library's slices."""
        from .strided import strided_slice
        return strided_slice(self.get_slice(name), name, dim, intervals, self.framework)

    def record(self, name: str, verify: bool = False):
        raise UnsupportedError(f"{self.filename} is a .safetensors file: tensor {name!r} has no wcodec record")

    span = record

    def close(self) -> None:
        if self._f is not None:
            self._f.__exit__(None, None, None)
            self._f = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
