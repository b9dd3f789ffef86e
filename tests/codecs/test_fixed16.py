"""Codec "fixed16" (fixed-rate lossless fp16): every bit pattern, the documented layout read back
by hand, the "would not save" refusal, the file API (format version 2), hostile records, real
weights cast to fp16."""

from __future__ import annotations

import math

import numpy as np
import pytest

from wcodec.codecs import decode_tensor, encode_tensor, fixed16 as F
from wcodec.codecs.base import EncodedTensor
from wcodec.errors import CorruptDataError, UnsupportedError

ALL_BITS = np.arange(1 << 16, dtype=np.uint32).astype(np.uint16)


def fp16_weights(shape, seed=0, std=0.02) -> np.ndarray:
    return (np.random.default_rng(seed).standard_normal(shape) * std).astype(np.float16)


def record(bits: np.ndarray, rows: int, cols: int, max_bits=math.inf) -> EncodedTensor:
    params, sections = F.encode_bits(bits.reshape(-1), rows, cols, max_bits=max_bits)
    return EncodedTensor("fixed16", "F16", (rows, cols), params, sections)


@pytest.mark.parametrize("rows,cols", [(1, 1 << 16), (256, 256), (37, 1771), (4096, 16)])
def test_every_bit_pattern_roundtrips(rows, cols):
    bits = np.random.default_rng(rows).permutation(ALL_BITS)[:rows * cols]  # NaN payloads, +-inf, -0, subnormals
    rec = record(bits, rows, cols)
    out = decode_tensor(rec, "t")
    assert out.dtype == np.float16 and np.array_equal(out.view(np.uint16).reshape(-1), bits)
    dst = np.full(rows * cols, 0x1234, np.uint16)  # decode into a caller's buffer (bytes of the tensor)
    decode_tensor(rec, "t", out=dst.view(np.uint8))
    assert np.array_equal(dst, bits)


def test_layout_read_back_by_hand():
    """The sections as CODEC_LAYOUT.md describes them, read with plain Python."""
    rows, cols = 3, 21
    w = fp16_weights((rows, cols), seed=3)
    w.reshape(-1)[:5] = [np.inf, -0.0, 6e-8, 1000.0, np.nan]
    bits = w.view(np.uint16).reshape(-1)
    rec = record(bits, rows, cols)
    p, s = rec.params, rec.sections
    kpad, base = p["kpad"], p["base"]
    assert kpad == 32 and 0 <= base <= F.MAX_BASE
    escapes = {(r, int(s["esc.col"][e])): int(s["esc.val"][e])
               for r in range(rows) for e in range(int(s["esc.ptr"][r]), int(s["esc.ptr"][r + 1]))}
    for r in range(rows):
        for c in range(kpad):
            lo = int(s["lo"][r * kpad + c])
            i, j = divmod(c, 8)
            nib = (int(s["nib"][r * kpad // 2 + 4 * i + j % 4]) >> (4 * (j // 4))) & 0xF
            jj, rest = divmod(c, 16)
            k, q = divmod(rest, 4)
            m2 = (int(s["m2"][r * kpad // 4 + 4 * jj + q]) >> (2 * k)) & 3
            if c >= cols:
                assert lo == nib == m2 == 0
                continue
            v = int(bits[r * cols + c])
            if (r, c) in escapes:
                assert escapes[(r, c)] == v and nib == (v >> 15) << 3 | 7
                assert not base <= (v >> 10) & 0x1F <= base + 6
            else:
                assert F.reference_decode_value(lo, nib, m2, base) == v
            assert lo == v & 0xFF and m2 == (v >> 8) & 3
    assert (0, 0) in escapes and (0, 3) in escapes and (0, 4) in escapes  # inf, 1000 and NaN


def test_window_chosen_per_tensor_and_cost():
    for std in (1e-3, 0.02, 0.5):
        w = fp16_weights((64, 256), std=std)
        rec = encode_tensor(w, "F16", codec="fixed16")
        exp = (w.view(np.uint16) >> 10) & 0x1F
        counts = np.bincount(exp.reshape(-1), minlength=32)
        best = max(counts[b:b + 7].sum() for b in range(F.MAX_BASE + 1))
        assert counts[rec.params["base"]:rec.params["base"] + 7].sum() == best
        assert rec.params["n_escapes"] == w.size - best
        assert rec.nbytes * 8 == F.record_bits(64, 256, rec.params["n_escapes"])
        assert 14 < rec.bits_per_weight < F.MAX_BITS_PER_WEIGHT


def test_would_not_save_is_refused_and_the_policy_codec_takes_it():
    g = np.random.default_rng(1)
    wide = (np.sign(g.standard_normal((32, 64))) * 2.0 ** g.uniform(-20, 10, (32, 64))).astype(np.float16)
    with pytest.raises(UnsupportedError, match="would not save"):
        encode_tensor(wide, "F16", codec="fixed16")
    assert encode_tensor(wide, "F16", prefer="fixed").codec == "float"
    assert encode_tensor(fp16_weights((32, 64)), "F16", prefer="fixed").codec == "fixed16"
    assert encode_tensor(fp16_weights((4, 8)), "F16", prefer="fixed").codec == "raw"  # too small to code
    with pytest.raises(UnsupportedError, match="F16 tensors only"):
        encode_tensor(fp16_weights((32, 64)).astype(np.float32), "F32", codec="fixed16")


def test_file_api_writes_version_2(tmp_path):
    import wcodec.numpy as wn

    g = np.random.default_rng(2)
    tensors = {"w": fp16_weights((48, 128)), "all": ALL_BITS.view(np.float16).reshape(256, 256).copy(),
               "wide": (2.0 ** g.uniform(-20, 10, (16, 32))).astype(np.float16), "b": fp16_weights((100,))}
    path = tmp_path / "m.wcodec"
    wn.save_file(tensors, path, codec="fixed")
    assert path.read_bytes()[8:12] == (2).to_bytes(4, "little")  # a fixed16 record needs version 2
    back = wn.load_file(path)
    for k, v in tensors.items():
        assert np.array_equal(back[k].view(np.uint16), v.view(np.uint16)), k


def test_fixed_without_any_f16_or_bf16_is_refused(tmp_path):
    import wcodec.numpy as wn

    with pytest.raises(UnsupportedError, match="F16 ones"):
        wn.save_file({"w": np.zeros((64, 64), np.float32)}, tmp_path / "x.wcodec", codec="fixed")


def _hostile(rec: EncodedTensor, change) -> EncodedTensor:
    params = dict(rec.params)
    sections = {k: v.copy() for k, v in rec.sections.items()}
    change(params, sections)
    return EncodedTensor(rec.codec, rec.dtype, rec.shape, params, sections)


def _set(name, index, value):
    def change(p, s):
        s[name][index] = value
    return change


@pytest.mark.parametrize("change,field", [
    (lambda p, s: p.update(base=24), "base"),
    (lambda p, s: p.update(kpad=48), "kpad"),
    (lambda p, s: p.update(col_bits=32), "col_bits"),
    (lambda p, s: p.update(n_escapes=10 ** 6), "n_escapes"),
    (lambda p, s: p.pop("base"), "base"),
    (lambda p, s: s.update(m2=s["m2"][:-1]), "m2"),
    (lambda p, s: s.update(m2=s["m2"].astype(np.uint16)), "m2"),
    (lambda p, s: s.pop("m2"), "m2"),
    (_set("m2", -1, 0xC0), "m2"),                       # padding column 31's m2
    (_set("lo", 31, 1), "lo"),                          # padding low byte
    (_set("esc.ptr", -1, 99), "esc.ptr"),               # not the CSR of the listed escapes
    (_set("esc.col", 0, 40), "esc.col"),                # out of range
    (_set("nib", 0, 0x77), "nib"),                      # escape nibbles where none is listed
])
def test_hostile_records_are_refused_naming_the_field(change, field):
    w = fp16_weights((4, 20), seed=5)
    w[0, 0] = np.inf  # one escape in row 0, column 0
    w[1, 3] = 1e-7
    good = record(w.view(np.uint16), 4, 20)
    assert good.params["n_escapes"] >= 2 and good.params["kpad"] == 32
    bad = _hostile(good, change)
    with pytest.raises(CorruptDataError, match=field) as e:
        decode_tensor(bad, "layer.w")
    assert "layer.w" in str(e.value)


def test_hostile_escape_values():
    w = fp16_weights((4, 20), seed=5)
    w[0, 0] = np.inf
    good = record(w.view(np.uint16), 4, 20)
    base = good.params["base"]
    inside = np.uint16((base + 2) << 10)  # an exponent inside the window is never an escape
    for change, field in [(_set("esc.val", 0, inside), "esc.val"),
                          (_set("esc.val", 0, np.uint16(0x7C00 | 0x300)), "m2"),  # m2 not the stored one
                          (_set("esc.val", 0, np.uint16(0xFC00)), "nib")]:        # sign not the nibble's
        with pytest.raises(CorruptDataError, match=field):
            decode_tensor(_hostile(good, change), "t")


def _real_f16(tensors: dict, limit: int):
    """fp16 casts of the float32 tensors of >= 4096 weights, up to ``limit`` weights in all."""
    n = 0
    for name, a in tensors.items():
        a = np.asarray(a)
        if a.dtype != np.float32 or a.size < 4096:
            continue
        yield name, a.astype(np.float16)
        n += a.size
        if n >= limit:
            return


def _check_real(tensors: dict, limit: int = 1 << 19) -> None:
    for name, h in _real_f16(tensors, limit):
        try:
            rec = encode_tensor(h, "F16", codec="fixed16")
        except UnsupportedError:
            rec = EncodedTensor("fixed16", "F16", h.shape, *F.encode_bits(h.view(np.uint16).reshape(-1),
                                                                          *_view(h), max_bits=math.inf))
        assert np.array_equal(decode_tensor(rec, name).view(np.uint16), h.view(np.uint16)), name


def _view(h):
    from wcodec.codecs.base import view_2d

    return view_2d(h.shape)


def test_shared_models_cast_to_fp16(shared_models):
    from tests._models import shared_model_tensors

    for model, tensors in shared_model_tensors(shared_models).items():
        if model == "stories260K":  # one flat array: its 2-D view is a single row
            tensors = {"all": tensors["stories260K.all_weights"][:1 << 18].reshape(512, -1)}
        _check_real(tensors)


def test_minilm_cast_to_fp16(minilm_path):
    from safetensors.numpy import load_file

    _check_real(load_file(minilm_path))


def test_cli_encode_codec_fixed_on_an_fp16_checkpoint(tmp_path):
    pytest.importorskip("safetensors")
    from safetensors.numpy import save_file

    import wcodec.numpy as wn
    from wcodec.cli import main

    tensors = {"w": fp16_weights((64, 256)), "b": fp16_weights((64,))}
    save_file(tensors, tmp_path / "m.safetensors")
    assert main(["encode", str(tmp_path / "m.safetensors"), str(tmp_path / "m.wcodec"), "--codec", "fixed",
                 "-q"]) == 0
    from wcodec.format.reader import Reader

    with Reader(tmp_path / "m.wcodec") as r:
        entries = r.header["tensors"]
    assert entries["w"]["codec"] == "fixed16" and entries["b"]["codec"] == "raw"
    back = wn.load_file(tmp_path / "m.wcodec")
    assert all(np.array_equal(back[k].view(np.uint16), v.view(np.uint16)) for k, v in tensors.items())
