"""Helpers for the container tests: a small mixed container and header surgery."""

from __future__ import annotations

import json

import numpy as np

from wcodec.format import Writer, encode_into, spec
from wcodec.format.encode import Item


def mixed_tensors() -> dict:
    """Tensors exercising every codec path: float (bf16/f32), int8, raw, 0-d, empty."""
    rng = np.random.default_rng(0)
    w = rng.standard_normal((40, 33)).astype(np.float32)
    return {
        "w.f32": w,
        "w.bf16": (w.view(np.uint32) >> 16).astype(np.uint16),
        "q.i8": rng.integers(-128, 128, (30, 20), dtype=np.int8),
        "idx.i64": np.arange(7, dtype=np.int64),
        "scalar": np.array(2.5, dtype=np.float32),
        "empty": np.zeros((0, 4), dtype=np.float16),
        "mask": np.array([True, False, True]),
    }


DTYPE_OF = {"w.f32": "F32", "w.bf16": "BF16", "q.i8": "I8", "idx.i64": "I64", "scalar": "F32",
            "empty": "F16", "mask": "BOOL"}


def write_mixed(path, alias: bool = True) -> dict:
    t = mixed_tensors()
    items = [Item(k, v, DTYPE_OF[k], (k,)) for k, v in t.items()]
    if alias:
        items.append(Item("w.tied", t["w.f32"], "F32", ("w.f32",)))
    with Writer(path, {"origin": "test"}) as w:
        encode_into(w, items, workers=2)
    return t


def read_header(path) -> tuple[bytes, int, dict]:
    """(file bytes, header offset, parsed header)."""
    data = path.read_bytes()
    _, _, _, h_off, h_size, _ = spec.PREAMBLE.unpack(data[:64])
    return data, h_off, json.loads(data[h_off:h_off + h_size])


def rewrite_header(path, header) -> None:
    """Replace the header (a dict or raw bytes) with a valid preamble crc, keeping the sections."""
    data, h_off, _ = read_header(path)
    raw = header if isinstance(header, bytes) else json.dumps(header).encode()
    version = int.from_bytes(data[8:12], "little")  # the file's own (1 or 2)
    path.write_bytes(spec.pack_preamble(h_off, len(raw), spec.crc32(raw), version) + data[64:h_off] + raw)

