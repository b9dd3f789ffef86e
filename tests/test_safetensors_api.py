"""safetensors parity: wcodec.torch / wcodec.numpy save/load (file and bytes), safe_open
(keys, metadata, get_tensor, get_tensors, get_slice, closed handle), error types, map_location,
save_model / load_model shared-tensor rules, every torch dtype, and the seed entry points."""

from __future__ import annotations

import sys

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import wcodec  # noqa: E402
import wcodec.numpy  # noqa: E402
import wcodec.torch  # noqa: E402
from wcodec.codecs import decode_tensor, encode_tensor  # noqa: E402
from wcodec.format import Writer, spec  # noqa: E402
from wcodec.errors import (ClosedError, DeviceError, InvalidInputError, MissingDependencyError,  # noqa: E402
                           TensorNotFoundError, UnsupportedError, WcodecError)

#: torch dtype -> stored name: every dtype safetensors 0.8 writes (F4 as packed pairs)
SUPPORTED = {torch.bool: "BOOL", torch.uint8: "U8", torch.int8: "I8", torch.int16: "I16",
             torch.uint16: "U16", torch.int32: "I32", torch.uint32: "U32", torch.int64: "I64",
             torch.uint64: "U64", torch.float16: "F16", torch.bfloat16: "BF16", torch.float32: "F32",
             torch.float64: "F64", torch.complex64: "C64", torch.float8_e4m3fn: "F8_E4M3",
             torch.float8_e5m2: "F8_E5M2", torch.float8_e4m3fnuz: "F8_E4M3FNUZ",
             torch.float8_e5m2fnuz: "F8_E5M2FNUZ", torch.float8_e8m0fnu: "F8_E8M0",
             torch.float4_e2m1fn_x2: "F4_X2"}


def _all_torch_dtypes():
    return sorted({v for v in vars(torch).values() if isinstance(v, torch.dtype)}, key=str)


def _random(dtype, shape, seed=0):
    """Random bit patterns of any dtype (NaNs and all), via bytes."""
    g = torch.Generator().manual_seed(seed)
    size = torch.empty(0, dtype=dtype).element_size()
    n = int(np.prod(shape, dtype=np.int64))
    if dtype == torch.bool:
        return torch.randint(0, 2, shape, generator=g).bool()
    return torch.randint(0, 256, (n * size,), dtype=torch.uint8, generator=g).view(dtype).reshape(shape)


def _same_bits(a, b) -> bool:
    return a.dtype == b.dtype and a.shape == b.shape and torch.equal(
        a.reshape(-1).view(torch.uint8), b.reshape(-1).view(torch.uint8))


@pytest.mark.filterwarnings("ignore::UserWarning")  # complex32 / quantized dtypes warn on creation
@pytest.mark.parametrize("dtype", _all_torch_dtypes(), ids=str)
def test_round_trip_of_every_torch_dtype(dtype, tmp_path):
    shapes = [(), (5,), (40, 33)]  # raw, raw, and coded where a codec exists (>= 256 elements)
    try:
        tensors = {f"t{i}": _random(dtype, s, i) for i, s in enumerate(shapes)}
    except (RuntimeError, TypeError):
        pytest.skip(f"torch cannot make a {dtype} tensor from bytes")
    if dtype not in SUPPORTED:
        with pytest.raises(UnsupportedError, match="t0"):
            wcodec.torch.save_file(tensors, tmp_path / "x.wcodec")
        assert not (tmp_path / "x.wcodec").exists()
        return
    for out in (wcodec.torch.load(wcodec.torch.save(tensors)),
                (wcodec.torch.save_file(tensors, tmp_path / "x.wcodec"), wcodec.torch.load_file(tmp_path / "x.wcodec"))[1]):
        for k, t in tensors.items():
            assert _same_bits(out[k], t), (k, dtype)
    with wcodec.safe_open(tmp_path / "x.wcodec") as f:
        rec = f.record("t2")
        assert rec.dtype == SUPPORTED[dtype]
        if rec.dtype.startswith("F8_") and rec.dtype != "F8_E8M0":
            assert rec.codec == "fp8"


def test_numpy_flavour_bytes_and_complex():
    arrays = {"c": (np.arange(12) + 1j * np.arange(12)).astype(np.complex64).reshape(3, 4),
              "f": np.linspace(-1, 1, 600, dtype=np.float32).reshape(20, 30)}  # 0-d numpy arrays: helper i10's fix
    out = wcodec.numpy.load(wcodec.numpy.save(arrays, metadata={"k": "v"}))
    for k, a in arrays.items():
        assert out[k].dtype == a.dtype and out[k].shape == a.shape and np.array_equal(out[k], a), k


def test_fp8_checkpoint_through_safetensors_and_cli_encode(tmp_path):
    from safetensors.torch import save_file as st_save
    w = torch.randn(64, 48)
    sd = {"w": (w / (w.abs().max() / 448)).to(torch.float8_e4m3fn), "w_scale": w.abs().max().reshape(1) / 448,
          "e5": torch.randn(300).to(torch.float8_e5m2)}
    st_save(sd, tmp_path / "m.safetensors")
    paths = wcodec.encode_safetensors_to_wcodec(tmp_path / "m.safetensors", tmp_path / "m.wcodec")
    out = wcodec.torch.load_file(paths[0])
    assert all(_same_bits(out[k], v) for k, v in sd.items())
    wcodec.decode_to_safetensors(tmp_path / "m.wcodec", tmp_path / "back.safetensors")
    from safetensors.torch import load_file as st_load
    back = st_load(tmp_path / "back.safetensors")
    assert all(_same_bits(back[k], v) for k, v in sd.items())


# -- errors ----------------------------------------------------------------------------------
def test_argument_errors_are_value_errors(tmp_path):
    for bad_call in (lambda: wcodec.torch.save_file({"a": [1, 2]}, tmp_path / "a.wcodec"),
                     lambda: wcodec.torch.save_file({"a": torch.zeros(2)}, tmp_path / "a.wcodec", metadata="x"),
                     lambda: wcodec.torch.save_file({"a": torch.zeros(2)}, tmp_path / "a.wcodec", metadata={"k": 1}),
                     lambda: wcodec.torch.save_file([torch.zeros(2)], tmp_path / "a.wcodec"),
                     lambda: wcodec.torch.save({"a": 3}),
                     lambda: wcodec.torch.load("not bytes"),
                     lambda: wcodec.safe_open(tmp_path / "a.wcodec", framework="tf")):
        with pytest.raises(ValueError) as e:
            bad_call()
        assert isinstance(e.value, WcodecError) and isinstance(e.value, InvalidInputError)
    assert not list(tmp_path.iterdir())


def test_metadata_none_when_absent_and_closed_handle(tmp_path):
    wcodec.torch.save_file({"a": torch.zeros(3)}, tmp_path / "a.wcodec")
    wcodec.torch.save_file({"a": torch.zeros(3)}, tmp_path / "b.wcodec", metadata={"format": "pt"})
    with wcodec.safe_open(tmp_path / "a.wcodec", framework="pt") as f:
        assert f.metadata() is None and f.keys() == ["a"] and not f.closed
        s = f.get_slice("a")
        with pytest.raises(TensorNotFoundError) as e:
            f.get_tensor("nope")
        assert isinstance(e.value, KeyError) and "nope" in str(e.value)
    with wcodec.safe_open(tmp_path / "b.wcodec", framework="np") as g:
        assert g.metadata() == {"format": "pt"}
    assert f.closed
    for use in (f.keys, f.metadata, lambda: f.get_tensor("a"), lambda: f.get_slice("a"),
                lambda: f.get_tensors(), lambda: s[0:1]):
        with pytest.raises(ClosedError):
            use()


def test_cuda_absent_is_a_clear_error(tmp_path):
    if torch.cuda.is_available():
        pytest.skip("CUDA is available here")
    wcodec.torch.save_file({"a": torch.zeros(3)}, tmp_path / "a.wcodec")
    for call in (lambda: wcodec.torch.load_file(tmp_path / "a.wcodec", device="cuda"),
                 lambda: wcodec.load_wcodec_checkpoint(tmp_path / "a.wcodec", map_location="cuda:0"),
                 lambda: wcodec.safe_open(tmp_path / "a.wcodec", device=0),
                 lambda: wcodec.gpu.GPUDecoder(use_gpu=True)):
        with pytest.raises(DeviceError, match="CUDA is not available"):
            call()


def test_missing_torch_names_the_extra(monkeypatch):
    from wcodec import api
    monkeypatch.setitem(sys.modules, "torch", None)
    with pytest.raises(MissingDependencyError, match=r"wcodec\[torch\]") as e:
        api.import_torch()
    assert isinstance(e.value, ImportError)


def test_wcodec_torch_without_torch_names_the_extra():
    import subprocess
    code = ("import sys; sys.modules['torch'] = None\n"
            "try:\n    import wcodec.torch\nexcept ImportError as e:\n"
            "    import wcodec; assert isinstance(e, wcodec.MissingDependencyError); print(e)")
    out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True).stdout
    assert "pip install 'wcodec[torch]'" in out


def test_map_location_forms(tmp_path):
    sd = {"w": torch.randn(20, 30), "b": torch.arange(5)}
    sd["tied"] = sd["w"]
    wcodec.torch.save_file(sd, tmp_path / "m.wcodec")
    seen = []

    def fn(storage, location):
        seen.append(location)
        return storage.double() if storage.is_floating_point() else None

    for loc in (None, "cpu", torch.device("cpu"), {"cpu": "cpu"}, {"cuda:0": "cpu"}, lambda s, l: s, fn):
        out = wcodec.load_wcodec_checkpoint(tmp_path / "m.wcodec", map_location=loc)
        assert out["tied"] is out["w"] and torch.equal(out["b"], sd["b"])
        assert torch.equal(out["w"].float(), sd["w"])
    assert out["w"].dtype == torch.float64 and seen == ["cpu", "cpu"]  # w (tied) and b: once each


# -- get_slice ---------------------------------------------------------------------------------
def _write(path, arrays: dict, **options):
    """A container with records encoded with explicit options (small chunks: many of them)."""
    with Writer(path) as w:
        for name, (arr, dtype, kw) in arrays.items():
            rec = encode_tensor(arr, dtype, name=name, **{**options, **kw})
            w.add_record(name, rec, spec.crc32(decode_tensor(rec, name)))  # int8-quant is lossy


def test_get_slice_equals_slicing_the_full_tensor_on_every_codec(tmp_path):
    rng = np.random.default_rng(5)
    w = (rng.standard_normal((64, 45)) * 0.02).astype(np.float32)
    bf = (w.view(np.uint32) >> 16).astype(np.uint16)
    fp8 = torch.from_numpy(w / np.abs(w).max() * 448).to(torch.float8_e4m3fn).view(torch.uint8).numpy()
    smooth = (np.add.outer(np.arange(50), 2 * np.arange(40)) + rng.integers(0, 2, (50, 40))).astype(np.int8)
    arrays = {"f32": (w, "F32", {"codec": "float", "tables": 3}),
              "f16": (w.astype(np.float16).reshape(8, 8, 45), "F16", {"codec": "float"}),
              "bf16": (bf, "BF16", {"codec": "float", "tables": 2}),
              "fp8": (fp8, "F8_E4M3", {"tables": 4}),
              "i8": (smooth, "I8", {"tile": 8, "chunk_steps": 8}),
              "q": (w, "F32", {"mode": "int8", "tile": 16}),
              "raw": (rng.integers(0, 1000, (30, 7)).astype(np.int64), "I64", {}),
              "c64": (w[:10].astype(np.complex64), "C64", {}),
              "scalar": (np.array(2.5, np.float32), "F32", {})}
    _write(tmp_path / "s.wcodec", arrays, chunk_steps=2)
    with wcodec.safe_open(tmp_path / "s.wcodec", framework="pt") as f:
        assert f.record("i8").params["all_none"] is False  # prediction modes are exercised
        for name in arrays:
            full = f.get_tensor(name)
            s = f.get_slice(name)
            assert s.get_shape() == list(full.shape) and s.get_dtype() == f.record(name).dtype
            if full.dim() == 0:
                assert _same_bits(s[()], full) and _same_bits(s[...], full)
                continue
            n0 = full.shape[0]
            idxs = [slice(None), 0, -1, slice(2, 5), slice(-3, None), slice(5, 2), slice(1, n0, 3),
                    (slice(1, 4), 0), (slice(None, None, -2),), (Ellipsis, 1), (slice(3, 9), slice(1, -1))]
            for _ in range(12):
                a, b = sorted(rng.integers(-n0, n0 + 1, 2).tolist())
                idxs.append(slice(a, b))
            for idx in idxs:
                got = s[idx]
                bits = {1: torch.uint8, 2: torch.int16}.get(full.element_size())
                if full.dtype in (torch.bfloat16, torch.float8_e4m3fn):  # no numpy dtype: compare bits
                    assert np.array_equal(got.view(bits).numpy(), full.view(bits).numpy()[idx]), (name, idx)
                else:
                    assert np.array_equal(got.numpy(), full.numpy()[idx]), (name, idx)
        with pytest.raises(IndexError):
            f.get_slice("f32")[64]


def test_partial_decode_touches_only_needed_chunks(monkeypatch):
    from wcodec.codecs import partial
    from wcodec.codecs.float import FloatCodec
    w = (np.random.default_rng(0).standard_normal((256, 128)) * 0.02).astype(np.float32)
    rec = encode_tensor(w, "F32", codec="float", chunk_steps=4, tables=64)  # 128-symbol chunks: 256
    decoded = []
    real = FloatCodec.decode
    monkeypatch.setattr(FloatCodec, "decode", lambda self, r: (decoded.append(r.numel), real(self, r))[1])
    got = partial.decode_range(rec, 10 * 128 + 5, 12 * 128 - 3).view(np.float32)
    assert np.array_equal(got, w.reshape(-1)[10 * 128 + 5:12 * 128 - 3])
    assert decoded == [256]  # chunks 10 and 11 only, one table segment
    decoded.clear()
    partial.decode_range(rec, 60 * 128, 70 * 128)  # crosses the table segment boundary at chunk 64
    assert decoded == [4 * 128, 6 * 128]


# -- save_model / load_model -------------------------------------------------------------------
class _Tied(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = torch.nn.Embedding(10, 4)
        self.head = torch.nn.Linear(4, 10, bias=False)
        self.head.weight = self.emb.weight


def test_save_model_load_model_shared_tensor_rules(tmp_path):
    m = _Tied()
    wcodec.torch.save_model(m, tmp_path / "m.wcodec")
    with wcodec.safe_open(tmp_path / "m.wcodec") as f:
        assert f.keys() == ["emb.weight"] and f.metadata() == {"head.weight": "emb.weight"}
    m2 = _Tied()
    missing, unexpected = wcodec.torch.load_model(m2, tmp_path / "m.wcodec")
    assert missing == [] and unexpected == [] and torch.equal(m2.head.weight, m.emb.weight)
    assert m2.head.weight is m2.emb.weight
    wcodec.torch.save_file({"emb.weight": m.emb.weight.detach(), "extra": torch.zeros(1)}, tmp_path / "x.wcodec")
    with pytest.raises(RuntimeError, match="Unexpected key"):
        wcodec.torch.load_model(_Tied(), tmp_path / "x.wcodec")
    assert wcodec.torch.load_model(_Tied(), tmp_path / "x.wcodec", strict=False) == ([], ["extra"])
    lin = torch.nn.Linear(3, 2)
    wcodec.torch.save_file({"weight": lin.weight.detach()}, tmp_path / "l.wcodec")
    with pytest.raises(RuntimeError, match="Missing key"):
        wcodec.torch.load_model(torch.nn.Linear(3, 2), tmp_path / "l.wcodec")


def test_shared_names_ignores_disjoint_views_and_refuses_partial_cover():
    from wcodec.torch.st import shared_names
    buf = torch.zeros(12)
    assert shared_names({"q": buf[:6], "k": buf[6:]}) == {}
    with pytest.raises(RuntimeError) as e:
        shared_names({"a": buf[:8], "b": buf[4:]})
    assert isinstance(e.value, WcodecError)
    assert shared_names({"b": buf, "a": buf.view(3, 4)}) == {"a": ["b"]}
    assert shared_names({"b": buf, "a": buf.view(3, 4)}, preferred=["b"]) == {"b": ["a"]}


# -- seed entry points ---------------------------------------------------------------------------
def test_seed_entry_points(tmp_path):
    sd = {"l.weight": torch.randn(16, 8), "l.bias": torch.randn(16)}
    wcodec.torch.save_file(sd, tmp_path / "m.wcodec", metadata={"a": "b"})
    with wcodec.WCodecCheckpoint(tmp_path / "m.wcodec") as ck:
        assert ck.keys() == sorted(sd) and "l.bias" in ck and len(ck) == 2 and ck.metadata == {"a": "b"}
        assert torch.equal(ck.load_layer("l.weight", device="cpu"), sd["l.weight"])
        assert all(torch.equal(ck.state_dict()[k], v) for k, v in sd.items())
        rec = wcodec.safe_open(tmp_path / "m.wcodec").record("l.weight")
    dec = wcodec.gpu.GPUDecoder(use_gpu=False)
    assert torch.equal(dec.decode_layer(rec), sd["l.weight"])
    if not torch.cuda.is_available():
        fb = wcodec.gpu.GPUDecoder(use_gpu=True, fallback=True)
        assert not fb.use_gpu and torch.equal(fb.decode_layer(rec), sd["l.weight"])
    lin = torch.nn.Linear(8, 16)
    lin.bias.data.copy_(sd["l.bias"])
    lin.register_forward_pre_hook(wcodec.torch.make_decompression_hook(lin, "weight", rec, decoder=dec))
    x = torch.randn(3, 8)
    assert torch.allclose(lin(x), x @ sd["l.weight"].T + sd["l.bias"])
    assert not lin.weight.requires_grad


def test_import_wcodec_torch_stays_lazy():
    import subprocess
    code = ("import sys, wcodec, wcodec.torch; "
            "assert 'wcodec.torch.st' not in sys.modules and 'wcodec.torch.linear' not in sys.modules; "
            "wcodec.torch.save_file; assert 'wcodec.torch.st' in sys.modules; "
            "assert 'wcodec.torch.linear' not in sys.modules")
    subprocess.run([sys.executable, "-c", code], check=True)


def test_fp4_and_fp8_through_safetensors_files_and_header_schema(tmp_path):
    """safetensors writes FP4 as "F4" with the last dim doubled: encode/decode keeps its bytes,
    dtype and shape; the header of a file with the new dtypes matches the schema."""
    import json
    from importlib import resources

    from safetensors.torch import save_file as st_save

    from wcodec.format.reader import Reader
    sd = {"fp4": _random(torch.float4_e2m1fn_x2, (6, 40), 1), "e8m0": _random(torch.float8_e8m0fnu, (4, 4), 2),
          "fp8": _random(torch.float8_e5m2fnuz, (20, 20), 3), "c": _random(torch.complex64, (3,), 4)}
    st_save(sd, tmp_path / "m.safetensors")
    wcodec.encode_safetensors_to_wcodec(tmp_path / "m.safetensors", tmp_path / "m.wcodec")
    out = wcodec.torch.load_file(tmp_path / "m.wcodec")
    assert all(_same_bits(out[k], v) for k, v in sd.items())
    wcodec.decode_to_safetensors(tmp_path / "m.wcodec", tmp_path / "back.safetensors")

    def header(p):
        raw = p.read_bytes()
        n = int.from_bytes(raw[:8], "little")
        h = json.loads(raw[8:8 + n])
        h.pop("__metadata__", None)
        return h, raw[8 + n:]
    (h0, d0), (h1, d1) = header(tmp_path / "m.safetensors"), header(tmp_path / "back.safetensors")
    assert {k: (v["dtype"], v["shape"]) for k, v in h0.items()} == {k: (v["dtype"], v["shape"]) for k, v in h1.items()}
    assert h1["fp4"]["dtype"] == "F4" and h1["fp4"]["shape"] == [6, 80]
    assert all(d0[slice(*h0[k]["data_offsets"])] == d1[slice(*h1[k]["data_offsets"])] for k in sd)
    jsonschema = pytest.importorskip("jsonschema")
    schema = json.loads(resources.files("wcodec").joinpath("schema/header.schema.json").read_text())
    with Reader(tmp_path / "m.wcodec") as r:
        jsonschema.validate(r.header, schema)
