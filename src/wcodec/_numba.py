"""numba helpers: each parallel kernel also gets a serial twin for small inputs.

Starting an OpenMP parallel region costs far more than coding a few thousand symbols (and much
more again on a busy machine), so callers pick the serial twin below ``PARALLEL_MIN`` elements.
"""

from __future__ import annotations

import os
import types

# OpenMP threads that spin after a parallel region starve everything else on a busy machine
# (measured: 3-4x slower MiniLM encode/decode on 2 loaded cores); waiting passively costs
# little for kernels this size. Read when the OpenMP runtime starts; a user's setting wins.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import numba as nb  # noqa: E402

JIT = dict(nogil=True, cache=True)
#: inputs smaller than this (elements) run on one thread
PARALLEL_MIN = 1 << 18


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
        return (self.parallel if size >= PARALLEL_MIN else self.serial)(*args)


def kernel(fn) -> Kernel:
    return Kernel(fn)
