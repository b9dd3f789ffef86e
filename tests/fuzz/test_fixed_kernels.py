"""Property (issue 27, must-have 1): for any codec "fixed" record that the decoder accepts, every
Triton kernel (the Triton interpreter here; compiled with WCODEC_GPU_TESTS_ON_DEVICE=1) computes
with the decoder's weights: the decode and rows kernels give them bit for bit, the GEMV, tiled
(split-K too) and input-gradient kernels give ``x @ W.T`` / ``g @ W`` of them
(``hostile.check_fixed_kernels``). Records are valid encodings mutated in their escape lists,
pointer, nibbles, low bytes and values (``hostile.mutate_fixed``); a record the decoder refuses
must be refused by ``from_sections`` too. The mma kernel (GPU only) reads the same checked
layout and escape lists."""

from __future__ import annotations

import os

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("triton")
from hypothesis import HealthCheck, example, given, settings, strategies as st  # noqa: E402

import hostile  # noqa: E402
from wcodec.codecs import decode_tensor  # noqa: E402
from wcodec.errors import CorruptDataError  # noqa: E402

DEVICE = "cuda" if os.environ.get("WCODEC_GPU_TESTS_ON_DEVICE") == "1" else "cpu"


@settings(max_examples=12, deadline=None, suppress_health_check=list(HealthCheck))
@given(n=st.integers(1, 9), k=st.integers(1, 40), seed=st.integers(0, 2 ** 31),
       ops=st.lists(st.sampled_from(hostile.FIXED_OPS), max_size=2))
@example(n=3, k=20, seed=0, ops=["dup"])  # issue 27: one weight, three values
@example(n=4, k=33, seed=1, ops=["swap"])
@example(n=5, k=17, seed=2, ops=["col", "move"])
def test_kernels_compute_with_the_decoders_weights(n, k, seed, ops):
    r = np.random.default_rng(seed)
    rec = hostile.fixed_record(r, n, k)
    for op in ops:
        hostile.mutate_fixed(rec, op, r)
    try:
        hostile.check_fixed_kernels(rec, r, DEVICE)
    except CorruptDataError:
        pass  # refused by the decoder and by from_sections alike


def test_the_check_catches_a_kernel_that_double_counts_an_escape():
    """The property's comparison can fail: a duplicated escape that slips past a weakened
    check_layout gives other weights in the kernels (the defect the check now refuses)."""
    from unittest import mock

    from wcodec.codecs import fixed as F
    r = np.random.default_rng(0)
    rec = hostile.fixed_record(r, 3, 20)
    hostile.mutate_fixed(rec, "dup", r)

    def lenient(base, rows, cols, lo, nibbles, ptr, col, val):  # the pointer only, as before issue 27
        return np.repeat(np.arange(rows, dtype=np.int64), np.diff(np.asarray(ptr).astype(np.int64)))

    with pytest.raises(CorruptDataError, match="esc.col"):
        decode_tensor(rec, "w")
    with mock.patch.object(F, "check_layout", lenient), pytest.raises(hostile.KernelMismatch):
        hostile.check_fixed_kernels(rec, r, DEVICE)
