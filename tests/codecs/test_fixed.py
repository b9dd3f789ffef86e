"""Codec "fixed" (fixed-rate lossless bf16): the pure-Python spec, the numpy codec, golden bytes,
special values, corrupt records, the file API, real weights."""

from __future__ import annotations

import hashlib

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from wcodec.codecs import decode_tensor, encode_tensor, fixed as F
from wcodec.errors import CorruptDataError, UnsupportedError

SPECIALS = [0x7FC1, 0xFFC0, 0x7F80, 0xFF80, 0x8000, 0x0000, 0x0001, 0x807F, 0x7F7F, 0xFF7F, 0x3F80]


def bf16_bits(x: np.ndarray) -> np.ndarray:
    u = x.astype(np.float32).view(np.uint32)
    return ((u + np.uint32(0x7FFF) + ((u >> 16) & 1)) >> 16).astype(np.uint16)


def weights(shape, seed=0, std=0.05, specials=True) -> np.ndarray:
    b = bf16_bits(np.random.default_rng(seed).standard_normal(shape) * std)
    flat = b.reshape(-1)
    if specials and flat.size >= len(SPECIALS):
        flat[:len(SPECIALS)] = SPECIALS
    return b


def roundtrip(bits: np.ndarray) -> np.ndarray:
    rec = encode_tensor(bits, "BF16", codec="fixed")
    assert rec.codec == "fixed"
    out = decode_tensor(rec, "t")
    assert out.shape == bits.shape and out.dtype == np.uint16
    return out


@pytest.mark.parametrize("shape", [(0,), (3, 0), (), (1,), (5,), (7, 13), (830, 545), (2, 3, 17), (16, 16)])
def test_roundtrip_shapes(shape):
    bits = weights(shape)
    copy = bits.copy()
    assert np.array_equal(roundtrip(bits), bits)
    assert np.array_equal(bits, copy)  # the input is never modified


def test_every_bit_pattern_roundtrips():
    bits = np.arange(1 << 16, dtype=np.uint32).astype(np.uint16).reshape(256, 256)
    rec = encode_tensor(bits, "BF16", codec="fixed")
    assert rec.params["n_escapes"] == (1 << 16) - 14 * 256  # 7 high bytes x 2 signs x 256 low bytes
    assert np.array_equal(decode_tensor(rec), bits)


def test_all_escapes():
    # exponents spread so that no 7-wide window holds more than a few values: mostly escapes
    bits = np.array([(e << 7) | (e % 128) for e in range(0, 255, 9)] * 40, np.uint16).reshape(40, -1)
    rec = encode_tensor(bits, "BF16", codec="fixed")
    assert rec.params["n_escapes"] > bits.size // 2
    assert np.array_equal(decode_tensor(rec), bits)


@settings(max_examples=60, deadline=None)
@given(rows=st.integers(1, 5), cols=st.integers(1, 40), seed=st.integers(0, 2**31), std=st.sampled_from([1e-3, 0.05, 3.0, 1e30]))
def test_numpy_matches_pure_python_spec(rows, cols, seed, std):
    bits = weights((rows, cols), seed, std).reshape(-1)
    params, sec = F.encode_bits(bits, rows, cols)
    ref = F.reference_encode([int(b) for b in bits], rows, cols)
    assert params["base"] == ref["base"] and params["kpad"] == ref["kpad"]
    assert sec["lo"].tobytes() == ref["lo"] and sec["nib"].tobytes() == ref["nib"]
    assert sec["esc.ptr"].tolist() == ref["ptr"]
    assert sec["esc.col"].tolist() == ref["col"] and sec["esc.val"].tolist() == ref["val"]
    assert np.array_equal(F.decode_bits(params, sec, rows, cols), bits)
    # the spec's per-value formula for every non-escaped value
    nib = [(ref["nib"][r * ref["kpad"] // 2 + 4 * (c // 8) + c % 4] >> (4 * ((c % 8) // 4))) & 15
           for r in range(rows) for c in range(cols)]
    for b, n in zip(bits.tolist(), nib):
        if n & 7 != F.ESCAPE_D:
            assert F.reference_decode_value(b & 0xFF, n, ref["base"]) == b


def test_golden_bytes():
    """Pinned layout: changing these bytes needs a format version bump (docs/CODEC_LAYOUT.md)."""
    bits = weights((3, 20), seed=7, std=0.02)
    assert hashlib.sha256(bits.tobytes()).hexdigest() == GOLDEN_INPUT_SHA256
    rec = encode_tensor(bits, "BF16", codec="fixed")
    assert rec.params == {"base": 57, "kpad": 32, "n_escapes": 10, "col_bits": 16}
    digest = hashlib.sha256(b"".join(rec.sections[k].tobytes() for k in sorted(rec.sections))).hexdigest()
    assert digest == GOLDEN_SHA256
    assert rec.sections["nib"][:8].tolist() == GOLDEN_NIB8


GOLDEN_INPUT_SHA256 = "41c433682c3ed97a8df2f11abaaa0f4aa5bc7251b88dfca23d6288ac1b09b13c"
GOLDEN_SHA256 = "54a025476f03cb9e26cd567eb00f2bd86aae29d5099a55e5ae706201b68f5e47"
GOLDEN_NIB8 = [247, 127, 119, 255, 39, 191, 150, 50]


def test_only_bf16():
    with pytest.raises(UnsupportedError):
        encode_tensor(np.zeros((4, 4), np.float32), "F32", codec="fixed")


def test_prefer_keeps_policy_for_other_tensors():
    small = encode_tensor(np.zeros(8, np.uint16), "BF16", prefer="fixed")
    assert small.codec == "raw"
    f32 = encode_tensor(np.ones((64, 64), np.float32), "F32", prefer="fixed")
    assert f32.codec == "float"
    big = encode_tensor(weights((64, 64)), "BF16", prefer="fixed")
    assert big.codec == "fixed"
    with pytest.raises(UnsupportedError):
        encode_tensor(weights((64, 64)), "BF16", prefer="int8")


@pytest.mark.parametrize("mutate", [
    lambda r: r.params.update(base=200),
    lambda r: r.params.update(base=-1),
    lambda r: r.params.update(kpad=8),
    lambda r: r.params.update(n_escapes=10**12),
    lambda r: r.params.update(col_bits=8),
    lambda r: r.params.pop("base"),
    lambda r: r.params.update(base=1.5),
    lambda r: r.sections.pop("nib"),
    lambda r: r.sections.update(lo=r.sections["lo"][:-1]),
    lambda r: r.sections.update({"esc.ptr": r.sections["esc.ptr"][::-1].copy()}),
    lambda r: r.sections.update({"esc.col": np.full_like(r.sections["esc.col"], 60000)}),
])
def test_corrupt_records_raise(mutate):
    rec = encode_tensor(weights((6, 40)), "BF16", codec="fixed")
    mutate(rec)
    with pytest.raises(CorruptDataError):
        decode_tensor(rec, "w")


def test_file_api(tmp_path):
    torch = pytest.importorskip("torch")
    import wcodec
    t = {"w": torch.from_numpy(weights((64, 48)).view(np.int16)).view(torch.bfloat16),
         "b": torch.arange(5, dtype=torch.float32)}
    path = tmp_path / "m.wcodec"
    wcodec.save_file(t, path, codec="fixed")
    with wcodec.Reader(path) as r:
        assert r.record("w").codec == "fixed"
    back = wcodec.load_file(path)
    assert torch.equal(back["w"].view(torch.int16), t["w"].view(torch.int16))
    assert torch.equal(back["b"], t["b"])


def test_minilm_bits_and_roundtrip(minilm_path):
    from safetensors.numpy import load_file
    total = bits_total = 0
    for name, w in load_file(str(minilm_path)).items():
        if w.dtype != np.float32 or w.size < 4096:
            continue
        b = bf16_bits(w)
        rec = encode_tensor(b, "BF16", codec="fixed")
        assert np.array_equal(decode_tensor(rec, name), b), name
        total += b.size
        bits_total += rec.nbytes * 8
    assert 12.0 <= bits_total / total <= 12.2  # 12 bits + escapes (measured 12.09)
