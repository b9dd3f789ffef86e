"""Replay of a recorded Triton launch: the host side of a fused linear at nn.Linear's cost.

Eager generation at batch 1 is bound by host time per layer: on the H100 host ``nn.Linear``
costs 21-34 us a call, our fused linear 67-105 us through ``JITFunction.run`` (binding,
specialisation, cache key, launch metadata) and our argument set-up, 20-30 us replayed
(``benchmarks/experiments/launch_overhead.py``). A :class:`Launch` records the one call that
Triton's ``JITFunction.run`` makes into the compiled kernel's launcher (grid, stream, function
handle, packed metadata, every argument) and replays it with new tensors in the recorded places. The
caller keys it on everything that enters the kernel's specialisation (shapes, strides, dtypes,
pointer alignments, the weight's tensors), so the compiled kernel stays valid; everything else
in the call is constant by that key.

The recording goes through Triton's public ``warmup`` and one real launch, and checks what it
saw (one call, our stream, our tensors found by identity, no launch hook to call). Anything
else gives ``None`` and the caller stays on the normal launch. ``WCODEC_REPLAY=0`` turns replay
off; so does a Triton outside :data:`TRITON_TESTED` (one line on stderr says so).
"""

from __future__ import annotations

import os
import re
import sys

import torch

ENABLED = os.environ.get("WCODEC_REPLAY", "1") != "0"

#: Triton versions (major, minor), both ends included, whose launcher replay is tested with:
#: 3.6 on H100 and H200 (tests/gpu/test_replay.py, every replay bit-identical to the normal
#: launch), 3.9 by the recording's checks on the CPU; the launcher's leading arguments and the
#: ``run`` property are the same in both. pyproject.toml states it ([tool.wcodec] replay-triton).
TRITON_TESTED = ((3, 6), (3, 9))

_triton_ok: bool | None = None


def triton_tested(version: str) -> bool:
    """True when a Triton version string ("3.6.0", "3.9.0+git1234") lies in TRITON_TESTED."""
    m = re.match(r"(\d+)\.(\d+)", version)
    return m is not None and TRITON_TESTED[0] <= (int(m[1]), int(m[2])) <= TRITON_TESTED[1]


def _triton_is_tested() -> bool:
    """Whether the installed Triton is tested with replay; says once on stderr when it is not."""
    global _triton_ok
    if _triton_ok is None:
        import triton

        version = getattr(triton, "__version__", "unknown")
        _triton_ok = triton_tested(version)
        if not _triton_ok:
            lo, hi = (".".join(map(str, v)) for v in TRITON_TESTED)
            print(f"wcodec: Triton {version} is outside the versions launch replay is tested with "
                  f"({lo}-{hi}): fused linears launch the plain way", file=sys.stderr, flush=True)
    return _triton_ok

#: the launcher call's leading arguments: grid x, y, z, stream, function, packed metadata,
#: launch metadata, enter hook, exit hook; the kernel's arguments follow
_N_HEAD = 9


def _stream(device: int) -> int:
    return torch._C._cuda_getCurrentRawStream(device)


class Launch:
    """One recorded launcher call of a compiled Triton kernel; ``launch(subs)`` replays it with
    ``subs[j]`` (tensors) in the places where the recording had its ``j``-th per-call tensor.
    Check ``ready()`` first: it is False when a launch hook was installed since (a profiler's:
    the caller then launches the normal way, which calls it)."""

    __slots__ = ("run", "args", "slots", "device", "hooks")

    def __init__(self, run, args: tuple, slots: tuple, device: int, hooks: tuple = ()):
        self.run, self.args, self.slots, self.device, self.hooks = run, args, slots, device, hooks

    def ready(self) -> bool:
        return not any(h.calls for h in self.hooks)

    def __call__(self, subs: tuple) -> None:
        a = list(self.args)
        for pos, j in self.slots:
            a[pos] = subs[j]
        a[3] = _stream(self.device)
        self.run(*a)


def record(fn, grid, args: tuple, kwargs: dict, subs: tuple) -> Launch | None:
    """Launch ``fn[grid](*args, **kwargs)`` (``fn`` a Triton JITFunction) once, on a GPU, and
    return a :class:`Launch` that repeats it with other tensors in the places of ``subs`` (the
    per-call tensors among ``args``, found by identity; None entries are not this launch's),
    or None where the launch cannot be recorded (then it has still run once, the normal way)."""
    if not ENABLED or not _triton_is_tested():
        fn[grid](*args, **kwargs)
        return None
    try:
        ck = fn.warmup(*args, grid=grid, **kwargs)
        ck = ck.result() if hasattr(ck, "result") else ck
        # Triton >= 3.3 keeps the launcher behind a ``run`` property over ``_run``
        attr = "_run" if isinstance(getattr(type(ck), "run", None), property) else "run"
        run = ck.run
    except Exception:
        fn[grid](*args, **kwargs)
        return None
    calls = []

    def spy(*a):
        calls.append(a)
        return run(*a)

    setattr(ck, attr, spy)
    try:
        fn[grid](*args, **kwargs)
    finally:
        setattr(ck, attr, run)
    device = torch.cuda.current_device()
    return checked(calls, run, subs, device, _stream(device))


def checked(calls: list, run, subs: tuple, device: int, stream: int) -> Launch | None:
    """The Launch of the recorded launcher ``calls`` (argument tuples), or None unless there was
    exactly one, on ``stream``, with every tensor of ``subs`` (but None) in it and no launch hook to call
    (None, or Triton's empty hook chain: the replay passes None and no launch metadata, and
    checks the chains before each launch)."""
    if len(calls) != 1 or len(calls[0]) < _N_HEAD:
        return None
    a = list(calls[0])
    hooks = tuple(h for h in a[7:_N_HEAD] if h is not None)
    if a[3] != stream or any(getattr(h, "calls", None) != [] for h in hooks):
        return None  # another stream source, or hooks that a replay would skip
    a[6:_N_HEAD] = (None, None, None)
    slots = tuple((pos, j) for pos in range(_N_HEAD, len(a)) for j, s in enumerate(subs)
                  if s is not None and a[pos] is s)
    if {j for _, j in slots} != {j for j, s in enumerate(subs) if s is not None}:
        return None
    for pos, _ in slots:  # each replay fills them: keep no reference to the recording's tensors
        a[pos] = None
    return Launch(run, tuple(a), slots, device, hooks)


__all__ = ["Launch", "record", "checked", "triton_tested", "ENABLED", "TRITON_TESTED"]
