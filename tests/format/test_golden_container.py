"""Golden bytes of a tiny container (raw codec): changing them needs a format version bump.

Regenerate (only together with a version bump): WCODEC_REGEN_GOLDEN=1 pytest tests/format
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from wcodec.format import Reader, Writer, encode_into, spec
from wcodec.format.encode import Item

GOLDEN = Path(__file__).resolve().parents[1] / "golden" / "tiny_raw_v1.wcodec"


def _tiny_items():
    a = np.arange(6, dtype=np.int8).reshape(2, 3)
    return [
        Item("a", a, "I8", ("a",)),
        Item("b", np.array([1.5, -2.0], dtype=np.float32), "F32"),
        Item("bf", np.array([0x3F80, 0xC000], dtype=np.uint16), "BF16"),
        Item("s", np.array(7, dtype=np.int64), "I64"),
        Item("e", np.zeros((0, 3), dtype=np.uint8), "U8"),
        Item("a.tied", a, "I8", ("a",)),
    ]


def _write(path):
    with Writer(path, {"name": "tiny"}) as w:
        encode_into(w, _tiny_items(), workers=1)


def test_golden_bytes(tmp_path):
    out = tmp_path / "tiny.wcodec"
    _write(out)
    if os.environ.get("WCODEC_REGEN_GOLDEN"):
        GOLDEN.write_bytes(out.read_bytes())
    assert out.read_bytes() == GOLDEN.read_bytes()


def test_golden_reads_back():
    data = GOLDEN.read_bytes()
    assert data[:8] == b"\x89WCODEC\n" and int.from_bytes(data[8:12], "little") == 1
    with Reader(GOLDEN) as r:
        assert r.keys() == ["a", "b", "bf", "s", "e", "a.tied"]
        assert r.metadata() == {"name": "tiny"}
        assert r.get_numpy("a").tolist() == [[0, 1, 2], [3, 4, 5]]
        assert r.get_numpy("a.tied").tolist() == [[0, 1, 2], [3, 4, 5]]
        assert r.get_numpy("b").tolist() == [1.5, -2.0]
        assert r.get_numpy("bf").tolist() == [0x3F80, 0xC000]
        assert r.get_numpy("s").shape == () and int(r.get_numpy("s")) == 7
        assert r.get_numpy("e").shape == (0, 3)
        assert r.span("a") == (64, 70) and r.span("b") == (128, 136)
