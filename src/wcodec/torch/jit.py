"""Weights kept compressed, decoded just in time into one scratch buffer shared by all modules.

Each registered weight stays as its encoded record (the container's sections) on the target
device, or in pinned CPU memory with ``offload=True``. A forward pre-hook decodes it into a
scratch buffer sized for the largest weight, just before the module runs; the module's weight
is a permanent view of that buffer, so the module's own forward (nn.Linear, nn.Embedding, or any
module using ``self.weight``) runs unchanged. Peak memory = compressed weights + one scratch
buffer (+ a second one when the model dtype differs from the stored dtype).

Decoders: the Triton kernels of ``wcodec.gpu`` on CUDA (one launch per weight, asynchronous on
the current stream, status checked at each weight's first decode only), the numba CPU codecs
on the CPU. The weights are frozen. Autograd must not keep a scratch view for a backward pass (the
next module overwrites it): an attached nn.Linear runs :class:`_JitLinear`, which saves nothing of
the weight and decodes it again in the backward for the input gradient (LoRA adapters on a
compressed base: memory stays compressed weights + one scratch, at one more decode per layer).

A module's weight is a :class:`JitWeight` over its scratch view: model code that reads a weight
without calling its module (``position_embedding.weight``, nn.MultiheadAttention's
``out_proj.weight``) gets that weight decoded, and never a view of the scratch that the next
decode overwrites.

The scratch never leaves as a weight: ``state_dict()`` decodes each weight into a new tensor
(transient memory: that weight's dense size, for every weight in the dict; peft's adapter
``save_pretrained`` calls it as well), ``load_state_dict`` refuses values other than the stored
ones, and :meth:`CompressedWeights.release` gives a module its own decoded weight (LoRA merge).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F

from .tensors import linear_as_parameter, torch_dtype

_ALIGN = 256  # the GPU decoder places outputs at 256-byte aligned offsets


def _align(n: int) -> int:
    return -(-n // _ALIGN) * _ALIGN


class _NumbaDecoder:
    """CPU decode with the numba codecs. The record's sections stay where they are (a
    read-only memory map of the file or a copy), so the CPU keeps only the compressed bytes."""

    work_nbytes = 0

    def __init__(self, name: str, record):
        self.name, self.record = name, record
        self.nbytes = record.nbytes

    def decode_into(self, out: torch.Tensor, work: torch.Tensor | None) -> None:
        """Write the decoded tensor's bytes (stored dtype) at the start of out (uint8)."""
        from ..codecs import decode_tensor

        n = self.record.raw_nbytes
        if out.device.type == "cpu" and out.is_contiguous():  # straight into it, no copy
            decode_tensor(self.record, self.name, out=out[:n].numpy())
            return
        arr = np.ascontiguousarray(decode_tensor(self.record, self.name)).reshape(-1)
        out[:arr.nbytes].copy_(torch.from_numpy(arr.view(np.uint8)))


class _TritonDecoder:
    """GPU decode of one record with wcodec.gpu.decode: plan, device tables and the uploaded
    sections are built once; each decode is one asynchronous launch on the current stream."""

    def __init__(self, name: str, record, device: torch.device, offload: bool):
        from ..gpu import decode as D

        self._D = D
        self.plan = D.build_plan([(name, record)])
        # the kernels write byte planes (int8 residuals, F32 low bytes) to scratch after the
        # uploaded bytes: such records, and offloaded ones, decode from a shared work buffer
        self.needs_work = offload or self.plan.scratch_nbytes > 0
        n = self.plan.upload_nbytes if self.needs_work else self.plan.buf_nbytes
        pin = offload and device.type == "cuda"
        host = torch.zeros(max(n, 1), dtype=torch.uint8, pin_memory=pin)
        D.fill_host(self.plan, host.numpy())
        self.data = host if offload else host.to(device)
        self.prep = D.Prepared(self.plan, device)
        self.work_nbytes = self.plan.buf_nbytes if self.needs_work else 0
        self.nbytes = int(self.data.numel()) + sum(
            int(t.numel() * t.element_size()) for t in [self.prep.lut, *self.prep.desc.values()])
        self.checked = False

    def decode_into(self, out: torch.Tensor, work: torch.Tensor | None) -> None:
        buf = self.data
        if self.needs_work:
            buf = work[:self.work_nbytes]
            buf[:self.data.numel()].copy_(self.data, non_blocking=True)
        status = self._D.run(self.prep, buf, out)
        if not self.checked:  # one synchronisation per weight, at its first use
            self._D.check(self.plan, status)
            self.checked = True


class _FixedDecoder:
    """GPU decode of a codec "fixed" / "fixed16" record (which the plan decoder does not take):
    the layout kept on the device, decoded by its own kernels, then copied into the scratch."""

    work_nbytes = 0

    def __init__(self, name: str, record, device: torch.device):
        import importlib

        self.layout = importlib.import_module(f"wcodec.gpu.{_FIXED[record.codec]}")
        self.fw = self.layout.from_sections(record.params, record.sections, tuple(record.shape), device, name)
        self.nbytes = self.fw.nbytes

    def decode_into(self, out: torch.Tensor, work: torch.Tensor | None) -> None:
        w = self.layout.decode(self.fw).reshape(-1)
        out[:w.numel() * w.element_size()].copy_(w.view(torch.uint8))


#: fixed-rate codec id -> its wcodec.gpu module (decoded by _FixedDecoder on the GPU)
_FIXED = {"fixed": "fixed", "fixed16": "fixed16"}


class _JitLinear(torch.autograd.Function):
    """``F.linear(x, weight, bias)`` whose weight is a scratch view: nothing of it is saved; the
    backward decodes it again (the scratch holds another module's weight by then). The weight
    is frozen: no gradient for it."""

    @staticmethod
    def forward(ctx, x, weight, bias, cw, key):
        ctx.cw, ctx.key = cw, key
        return linear_as_parameter(x, weight, bias)

    @staticmethod
    def backward(ctx, grad):
        gx = gb = None
        if ctx.needs_input_grad[0]:
            gx = grad.matmul(ctx.cw.decode(ctx.key))
        if ctx.needs_input_grad[2]:
            gb = grad.reshape(-1, grad.shape[-1]).sum(0)
        return gx, None, gb, None, None


# what reads only a tensor's metadata (never its values): no decode for these
_METADATA = frozenset({
    "dtype", "shape", "device", "ndim", "layout", "requires_grad", "is_leaf", "grad", "grad_fn", "names",
    "is_cuda", "is_cpu", "is_meta", "is_sparse", "is_quantized", "is_mkldnn", "is_nested", "itemsize", "nbytes",
    "_base", "_version", "output_nr", "_cdata", "size", "dim", "numel", "nelement", "stride", "storage_offset",
    "data_ptr", "untyped_storage", "element_size", "is_contiguous", "is_floating_point", "is_complex",
    "is_signed", "get_device", "requires_grad_", "__len__", "__hash__", "is_pinned",
    "has_names", "is_inference", "_is_view", "is_shared", "retain_grad", "register_hook"})


# functions whose output never aliases their inputs, called as func(x, weight, ...)
_FRESH = (F.linear, F.embedding, torch.matmul, torch.Tensor.matmul, torch.Tensor.__matmul__)


def _func_name(func) -> str:
    owner = getattr(func, "__self__", None)  # a property getter: Tensor.dtype.__get__
    if getattr(func, "__name__", "") in ("__get__", "__set__") and owner is not None:
        return getattr(owner, "__name__", "")
    return getattr(func, "__name__", "")


class JitWeight(torch.nn.Parameter):
    """The ``.weight`` of a module attached to a :class:`CompressedWeights`: a frozen Parameter
    whose storage is the shared scratch. Its module's pre-hook decodes it there before each
    forward, but model code also reads weights outside their module's forward (BridgeTower's
    ``self.position_embedding.weight.unsqueeze(0)``, tied heads, ``.weight.T``): there the
    scratch holds whichever weight decoded last. So any torch operation on this tensor first
    decodes it into the scratch unless the scratch holds it already (metadata reads, as
    ``.dtype`` / ``.shape`` / ``data_ptr()``, decode nothing), and a result that is a view of the
    scratch (``.unsqueeze(0)``, ``.T``, ``.data``) comes back as a copy: the next decode would
    overwrite it. In-place changes reach only such copies (the weight is frozen)."""

    def __new__(cls, view: torch.Tensor, cw, key: str):
        t = torch.Tensor._make_subclass(cls, view, False)
        t._wcodec_cw, t._wcodec_key = cw, key
        return t

    def __init__(self, *args, **kwargs):  # Parameter has no __init__ of its own to take these
        pass

    def __repr__(self, *, tensor_contents=None) -> str:
        return f"JitWeight(key={self._wcodec_key!r}, shape={tuple(self.shape)}, dtype={self.dtype})"

    def __reduce_ex__(self, protocol):  # pickles / deep-copies as the weight's values
        return torch._utils._rebuild_parameter, (self._wcodec_cw.materialize(self._wcodec_key), False, {})

    def __deepcopy__(self, memo):
        return torch.nn.Parameter(self._wcodec_cw.materialize(self._wcodec_key), requires_grad=False)

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func in _FRESH and len(args) > 1 and isinstance(args[1], JitWeight) and not isinstance(args[0], JitWeight):
            # a module's own forward (F.linear(x, w), F.embedding(ids, w)): a new output, one weight;
            # the fast path, and the one torch.compile traces without a break past the decode
            args[1]._wcodec_cw.ensure(args[1]._wcodec_key)
            with torch._C.DisableTorchFunctionSubclass():
                return func(*args, **kwargs)
        if _func_name(func) in _METADATA:
            with torch._C.DisableTorchFunctionSubclass():
                return func(*args, **kwargs)
        flat = lambda a: a if isinstance(a, (list, tuple)) else (a,)  # noqa: E731
        jws = [t for a in (*args, *kwargs.values()) for t in flat(a) if isinstance(t, JitWeight)]
        if len({(id(t._wcodec_cw), t._wcodec_key) for t in jws}) > 1:
            # two weights of one scratch in one op (torch.cat of two): each decoded into its own tensor
            own = lambda t: t._wcodec_cw.materialize(t._wcodec_key) if isinstance(t, JitWeight) else t  # noqa: E731
            mapped = lambda a: type(a)(own(t) for t in a) if type(a) in (list, tuple) else own(a)  # noqa: E731
            args, kwargs = tuple(mapped(a) for a in args), {k: mapped(v) for k, v in kwargs.items()}
            with torch._C.DisableTorchFunctionSubclass():
                return func(*args, **kwargs)
        scratch = None
        for t in jws:
            t._wcodec_cw.ensure(t._wcodec_key)
            scratch = t._wcodec_cw.scratch
        with torch._C.DisableTorchFunctionSubclass():
            out = func(*args, **kwargs)
        if scratch is None:
            return out
        if _func_name(func).endswith("_") or func in (torch.Tensor.copy_, torch.Tensor.__setitem__):
            for t in (*args, *kwargs.values()):  # written in place: the scratch no longer holds its weight
                if isinstance(t, JitWeight):
                    t._wcodec_cw.holding = None
        return _unalias(out, scratch)


def _unalias(out, scratch: torch.Tensor):
    """``out`` with every tensor that shares the scratch's storage replaced by a plain copy."""
    if isinstance(out, torch.Tensor):
        if out.untyped_storage().data_ptr() == scratch.untyped_storage().data_ptr():
            with torch._C.DisableTorchFunctionSubclass():
                return out.detach().clone()
        return out
    if isinstance(out, (list, tuple)) and any(isinstance(o, torch.Tensor) for o in out):
        return type(out)(_unalias(o, scratch) for o in out) if type(out) in (list, tuple) else out
    return out


def _linear_forward(module: torch.nn.Linear, cw, key: str):
    """forward of an attached nn.Linear: plain F.linear when autograd records nothing."""
    def forward(x):
        if torch.is_grad_enabled() and (x.requires_grad or (module.bias is not None and module.bias.requires_grad)):
            return _JitLinear.apply(x, module.weight, module.bias, cw, key)
        return linear_as_parameter(x, module.weight, module.bias)
    return forward


class _Hook:
    """A hook of a module decoding just in time: calls ``fn``; copies share it (as a function's
    would), and pickling refuses with a clear error (``torch.save(model)`` reaches the hooks
    before anything else of such a module; they hold the shared decode state, which does not
    pickle)."""

    def __init__(self, fn):
        self.fn = fn

    def __call__(self, *args, **kwargs):
        return self.fn(*args, **kwargs)

    def __copy__(self):
        return self

    def __deepcopy__(self, memo):
        return self

    def __reduce_ex__(self, protocol):
        from ..errors import UnsupportedError

        raise UnsupportedError("a model whose weights decode just in time (keep_compressed='jit', or weights "
                               "kept compressed beside fused layers) does not pickle: save it with "
                               "save_pretrained() or its state_dict(), or dequantize() it first")


def _own_forward_pre_hook(cw, key: str, view: torch.nn.Parameter):
    """Pre-hook of an attached Linear subclass whose own forward reads ``self.weight`` (it may
    not be F.linear, so :class:`_JitLinear` cannot stand in): without autograd, the weight is
    decoded into its scratch view as for any module; with autograd on, into a tensor of its own
    for this call, since the forward may save the weight for its backward and the scratch
    holds another module's weight by then (the numba decode writes past autograd's version
    counter: no error, wrong gradients)."""
    def pre_hook(mod, args):
        if torch.is_grad_enabled():
            mod._parameters["weight"] = torch.nn.Parameter(cw.materialize(key), requires_grad=False)
        else:
            mod._parameters["weight"] = view
            cw.decode(key)
    return pre_hook


def _restore_view(view: torch.nn.Parameter):
    """Forward hook: the module holds its scratch view again (a call's own tensor is freed)."""
    def hook(mod, args, out):
        mod._parameters["weight"] = view
    return hook


@dataclass
class _Weight:
    decoder: object
    shape: tuple
    stored: torch.dtype   # dtype the record decodes to
    dtype: torch.dtype    # dtype the module uses
    view: torch.Tensor | None = None


class CompressedWeights:
    """A set of weights kept compressed on ``device`` and decoded on use into a shared scratch.

    Usage: :meth:`add` every weight, :meth:`allocate` the scratch (returns the views that the
    modules must hold as their weights), then :meth:`attach` each module to its weight;
    :meth:`release` gives one module its own decoded weight again.

    Args:
        device: where modules run ("cpu", "cuda", "cuda:1", torch.device).
        decoder: "auto" (Triton on CUDA, numba on CPU), "triton" (also on CPU under
            TRITON_INTERPRET=1, for tests) or "numba".
        offload: keep the compressed bytes in pinned CPU memory and copy each to the device
            before decoding (models larger than the GPU; costs PCIe bandwidth per forward).
    Raises ValueError for an unknown decoder, CorruptDataError from the GPU planner on a bad record.
    """

    def __init__(self, device="cpu", decoder: str = "auto", offload: bool = False):
        self.device = torch.device(device)
        if decoder == "auto":
            decoder = "triton" if self.device.type == "cuda" else "numba"
        if decoder not in ("triton", "numba"):
            raise ValueError(f"decoder must be 'auto', 'triton' or 'numba', got {decoder!r}")
        self.decoder, self.offload = decoder, offload and self.device.type == "cuda"
        self.weights: dict[str, _Weight] = {}
        self.scratch = self.raw = self.work = None
        self.holding: str | None = None  # the key whose values the scratch holds now
        self.bound: dict = {}  # attached module -> (key, [its hook handles])
        self._params: dict = {}  # id of a module's weight at attach -> its JitWeight (tied modules share one)

    # -- building --------------------------------------------------------------------------
    def add(self, key: str, name: str, record, dtype: torch.dtype | None = None) -> None:
        """Register one weight. key: caller's id (e.g. the checkpoint name); name: for error
        messages; record: its EncodedTensor; dtype: the module's dtype (default: the stored one)."""
        stored = torch_dtype(record.dtype)
        if self.decoder == "triton" and record.codec in _FIXED and not self.offload:
            dec = _FixedDecoder(name, record, self.device)
        else:
            dec = (_TritonDecoder(name, record, self.device, self.offload) if self.decoder == "triton"
                   else _NumbaDecoder(name, record))
        self.weights[key] = _Weight(dec, tuple(record.shape), stored, dtype or stored)

    def allocate(self) -> dict[str, torch.Tensor]:
        """Allocate the scratch buffers; returns {key: view of the scratch with the weight's
        shape and dtype} (contents undefined until the weight is decoded)."""
        ws = self.weights.values()
        size = lambda w, dt: _align(int(np.prod(w.shape)) * torch.empty(0, dtype=dt).element_size())
        dev = self.device
        self.scratch = torch.empty(max([size(w, w.dtype) for w in ws], default=0) + _ALIGN,
                                   dtype=torch.uint8, device=dev)
        raw = max([size(w, w.stored) for w in ws if w.stored != w.dtype], default=0)
        self.raw = torch.empty(raw + _ALIGN, dtype=torch.uint8, device=dev) if raw else None
        work = max([w.decoder.work_nbytes for w in ws], default=0)
        self.work = torch.empty(work, dtype=torch.uint8, device=dev) if work else None
        for w in ws:
            n = int(np.prod(w.shape))
            w.view = self.scratch.view(w.dtype)[:n].view(w.shape) if n else torch.empty(w.shape, dtype=w.dtype, device=dev)
        return {k: w.view for k, w in self.weights.items()}

    # -- use -------------------------------------------------------------------------------
    # torch.compile: a graph break around each decode (the numba / Triton launchers are Python
    # that dynamo must not trace); the fused CompressedLinear is the path without breaks
    @torch.compiler.disable
    def decode(self, key: str, out: torch.Tensor | None = None) -> torch.Tensor:
        """Decode weight ``key`` into its scratch view (or into ``out``, a tensor of its shape and
        the module dtype); returns that tensor. Asynchronous on CUDA."""
        w = self.weights[key]
        target = w.view if out is None else out
        if target.numel() == 0:
            return target
        if self.device.type == "cuda" and self.device.index is not None \
                and self.device.index != torch.cuda.current_device():
            with torch.cuda.device(self.device):  # Triton launches on the current device
                self._decode(w, target, out)
        else:
            self._decode(w, target, out)
        if out is None:
            self.holding = key
        return target

    def _decode(self, w: _Weight, target: torch.Tensor, out) -> torch.Tensor:
        if out is None:
            self.holding = None  # until this decode is issued (a failing one leaves nothing held)
        if w.stored == w.dtype and out is None:
            w.decoder.decode_into(self.scratch, self.work)
        else:
            n = target.numel() * torch.empty(0, dtype=w.stored).element_size()
            tmp = (self.raw if out is None else
                   torch.empty(_align(n), dtype=torch.uint8, device=self.device))
            w.decoder.decode_into(tmp, self.work)
            target.copy_(tmp[:n].view(w.stored).view(w.shape))
        return target

    def ensure(self, key: str) -> None:
        """Decode weight ``key`` into the scratch unless it holds that weight already (a read of a
        :class:`JitWeight` outside its module's forward)."""
        if self.holding != key:
            self.decode(key)

    def materialize(self, key: str) -> torch.Tensor:
        """A new tensor holding weight ``key`` decoded (for weights that cannot stay compressed)."""
        w = self.weights[key]
        return self.decode(key, torch.empty(w.shape, dtype=w.dtype, device=self.device))

    def attach(self, module: torch.nn.Module, key: str):
        """Decode weight ``key`` before every forward of ``module`` (its weight is frozen:
        requires_grad False); an nn.Linear also gets the forward of :class:`_JitLinear` so that
        training adapters on top works (a subclass with a forward of its own keeps it, see
        :func:`_own_forward_pre_hook`). The module's ``state_dict()`` then holds the weight
        decoded (a new tensor, never the scratch), and ``load_state_dict`` refuses a weight
        other than the stored one. Returns the forward pre-hook's handle."""
        def pre_hook(mod, args):
            self.ensure(key)

        def state_dict_hook(mod, state_dict, prefix, local_metadata):
            name = prefix + "weight"
            if name in state_dict:  # the parameter is a scratch view: hand out the true weight
                state_dict[name] = self.materialize(key)

        def load_hook(mod, state_dict, prefix, local_metadata, strict, missing, unexpected, errors):
            name = prefix + "weight"
            if name in state_dict and not self._holds(key, state_dict[name]):
                from ..errors import InvalidInputError

                raise InvalidInputError(
                    f"{name}: this weight is kept compressed and frozen (decoded just in time); the "
                    f"state dict holds another value, which loading would lose. Load it into a model "
                    f"that is not kept compressed, or call release() on the module first")

        w = module._parameters.get("weight")
        if type(w) in (torch.Tensor, torch.nn.Parameter) and w.data_ptr() == self.weights[key].view.data_ptr():
            if id(w) not in self._params:  # tied modules hold one Parameter: they share one JitWeight
                self._params[id(w)] = (w, JitWeight(self.weights[key].view, self, key))  # w kept: its id stays its
            module._parameters["weight"] = self._params[id(w)][1]
        own = isinstance(module, torch.nn.Linear) and type(module).forward is not torch.nn.Linear.forward
        if own:  # a Linear subclass with a forward of its own (a grouped projection): kept, see below
            h = module.register_forward_pre_hook(_Hook(_own_forward_pre_hook(self, key, module.weight)))
        else:
            h = module.register_forward_pre_hook(_Hook(pre_hook))
        handles = [h, module.register_state_dict_post_hook(_Hook(state_dict_hook)),
                   module.register_load_state_dict_pre_hook(_Hook(load_hook))]
        if own:
            handles.append(module.register_forward_hook(_Hook(_restore_view(module.weight))))
        module.weight.requires_grad_(False)
        if isinstance(module, torch.nn.Linear) and not own:
            module.forward = _linear_forward(module, self, key)
        self.bound[module] = (key, handles)
        module.__dict__["_wcodec_jit"] = self  # how peft's LoRA layers find the set (wcodec.hf.lora)
        return h

    def key_of(self, module: torch.nn.Module) -> str | None:
        """The key of the weight ``module`` decodes just in time, None when it is not attached."""
        entry = self.bound.get(module)
        return None if entry is None else entry[0]

    def release(self, module: torch.nn.Module, weight: torch.nn.Parameter | None = None) -> torch.nn.Parameter:
        """Stop decoding ``module``'s weight just in time: it gets its own decoded copy (a new
        frozen Parameter, model dtype, on this set's device), which it keeps; the record stays
        here for the other modules using it (tied weights). For changing a weight in place, as
        a LoRA merge does. ``weight``: that decoded Parameter when the caller has it already (a
        tied partner released before), so that the partners keep sharing one. Returns the new
        Parameter. Raises InvalidInputError for a module not attached here."""
        if module not in self.bound:
            from ..errors import InvalidInputError

            raise InvalidInputError(f"{type(module).__name__}: not attached to these compressed weights")
        key, handles = self.bound.pop(module)
        for h in handles:
            h.remove()
        module.__dict__.pop("forward", None)
        module.__dict__.pop("_wcodec_jit", None)
        module.weight = weight if weight is not None else torch.nn.Parameter(self.materialize(key), requires_grad=False)
        return module.weight

    def detach(self) -> None:
        """Remove every hook and forward installed by :meth:`attach` (the modules' weights are
        then scratch views: call this only when dropping the model)."""
        for module, (_, handles) in self.bound.items():
            for h in handles:
                h.remove()
            module.__dict__.pop("forward", None)
            module.__dict__.pop("_wcodec_jit", None)
        self.bound.clear()

    def _holds(self, key: str, t: torch.Tensor) -> bool:
        """Whether ``t`` is the scratch view of ``key`` or equals the stored weight."""
        w = self.weights[key]
        if t.data_ptr() == w.view.data_ptr() and t.dtype == w.view.dtype:
            return True
        return tuple(t.shape) == w.shape and torch.equal(t.to(w.dtype).to(self.device), self.materialize(key))

    @property
    def compressed_nbytes(self) -> int:
        """Bytes held by the compressed weights (sections + decode tables), wherever they are."""
        return sum(int(w.decoder.nbytes) for w in self.weights.values())

    @property
    def scratch_nbytes(self) -> int:
        """Bytes of the shared scratch, cast and work buffers on the device."""
        return sum(int(t.numel()) for t in (self.scratch, self.raw, self.work) if t is not None)
