"""The load path's reuse of one read buffer per thread (reader.SpanBuffer) and the writer's
sections prepared on the encode threads (writer.prepare_sections): same bytes, same checks."""

from __future__ import annotations

import numpy as np
import pytest

from _container_helpers import DTYPE_OF, mixed_tensors, read_header, write_mixed
from wcodec.errors import ChecksumError
from wcodec.format import Reader, Writer, encode_into, spec
from wcodec.format.encode import Item
from wcodec.format.reader import SpanBuffer
from wcodec.format.writer import prepare_sections
from wcodec.codecs import encode_tensor


def test_one_buffer_for_every_tensor_decodes_exactly(tmp_path):
    path = tmp_path / "m.wcodec"
    tensors = write_mixed(path)
    into = SpanBuffer()
    with Reader(path) as r:
        names = sorted((n for n in r.keys() if not r.alias_of(n)), key=r.numel, reverse=True)
        outs = {n: r.get_numpy(n, into=into) for n in names}  # largest first, then reused
        largest = into.take(0).base
        for n in names:
            assert not into.holds(outs[n]), n
            assert np.array_equal(outs[n].reshape(-1).view(np.uint8),
                                  np.ascontiguousarray(tensors[n]).reshape(-1).view(np.uint8)), n
        r.get_numpy(names[-1], into=into)
        assert into.take(0).base is largest  # no new buffer for a smaller span


def test_reused_buffer_still_checks_sections_and_result(tmp_path):
    path = tmp_path / "m.wcodec"
    write_mixed(path)
    data, _, header = read_header(path)
    sec = header["tensors"]["w.f32"]["sections"]["tail"]
    bad = bytearray(data)
    bad[sec["offset"] + 3] ^= 0x10
    path.write_bytes(bytes(bad))
    into = SpanBuffer()
    with Reader(path) as r:
        r.get_numpy("q.i8", into=into)
        with pytest.raises(ChecksumError, match="tensor 'w.f32': section 'tail'"):
            r.get_numpy("w.f32", into=into)
        rec = r.record("w.f32", verify=False, into=into)
        assert not rec.sections["tail"].flags.writeable


def test_result_never_shares_the_buffer():
    into = SpanBuffer()
    buf = into.take(100)
    assert into.holds(buf[10:20]) and not into.holds(np.zeros(3))
    assert not SpanBuffer().holds(np.zeros(3))


def test_prepared_sections_write_the_same_file(tmp_path):
    t = mixed_tensors()
    items = [Item(k, v, DTYPE_OF[k], (k,)) for k, v in t.items()]
    with Writer(tmp_path / "a.wcodec") as w:  # encode_into: prepared on its threads
        encode_into(w, items, workers=2)
    with Writer(tmp_path / "b.wcodec") as w:  # prepared by add_record itself
        for it in items:
            w.add_record(it.name, encode_tensor(it.array, it.dtype), spec.crc32(it.array))
    assert (tmp_path / "a.wcodec").read_bytes() == (tmp_path / "b.wcodec").read_bytes()


def test_prepared_sections_must_be_the_records(tmp_path):
    rec = encode_tensor(np.arange(600, dtype=np.float32), "F32")
    other = encode_tensor(np.arange(600, dtype=np.uint8).reshape(20, 30).view(np.int8), "I8")
    prepared = prepare_sections(rec)
    name, (dt, data, crc) = next(iter(prepared.items()))
    assert crc == spec.crc32(data) and dt == spec.section_dtype_name(rec.sections[name])
    with Writer(tmp_path / "c.wcodec") as w:
        with pytest.raises(ValueError, match="prepared sections"):
            w.add_record("x", rec, 0, prepared=prepare_sections(other))
        w.abort()
