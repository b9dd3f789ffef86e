"""Float records decoded straight from their file (``Reader.decode_floats``, the C extension's
``decode_float_file``, issue 30): bit-exact against the reference path (the record read whole,
``decode_tensor``) for every layout the encoder writes, never accepting what the reference
refuses, and a file truncated while open is an error, not a crash."""

from __future__ import annotations

import json
import os
import threading
import zlib

import numpy as np
import pytest

from _container_helpers import read_header, rewrite_header
from wcodec import native
from wcodec.codecs import decode_tensor, encode_tensor
from wcodec.codecs.float import FILE_COLS, LAYOUT, UINT, file_row
from wcodec.errors import CorruptDataError, WcodecError
from wcodec.format import Reader, Writer

needs_ext = pytest.mark.skipif(native.ext() is None, reason="C extension wcodec._cext not built")


def _weights(shape, dtype: str, seed: int, scale: float = 0.02) -> np.ndarray:
    w = (np.random.default_rng(seed).standard_normal(shape) * scale).astype(np.float32)
    if dtype == "F16":
        return w.astype(np.float16)
    return (w.view(np.uint32) >> 16).astype(np.uint16) if dtype == "BF16" else w


#: (dtype, shape, encode options): pairs and odd chunk counts, one chunk, many tables, every
#: head_bits, prob_bits 11, coded and raw F32 low planes, empty and one-element tensors
CASES = [
    ("BF16", (300, 301), {}), ("BF16", (4,), {}), ("BF16", (0, 3), {}), ("BF16", (1,), {}),
    ("BF16", (2 * 32 * 4 + 1,), {"chunk_steps": 4}), ("BF16", (5 * 32 * 8 - 3,), {"chunk_steps": 8}),
    ("BF16", (40000,), {"chunk_steps": 16, "tables": 3}), ("BF16", (9000,), {"prob_bits": 11}),
    *[("BF16", (6000,), {"head_bits": j, "chunk_steps": 7}) for j in range(5)],
    ("F16", (3000, 7), {}), ("F16", (777,), {"chunk_steps": 3}),
    ("F32", (513, 130), {}), ("F32", (4097,), {"chunk_steps": 5, "tables": 2}), ("F32", (0,), {}),
    ("F32-coded", (257, 129), {"chunk_steps": 6}), ("F32-coded", (70000,), {}),
]


def _write(path, cases=CASES):
    """A file of one float record per case; {name: (record, array)}."""
    out = {}
    with Writer(path) as w:
        for i, (dtype, shape, opts) in enumerate(cases):
            a = _weights(shape, dtype.split("-")[0], i)
            if dtype == "F32-coded":  # low mantissa bytes far from uniform: coded planes
                a = np.round(a * 64) / 64
            rec = encode_tensor(a, dtype.split("-")[0], codec="float", **opts)
            name = f"t{i:02d}"
            w.add_record(name, rec, zlib.crc32(np.ascontiguousarray(a).tobytes()))
            out[name] = (rec, a)
    return out


def _direct(r: Reader, names, verify=True):
    """(codes, outputs) of the C call itself over ``names``."""
    rows = np.array([file_row(r.entry(n), r.numel(n)) for n in names], dtype=np.int64)
    outs = [np.full(r.numel(n), 0x5A, dtype=UINT[LAYOUT[r.entry(n)["dtype"]][0]]) for n in names]
    return native.decode_float_file(r._f.fileno(), rows, outs, verify), outs


@needs_ext
def test_row_layout_is_the_extensions():
    assert native.has_file_decode(FILE_COLS) and not native.has_file_decode(FILE_COLS + 1)


@needs_ext
def test_every_layout_decodes_bit_exact(tmp_path, isa):
    cases = _write(tmp_path / "f.wcodec")
    coded = [n for n, (rec, _) in cases.items() if any(k.endswith(".words") and k.startswith("low") for k in rec.sections)]
    assert coded, "no F32 record with coded low planes: the case list no longer covers them"
    with Reader(tmp_path / "f.wcodec") as r:
        names = r.keys()
        assert all(r.file_decodable(n) for n in names)
        for verify in (True, False):
            codes, outs = _direct(r, names, verify)
            assert codes == [0] * len(names), (isa, verify, codes)
            for n, o in zip(names, outs):
                rec, a = cases[n]
                assert o.tobytes() == np.ascontiguousarray(a).tobytes() == decode_tensor(rec).tobytes(), (isa, n)
        got = r.decode_floats(names)
        for n in names:
            assert got[n].shape == cases[n][1].shape and got[n].tobytes() == cases[n][1].tobytes()


@needs_ext
def test_one_call_over_threads_matches_each_alone(tmp_path):
    cases = _write(tmp_path / "f.wcodec")
    with Reader(tmp_path / "f.wcodec") as r:
        names = r.keys()
        before = native.threads()
        try:
            for threads in (1, 3):
                native.set_threads(threads)
                codes, outs = _direct(r, names)
                assert codes == [0] * len(names)
                alone = [_direct(r, [n])[1][0] for n in names]
                assert all(np.array_equal(a, b) for a, b in zip(outs, alone))
        finally:
            native.set_threads(before)
        # concurrent calls from Python threads (each thread keeps its own buffers)
        results, errors = {}, []

        def load(k):
            try:
                results[k] = r.decode_floats(names)
            except BaseException as e:  # noqa: B036 - reported below
                errors.append(e)

        threads = [threading.Thread(target=load, args=(k,)) for k in range(3)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert not errors
        assert all(results[k][n].tobytes() == cases[n][1].tobytes() for k in results for n in names)


@needs_ext
def test_into_a_given_out(tmp_path):
    cases = _write(tmp_path / "f.wcodec", CASES[:1] + CASES[-4:-3])
    with Reader(tmp_path / "f.wcodec") as r:
        for n, (rec, a) in cases.items():
            out = np.empty(a.shape, dtype=a.dtype)
            got = r.get_numpy(n, out=out)
            assert np.shares_memory(got, out) and out.tobytes() == a.tobytes()
            with pytest.raises(ValueError):
                r.get_numpy(n, out=np.empty(a.size + 1, dtype=a.dtype))


def _reference(r: Reader, name: str, verify: bool):
    try:
        return r._get_numpy(name, verify, None)
    except WcodecError as e:
        return e


@needs_ext
@pytest.mark.parametrize("verify", [True, False])
def test_never_accepts_what_the_reference_refuses(tmp_path, verify):
    """Byte flips in every section and edits of the plane params: wherever the C call accepts a
    record (code 0), the reference decodes it too, to the same bytes; and the public path raises
    only WcodecError, as the reference does."""
    src = tmp_path / "good.wcodec"
    _write(src, [CASES[0], CASES[6], CASES[10], CASES[-2]])
    good, h_off, header = read_header(src)
    rng = np.random.default_rng(7 + verify)
    path = tmp_path / "m.wcodec"
    accepted = refused = 0
    for trial in range(160):
        data, hdr = bytearray(good), json.loads(json.dumps(header))
        name = sorted(hdr["tensors"])[trial % len(hdr["tensors"])]
        e = hdr["tensors"][name]
        if trial % 3:  # flip bytes of one section (the small ones most often)
            secs = [s for k, s in e["sections"].items() if s["size"]]
            s = secs[int(rng.integers(len(secs)))] if trial % 5 else e["sections"]["head.words"]
            for _ in range(int(rng.integers(1, 4))):
                data[s["offset"] + int(rng.integers(s["size"]))] ^= 1 << int(rng.integers(8))
            path.write_bytes(bytes(data))
        else:  # a plane param or the alphabet's bounds moved by a little
            plane = e["params"]["head"]
            key = ["alphabet_size", "chunks_per_table", "prob_bits", "chunk_steps"][int(rng.integers(4))]
            plane[key] = max(1, plane[key] + int(rng.choice([-1, 1, 2])))
            path.write_bytes(bytes(data))
            rewrite_header(path, hdr)
        try:
            r = Reader(path)
        except WcodecError:
            continue
        with r:
            for n in r.keys():
                ref = _reference(r, n, verify)
                (code,), (out,) = _direct(r, [n], verify)
                if code == 0:
                    accepted += 1
                    assert not isinstance(ref, Exception), (trial, n, ref)
                    assert out.tobytes() == ref.tobytes(), (trial, n)
                else:
                    refused += 1
                try:
                    got = r.get_numpy(n, verify=verify)
                except WcodecError as err:
                    assert isinstance(ref, Exception), (trial, n, err)
                    assert type(err) is type(ref) and str(err) == str(ref)
                else:
                    assert not isinstance(ref, Exception) and got.tobytes() == ref.tobytes()
    assert accepted and refused


@needs_ext
def test_a_tensor_failing_its_set_up_leaves_the_others_numbered_right(tmp_path):
    """A record that fails its set-up decodes no pair, and the records after it decode exactly
    their own pairs (the pair numbering once gave the next record the failed one's count too: its
    extra pairs wrote past its buffers, a heap overflow found by AddressSanitizer)."""
    cases = _write(tmp_path / "f.wcodec", [("BF16", (40000,), {"chunk_steps": 1}), ("BF16", (4,), {}),
                                            ("F32", (4097,), {"chunk_steps": 5})])
    with Reader(tmp_path / "f.wcodec") as r:
        names = r.keys()
        rows = np.array([file_row(r.entry(n), r.numel(n)) for n in names], dtype=np.int64)
        rows[0, 6] = 0  # tail_bits 0: a layout the set-up refuses
        outs = [np.full(r.numel(n), 0x5A, dtype=UINT[LAYOUT[r.entry(n)["dtype"]][0]]) for n in names]
        codes = native.decode_float_file(r._f.fileno(), rows, outs, True)
        assert codes[0] != 0 and codes[1:] == [0, 0]
        for n, o in zip(names[1:], outs[1:]):
            assert o.tobytes() == np.ascontiguousarray(cases[n][1]).tobytes()


@needs_ext
def test_truncated_while_open_is_an_error(tmp_path):
    cases = _write(tmp_path / "f.wcodec", [CASES[0], CASES[-1]])
    path = tmp_path / "f.wcodec"
    with Reader(path) as r:
        size = os.path.getsize(path)
        for keep in (size // 2, 1 << 12):
            os.truncate(path, keep)
            codes, _ = _direct(r, r.keys())
            assert all(codes)
            with pytest.raises(CorruptDataError, match="truncated"):
                r.decode_floats(r.keys())
    assert cases


def test_bytes_read_in_place_as_the_file(tmp_path):
    """A Reader over the file's bytes (``wcodec.load``) decodes every tensor as the file does,
    float records through the same C call, and never copies or changes the bytes."""
    from _container_helpers import write_mixed

    import wcodec

    write_mixed(tmp_path / "m.wcodec")
    _write(tmp_path / "f.wcodec", CASES[:3] + CASES[-2:])
    for name in ("m.wcodec", "f.wcodec"):
        data = (tmp_path / name).read_bytes()
        with Reader(tmp_path / name) as rf, Reader("<bytes>", data=data) as rm:
            assert rm.keys() == rf.keys() and rm.file_size == len(data)
            for n in rf.keys():
                assert rm.get_numpy(n).tobytes() == rf.get_numpy(n).tobytes(), n
            fast = [n for n in rf.keys() if rf.file_decodable(n) and not rf.alias_of(n)]
            if fast and native.ext() is not None:
                rows = np.array([file_row(rm.entry(n), rm.numel(n)) for n in fast], dtype=np.int64)
                outs = [np.empty(rm.numel(n), dtype=UINT[LAYOUT[rm.entry(n)["dtype"]][0]]) for n in fast]
                assert native.decode_float_file(memoryview(data), rows, outs, True) == [0] * len(fast)
        got = wcodec.load(bytearray(data), framework="np")
        assert data == (tmp_path / name).read_bytes()
        assert {k: v.tobytes() for k, v in got.items()} == \
            {k: v.tobytes() for k, v in wcodec.load_file(tmp_path / name, framework="np").items()}


def test_hostile_bytes_raise_only_wcodec_errors(tmp_path):
    import wcodec

    _write(tmp_path / "f.wcodec", CASES[:2] + CASES[-1:])
    good, _, header = read_header(tmp_path / "f.wcodec")
    rng = np.random.default_rng(3)
    for cut in (0, 8, 64, len(good) // 2, len(good) - 1):
        with pytest.raises(WcodecError):
            wcodec.load(good[:cut], framework="np")
    for _ in range(40):
        data = bytearray(good)
        for _ in range(4):
            data[int(rng.integers(64, len(good)))] ^= 1 << int(rng.integers(8))
        try:
            wcodec.load(bytes(data), framework="np")
        except WcodecError:
            pass


def test_save_builds_the_bytes_save_file_writes(tmp_path):
    import wcodec

    t = {n: a for n, (_, a) in _write(tmp_path / "unused.wcodec", CASES[:2] + CASES[-3:]).items()}
    t["raw"] = np.arange(5, dtype=np.int64)
    wcodec.save_file(t, tmp_path / "s.wcodec", metadata={"k": "v"})
    assert wcodec.save(t, metadata={"k": "v"}) == (tmp_path / "s.wcodec").read_bytes()
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # no temporary file left


def test_one_worker_encodes_on_the_calling_thread_alike(tmp_path):
    """workers=1 with the C extension encodes on the calling thread (no pool): the same bytes
    as two workers, and an error still aborts the file in write order."""
    import wcodec
    from wcodec.errors import UnsupportedError

    t = {n: a for n, (_, a) in _write(tmp_path / "unused.wcodec", CASES[:3]).items()}
    wcodec.save_file(t, tmp_path / "one.wcodec", workers=1)
    wcodec.save_file(t, tmp_path / "two.wcodec", workers=2)
    assert (tmp_path / "one.wcodec").read_bytes() == (tmp_path / "two.wcodec").read_bytes()
    with pytest.raises(UnsupportedError):  # a dtype the format lacks, after tensors already written
        wcodec.save_file({**t, "z": np.zeros(3, dtype=np.complex128)}, tmp_path / "bad.wcodec", workers=1)
    assert not (tmp_path / "bad.wcodec").exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["one.wcodec", "two.wcodec", "unused.wcodec"]


def test_a_section_the_decode_does_not_read_is_still_checked(tmp_path):
    """A float record holding a section its decode does not read (written by no encoder) is left
    to the reference path, which checks every section's checksum."""
    from wcodec.errors import ChecksumError

    path = tmp_path / "f.wcodec"
    cases = _write(path, CASES[:1])
    _, _, header = read_header(path)
    (name, e), = header["tensors"].items()
    e["sections"]["low16.words"] = {"dtype": "U16", "offset": 64, "size": 0, "crc32": 5}
    rewrite_header(path, header)
    with Reader(path) as r:
        assert not r.file_decodable(name)
        with pytest.raises(ChecksumError, match="low16.words"):
            r.get_numpy(name)
        assert r.get_numpy(name, verify=False).tobytes() == cases[name][1].tobytes()
