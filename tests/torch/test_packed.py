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
