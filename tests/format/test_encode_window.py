"""wcodec.format.encode_into's in-flight window: tensors behind a slow one keep the other workers
busy while their input bytes fit WINDOW_BYTES (their records wait to be written in order), and
beyond the window at most ``workers + 1`` tensors are in flight; the bytes do not depend on it."""

from __future__ import annotations

import threading

import numpy as np

from wcodec.format import Writer, encode_into
from wcodec.format import encode as enc
from wcodec.format.encode import Item


def _items(n: int = 10, size: int = 4096) -> list[Item]:
    g = np.random.default_rng(0)
    bits = lambda: (g.standard_normal(size).astype(np.float32) * 0.02).view(np.uint32) >> 16  # noqa: E731
    return [Item(f"t{i:02d}", bits().astype(np.uint16), "BF16") for i in range(n)]


def _run(monkeypatch, items, gate_after: int | None):
    """Encode ``items`` on 2 workers; the first tensor's encode waits until ``gate_after`` others
    have started (None: it does not wait). Returns (file bytes, most tensors started and not yet
    written at any record's write)."""
    started, written, seen = [], [], []
    gate = threading.Event()
    real = enc._encode_one

    def spy(item, *a):
        started.append(item.name)
        if gate_after is not None and len(started) > gate_after:
            gate.set()
        if gate_after is not None and item.name == items[0].name:
            gate.wait(10)  # the slow tensor ahead
        return real(item, *a)

    monkeypatch.setattr(enc, "_encode_one", spy)
    with Writer(None, None) as w:
        real_add = w.add_record

        def add(name, *a, **k):
            seen.append(len(started) - len(written))
            written.append(name)
            return real_add(name, *a, **k)

        w.add_record = add
        encode_into(w, iter(items), workers=2)
    assert written == [i.name for i in items]  # input order, whatever finished first
    return w.data, max(seen)


def test_tensors_behind_a_slow_one_run_within_the_window(monkeypatch):
    items = _items()
    data, most = _run(monkeypatch, items, gate_after=6)
    assert most >= 7  # the slow first tensor's record waited for 6 tensors behind it: all were in flight


def test_beyond_the_window_at_most_workers_plus_one_in_flight(monkeypatch):
    items = _items()
    monkeypatch.setattr(enc, "WINDOW_BYTES", 0)
    data, most = _run(monkeypatch, items, gate_after=None)
    assert most <= 3
    monkeypatch.setattr(enc, "WINDOW_BYTES", 256 << 20)
    assert _run(monkeypatch, items, gate_after=None)[0] == data  # the same bytes either way
