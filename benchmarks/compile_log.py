"""Which Triton kernels a process compiles, when, and why: a log through Triton's JIT hooks.

``knobs.runtime.jit_cache_hook`` runs before and ``jit_post_compile_hook`` after each in-memory
cache miss of a JIT function (a compile, or a load from Triton's on-disk cache); each entry keeps
the kernel's name, the phase the caller set (:meth:`CompileLog.phase`), the seconds between the
hooks, the thread, the specialisation (constexprs, the arguments' attributes: 16-divisibility,
alignment; the signature's types), and the fused linear's call (M, N, K, x's row stride and
pointer alignment, kind, whether a replay was recording) read from the stack. :meth:`report`
lists each entry of one phase beside the nearest entry of an earlier phase for the same kernel:
the specialisation keys that differ say why the earlier phase's compile was not reused.
"""

from __future__ import annotations

import json
import sys
import threading
import time


def _call_site() -> dict:
    """The fused linear's call on this thread's stack (wcodec.gpu.fixed.linear's locals)."""
    f, site = sys._getframe(2), {}
    while f is not None:
        code, loc = f.f_code, f.f_locals
        if code.co_name == "linear" and code.co_filename.endswith("fixed.py") and "x2" in loc:
            x2, fw = loc["x2"], loc.get("fw")
            site.update(M=int(x2.shape[0]), N=getattr(fw, "N", None), K=getattr(fw, "K", None),
                        stride0=int(x2.stride(0)), ptr_mod16=int(x2.data_ptr() % 16), kind=loc.get("kind"),
                        dtype=str(x2.dtype).replace("torch.", ""))
        elif code.co_name == "__call__" and type(loc.get("self")).__name__ == "LinearReplays":
            site["replay"] = True
        f = f.f_back
    return site


class CompileLog:
    """Install with :meth:`install` (before the work to watch), set phases, then :meth:`report`."""

    def __init__(self):
        self.entries: list = []
        self._phase = "start"
        self._t0: dict = {}
        self._lock = threading.Lock()

    def install(self) -> bool:
        try:
            from triton import knobs
        except ImportError:
            return False
        knobs.runtime.jit_cache_hook = self._before
        knobs.runtime.jit_post_compile_hook = self._after
        return True

    def phase(self, name: str) -> None:
        self._phase = name

    def _before(self, *, key, compile, **_):
        self._t0[(threading.get_ident(), key)] = time.perf_counter()
        return None  # falsy: Triton compiles

    def _after(self, *, key, fn, compile, **_):
        t0 = self._t0.pop((threading.get_ident(), key), None)
        spec = json.loads(compile["specialization_data"])
        entry = {"name": fn.name, "phase": self._phase, "s": None if t0 is None else time.perf_counter() - t0,
                 "thread": threading.current_thread().name,
                 "spec": {**{f"c{k}": v for k, v in zip(map(str, spec["constant_keys"]), spec["constant_vals"])},
                          **{f"a{k}": v for k, v in zip(map(str, spec["attrs_keys"]), spec["attrs_vals"])},
                          **{f"s{k}": v for k, v in spec["signature"].items()},
                          "warps": compile["num_warps"], "stages": compile["num_stages"]},
                 "call": _call_site()}
        with self._lock:
            self.entries.append(entry)

    def report(self, phase: str, slower_than: float = 0.0, most: int = 40) -> dict:
        """Entries of ``phase`` (slower than ``slower_than`` s): counts per kernel, and up to
        ``most`` entries each with ``differs``: the specialisation keys whose values differ from
        the nearest earlier-phase entry of the same kernel (None: that kernel had none)."""
        earlier, mine = [], []
        for e in self.entries:
            if e["phase"] == phase:
                mine.append(e)
            elif not mine:
                earlier.append(e)
        slow = [e for e in mine if (e["s"] or 0) > slower_than]
        counts: dict = {}
        for e in slow:
            counts[e["name"]] = counts.get(e["name"], 0) + 1
        out = []
        for e in slow[:most]:
            best = None
            for o in earlier:
                if o["name"] != e["name"]:
                    continue
                keys = sorted(k for k in {*o["spec"], *e["spec"]} if o["spec"].get(k) != e["spec"].get(k))
                if best is None or len(keys) < len(best[0]):
                    best = (keys, o)
            differs = None if best is None else {k: [best[1]["spec"].get(k), e["spec"].get(k)] for k in best[0]}
            out.append({"name": e["name"], "s": e["s"], "thread": e["thread"], "call": e["call"],
                        "differs": differs, "nearest_call": best and best[1]["call"]})
        return {"first_uses": len(mine), "compiles": counts, "entries": out}


__all__ = ["CompileLog"]
