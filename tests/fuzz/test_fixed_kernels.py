"""Property (issue 27, must-have 1): for any codec "fixed" record that the decoder accepts, every
Triton kernel (the Triton interpreter here; compiled with WCODEC_GPU_TESTS_ON_DEVICE=1) computes
with the decoder's weights: the decode and rows kernels give them bit for bit, the GEMV, tiled
(split-K too) and input-gradient kernels give ``x @ W.T`` / ``g @ W`` of them. Records are valid
encodings mutated in their escape lists, pointer, nibbles, low bytes and values (checksums play no
part: the decoder's check is what is tested); a record the decoder refuses is refused by
``from_sections`` too. The mma kernel (GPU only) reads the same layout and escape lists."""

from __future__ import annotations

import os

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("triton")
from hypothesis import HealthCheck, example, given, settings, strategies as st  # noqa: E402

from wcodec.codecs import decode_tensor, encode_tensor  # noqa: E402
from wcodec.errors import CorruptDataError  # noqa: E402
from wcodec.gpu import fixed as fx  # noqa: E402

DEVICE = "cuda" if os.environ.get("WCODEC_GPU_TESTS_ON_DEVICE") == "1" else "cpu"
SPECIALS = [0x7FC1, 0xFFC0, 0x7F80, 0xFF80, 0x8000, 0x0000, 0x0001, 0x7F7F, 0x4F00, 0x2000]
OPS = ("col", "dup", "swap", "nib", "lo", "val", "ptr", "drop")


def mutate(rec, op: str, r: np.random.Generator) -> None:
    s, p = rec.sections, rec.params
    col, val, ptr = s["esc.col"].copy(), s["esc.val"].copy(), s["esc.ptr"].copy()
    n_esc = col.size
    i = int(r.integers(n_esc)) if n_esc else 0
    if op == "col" and n_esc:
        col[i] = r.integers(0, int(rec.shape[1]) + 2)
    elif op == "dup" and n_esc:  # a well-formed CSR list with the escape listed twice
        row = int(np.searchsorted(ptr, i, side="right")) - 1
        col, val = np.insert(col, i, col[i]), np.insert(val, i, val[i] ^ np.uint16(r.integers(0, 2) << 14))
        ptr[row + 1:] += 1
        p["n_escapes"] += 1
    elif op == "swap" and n_esc > 1:
        j = min(i + 1, n_esc - 1)
        col[[i, j]] = col[[j, i]]
    elif op == "nib":
        nib = s["nib"].copy()
        nib[r.integers(nib.size)] ^= np.uint8(r.integers(1, 256))
        s["nib"] = nib
    elif op == "lo":
        lo = s["lo"].copy()
        lo[r.integers(lo.size)] ^= np.uint8(r.integers(1, 256))
        s["lo"] = lo
    elif op == "val" and n_esc:
        val[i] = r.integers(0, 1 << 16)
    elif op == "ptr":
        ptr[r.integers(ptr.size)] += np.uint32(1)
    elif op == "drop" and n_esc:
        row = int(np.searchsorted(ptr, i, side="right")) - 1
        col, val = np.delete(col, i), np.delete(val, i)
        ptr[row + 1:] -= 1
        p["n_escapes"] -= 1
    s["esc.col"], s["esc.val"], s["esc.ptr"] = col, val, ptr


def close(y: torch.Tensor, ref: np.ndarray, scale: np.ndarray) -> bool:
    """y (fp32 kernel output) equals ref (float64 of the decoder's weights) up to fp32 rounding of
    the sums and of the kernels' ``placeholder + (value - placeholder)``; same NaN / inf."""
    y = y.double().cpu().numpy()
    fin = np.isfinite(ref)
    if not np.array_equal(np.isnan(y), np.isnan(ref)) or not np.array_equal(y[np.isinf(ref)], ref[np.isinf(ref)]):
        return False
    return bool(np.all(np.abs(y[fin] - ref[fin]) <= 1e-5 * scale[fin] + 1e-30))


@settings(max_examples=12, deadline=None, suppress_health_check=list(HealthCheck))
@given(n=st.integers(1, 9), k=st.integers(1, 40), seed=st.integers(0, 2 ** 31),
       ops=st.lists(st.sampled_from(OPS), max_size=2))
@example(n=3, k=20, seed=0, ops=["dup"])  # issue 27's three values of one weight
@example(n=4, k=33, seed=1, ops=["swap"])
@example(n=2, k=17, seed=2, ops=["col", "drop"])
def test_kernels_compute_with_the_decoders_weights(n, k, seed, ops, monkeypatch_env):
    r = np.random.default_rng(seed)
    u = (r.standard_normal((n, k)) * 0.05).astype(np.float32).view(np.uint32)
    bits = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)
    flat = bits.reshape(-1)
    flat[r.integers(0, flat.size, max(1, flat.size // 6))] = r.choice(SPECIALS, max(1, flat.size // 6))
    rec = encode_tensor(bits, "BF16", codec="fixed")
    for op in ops:
        mutate(rec, op, r)
    try:
        w_bits = decode_tensor(rec, "w")
    except CorruptDataError:
        with pytest.raises(CorruptDataError):
            fx.from_sections(rec.params, rec.sections, rec.shape, DEVICE, name="w")
        return
    w = torch.from_numpy(w_bits.view(np.int16).copy()).view(torch.bfloat16).to(DEVICE)
    fw = fx.from_sections(rec.params, rec.sections, rec.shape, DEVICE, name="w")
    assert torch.equal(fx.decode(fw).view(torch.int16), w.view(torch.int16))  # decode kernel + patch
    rows = torch.arange(n, device=DEVICE)
    assert torch.equal(fx.embedding(rows, fw).view(torch.int16), w.view(torch.int16))  # rows kernel
    wd = w.double().cpu().numpy()
    placeholder = np.where(np.isfinite(wd), np.abs(wd), 0) + 2.0 ** (2 * (fw.base + 7) - 126)
    for m in (1 + seed % 3,):
        x = torch.from_numpy(r.uniform(-1e-3, 1e-3, (m, k)).astype(np.float32)).to(DEVICE)
        xd = x.double().cpu().numpy()
        ref = xd @ wd.T if np.all(np.isfinite(wd)) else np.einsum("mk,nk->mn", xd, wd)
        scale = np.abs(xd) @ placeholder.T
        for kind, split in (("gemv", None), ("mm", None), ("mm", 2)):
            y = fx.linear(x, fw, kind=kind, split=split)
            assert close(y, ref, scale), (kind, split, m)
        g = torch.from_numpy(r.uniform(-1e-3, 1e-3, (m, n)).astype(np.float32)).to(DEVICE)
        gd = g.double().cpu().numpy()
        assert close(fx.grad_input(g, fw), np.einsum("mn,nk->mk", gd, wd), np.abs(gd) @ placeholder), "grad"


@pytest.fixture
def monkeypatch_env():
    """The fixed-rate Triton kernels on the CPU (interpreter); restored after the test."""
    old = os.environ.get("WCODEC_FIXED_TRITON")
    os.environ["WCODEC_FIXED_TRITON"] = "1"
    yield
    if old is None:
        os.environ.pop("WCODEC_FIXED_TRITON", None)
    else:
        os.environ["WCODEC_FIXED_TRITON"] = old
