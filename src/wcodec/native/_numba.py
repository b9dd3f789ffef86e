"""numba helpers: each parallel kernel also gets a serial twin for small inputs.

Starting an OpenMP parallel region costs far more than coding a few thousand symbols (and much
more again on a busy machine), so callers pick the serial twin below ``PARALLEL_MIN`` elements.
A kernel about to compile (no machine code in this process or in numba's on-disk cache) prints
one line on stderr, once per process, so that a first run is not a silent wait.
"""

from __future__ import annotations

import os
import sys
import types

# OpenMP threads that spin after a parallel region starve everything else on a busy machine
# (measured: 3-4x slower MiniLM encode/decode on 2 loaded cores); waiting passively costs
# little for kernels this size. Read when the OpenMP runtime starts; a user's setting wins.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import numba as nb  # noqa: E402

JIT = dict(nogil=True, cache=True)
#: inputs smaller than this (elements) run on one thread
PARALLEL_MIN = 1 << 18


_announced = False


def announce_compile(dispatcher) -> None:
    """Say once per process that numba compiles, if ``dispatcher`` has no machine code yet
    (none compiled here, no index in its on-disk cache)."""
    global _announced
    if _announced or dispatcher.signatures:
        return
    try:
        cached = os.path.exists(dispatcher._cache._cache_file._index_path)
    except AttributeError:  # numba internals moved: assume a compile
        cached = False
    if not cached:
        _announced = True
        from . import available

        why = "" if available() else \
            " (WCODEC_NATIVE=0)" if os.environ.get("WCODEC_NATIVE", "").strip() in ("0", "no", "false", "off") else \
            " (the C extension is not built, see wcodec.native)"
        print(f"wcodec: compiling numba kernels{why}; once, cached on disk afterwards...",
              file=sys.stderr, flush=True)


class Kernel:
    """A numba kernel compiled twice from one Python function: parallel and serial.

    Call it with ``size=`` (elements of work) to pick the variant. The serial twin is a copy of
    the function under another qualified name, so numba's on-disk cache keeps both.
    """

    def __init__(self, fn):
        self.parallel = nb.njit(parallel=True, **JIT)(fn)
        twin = types.FunctionType(fn.__code__, fn.__globals__, fn.__name__ + "_serial",
                                  fn.__defaults__, fn.__closure__)
        twin.__qualname__ = fn.__qualname__ + "_serial"
        twin.__doc__ = fn.__doc__
        self.serial = nb.njit(**JIT)(twin)
        self.__doc__ = fn.__doc__
        self.__name__ = fn.__name__

    def __call__(self, *args, size: int):
        fn = self.parallel if size >= PARALLEL_MIN else self.serial
        if not _announced:
            announce_compile(fn)
        return fn(*args)


def kernel(fn) -> Kernel:
    return Kernel(fn)
