"""wcodec.gpu.fixed.pack / unpack: the fixed layout's tensors in one uint8 buffer and back, for
any shape and escape count (hypothesis), and refused sizes."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
from hypothesis import given, settings, strategies as st  # noqa: E402

from wcodec.gpu import fixed as fx  # noqa: E402

FIELDS = ("lo", "nib", "eptr", "ecol", "eval", "erow")


@settings(max_examples=40, deadline=None)
@given(n=st.integers(1, 40), k=st.integers(1, 70), escapes=st.integers(0, 60), seed=st.integers(0, 2 ** 16))
def test_unpack_gives_back_every_tensor_as_views(n, k, escapes, seed):
    g = torch.Generator().manual_seed(seed)
    w = (torch.randn(n, k, generator=g) * 0.05).to(torch.bfloat16)
    w.view(torch.int16).view(-1)[torch.randperm(n * k, generator=g)[:escapes]] = 0  # zeros escape
    fw = fx.encode_weight(w)
    packed = fx.pack(fw)
    back = fx.unpack(packed, fw.base, n, k)
    for f in FIELDS:
        a, b = getattr(fw, f), getattr(back, f)
        assert a.dtype == b.dtype and a.shape == b.shape and torch.equal(a, b), f
        assert b.untyped_storage().data_ptr() == packed.untyped_storage().data_ptr()  # no copy
    assert torch.equal(fx.decode(back).view(torch.int16), w.view(torch.int16))


def test_unpack_refuses_a_size_that_fits_no_escape_count():
    fw = fx.encode_weight(torch.zeros(4, 16, dtype=torch.bfloat16))
    packed = fx.pack(fw)
    for bad in (packed[:-1], torch.cat([packed, packed[:3]]), packed.view(torch.int16)):
        with pytest.raises(ValueError, match="packed"):
            fx.unpack(bad, fw.base, 4, 16)
    with pytest.raises(ValueError, match="packed"):
        fx.unpack(packed, fw.base, 40, 16)  # another shape's fixed part is larger


def test_a_stored_fixed_record_without_escapes_packs(tmp_path):
    """Regression: a `wcodec encode --codec fixed` record with no escapes reads back as empty
    numpy sections of stride 0, which pack() could not view as bytes (issue 26)."""
    from safetensors.torch import save_file

    from wcodec.cli import main
    from wcodec.format import Reader
    from wcodec.torch.linear import CompressedLinear

    torch.manual_seed(0)
    w = (torch.rand(48, 80) * 0.5 + 0.5).to(torch.bfloat16)  # one exponent: no escapes
    save_file({"w": w}, str(tmp_path / "x.safetensors"))
    assert main(["encode", str(tmp_path / "x.safetensors"), str(tmp_path / "y.wcodec"), "--codec", "fixed"]) == 0
    rec = Reader(str(tmp_path / "y.wcodec")).record("w")
    assert rec.codec == "fixed" and rec.params["n_escapes"] == 0
    fw = fx.from_sections(rec.params, rec.sections, tuple(rec.shape), torch.device("cpu"))
    lin = CompressedLinear(fw)
    assert torch.equal(lin.decoded_weight().view(torch.int16), w.view(torch.int16))
    x = torch.randn(3, 80, dtype=torch.bfloat16)
    assert torch.equal(lin(x), torch.nn.functional.linear(x, w))


# --- state dicts are untrusted input (issue 27): checked against the module's shape first ----

from wcodec.errors import CorruptDataError  # noqa: E402
from wcodec.torch.embedding import CompressedEmbedding  # noqa: E402
from wcodec.torch.linear import CompressedLinear  # noqa: E402


def _module(cls, n=24, k=40, seed=0):
    g = torch.Generator().manual_seed(seed)
    w = (torch.randn(n, k, generator=g) * 0.05).to(torch.bfloat16)
    w.view(torch.int16).view(-1)[torch.randperm(n * k, generator=g)[:30]] = 0  # escapes
    w[1, 5] = 0
    w[1, 7] = 0
    return cls(fx.encode_weight(w)), w


def _fresh(cls):
    return _module(cls, seed=1)[0]


def _packed_with(sd, edit):
    """sd's w_packed with its unpacked fields edited by edit(fields dict of clones); repacked."""
    m = _fresh(CompressedLinear)
    fw = fx.unpack(sd["w_packed"], sd["_extra_state"]["base"], 24, 40)
    f = {k: v.clone() for k, v in fw.tensors().items()}
    edit(f)
    return fx.pack(fx.FixedWeight(**f, base=fw.base, N=24, K=40)), m


def _dup(f):
    f["ecol"] = torch.cat([f["ecol"][:1], f["ecol"]])
    f["eval"] = torch.cat([f["eval"][:1], f["eval"]])
    f["erow"] = torch.cat([f["erow"][:1], f["erow"]])
    f["eptr"][int(f["erow"][0]) + 1:] += 1


def _wide_col(f):
    f["ecol"][0] += 65536  # 65539 for column 3: wrapped to 3 by a uint16 cast


def _bad_erow(f):
    f["erow"][0] += 1


def _seven(f):
    f["nib"].view(torch.uint8)[0, 0] |= 0x07  # an escape nibble where none is listed (or a changed one)
    f["nib"].view(torch.uint8)[0, 0] &= 0xF7 if f["ecol"].numel() and int(f["erow"][0]) == 0 else 0xFF


@pytest.mark.parametrize("edit,field", [(_dup, "esc.col"), (_wide_col, "esc.col"), (_bad_erow, "esc_row"),
                                        (_seven, "nib")])
def test_packed_contents_are_checked(edit, field):
    src, _ = _module(CompressedLinear)
    sd = src.state_dict()
    bad, m = _packed_with(sd, edit)
    before = m.w_packed.clone()
    with pytest.raises(CorruptDataError, match=f"'w_packed.*{field}"):
        m.load_state_dict({**sd, "w_packed": bad})
    assert torch.equal(m.w_packed, before)  # nothing loaded


def test_stride0_packed_is_refused_before_any_allocation(tmp_path):
    """A 1-byte storage expanded to the size of the module's packed weight (a tiny .pt file)."""
    src, _ = _module(CompressedLinear)
    sd = src.state_dict()
    sd["w_packed"] = torch.zeros(1, dtype=torch.uint8).expand(sd["w_packed"].numel())
    torch.save(sd, tmp_path / "sd.pt")
    assert (tmp_path / "sd.pt").stat().st_size < 4096
    loaded = torch.load(tmp_path / "sd.pt", weights_only=True)
    for assign in (False, True):
        with pytest.raises(CorruptDataError, match="w_packed.*(storage|contiguous)"):
            _fresh(CompressedLinear).load_state_dict(loaded, assign=assign)


@pytest.mark.parametrize("size", [0, 1, 10 ** 9])
def test_packed_sizes_that_fit_no_escape_count_are_refused(size):
    src, _ = _module(CompressedLinear)
    sd = src.state_dict()
    sd["w_packed"] = torch.zeros(1, dtype=torch.uint8).expand(size) if size > 1 else torch.zeros(size, dtype=torch.uint8)
    with pytest.raises(CorruptDataError, match="w_packed"):
        _fresh(CompressedLinear).load_state_dict(sd)


def test_packed_of_another_dtype_or_rank_is_refused():
    src, _ = _module(CompressedLinear)
    sd = src.state_dict()
    for bad in (sd["w_packed"].to(torch.int16), sd["w_packed"].view(1, -1), [1, 2, 3]):
        with pytest.raises(CorruptDataError, match="w_packed"):
            _fresh(CompressedLinear).load_state_dict({**sd, "w_packed": bad})


def _old_layout(m):
    sd = m.state_dict()
    fw = m.fixed_weight
    names = {"lo": "w_lo", "nib": "w_nib", "eptr": "esc_ptr", "ecol": "esc_col", "eval": "esc_val", "erow": "esc_row"}
    old = {k: v for k, v in sd.items() if k != "w_packed"}
    old.update({name: getattr(fw, f).clone() for f, name in names.items()})
    return old


def test_six_buffer_layout_is_checked():
    src, w = _module(CompressedLinear)
    old = _old_layout(src)
    m = _fresh(CompressedLinear)
    m.load_state_dict(old)
    assert torch.equal(m.decoded_weight().view(torch.int16), w.view(torch.int16))
    cut = dict(old, w_lo=old["w_lo"][:3].clone())  # 3 of 24 rows: loaded silently before
    with pytest.raises(CorruptDataError, match="w_lo.*shape"):
        _fresh(CompressedLinear).load_state_dict(cut)
    with pytest.raises(CorruptDataError, match="lacks"):
        _fresh(CompressedLinear).load_state_dict({k: v for k, v in old.items() if k != "esc_row"})
    wide = dict(old, esc_col=old["esc_col"].clone())
    wide["esc_col"][0] += 65536
    with pytest.raises(CorruptDataError, match="esc.col"):
        _fresh(CompressedLinear).load_state_dict(wide)
    for name in ("w_nib", "esc_val"):
        with pytest.raises(CorruptDataError, match=name):
            _fresh(CompressedLinear).load_state_dict(dict(old, **{name: old[name].to(torch.int64)}))


HOSTILE_EXTRA = [None, [], "x", torch.zeros(3), {}, {"base": "1", "a": 1},
                 {"base": 2.0}, {"base": -1}, {"base": 120}, {"base": True}, {"base": 1 << 70}]


@pytest.mark.parametrize("cls", [CompressedLinear, CompressedEmbedding])
@pytest.mark.parametrize("i", range(len(HOSTILE_EXTRA) + 2))
def test_hostile_extra_state_is_a_wcodec_error(cls, i):
    src, _ = _module(cls)
    sd = src.state_dict()
    good = dict(sd["_extra_state"])
    if i < len(HOSTILE_EXTRA):
        extra = HOSTILE_EXTRA[i]
        if isinstance(extra, dict) and "base" in extra and len(extra) == 1:
            extra = {**good, **extra}
    else:  # another shape than the module's, or an extra key
        extra = {k: v + 1 if k != "base" else v for k, v in good.items()} if i == len(HOSTILE_EXTRA) \
            else {**good, "bias": 1}
    m = _fresh(cls)
    with pytest.raises(CorruptDataError, match="_extra_state"):
        m.load_state_dict({**sd, "_extra_state": extra})
    with pytest.raises(CorruptDataError, match="_extra_state"):
        m.set_extra_state(extra)


@pytest.mark.parametrize("cls", [CompressedLinear, CompressedEmbedding])
def test_state_dict_round_trip_through_a_weights_only_file(cls, tmp_path):
    src, w = _module(cls)
    torch.save(src.state_dict(), tmp_path / "m.pt")
    m = _fresh(cls)
    m.load_state_dict(torch.load(tmp_path / "m.pt", weights_only=True))
    assert torch.equal(m.decoded_weight().view(torch.int16), w.view(torch.int16))
    m2 = _fresh(cls)
    m2.load_state_dict(torch.load(tmp_path / "m.pt", weights_only=True), assign=True)
    assert torch.equal(m2.decoded_weight().view(torch.int16), w.view(torch.int16))


def test_empty_weights_from_records_pack_and_run():
    """Records with no escapes (numpy's empty arrays have stride 0) and shapes with a 0."""
    import numpy as np
    from wcodec.codecs import encode_tensor
    for shape in [(24, 0), (0, 24), (3, 16)]:
        rec = encode_tensor(np.full(shape, 0x3F80, np.uint16), "BF16", codec="fixed")
        fw = fx.from_sections(rec.params, rec.sections, rec.shape, "cpu")
        cl = CompressedLinear(fw, torch.ones(shape[0], dtype=torch.bfloat16))
        y = cl(torch.ones(2, shape[1], dtype=torch.bfloat16))
        assert y.shape == (2, shape[0]) and torch.all(y == 1 + shape[1])
        other = CompressedLinear(fw, torch.zeros(shape[0], dtype=torch.bfloat16))
        other.load_state_dict(cl.state_dict())
        assert torch.equal(other(torch.ones(2, shape[1], dtype=torch.bfloat16)), y)
