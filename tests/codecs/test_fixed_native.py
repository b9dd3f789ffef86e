"""Codec "fixed" in C (src/wcodec/csrc/fixedcodec.c) against its numpy reference
(``encode_bits_numpy`` / ``decode_bits_numpy``): the same params and section bytes for any bf16
bits and shape, the same decode, inputs never written, bad buffers refused, and the numpy path
taken without the extension."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from wcodec import native
from wcodec.codecs import decode_tensor, encode_tensor, fixed as F
from wcodec.errors import CorruptDataError

pytestmark = pytest.mark.skipif(not native.available(), reason="the C extension is not built")


def _same(a: tuple, b: tuple) -> None:
    (pa, sa), (pb, sb) = a, b
    assert pa == pb
    assert sa.keys() == sb.keys()
    for k in sa:
        assert sa[k].dtype == sb[k].dtype and np.array_equal(sa[k], sb[k]), k
    assert list(sa) == list(sb)  # the order the file stores them in


def _bits(rng, n: int, kind: str) -> np.ndarray:
    if kind == "any":
        return rng.integers(0, 1 << 16, n).astype(np.uint16)
    if kind == "one":  # a single value: all in the window, or all escapes
        return np.full(n, rng.integers(0, 1 << 16), np.uint16)
    scale = {"gauss": rng.standard_normal, "heavy": lambda k: rng.standard_t(1.5, k)}[kind](n) * 0.05
    return (np.asarray(scale, np.float32).view(np.uint32) >> 16).astype(np.uint16)


@settings(max_examples=60, deadline=None)
@given(rows=st.integers(0, 9), cols=st.integers(0, 70), seed=st.integers(0, 2**31),
       kind=st.sampled_from(["any", "one", "gauss", "heavy"]))
def test_c_equals_numpy(rows, cols, seed, kind):
    bits = _bits(np.random.default_rng(seed), rows * cols, kind)
    keep = bits.copy()
    enc = F.encode_bits(bits, rows, cols)
    _same(enc, F.encode_bits_numpy(bits, rows, cols))
    assert np.array_equal(bits, keep)  # never written
    params, sections = enc
    got = F.decode_bits(params, sections, rows, cols)
    assert np.array_equal(got, bits) and np.array_equal(F.decode_bits_numpy(params, sections, rows, cols), bits)
    out = np.full(rows * cols, 0xABCD, np.uint16)
    assert F.decode_bits(params, sections, rows, cols, out=out) is out and np.array_equal(out, bits)


@pytest.mark.parametrize("rows,cols", [(300, 4097), (3, 70000), (1, 65536), (1, 65537), (64, 16)])
def test_large_and_wide_rows(rows, cols):
    # many tasks of whole rows on the threads; rows past 65536 columns store 32-bit columns
    bits = _bits(np.random.default_rng(rows + cols), rows * cols, "heavy")
    enc = F.encode_bits(bits, rows, cols)
    _same(enc, F.encode_bits_numpy(bits, rows, cols))
    assert enc[0]["col_bits"] == (16 if cols <= 65536 else 32) and enc[0]["n_escapes"] > 0
    assert np.array_equal(F.decode_bits(*enc, rows, cols), bits)


def test_every_bit_pattern_and_the_numpy_path_without_the_extension():
    bits = np.arange(1 << 16, dtype=np.uint16)
    rec = encode_tensor(bits.reshape(256, 256), "BF16", codec="fixed")
    with native.disabled():
        ref = encode_tensor(bits.reshape(256, 256), "BF16", codec="fixed")
        assert np.array_equal(decode_tensor(rec).reshape(-1), bits)
    _same((rec.params, rec.sections), (ref.params, ref.sections))
    assert np.array_equal(decode_tensor(rec).reshape(-1), bits)


def test_corrupt_records_still_raise_before_the_c_decode():
    params, sections = F.encode_bits(_bits(np.random.default_rng(3), 40 * 33, "heavy"), 40, 33)
    bad = dict(sections, **{"esc.col": sections["esc.col"].copy()})
    bad["esc.col"][-1] = 40  # a column past the row
    out = np.full(40 * 33, 7, np.uint16)
    with pytest.raises(CorruptDataError, match="esc.col"):
        F.decode_bits(params, bad, 40, 33, out=out)
    assert (out == 7).all()  # not touched


def test_the_c_functions_refuse_what_they_cannot_do_safely():
    e = native.ext()
    rows, cols = 6, 20
    bits = _bits(np.random.default_rng(4), rows * cols, "any")
    params, s = F.encode_bits(bits, rows, cols)
    assert params["n_escapes"] > 2
    kpad, base = params["kpad"], params["base"]
    out = np.empty(rows * cols, np.uint16)
    args = [s["lo"], s["nib"], s["esc.ptr"], s["esc.col"], s["esc.val"], rows, cols, kpad, base, out]
    e.fixed_decode(*args)
    assert np.array_equal(out, bits)
    ptr = s["esc.ptr"].copy()
    ptr[2] = 10**6  # past the escapes: refused, nothing read outside
    with pytest.raises(ValueError, match="out of range"):
        e.fixed_decode(*args[:2], ptr, *args[3:])
    col = s["esc.col"].copy()
    col[0] = cols
    with pytest.raises(ValueError, match="out of range"):
        e.fixed_decode(*args[:3], col, *args[4:])
    with pytest.raises(ValueError, match="lo"):
        e.fixed_decode(s["lo"][:-1], *args[1:])
    with pytest.raises(ValueError, match="bad shape"):
        e.fixed_decode(*args[:7], kpad + 16, base, out)
    with pytest.raises(ValueError, match="bad shape"):
        e.fixed_decode(*args[:8], 120, out)
    read_only = np.empty(rows * cols, np.uint16)
    read_only.setflags(write=False)
    with pytest.raises((BufferError, ValueError)):
        e.fixed_decode(*args[:9], read_only)
    n = params["n_escapes"]
    short = np.zeros(rows + 1, np.uint32)
    short[1:] = n  # every escape claimed by the first row
    col, val = np.empty(n, np.uint16), np.empty(n, np.uint16)
    with pytest.raises(ValueError, match="differ"):
        e.fixed_encode_escapes(bits, rows, cols, base, short, col, val)
    with pytest.raises(ValueError, match="row pointer"):
        e.fixed_encode_escapes(bits, rows, cols, base, s["esc.ptr"], col[:-1], val[:-1])
    with pytest.raises(ValueError, match="bits"):
        e.fixed_encode_planes(bits[:-1], rows, cols, kpad, base, np.empty(rows * kpad, np.uint8),
                              np.empty(rows * kpad // 2, np.uint8), np.empty(rows, np.uint32))


@pytest.mark.parametrize("shape", [(1, 1), (37, 61), (64, 4096), (5, 70000)])
def test_cpu_weights_encode_in_c_as_the_torch_path_does(shape):
    torch = pytest.importorskip("torch")
    from wcodec.gpu import fixed as fx

    torch.manual_seed(shape[1])
    w = (torch.distributions.StudentT(2.0).sample(shape) * 0.02).to(torch.bfloat16)
    special = torch.tensor([0x7FC1, -128, 1], dtype=torch.int16)  # NaN, -inf, a subnormal
    n = min(3, w.numel())
    w.view(torch.int16).view(-1)[:n] = special[:n]
    keep = w.clone()
    got = fx.encode_weight(w)
    with native.disabled():  # the torch ops of the device path
        ref = fx.encode_weight(w)
    assert torch.equal(w.view(torch.int16), keep.view(torch.int16))
    assert (got.base, got.N, got.K) == (ref.base, ref.N, ref.K)
    for a, b in zip(got.tensors().values(), ref.tensors().values()):
        assert a.dtype == b.dtype and torch.equal(a, b)
    assert torch.equal(fx.decode(got).view(torch.int16), w.view(torch.int16))


@settings(max_examples=40, deadline=None)
@given(rows=st.integers(0, 7), cols=st.integers(0, 40), seed=st.integers(0, 2**31), scale=st.sampled_from([1e-3, 0.05, 3.0]))
def test_fixed16_codes_in_c_as_in_numpy(rows, cols, seed, scale):
    from wcodec.codecs import fixed16 as F16
    from wcodec.errors import UnsupportedError

    rng = np.random.default_rng(seed)
    bits = (rng.standard_normal(rows * cols) * scale).astype(np.float16).view(np.uint16)
    if bits.size:
        bits[:: max(1, bits.size // 3)] = rng.integers(0, 1 << 16, len(bits[:: max(1, bits.size // 3)]))  # escapes
    params, sections = F16.encode_bits(bits, rows, cols, max_bits=float("inf"))
    ref_params, ref_sections = F16.encode_bits_numpy(bits, rows, cols, max_bits=float("inf"))
    _same((params, sections), (ref_params, ref_sections))
    assert list(sections) == list(ref_sections)  # the file's section order
    for encode in (F16.encode_bits, F16.encode_bits_numpy):  # the same refusal on both paths
        if params["n_escapes"] and rows * cols:
            with pytest.raises(UnsupportedError, match="would not save"):
                encode(bits, rows, cols, max_bits=F16.record_bits(rows, cols, params["n_escapes"]) / (rows * cols))
    got = F16.decode_bits(params, sections, rows, cols)
    with native.disabled():
        ref = F16.decode_bits(params, sections, rows, cols)
    assert np.array_equal(got, bits) and np.array_equal(ref, bits)
    if params["kpad"] > cols and rows:  # a set m2 padding field is refused on both paths
        bad = dict(sections, m2=sections["m2"].copy())
        p = params["kpad"] - 1
        bad["m2"][4 * (p // 16) + (p % 16) % 4] |= 1 << (2 * ((p % 16) // 4))
        for ctx in (native.disabled(), __import__("contextlib").nullcontext()):
            with ctx, pytest.raises(CorruptDataError, match="fixed16: field m2: padding"):
                F16.decode_bits(params, bad, rows, cols)


@pytest.mark.parametrize("shape", [(1, 1), (37, 61), (64, 4096)])
def test_cpu_fp16_weights_encode_in_c_as_the_torch_path_does(shape):
    torch = pytest.importorskip("torch")
    from wcodec.gpu import fixed16 as fx16

    torch.manual_seed(shape[1])
    w = (torch.randn(shape) * 0.02).to(torch.float16)
    w.view(-1)[: min(2, w.numel())] = torch.tensor([float("nan"), 6e4], dtype=torch.float16)[: min(2, w.numel())]
    got = fx16.encode_weight(w, max_bits=float("inf"))
    with native.disabled():  # the torch ops of the device path
        ref = fx16.encode_weight(w, max_bits=float("inf"))
    assert torch.equal(got.m2, ref.m2)
    for a, b in zip(got.planes.tensors().values(), ref.planes.tensors().values()):
        assert a.dtype == b.dtype and torch.equal(a, b)
    assert torch.equal(fx16.decode(got).view(torch.int16), w.view(torch.int16))
