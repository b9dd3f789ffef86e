"""Triton decode kernels under TRITON_INTERPRET=1 (CPU): bit-exact with wcodec.codecs.decode_tensor
on small inputs, every codec, dtype, prediction mode and odd shapes; corrupt streams are reported.

TRITON_INTERPRET must be set before triton is imported: tests/conftest.py sets it unless a GPU
run asked otherwise (WCODEC_GPU_TESTS_ON_DEVICE=1 keeps the compiled path).
"""

from __future__ import annotations

import os

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="torch is needed for the GPU decoder")
pytest.importorskip("triton", reason="triton is not installed (pip install triton)")

from wcodec.codecs import decode_tensor, encode_tensor  # noqa: E402
from wcodec.codecs.int8 import Int8Codec  # noqa: E402
from wcodec.errors import CorruptDataError  # noqa: E402
from wcodec.gpu import decode_records  # noqa: E402

DEVICE = "cuda" if os.environ.get("WCODEC_GPU_TESTS_ON_DEVICE") == "1" else "cpu"


def _bits(t) -> np.ndarray:
    t = t.cpu()
    if t.dtype == torch.bfloat16:
        t = t.view(torch.int16)
    return t.numpy().view(np.uint8)


def _check(items):
    out = decode_records(items, DEVICE)
    for name, rec in items:
        ref = decode_tensor(rec, name)
        got = out[name]
        assert tuple(got.shape) == tuple(rec.shape), name
        assert np.array_equal(_bits(got).reshape(-1), np.ascontiguousarray(ref).view(np.uint8).reshape(-1)), name


def _bf16(rng, shape, std=0.02):
    x = (rng.standard_normal(shape) * std).astype(np.float32)
    return (x.view(np.uint32) >> 16).astype(np.uint16)


@pytest.mark.parametrize("shape", [(1,), (7,), (83, 54), (3, 1, 5)])
def test_float_all_dtypes_odd_shapes(shape):
    rng = np.random.default_rng(sum(shape))
    x = rng.standard_normal(shape).astype(np.float32) * 0.05
    items = []
    for dt, arr in (("BF16", (x.view(np.uint32) >> 16).astype(np.uint16)), ("F16", x.astype(np.float16)),
                    ("F32", x)):
        items.append((f"{dt}", encode_tensor(arr, dt, codec="float", chunk_steps=2)))
    _check(items)


def test_float_830x545():
    # the interpreter runs programs one after another: few, long chunks keep this one quick
    rng = np.random.default_rng(11)
    rec = encode_tensor(_bf16(rng, (830, 545)), "BF16", codec="float", chunk_steps=1024)
    _check([("w", rec)])


def test_float_head_bits_and_special_values():
    rng = np.random.default_rng(3)
    x = rng.standard_normal(3000).astype(np.float32)
    x[:6] = [np.nan, np.inf, -np.inf, -0.0, 1e-40, -1e-45]  # NaN, infinities, -0, subnormals
    items = [(f"j{j}", encode_tensor((x.view(np.uint32) >> 16).astype(np.uint16), "BF16", codec="float",
                                     head_bits=j, chunk_steps=3)) for j in range(0, 5)]
    items += [(f"h{j}", encode_tensor(x.astype(np.float16), "F16", codec="float", head_bits=j,
                                      chunk_steps=3)) for j in (0, 2)]
    _check(items)


def test_f32_coded_low_planes():
    rng = np.random.default_rng(4)
    x = rng.standard_normal((40, 300)).astype(np.float32)
    x = (x.view(np.uint32) & 0xFFFFFF00).view(np.float32)  # low byte 0 constant: coded plane
    rec = encode_tensor(x, "F32", codec="float", chunk_steps=8)
    assert any(lp.get("coded") for lp in rec.params["low"])
    _check([("x", rec)])


def _int8_with_modes(rng, shape, dtype, tile, modes=None):
    rows, cols = shape
    yy, xx = np.mgrid[0:rows, 0:cols]
    v = (np.sin(yy / 5.0) * 50 + np.cos(xx / 4.0) * 50 + rng.integers(-3, 4, shape))
    arr = v.astype(np.int8) if dtype == "I8" else (v + 128).clip(0, 255).astype(np.uint8)
    th = tw = tile
    n_tiles = (-(-rows // th)) * (-(-cols // tw))
    if modes is None:
        modes = rng.integers(0, 5, n_tiles).astype(np.uint8)  # every mode, forced per tile
    x = arr.astype(np.int16)
    return Int8Codec()._pack(dtype, shape, x, th, tw, modes, 12, 4, "auto", dtype == "I8")


@pytest.mark.parametrize("dtype", ["I8", "U8"])
def test_int8_every_mode(dtype):
    rng = np.random.default_rng(5)
    items = [("a", _int8_with_modes(rng, (37, 29), dtype, 8)),
             ("b", _int8_with_modes(rng, (5, 70), dtype, 16)),
             ("none", _int8_with_modes(rng, (9, 13), dtype, 4, np.zeros(12, np.uint8)))]
    for m in range(5):
        items.append((f"m{m}", _int8_with_modes(rng, (19, 23), dtype, 8, np.full(9, m, np.uint8))))
    _check(items)


def test_int8_codec_policy_and_quant():
    rng = np.random.default_rng(6)
    w = (rng.standard_normal((33, 21)) * 0.02).astype(np.float32)
    items = [("i8", encode_tensor(rng.integers(-128, 128, (7,)).astype(np.int8), "I8", codec="int8")),
             ("q32", encode_tensor(w, "F32", mode="int8", tile=8, chunk_steps=4)),
             ("q16", encode_tensor(w.astype(np.float16), "F16", mode="int8", tile=8, chunk_steps=4)),
             ("qbf", encode_tensor((w.view(np.uint32) >> 16).astype(np.uint16), "BF16", mode="int8",
                                   tile=8, chunk_steps=4)),
             ("q1d", encode_tensor(w[0].copy(), "F32", codec="int8-quant", tile=8, chunk_steps=4)),
             ("raw", encode_tensor(np.arange(10, dtype=np.int64), "I64"))]
    _check(items)
    # AVG and PLANAR on quantized data, then dequantized to bf16
    q = _int8_with_modes(rng, (24, 40), "I8", 8, np.array([3, 4, 3, 4, 3] * 3, np.uint8))
    scales = (rng.random(24) * 0.01 + 1e-3).astype(np.float32)
    from wcodec.codecs.base import EncodedTensor
    rec = EncodedTensor("int8-quant", "BF16", (24, 40), {"q": q.params}, {**q.sections, "scales": scales})
    _check([("avgq", rec)])


def test_views_of_one_allocation():
    rng = np.random.default_rng(8)
    items = [(f"t{i}", encode_tensor(_bf16(rng, (20, 30)), "BF16", codec="float", chunk_steps=2))
             for i in range(3)]
    out = decode_records(items, DEVICE)
    ptrs = {out[n].untyped_storage().data_ptr() for n, _ in items}
    assert len(ptrs) == 1


def _corrupt(rec, section, fn):
    s = dict(rec.sections)
    s[section] = fn(s[section].copy())
    from wcodec.codecs.base import EncodedTensor
    return EncodedTensor(rec.codec, rec.dtype, rec.shape, rec.params, s)


@pytest.mark.parametrize("what", ["words", "states", "drop", "alphabet"])
def test_corrupt_float_reported(what):
    rng = np.random.default_rng(9)
    rec = encode_tensor(_bf16(rng, (64, 64)), "BF16", codec="float", chunk_steps=4)
    if what == "words":
        bad = _corrupt(rec, "head.words", lambda w: w ^ np.uint16(0x5A5A))
    elif what == "states":
        bad = _corrupt(rec, "head.states", lambda s: s ^ np.uint32(0x00F00F00))
    elif what == "drop":
        # truncate the last chunk's words: offsets stay consistent, the stream ends early
        def drop(o):
            o[-1] -= 1
            return o
        bad = _corrupt(rec, "head.offsets", drop)
        bad.sections["head.words"] = bad.sections["head.words"][:-1].copy()
    else:
        k = rec.sections["head.alphabet"].size
        bad = _corrupt(rec, "head.alphabet", lambda a: a[: max(1, k // 2)])
    with pytest.raises(CorruptDataError):
        decode_records([("ok", rec), ("bad", bad)], DEVICE)


def test_corrupt_int8_reported():
    rng = np.random.default_rng(10)
    rec = _int8_with_modes(rng, (30, 30), "I8", 8)
    bad = _corrupt(rec, "res.words", lambda w: w[::-1].copy())
    with pytest.raises(CorruptDataError):
        decode_records([("bad", bad)], DEVICE)


def test_int8_avg_tall_tiles():
    # AVG wavefront on tiles taller than a warp, partial edge tiles in both directions
    rng = np.random.default_rng(12)
    items = [(f"{dt}", _int8_with_modes(rng, (70, 45), dt, 64, np.full(2, 3, np.uint8))) for dt in ("I8", "U8")]
    _check(items)


def test_int8_all_none_straight_to_output():
    """All-NONE int8 / int8-quant planes of 32-wide tiles over whole tile columns decode straight
    to their row-major place (MODE_TILED): chunks that cross tile and band edges, a short last
    band, every output kind; other tilings keep the residual plane + tile kernel."""
    from wcodec.gpu import layout as K
    from wcodec.gpu.decode import build_plan
    rng = np.random.default_rng(13)
    w = (rng.standard_normal((70, 64)) * 0.02).astype(np.float32)
    items = [("q32", encode_tensor(w, "F32", mode="int8", chunk_steps=3)),
             ("q16", encode_tensor(w.astype(np.float16), "F16", mode="int8", chunk_steps=5)),
             ("qbf", encode_tensor((w.view(np.uint32) >> 16).astype(np.uint16), "BF16", mode="int8",
                                   chunk_steps=7)),
             ("u8", Int8Codec().encode(rng.integers(0, 256, (45, 96)).astype(np.uint8), "U8",
                                       predict=False, chunk_steps=2)),
             ("i8", Int8Codec().encode(rng.integers(-128, 128, (33, 32)).astype(np.int8), "I8",
                                       predict=False, chunk_steps=4)),
             ("t8", encode_tensor(w, "F32", mode="int8", tile=8, chunk_steps=3))]
    assert all(r.params.get("q", r.params)["all_none"] for _, r in items)
    plan = build_plan(items)
    tiled = {plan.outputs[o].name for k, own in plan.owner.items() if k[0] == K.MODE_TILED for o in own}
    assert tiled == {"q32", "q16", "qbf", "u8", "i8"}
    _check(items)
    nan = items[2][1]
    sc = nan.sections["scales"].copy()
    sc[3] = np.nan  # NaN products have platform-dependent bits: refused by both decoders
    nan = type(nan)(nan.codec, nan.dtype, nan.shape, nan.params, {**nan.sections, "scales": sc})
    for decode in (lambda: decode_tensor(nan, "nan"), lambda: decode_records([("nan", nan)], DEVICE)):
        with pytest.raises(CorruptDataError, match="scale of row 3 is not finite"):
            decode()
    bad = items[2][1]
    words = bad.sections["res.words"].copy()
    words[len(words) // 2] ^= 0x5A5A
    with pytest.raises(CorruptDataError, match="qbf"):
        decode_records([("qbf", type(bad)(bad.codec, bad.dtype, bad.shape, bad.params,
                                          {**bad.sections, "res.words": words}))], DEVICE)


def test_auto_chunk_steps_rule():
    from wcodec.rans import auto_chunk_steps
    assert auto_chunk_steps(384 * 1536) == 1024  # MiniLM-sized planes keep the long chunks
    assert auto_chunk_steps((1 << 24) - 1) == 1024
    assert auto_chunk_steps(4096 * 4096) == 128
    assert auto_chunk_steps(11008 * 4096) == 256
    assert auto_chunk_steps(32000 * 4096) == 256


@pytest.fixture
def pair_mode(monkeypatch):
    """Two chunks per warp (decode.PAIR) in every mode."""
    from wcodec.gpu import decode as D
    monkeypatch.setattr(D, "PAIR", {m: True for m in D.PAIR})
    return D


@pytest.mark.parametrize("W,S", [(2, 2), (4, 1), (16, 4)])
def test_pair_two_chunks_per_warp(pair_mode, W, S):
    # chunk counts that leave the last program partly empty (rows clamped to the last chunk),
    # a partial last chunk, chains of different lengths in one program (several tensors per
    # launch), several tables per plane, F32 with coded low planes (byte launch + F32 launch)
    rng = np.random.default_rng(13 + W)
    x = rng.standard_normal((40, 300)).astype(np.float32)
    items = [("a", encode_tensor(_bf16(rng, (37, 61)), "BF16", codec="float", chunk_steps=3)),
             ("b", encode_tensor(_bf16(rng, (5, 33), std=0.5), "BF16", codec="float", chunk_steps=1)),
             ("c", encode_tensor(x.astype(np.float16), "F16", codec="float", chunk_steps=5)),
             ("d", encode_tensor((x.view(np.uint32) & 0xFFFFFF00).view(np.float32), "F32", codec="float",
                                 chunk_steps=8)),
             ("e", _int8_with_modes(rng, (37, 29), "I8", 8))]
    cfg = {m: (W, S) for m in pair_mode.CONFIG}
    out = decode_records(items, DEVICE, config=cfg)
    for name, rec in items:
        ref = np.ascontiguousarray(decode_tensor(rec, name)).view(np.uint8).reshape(-1)
        assert np.array_equal(_bits(out[name]).reshape(-1), ref), name


def test_pair_corrupt_chunk_named(pair_mode):
    # a corrupt chunk in the second chain (b) of a program is reported, with its tensor
    rng = np.random.default_rng(14)
    rec = encode_tensor(_bf16(rng, (64, 64)), "BF16", codec="float", chunk_steps=4)
    n_chunks = rec.params["head"]["n_symbols"] // (32 * 4)
    def flip(s):
        s[(n_chunks - 1) * 32:] ^= np.uint32(0x00F00F00)  # the last chunk's states
        return s
    bad = _corrupt(rec, "head.states", flip)
    with pytest.raises(CorruptDataError, match=f"'bad'.*chunk {n_chunks - 1}"):
        decode_records([("ok", rec), ("bad", bad)], DEVICE, config={m: (2, 2) for m in pair_mode.CONFIG})


@pytest.mark.parametrize("dtype", ["BF16", "F16"])
def test_lossy_rate_controlled_records(dtype):
    # mode "lossy" writes int8-quant records with dead-zone indices and coarse per-row steps
    rng = np.random.default_rng(11)
    w = (rng.standard_normal((40, 70)) * 0.02).astype(np.float32)
    w[3, 5] = 0.5  # an outlier row keeps its absmax-floored step
    arr = (w.view(np.uint32) >> 16).astype(np.uint16) if dtype == "BF16" else w.astype(np.float16)
    _check([(f"qp{qp}", encode_tensor(arr, dtype, f"lossy:qp={qp}", tile=8, chunk_steps=4))
            for qp in (20, 38)] + [("snr", encode_tensor(arr, dtype, "lossy:snr=24", tile=16))])


@pytest.mark.parametrize("dtype", ["I8", "U8"])
def test_int8_transform_modes(dtype):
    """DCT / ADST tiles (wcodec.gpu.transform_kernels) beside every prediction mode, extremes
    included, plain int8 and int8-quant; bit-exact with the CPU decoder."""
    from wcodec.codecs import transform as T
    from wcodec.codecs.base import EncodedTensor
    rng = np.random.default_rng(5 if dtype == "I8" else 6)
    v = np.cumsum(rng.integers(-9, 10, (24, 40)), axis=1).clip(-128, 127)
    v[:8, :8] = -128
    v[8:16, :8] = 127
    arr = v.astype(np.int8) if dtype == "I8" else (v + 128).astype(np.uint8)
    modes = np.array([T.DCT, T.ADST, 0, 1, 2, T.ADST, T.DCT, 3, 4, T.DCT, T.DCT, 1, T.ADST, 0, T.ADST], np.uint8)
    rec = Int8Codec()._pack(dtype, arr.shape, arr.astype(np.int16), 8, 8, modes, 12, 4, "auto", dtype == "I8")
    assert "hi" in rec.params
    items = [("t", rec), ("plain", _int8_with_modes(rng, (19, 23), dtype, 8))]
    if dtype == "I8":
        scales = (rng.random(24) * 0.01 + 0.001).astype(np.float32)
        items.append(("q", EncodedTensor("int8-quant", "BF16", (24, 40), {"q": rec.params},
                                         {**rec.sections, "scales": scales})))
    # edge tiles of other sizes (16x16, 16x8, 8x16, 8x8): every tile a transform
    e = rng.integers(-128, 128, (40, 24)).astype(np.int16)
    emodes = (T.DCT + np.arange(6) % 2).astype(np.uint8)
    items.append(("edges", Int8Codec()._pack("I8", e.shape, e, 16, 16, emodes, 12, 4, "auto", True)))
    # a 3-D tensor chosen by the encoder (transforms="auto"), tiles of 16
    n, k = np.mgrid[0:32, 0:64]
    basis = np.round(120 * np.cos(2 * np.pi * n * (k + 0.5) / 2048)).astype(np.int8)
    items.append(("auto", encode_tensor(basis.reshape(32, 1, 64), "I8", tile=16, transforms=True)))
    _check(items)
