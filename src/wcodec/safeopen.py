"""``safe_open``: lazy per-tensor access with safetensors' names and semantics, and partial reads.

``with wcodec.safe_open(path, framework="pt", device="cpu") as f:`` then ``f.keys()``,
``f.metadata()`` (None when none was saved), ``f.get_tensor(name)``, ``f.get_tensors()``,
``f.get_slice(name)[rows, ...]``. A slice decodes only the rANS chunks (int8: tile rows) holding
the rows of dim 0 it touches (:mod:`wcodec.codecs.partial`); the rest of the index is applied
with numpy semantics. Using the handle or a slice after the ``with`` block raises ClosedError.
"""

from __future__ import annotations

import numpy as np

from .errors import ClosedError, InvalidInputError, SliceIndexError, TensorNotFoundError
from .format import CheckpointReader
from .loading import apply_post, check_backend, is_safetensors, load_tensors, open_checkpoint, placement, to_torch
from .strided import strided_slice

FRAMEWORKS = ("pt", "torch", "np", "numpy")


class safe_open:  # noqa: N801  (the safetensors name)
    """An open .wcodec checkpoint (file, sharded folder or index); nothing is decoded until asked.
    A .safetensors file opens too (a :class:`wcodec.stopen.SafetensorsFile`, the same methods
    through the safetensors library), so checkpoints of both formats go through one call.

    Args:
        filename: the checkpoint. framework: "pt" (torch tensors) or "np" (numpy arrays, BF16 /
            FP8 as unsigned bits). device: where torch tensors go (see ``wcodec.api.placement``:
            str, int, torch.device, map_location dict or callable). verify: check checksums.
        backend: "mmap" or "pread" as safetensors takes it (a .wcodec file is read alike).
    Raises: NotFoundError (a FileNotFoundError), FormatError / CorruptDataError (bad file),
        InvalidInputError (framework, backend),
        DeviceError (device absent), MissingDependencyError (framework "pt" without torch).
    Extra (not in safetensors): ``record(name)`` (the EncodedTensor, zero-copy sections) and
    ``span(name)`` (its byte range in the file).
    """

    def __new__(cls, filename, framework: str = "pt", device="cpu", verify: bool = True, backend: str = "mmap"):
        if framework not in FRAMEWORKS:
            raise InvalidInputError(f"framework must be one of {FRAMEWORKS}, got {framework!r}")
        check_backend(backend)
        if cls is safe_open and is_safetensors(filename):
            from .stopen import SafetensorsFile
            return SafetensorsFile(filename, framework, device, backend)
        return super().__new__(cls)

    def __init__(self, filename, framework: str = "pt", device="cpu", verify: bool = True, backend: str = "mmap"):
        if framework in ("pt", "torch"):
            placement(device)  # fail now, not on the first tensor
        elif str(device) != "cpu":
            raise InvalidInputError("framework='np' only loads to device='cpu'")
        self._reader = open_checkpoint(filename)
        self.framework, self.device, self.verify = framework, device, verify
        self._verified: set = set()  # tensors whose section checksums a slice already checked

    # -- state -------------------------------------------------------------------------------
    @property
    def closed(self) -> bool:
        return self._reader is None

    def _open(self) -> CheckpointReader:
        if self._reader is None:
            raise ClosedError("the safe_open handle is closed (used after its `with` block)")
        return self._reader

    def _check_name(self, name: str) -> CheckpointReader:
        r = self._open()
        if name not in r:
            raise TensorNotFoundError(f"no tensor named {name!r} in {r.path.name}")
        return r

    # -- safetensors API ---------------------------------------------------------------------
    def keys(self) -> list[str]:
        """Tensor names, sorted as safetensors sorts them (aliases of tied weights included)."""
        return sorted(self._open().keys())

    def offset_keys(self) -> list[str]:
        """Tensor names in file order (as safetensors' ``offset_keys``)."""
        return self._open().keys()

    def metadata(self) -> dict[str, str] | None:
        """The str -> str metadata saved with the tensors, or None when none was saved."""
        from .restore import user_metadata
        return user_metadata(self._open().metadata()) or None

    def get_tensor(self, name: str, device=None, out=None):
        """Decode one tensor (torch or numpy per ``framework``) onto ``device`` (default: the
        handle's). Raises TensorNotFoundError, ClosedError, CorruptDataError naming the tensor.

        out (wcodec extra): a CPU destination to decode straight into, with no full-size copy:
        a numpy array, or a contiguous CPU torch tensor (pinned memory for a GPU upload, a
        model's parameter storage), of the tensor's shape (or flat) and width (bf16 may be given
        as int16/uint16 or torch.bfloat16), or bytes. Returns ``out`` itself. Raises
        InvalidInputError (before writing) for an ``out`` of the wrong dtype, shape, layout or
        device; on corrupt data ``out`` may be partly written.
        """
        r = self._check_name(name)
        if out is not None:
            if device is not None and str(device) != "cpu":
                raise InvalidInputError("get_tensor(out=...) decodes on the CPU: device must be 'cpu'")
            r.get_numpy(r.alias_of(name) or name, verify=self.verify, out=numpy_view(out))
            return out
        return load_tensors(r, [name], self.device if device is None else device, self.framework, self.verify)[name]

    def get_tensors(self, names=None, device=None) -> dict:
        """{name: tensor} for ``names`` (default all), decoded in parallel; tied names share one tensor."""
        r = self._open()
        names = self.keys() if names is None else list(names)
        for n in names:
            self._check_name(n)
        return load_tensors(r, names, self.device if device is None else device, self.framework, self.verify)

    def get_slice(self, name: str) -> "Slice":
        """A lazy view of one tensor: ``get_shape()``, ``get_dtype()``, and ``[index]``."""
        self._check_name(name)
        return Slice(self, name)

    def get_strided_slice(self, name: str, dim: int, intervals):
        """safetensors' ``get_strided_slice``: the [a, b) ranges of ``intervals`` along ``dim``,
        concatenated in the order given (overlaps repeat), equal to ``cat([t[..., a:b, ...] for
        a, b in intervals], dim)``. Each piece decodes only the rows of dim 0 it touches.
        Raises TensorNotFoundError, InvalidInputError (a dim out of range, no intervals, an
        empty, reversed or out-of-range interval), ClosedError."""
        return strided_slice(self.get_slice(name), name, dim, intervals, self.framework)

    # -- wcodec extras -----------------------------------------------------------------------
    def record(self, name: str, verify: bool = False):
        return self._check_name(name).record(name, verify=verify)

    def span(self, name: str) -> tuple[int, int]:
        return self._check_name(name).span(name)

    def close(self) -> None:
        if self._reader is not None:
            self._reader.close()
            self._reader = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def _is_int(i) -> bool:
    return isinstance(i, (int, np.integer)) and not isinstance(i, bool)


def _check_int_indices(idx: tuple, shape: tuple) -> None:
    """SliceIndexError for an int index out of its dim's range, worded as safetensors 0.8.0
    words it (a negative one: "Invalid index -6 for dimension 1 of size 5"; a positive one:
    "Error during slicing [2:, 20] with shape [10, 5]: index 20 out of bounds for tensor
    dimension #1 of size 5"). Only for plain int / slice / Ellipsis indices, as safetensors
    takes them; numpy's other index kinds are left to numpy."""
    if any(not (_is_int(i) or isinstance(i, slice) or i is Ellipsis) for i in idx) or idx.count(Ellipsis) > 1:
        return
    dims = []  # (dim, index) after the Ellipsis is expanded, as safetensors shows them
    for i in idx:
        if i is Ellipsis:
            dims += [(len(dims) + k, slice(None)) for k in range(max(len(shape) - len(idx) + 1, 0))]
        else:
            dims.append((len(dims), i))
    bad = next(((k, int(i)) for k, i in dims if _is_int(i) and k < len(shape) and not -shape[k] <= i < shape[k]), None)
    if bad is None:
        return
    k, i = bad
    if i < 0:
        raise SliceIndexError(f"Invalid index {i} for dimension {k} of size {shape[k]}")

    def show(k, i):
        if not isinstance(i, slice):
            return str(int(i) % shape[k] if int(i) < 0 else int(i))
        text = f"{'' if i.start is None else i.start}:{'' if i.stop is None else i.stop}"
        return text if i.step in (None, 1) else f"{text}:{i.step}"
    shown = ", ".join(show(k2, i2) for k2, i2 in dims)
    raise SliceIndexError(f"Error during slicing [{shown}] with shape {list(shape)}: index {i} out of bounds "
                          f"for tensor dimension #{k} of size {shape[k]}")


def _rows_of(first, n0: int):
    """(r0, r1, index of dim 0 relative to r0) for a dim-0 index; (0, n0, first) when the
    index is not a plain int or slice."""
    if isinstance(first, (int, np.integer)) and not isinstance(first, bool):
        i = int(first) % n0  # in range: _check_int_indices ran first
        return i, i + 1, 0
    if isinstance(first, slice):
        r = range(*first.indices(n0))
        if len(r) == 0:
            return 0, 0, slice(0, 0)
        lo, hi = min(r[0], r[-1]), max(r[0], r[-1]) + 1
        stop = r.stop - lo
        return lo, hi, slice(r.start - lo, stop if stop >= 0 else None, r.step)
    return 0, n0, first


class Slice:
    """A tensor of an open checkpoint, indexed lazily (safetensors' ``PySafeSlice``).

    ``s[i]``, ``s[a:b]``, ``s[a:b, ...]``: decodes only the chunks of the rows of dim 0 that the
    index touches; other dims (and fancy indices) are applied with numpy semantics on those
    rows. Section checksums (of the whole tensor's compressed bytes) are checked on the handle's
    first slice of a tensor when it verifies; the decoded-tensor checksum covers the whole
    tensor, so it is not checked on a partial read.
    """

    def __init__(self, handle: safe_open, name: str):
        self._h, self.name = handle, name
        e = handle._open().entry(name)
        self.shape, self.dtype = tuple(e["shape"]), e["dtype"]

    def get_shape(self) -> list[int]:
        return list(self.shape)

    def get_dtype(self) -> str:
        return self.dtype

    def __len__(self) -> int:
        if not self.shape:
            raise TypeError("len() of a 0-d tensor")
        return self.shape[0]

    def __getitem__(self, index):
        from .codecs.partial import decode_range
        r = self._h._open()
        idx = index if isinstance(index, tuple) else (index,)
        _check_int_indices(idx, self.shape)
        if not self.shape:
            r0, r1, first, rest = 0, 1, None, idx
        else:
            r0, r1, first = _rows_of(idx[0], self.shape[0]) if idx else (0, self.shape[0], slice(None))
            rest = idx[1:]
        if len([i for i in idx if i is not None and i is not Ellipsis]) > len(self.shape):
            raise SliceIndexError(f"tensor '{self.name}': too many indices for tensor of dimension {len(self.shape)}")
        inner = int(np.prod(self.shape[1:], dtype=np.int64))
        # section checksums cover whole sections: checked on this handle's first slice of the tensor
        # zero-copy views of the mapping (file size checked first): a partial decode touches only
        # the chunks it needs; a pread copy of the whole span made a 1-row slice 66x slower.
        # A truncation racing this one decode call can still raise SIGBUS (docs/FORMAT.md)
        rec = r.record(self.name, verify=self._h.verify and self.name not in self._h._verified, copy=False)
        self._h._verified.add(self.name)
        flat = decode_range(rec, r0 * inner, r1 * inner, self.name)
        if not self.shape:
            arr = flat.reshape(())[rest] if rest else flat.reshape(())
        else:
            try:
                arr = flat.reshape((r1 - r0,) + self.shape[1:])[(first,) + rest]
            except IndexError as e:  # other dims, too many indices: IndexError as safetensors, ours
                raise SliceIndexError(f"tensor '{self.name}': {e}") from None
        arr = np.asarray(arr)
        arr = np.ascontiguousarray(arr).reshape(arr.shape)  # (ascontiguousarray makes 0-d 1-d)
        if self._h.framework in ("np", "numpy"):
            return arr
        dev, post = placement(self._h.device)
        t = to_torch(arr, self.dtype)
        return t.to(dev) if post is None else apply_post(post, t)


def numpy_view(out):
    """A numpy array sharing ``out``'s memory: ``out`` itself for numpy, ``.numpy()`` of a
    contiguous CPU torch tensor (dtypes numpy lacks, such as bfloat16 or float8, as the unsigned
    integers of their width). Raises InvalidInputError for other objects, other devices and
    non-contiguous tensors."""
    if isinstance(out, np.ndarray):
        return out
    import sys

    torch = sys.modules.get("torch")
    if torch is None or not isinstance(out, torch.Tensor):
        raise InvalidInputError(f"out must be a numpy array or a torch tensor, got {type(out).__name__}")
    if out.device.type != "cpu":
        raise InvalidInputError(f"out must be in CPU memory (pinned for a GPU upload), got {out.device}")
    if not out.is_contiguous():
        raise InvalidInputError("out must be a contiguous torch tensor")
    t = out.detach()
    try:
        return t.numpy()
    except TypeError:  # no numpy dtype: same-width integers
        ints = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}
        return t.view(ints[t.element_size()]).numpy()


class _HandleFile:
    """What :func:`_safe_open_handle` returns: the safe_open of a temporary copy, removed on close."""

    def __init__(self, handle, tmp):
        self._handle, self._tmp = handle, tmp

    def __getattr__(self, name):
        return getattr(self._handle, name)

    def close(self) -> None:
        self._handle.close()
        self._tmp.cleanup()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def _safe_open_handle(f, framework: str = "pt", device="cpu", backend: str = "mmap"):
    """safetensors' ``_safe_open_handle``: safe_open over an open file object (a local file in
    text or binary mode, an fsspec file) holding a .wcodec or .safetensors file. Its bytes are
    copied once into a temporary file (removed when the handle closes); the object's position
    is left where it was. Returns a handle with safe_open's methods, for a ``with`` block.
    Raises InvalidInputError (an object without binary read/seek), and what safe_open raises."""
    import os
    import tempfile
    from pathlib import Path

    src = getattr(f, "buffer", f)  # a text-mode file reads bytes through its buffer
    try:
        pos = src.tell()
        src.seek(0)
        data = src.read()
        src.seek(pos)
    except (AttributeError, OSError, ValueError) as e:
        raise InvalidInputError(f"_safe_open_handle needs a readable, seekable file object, got "
                                f"{type(f).__name__} ({e})") from None
    if not isinstance(data, (bytes, bytearray, memoryview)):
        raise InvalidInputError(f"_safe_open_handle: {type(f).__name__}.read() gave {type(data).__name__}, not bytes")
    tmp = tempfile.TemporaryDirectory(prefix="wcodec-handle-")
    try:
        path = Path(tmp.name) / "checkpoint"
        path.write_bytes(data)
        return _HandleFile(safe_open(os.fspath(path), framework, device, backend=backend), tmp)
    except BaseException:
        tmp.cleanup()
        raise
