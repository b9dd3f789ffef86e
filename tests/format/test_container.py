"""Writer/reader round trips, layout rules, aliases, sharding, atomic writes, header schema."""

from __future__ import annotations

import json
from importlib import resources

import numpy as np
import pytest

from _container_helpers import read_header, write_mixed
from wcodec.errors import WcodecError
from wcodec.format import CheckpointReader, Reader, ShardedWriter, Writer, encode_into, spec
from wcodec.format.encode import Item


def test_round_trip_layout_and_spans(mixed_file):
    path, tensors = mixed_file
    with Reader(path) as r:
        assert r.keys() == list(tensors) + ["w.tied"]
        assert r.metadata() == {"origin": "test"}
        for name, arr in tensors.items():
            out = r.get_numpy(name)
            assert out.shape == arr.shape and out.tobytes() == arr.tobytes(), name
            assert r.numel(name) == arr.size, name
        assert r.alias_of("w.tied") == "w.f32" and r.alias_of("w.f32") is None
        assert np.array_equal(r.get_numpy("w.tied"), tensors["w.f32"])
        for name in tensors:
            spans = r.section_spans(name)
            assert all(off % spec.ALIGN == 0 for off, _ in spans.values())
            start, end = r.span(name)
            if any(s for _, s in spans.values()):
                # the span holds exactly the sections plus alignment padding
                assert end - start < sum(s for _, s in spans.values()) + spec.ALIGN * len(spans)
                rec = r.record(name)
                for sname, (off, size) in spans.items():
                    view = rec.sections[sname]
                    assert not view.flags.writeable
                    assert r.buffer()[off:off + size].tobytes() == view.tobytes()
    assert {r.entry(n)["codec"] for n in tensors} >= {"raw"}


def test_codec_choice(mixed_file):
    path, _ = mixed_file
    with Reader(path) as r:
        codecs = {n: r.entry(n)["codec"] for n in r.keys() if not r.alias_of(n)}
    assert codecs["w.f32"] == "float" and codecs["w.bf16"] == "float" and codecs["q.i8"] == "int8"
    assert codecs["idx.i64"] == codecs["scalar"] == codecs["empty"] == codecs["mask"] == "raw"


def test_header_matches_schema(mixed_file, tmp_path):
    jsonschema = pytest.importorskip("jsonschema")
    schema = json.loads(resources.files("wcodec").joinpath("schema/header.schema.json").read_text())
    jsonschema.Draft202012Validator.check_schema(schema)
    _, _, header = read_header(mixed_file[0])
    jsonschema.validate(header, schema)
    # and the schema rejects what the reader rejects
    bad = json.loads(json.dumps(header))
    bad["tensors"]["w.f32"]["sections"]["tail"]["offset"] += 1
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(bad, schema)


def test_deterministic_whatever_the_workers(tmp_path):
    write_mixed(tmp_path / "a.wcodec")
    t = write_mixed(tmp_path / "b.wcodec")
    with Writer(tmp_path / "c.wcodec", {"origin": "test"}) as w:
        from _container_helpers import DTYPE_OF
        items = [Item(k, v, DTYPE_OF[k], (k,)) for k, v in t.items()] + [Item("w.tied", t["w.f32"], "F32", ("w.f32",))]
        encode_into(w, items, workers=1)
    assert (tmp_path / "a.wcodec").read_bytes() == (tmp_path / "b.wcodec").read_bytes() \
        == (tmp_path / "c.wcodec").read_bytes()


def _failing_items(n_ok: int):
    for i in range(n_ok):
        yield Item(f"t{i}", np.full((64, 64), i, np.float32), "F32")
    raise RuntimeError("interrupted")


@pytest.mark.parametrize("workers", [1, 3])
def test_interrupted_write_leaves_nothing(tmp_path, workers):
    dest = tmp_path / "out.wcodec"
    with pytest.raises(RuntimeError, match="interrupted"):
        with Writer(dest) as w:
            encode_into(w, _failing_items(5), workers=workers)
    assert list(tmp_path.iterdir()) == []
    with pytest.raises(RuntimeError):
        with ShardedWriter(tmp_path / "shards", max_shard_size=10_000) as sw:
            encode_into(sw, _failing_items(5), workers=workers)
    assert list((tmp_path / "shards").iterdir()) == []


def test_existing_destination_survives_failure(tmp_path):
    dest = tmp_path / "out.wcodec"
    dest.write_bytes(b"previous")
    with pytest.raises(RuntimeError):
        with Writer(dest) as w:
            encode_into(w, _failing_items(2))
    assert dest.read_bytes() == b"previous"


def test_sharded_round_trip_with_alias(tmp_path):
    rng = np.random.default_rng(1)
    arrays = {f"layer{i}.w": rng.standard_normal((64, 64)).astype(np.float32) for i in range(5)}
    items = [Item(k, v, "F32", (k,)) for k, v in arrays.items()] + [Item("head.w", arrays["layer0.w"], "F32", ("layer0.w",))]
    with ShardedWriter(tmp_path / "ck", max_shard_size=20_000, metadata={"m": "1"}) as sw:
        encode_into(sw, items)
    names = sorted(p.name for p in (tmp_path / "ck").iterdir())
    assert "model.wcodec.index.json" in names and "model-00001-of-00005.wcodec" in names, names
    index = json.loads((tmp_path / "ck" / "model.wcodec.index.json").read_text())
    assert index["weight_map"]["head.w"] == index["weight_map"]["layer0.w"]
    for target in (tmp_path / "ck", tmp_path / "ck" / "model.wcodec.index.json"):
        with CheckpointReader(target) as r:
            assert r.keys() == list(arrays) + ["head.w"]
            assert r.metadata() == {"m": "1"}
            for k, v in arrays.items():
                assert np.array_equal(r.get_numpy(k), v)
            assert r.alias_of("head.w") == "layer0.w"
            assert r.numel("head.w") == r.numel("layer1.w") == 64 * 64


def test_single_shard_has_no_index(tmp_path):
    with ShardedWriter(tmp_path / "ck") as sw:
        encode_into(sw, [Item("a", np.ones(3, np.float32), "F32")])
    assert sorted(p.name for p in (tmp_path / "ck").iterdir()) == ["model.wcodec"]


def test_bad_index_rejected(tmp_path):
    (tmp_path / "model.wcodec.index.json").write_text(json.dumps({"weight_map": {"a": "../etc/x.wcodec"}}))
    with pytest.raises(WcodecError):
        CheckpointReader(tmp_path)


def test_writer_rejects_duplicates_and_bad_metadata(tmp_path):
    with pytest.raises(TypeError):
        Writer(tmp_path / "x.wcodec", {"a": 1})
    with pytest.raises(ValueError):
        with Writer(tmp_path / "x.wcodec") as w:
            encode_into(w, [Item("a", np.ones(2, np.float32), "F32"), Item("a", np.ones(2, np.float32), "F32")])
    assert list(tmp_path.iterdir()) == []


def test_map_in_threads_starts_costliest_first_and_keeps_order():
    from wcodec.format.encode import map_in_threads

    sizes = {"a": 3, "b": 100, "c": 7, "d": 100, "e": 0}
    started = []

    def fn(n):
        started.append(n)
        return n.upper()

    out = map_in_threads(fn, list(sizes), workers=1, cost=sizes.get)
    assert list(out.items()) == [(n, n.upper()) for n in sizes]  # the caller's order
    assert started == ["b", "d", "c", "a", "e"]  # largest first, ties in the caller's order
    started.clear()
    assert list(map_in_threads(fn, list(sizes), workers=1)) == list(sizes) and started == list(sizes)


def test_map_in_threads_runs_on_workers_and_raises_the_first_error():
    import threading

    from wcodec.format.encode import map_in_threads

    names = [f"t{i}" for i in range(40)]
    seen, both = set(), threading.Barrier(2, timeout=10)

    def fn(n):
        seen.add(threading.get_ident())
        if n in ("t0", "t1"):
            both.wait()  # returns only when two threads run fn at once
        return n

    assert map_in_threads(fn, names, workers=2) == {n: n for n in names}
    assert threading.get_ident() not in seen  # never the caller's thread (numba: see encode_into)
    taken = []

    def failing(n):
        taken.append(n)
        if n == "t3":
            raise KeyError("bad tensor t3")
        return n

    with pytest.raises(KeyError, match="bad tensor t3"):
        map_in_threads(failing, names, workers=1)
    assert taken == names[:4]  # nothing is taken after the error


def test_imap_in_threads_yields_in_order_a_bounded_distance_ahead():
    import threading

    from wcodec.format.encode import imap_in_threads

    names = [f"t{i}" for i in range(30)]
    started, lock = [], threading.Lock()

    def fn(n):
        with lock:
            started.append(n)
        return n.upper()

    got = []
    for i, v in enumerate(imap_in_threads(fn, names, workers=2)):
        got.append(v)
        assert len(started) <= i + 1 + 2  # at most workers names beyond the one handed out
    assert got == [n.upper() for n in names]

    def failing(n):
        if n == "t5":
            raise KeyError("bad tensor t5")
        return n

    it = imap_in_threads(failing, names, workers=2)
    assert [next(it) for _ in range(5)] == names[:5]
    with pytest.raises(KeyError, match="bad tensor t5"):
        next(it)
    early = imap_in_threads(fn, names, workers=1)
    started.clear()
    assert next(early) == "T0"
    early.close()  # the consumer stops: nothing more starts
    n = len(started)
    assert n <= 3 and len(started) == n


def test_map_in_threads_one_name_runs_on_the_calling_thread(monkeypatch):
    """A thread's start and join cost more than a small tensor's decode (get_tensor decodes one
    name per call); numba's parallel kernels, slow from the main thread, keep the worker thread."""
    import threading

    from wcodec import native
    from wcodec.format.encode import map_in_threads

    where = []

    def fn(n):
        where.append(threading.current_thread())
        return n

    monkeypatch.setattr(native, "available", lambda: True)
    assert map_in_threads(fn, ["a"], workers=4) == {"a": "a"}
    assert map_in_threads(fn, ["b", "c"], workers=1) == {"b": "b", "c": "c"}
    assert where == [threading.current_thread()] * 3
    where.clear()
    monkeypatch.setattr(native, "available", lambda: False)
    assert map_in_threads(fn, ["a"], workers=4) == {"a": "a"}
    assert where and where[0] is not threading.current_thread()
