"""Regression tests of the hostile-input defects of issue 10, one or more per numbered item.

Cases that crashed or hung the process before the fix (SIGBUS, FIFOs) run in a subprocess with
a timeout, so a regression fails the test instead of killing or blocking the suite.
"""

from __future__ import annotations

import json
import os
import struct
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

import hostile
import wcodec
from wcodec.errors import CorruptDataError, FormatError, UnsupportedError, WcodecError
from wcodec.format import CheckpointReader, Reader, ShardedWriter, Writer, spec
from wcodec.format import sources

SRC = Path(__file__).resolve().parents[2] / "src"


def run_isolated(code: str, timeout: float = 60) -> subprocess.CompletedProcess:
    """Run ``code`` in a fresh interpreter with our src first; fails the test on a hang."""
    env = {**os.environ, "PYTHONPATH": f"{SRC}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    try:
        return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True,
                              text=True, timeout=timeout, env=env)
    except subprocess.TimeoutExpired:
        pytest.fail(f"hung for more than {timeout} s")


@pytest.fixture(scope="module")
def seeds(tmp_path_factory):
    return hostile.make_seeds(tmp_path_factory.mktemp("seeds"))


def _edit_container(src: Path, dst: Path, edit) -> Path:
    """Copy ``src`` with ``edit(header)`` applied, every checksum recomputed."""
    data = src.read_bytes()
    h_off, header = hostile.split_container(data)
    edit(header)
    buf = bytearray(data)
    hostile.fix_section_crcs(buf, header)
    dst.write_bytes(hostile.join_container(bytes(buf), h_off, hostile.dump(header)))
    return dst


def _read_all(path):
    hostile.read_container(path)


# -- 1. checksum-valid hostile metadata -------------------------------------------------------------
@pytest.mark.parametrize("tensor,key,value", [
    ("f32", ("head", "n_symbols"), float("nan")),
    ("f32", ("head", "prob_bits"), float("inf")),
    ("i8", ("res", "chunks_per_table"), 2 ** 64),
    ("i8", ("res", "chunk_steps"), 2 ** 63),
    ("f32", ("low",), [1, 2]),
    ("f32", ("low", 0), [1]),
    ("f32", ("head_bits",), 1.5),
    ("i8", ("rows",), 2 ** 64),
    ("i8", ("signed",), "yes"),
    ("f32.q", ("q",), [1]),
    ("f32.q", ("q", "tile_h"), 0),
])
def test_hostile_params_raise_wcodec_error(seeds, tmp_path, tensor, key, value):
    def edit(h):
        p = h["tensors"][tensor]["params"]
        for k in key[:-1]:
            p = p[k]
        p[key[-1]] = value

    path = _edit_container(seeds["container"], tmp_path / "bad.wcodec", edit)
    nonfinite = isinstance(value, float) and not np.isfinite(value)
    with pytest.raises(CorruptDataError, match="NaN|Infinity" if nonfinite else f"'{tensor}'"):
        Reader(path)  # refused when the header is parsed, before any decode
    assert wcodec.cli.main(["verify", str(path), "--quiet"]) == 1  # an error line, no traceback


def test_section_dtypes_are_checked_per_codec(seeds, tmp_path):
    # an F32 'modes' section (size a multiple of 4) crashed `wcodec info`'s mode histogram
    def edit(h):
        h["tensors"]["i8.smooth"]["sections"]["modes"]["dtype"] = "F32"

    path = _edit_container(seeds["container"], tmp_path / "bad.wcodec", edit)
    with pytest.raises(CorruptDataError, match="'modes' must be U8"):
        Reader(path)
    assert wcodec.cli.main(["info", str(path)]) == 1


def test_nan_in_header_rejected_even_where_unused(seeds, tmp_path):
    path = _edit_container(seeds["container"], tmp_path / "bad.wcodec",
                           lambda h: h["tensors"]["f32"].setdefault("info", {}).update(x=float("nan")))
    with pytest.raises(CorruptDataError, match="NaN"):
        Reader(path)


def test_decode_tensor_checks_params_of_records_from_elsewhere():
    from wcodec.codecs import decode_tensor, encode_tensor
    rec = encode_tensor(np.ones((64, 8), np.float32) * np.arange(8), "F32", codec="float")
    rec.params["low"] = [1, 2]
    with pytest.raises(CorruptDataError, match="'t'"):
        decode_tensor(rec, "t")


# -- 2. memory amplification ------------------------------------------------------------------------
def test_many_frequency_tables_are_refused():
    from wcodec import rans
    sym = np.random.default_rng(0).integers(0, 3, 1 << 16).astype(np.uint8)
    with pytest.raises(ValueError, match="tables"):  # the encoder refuses to write it...
        rans.encode(sym, chunk_steps=1, tables=1)
    plane = rans.encode(sym, chunk_steps=1, tables=64)
    hostile_plane = rans.RansPlane(plane.n_symbols, plane.prob_bits, 1, 1, plane.alphabet_size,
                                   np.tile(plane.freqs, 64), plane.states, plane.offsets, plane.words)
    with pytest.raises(CorruptDataError, match="frequency tables"):  # ...and the decoder to read it
        rans.decode(hostile_plane)


def test_int8_ratio_bound(seeds, tmp_path):
    def edit(h):  # ~200 bytes of sections claiming 4M int8 weights (within the old 65536x bound)
        e = h["tensors"]["u8"]
        e["shape"] = [1 << 11, 1 << 11]
        e["params"].update(rows=1 << 11, cols=1 << 11)
        e["params"]["res"]["n_symbols"] = 1 << 22

    path = _edit_container(seeds["container"], tmp_path / "big.wcodec", edit)
    with pytest.raises(CorruptDataError, match="int8 codec.s bound is 256 symbols"):
        Reader(path)


def test_writer_refuses_records_the_reader_would_refuse(tmp_path):
    from wcodec.codecs import encode_tensor
    zeros = np.zeros(1 << 21, np.int8)  # constant: 132 bytes per chunk of 32 x 65536 symbols
    with pytest.raises(ValueError, match="symbols per byte"):
        encode_tensor(zeros, "I8", chunk_steps=1 << 16, predict=False)
    rec = encode_tensor(zeros, "I8")  # the default chunk_steps stays far inside the bound
    with Writer(tmp_path / "z.wcodec") as w:
        w.add_record("z", rec, spec.crc32(zeros))
    assert Reader(tmp_path / "z.wcodec").get_numpy("z").sum() == 0


# -- 3. SIGBUS --------------------------------------------------------------------------------------
def test_truncated_while_open_is_an_error_not_sigbus(seeds, tmp_path):
    path = tmp_path / "t.wcodec"
    path.write_bytes(Path(seeds["container"]).read_bytes())
    res = run_isolated(f"""
        import os, wcodec
        from wcodec.errors import CorruptDataError
        with wcodec.safe_open({str(path)!r}, framework="np") as f:
            os.truncate({str(path)!r}, 4096)
            try:
                for k in f.keys():
                    f.get_tensor(k)
            except CorruptDataError as e:
                print("REJECTED", e)
    """)
    assert res.returncode == 0, res.stderr[-2000:]
    assert "REJECTED" in res.stdout and "truncated" in res.stdout


def test_zero_copy_records_check_the_size_first(seeds, tmp_path):
    path = tmp_path / "t.wcodec"
    path.write_bytes(Path(seeds["container"]).read_bytes())
    with Reader(path) as r:
        a = r.record("f32", copy=False)
        b = r.record("f32")
        assert all(np.array_equal(a.sections[k], b.sections[k]) for k in a.sections)
        del a
        os.truncate(path, 4096)
        with pytest.raises(CorruptDataError, match="changed size"):
            r.record("f32", copy=False)


def test_safetensors_truncated_while_reading(seeds, tmp_path):
    path = tmp_path / "t.safetensors"
    path.write_bytes(Path(seeds["safetensors"]).read_bytes())
    res = run_isolated(f"""
        import os
        from wcodec.errors import CorruptDataError
        from wcodec.format import sources
        _, items = sources.read_safetensors({str(path)!r})
        os.truncate({str(path)!r}, 200)
        try:
            for it in items:
                it.array.sum()
        except CorruptDataError as e:
            print("REJECTED", e)
    """)
    assert res.returncode == 0, res.stderr[-2000:]
    assert "REJECTED" in res.stdout and "short read" in res.stdout


# -- 4. FIFOs ---------------------------------------------------------------------------------------
@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs FIFOs (POSIX)")
def test_fifos_are_refused_without_blocking(seeds, tmp_path):
    fifo = tmp_path / "fifo.wcodec"
    os.mkfifo(fifo)
    folder = tmp_path / "sharded"
    folder.mkdir()
    for p in Path(seeds["sharded"]).iterdir():
        (folder / p.name).write_bytes(p.read_bytes())
    index = next(folder.glob("*.index.json"))
    shard = sorted(folder.glob("*.wcodec"))[0]
    shard.unlink()
    os.mkfifo(shard)
    fifo_idx = tmp_path / "idx"
    fifo_idx.mkdir()
    os.mkfifo(fifo_idx / index.name)
    st = tmp_path / "fifo.safetensors"
    os.mkfifo(st)
    res = run_isolated(f"""
        import wcodec
        from wcodec.errors import FormatError
        from wcodec.format import sources
        for target in ({str(fifo)!r}, {str(folder)!r}, {str(fifo_idx)!r}):
            try:
                wcodec.load_file(target, framework="np")
            except FormatError as e:
                print("REJECTED", e)
        try:
            sources.read_safetensors({str(st)!r})
        except FormatError as e:
            print("REJECTED", e)
    """, timeout=60)
    assert res.returncode == 0, res.stderr[-2000:]
    assert res.stdout.count("REJECTED") == 4, res.stdout
    assert "not a regular file" in res.stdout


# -- 5. deep JSON -----------------------------------------------------------------------------------
DEEP = b"[" * 100_000 + b"]" * 100_000


def test_deep_json_everywhere(seeds, tmp_path):
    folder = tmp_path / "sharded"
    folder.mkdir()
    for p in Path(seeds["sharded"]).iterdir():
        (folder / p.name).write_bytes(p.read_bytes())
    next(folder.glob("*.index.json")).write_bytes(b'{"weight_map": ' + DEEP + b"}")
    with pytest.raises(FormatError, match="nested too deeply"):
        CheckpointReader(folder)
    st = tmp_path / "deep.safetensors"
    st.write_bytes(struct.pack("<Q", len(DEEP)) + DEEP)
    with pytest.raises(FormatError, match="nested too deeply"):
        sources.read_safetensors(st)
    data = Path(seeds["container"]).read_bytes()
    h_off, _ = hostile.split_container(data)
    c = tmp_path / "deep.wcodec"
    c.write_bytes(hostile.join_container(data, h_off, DEEP))
    with pytest.raises(CorruptDataError, match="nested too deeply"):
        Reader(c)
    v = tmp_path / "deep.vectors.wcodec"
    vdata = Path(seeds["vectors"]).read_bytes()
    h_off, header = hostile.split_container(vdata)
    header["metadata"]["wcodec.vectors"] = DEEP.decode()
    v.write_bytes(hostile.join_container(vdata, h_off, hostile.dump(header)))
    from wcodec.vectors.index import load_index
    with pytest.raises(CorruptDataError, match="nested too deeply"):
        load_index(v)


# -- 6. safetensors inputs --------------------------------------------------------------------------
def _st(tmp_path, header) -> Path:
    raw = json.dumps(header).encode() if not isinstance(header, bytes) else header
    p = tmp_path / "h.safetensors"
    p.write_bytes(struct.pack("<Q", len(raw)) + raw + bytes(64))
    return p


@pytest.mark.parametrize("header", [
    {"a": {"dtype": "F32", "shape": [-1, 4], "data_offsets": [0, 16]}},
    {"a": {"dtype": "F32", "shape": [2 ** 64], "data_offsets": [0, 16]}},
    {"a": {"dtype": "F32", "shape": [4], "data_offsets": ["0", "16"]}},
    {"a": {"dtype": "F32", "shape": [4], "data_offsets": [0, 2 ** 64]}},
    {"a": {"dtype": "F32", "shape": [4], "data_offsets": [0]}},
    {"a": {"dtype": ["F32"], "shape": [4], "data_offsets": [0, 16]}},
    {"a": {"dtype": "F32", "shape": "4", "data_offsets": [0, 16]}},
    {"a": {"dtype": "F32", "shape": [1.5], "data_offsets": [0, 16]}},
    {"a": [1, 2]},
    [1, 2],
    "x",
    {"__metadata__": {"k": 1}},
    {"__metadata__": [1]},
    b'{"a": NaN}',
    b'{"a": 1, "a": 2}',
])
def test_malformed_safetensors_headers(tmp_path, header):
    with pytest.raises(WcodecError):
        meta, items = sources.read_safetensors(_st(tmp_path, header))
        list(items)


# -- 7. vectors index files -------------------------------------------------------------------------
@pytest.mark.parametrize("edit", [
    lambda m: m.pop("assignment_planes"),
    lambda m: m.update(n=2 ** 64),
    lambda m: m.update(n="5"),
    lambda m: m.update(d=0),
    lambda m: m.update(sub_sizes="x"),
    lambda m: m.update(sub_sizes=[2 ** 70]),
    lambda m: m.update(assignment_planes=[1]),
    lambda m: m.update(table_planes={"rotation": 5}),
    lambda m: m.update(version=[1]),
    lambda m: m.update(energy="x"),
    lambda m: m.update(source_itemsize=None),
    lambda m: m.update(code_planes=None),  # found by tools/fuzz.py (seed 9150)
    lambda m: m["assignment_planes"][0].update(chunks_per_table=2 ** 64),
    lambda m: m["assignment_planes"][0].update(n_symbols=1.5),
])
def test_malformed_vectors_metadata(seeds, tmp_path, edit):
    from wcodec.vectors.index import load_index
    data = Path(seeds["vectors"]).read_bytes()
    h_off, header = hostile.split_container(data)
    meta = json.loads(header["metadata"]["wcodec.vectors"])
    edit(meta)
    header["metadata"]["wcodec.vectors"] = json.dumps(meta)
    path = tmp_path / "v.wcodec"
    path.write_bytes(hostile.join_container(data, h_off, hostile.dump(header)))
    with pytest.raises(WcodecError):
        load_index(path)


# -- 8. sharded output atomic -----------------------------------------------------------------------
def _tensors(n=6, seed=0):
    rng = np.random.default_rng(seed)
    return {f"t{i}": rng.standard_normal((40, 40)).astype(np.float32) for i in range(n)}


def test_killed_after_first_shard_rename_is_refused_not_partial(tmp_path):
    out = tmp_path / "out"
    res = run_isolated(f"""
        import os, numpy as np
        from wcodec.format import ShardedWriter, encode_into
        from wcodec.format.encode import Item
        real, n = os.replace, [0]
        def replace(a, b):
            real(a, b)
            n[0] += 1
            if n[0] == 1:
                os._exit(9)  # as kill -9 right after the first shard's rename
        os.replace = replace
        rng = np.random.default_rng(0)
        items = [Item(f"t{{i}}", rng.standard_normal((40, 40)).astype(np.float32), "F32") for i in range(6)]
        with ShardedWriter({str(out)!r}, max_shard_size=7000) as w:
            encode_into(w, items, workers=1)
    """)
    assert res.returncode == 9, res.stderr[-2000:]
    shards = sorted(p.name for p in out.glob("*.wcodec"))
    assert len(shards) == 1 and "-of-" in shards[0]
    with pytest.raises(FormatError, match="incomplete"):
        wcodec.load_file(out, framework="np")


def test_one_file_over_an_older_sharded_checkpoint(tmp_path):
    out = tmp_path / "out"
    old = _tensors(6, 0)
    with ShardedWriter(out, max_shard_size=7000) as w:
        from wcodec.format import encode_into
        from wcodec.format.encode import Item
        encode_into(w, [Item(k, v, "F32") for k, v in old.items()], workers=1)
    assert (out / f"model{spec.INDEX_SUFFIX}").exists()
    new = {"x": np.arange(10, dtype=np.float32)}
    with ShardedWriter(out) as w:
        encode_into(w, [Item(k, v, "F32") for k, v in new.items()], workers=1)
    assert sorted(p.name for p in out.iterdir()) == ["model.wcodec"]
    got = wcodec.load_file(out, framework="np")
    assert list(got) == ["x"] and np.array_equal(got["x"], new["x"])
    with ShardedWriter(out, max_shard_size=7000) as w:  # and back: the single file goes
        encode_into(w, [Item(k, v, "F32") for k, v in old.items()], workers=1)
    assert not (out / "model.wcodec").exists()
    assert sorted(wcodec.load_file(out, framework="np")) == sorted(old)


def test_sharded_abort_survives_a_full_disk(tmp_path, monkeypatch):
    from wcodec.codecs import encode_tensor
    out = tmp_path / "out"
    w = ShardedWriter(out, max_shard_size=3000)
    for k, v in _tensors(4).items():
        w.add_record(k, encode_tensor(v, "F32"), spec.crc32(v))
    assert len(w.shards) >= 3

    def enospc():
        raise OSError(28, "No space left on device")
    monkeypatch.setattr(w.shards[0]._f, "close", enospc)
    w.abort()  # must not stop at the first shard's error
    assert list(out.iterdir()) == []


def test_stale_temps_of_dead_writers_are_removed(tmp_path):
    p = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    dead = int(p.stdout)
    stale = tmp_path / f".model.wcodec.{dead}-abcd1234.tmp"
    live = tmp_path / f".model.wcodec.{os.getpid()}-efgh5678.tmp"
    other = tmp_path / f".other.wcodec.{dead}-abcd1234.tmp"
    for f in (stale, live, other):
        f.write_bytes(b"x")
    wcodec.save_file({"a": np.ones(3, np.float32)}, tmp_path / "model.wcodec")
    assert not stale.exists() and live.exists() and other.exists()


# -- 9. unique temporary names ----------------------------------------------------------------------
def test_concurrent_safetensors_writes_do_not_mix(tmp_path):
    dst = tmp_path / "out.safetensors"
    a = {f"a{i}": np.full((8,), i, np.float32) for i in range(3)}
    b = {f"b{i}": np.full((8,), 10 + i, np.float32) for i in range(3)}

    def produce_a(name):
        if name == "a1":  # writer B runs entirely while A is half-way through
            sources.write_safetensors(dst, [(k, "F32", (8,)) for k in b], b.__getitem__)
        return a[name]

    sources.write_safetensors(dst, [(k, "F32", (8,)) for k in a], produce_a)
    from safetensors.numpy import load_file
    got = load_file(str(dst))
    assert sorted(got) == sorted(a) and all(np.array_equal(got[k], a[k]) for k in a)
    assert [p.name for p in tmp_path.iterdir()] == ["out.safetensors"]


# -- 10. outside the folder -------------------------------------------------------------------------
def _st_folder(folder: Path, seeds) -> Path:
    folder.mkdir()
    (folder / "model.safetensors").write_bytes(Path(seeds["safetensors"]).read_bytes())
    return folder


@pytest.mark.parametrize("entry", ["../secret.safetensors", "/etc/passwd", "sub/../../x.safetensors"])
def test_index_entries_outside_the_folder(seeds, tmp_path, entry):
    folder = _st_folder(tmp_path / "m", seeds)
    (folder / "model.safetensors.index.json").write_text(json.dumps({"weight_map": {"w": entry}}))
    with pytest.raises(FormatError, match="outside|relative"):
        sources.weight_files(folder)


def test_symlinks_out_of_the_folder(seeds, tmp_path):
    secret = tmp_path / "secret.safetensors"
    secret.write_bytes(Path(seeds["safetensors"]).read_bytes())
    folder = tmp_path / "m"
    folder.mkdir()
    (folder / "model.safetensors").symlink_to(secret)
    with pytest.raises(FormatError, match="outside"):
        sources.weight_files(folder)
    # a wcodec shard symlinked out of its folder
    sh = tmp_path / "sh"
    sh.mkdir()
    for p in Path(seeds["sharded"]).iterdir():
        (sh / p.name).write_bytes(p.read_bytes())
    shard = sorted(sh.glob("*.wcodec"))[0]
    (tmp_path / "elsewhere.wcodec").write_bytes(shard.read_bytes())
    shard.unlink()
    shard.symlink_to(tmp_path / "elsewhere.wcodec")
    with pytest.raises(FormatError, match="outside"):
        wcodec.load_file(sh, framework="np")
    # a side file symlinked out is not copied
    m2 = _st_folder(tmp_path / "m2", seeds)
    (tmp_path / "private.txt").write_text("secret")
    (m2 / "tokenizer.json").symlink_to(tmp_path / "private.txt")
    (m2 / "vocab.txt").write_text("a b")
    dst = tmp_path / "dst"
    with pytest.warns(UserWarning, match="outside"):
        wcodec.encode_safetensors_to_wcodec(m2, dst)
    assert (dst / "vocab.txt").exists() and not (dst / "tokenizer.json").exists()


# -- 11. smaller ones -------------------------------------------------------------------------------
def test_zero_d_numpy_round_trip(tmp_path):
    p = tmp_path / "s.wcodec"
    wcodec.save_file({"s": np.array(2.5, np.float32), "b": np.array(True), "i": np.array(7, np.int64)}, p)
    got = wcodec.load_file(p, framework="np")
    assert all(v.shape == () for v in got.values()) and got["s"] == 2.5 and got["i"] == 7


def test_more_than_32_dims_refused_at_write(tmp_path):
    with pytest.raises(UnsupportedError, match="33 dimensions"):
        wcodec.save_file({"x": np.zeros((1,) * 33, np.float32)}, tmp_path / "x.wcodec")
    assert list(tmp_path.iterdir()) == []


def test_metadata_tensor_name_refused_on_safetensors_output(tmp_path):
    p = tmp_path / "m.wcodec"
    wcodec.save_file({"__metadata__": np.ones(3, np.float32)}, p)
    with pytest.raises(UnsupportedError, match="__metadata__"):
        wcodec.decode_to_safetensors(p, tmp_path / "m.safetensors")
    assert not (tmp_path / "m.safetensors").exists()


def test_config_that_is_not_an_object(seeds, tmp_path):
    from wcodec.hf import convert_folder
    folder = _st_folder(tmp_path / "m", seeds)
    (folder / "config.json").write_text("[1, 2]")
    with pytest.raises(FormatError, match="JSON object"):
        convert_folder(folder, tmp_path / "out")
    assert not (tmp_path / "out").exists() or not list((tmp_path / "out").glob("*.wcodec"))


def test_sparse_meta_and_nul_names():
    torch = pytest.importorskip("torch")
    import tempfile
    with tempfile.TemporaryDirectory() as d:
        p = Path(d) / "x.wcodec"
        with pytest.raises(WcodecError, match="sparse"):
            wcodec.save_file({"s": torch.eye(3).to_sparse()}, p)
        with pytest.raises(WcodecError, match="meta"):
            wcodec.save_file({"m": torch.zeros(3, device="meta")}, p)
        with pytest.raises(UnsupportedError, match="NUL"):
            wcodec.save_file({"a\x00b": np.ones(3, np.float32)}, p)
        assert list(Path(d).iterdir()) == []


def test_int8_mode_keeps_nonfinite_tensors_lossless(tmp_path):
    w = np.random.default_rng(0).standard_normal((64, 64)).astype(np.float32)
    bad = w.copy()
    bad[3, 4] = np.nan
    bad[5, 6] = np.inf
    p = tmp_path / "q.wcodec"
    with pytest.warns(UserWarning, match="'bad'.*lossless"):
        wcodec.save_file({"good": w, "bad": bad}, p, mode="int8")
    with Reader(p) as r:
        assert r.entry("bad")["codec"] == "float" and r.entry("good")["codec"] == "int8-quant"
        got = r.get_numpy("bad")
    assert np.array_equal(got.view(np.uint32), bad.view(np.uint32))


def test_bf16_nonfinite_detection():
    from wcodec.format.encode import has_nonfinite
    bits = np.array([0x3F80, 0x7F80, 0xFFC0, 0x0001], np.uint16)
    assert has_nonfinite(bits, "BF16") and not has_nonfinite(bits[[0, 3]], "BF16")


@pytest.mark.parametrize("raw", [
    '{"weight_map": {"a": "model-00001-of-00002.wcodec", "a": "model-00002-of-00002.wcodec"}}',
    '{"weight_map": {"f32": "missing-00001-of-00002.wcodec"}}',
    '{"weight_map": {}}',
    '{"weight_map": []}',
    '{"weight_map": {"a": "../model-00001-of-00002.wcodec"}}',
])
def test_bad_weight_maps(seeds, tmp_path, raw):
    sh = tmp_path / "sh"
    sh.mkdir()
    for p in Path(seeds["sharded"]).iterdir():
        (sh / p.name).write_bytes(p.read_bytes())
    next(sh.glob("*.index.json")).write_text(raw)
    with pytest.raises(FormatError):
        wcodec.load_file(sh, framework="np")
    st = _st_folder(tmp_path / "st", seeds)
    (st / "model.safetensors.index.json").write_text(raw.replace("model-00001-of-00002.wcodec", "model.safetensors")
                                                     .replace("model-00002-of-00002.wcodec", "model.safetensors"))
    with pytest.raises(FormatError):
        sources.weight_files(st)
