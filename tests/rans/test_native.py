"""The C extension (wcodec._cext) against numba and the pure-Python reference: same bits, same
corruption reports, on every instruction set this CPU runs (scalar, AVX2, AVX-512)."""

import contextlib
import os
import platform
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import numpy as np
import pytest
from hypothesis import assume, given, settings, strategies as st
from hypothesis.extra.numpy import arrays

from wcodec import native, rans
from wcodec.codecs import decode_tensor, encode_tensor
from wcodec.codecs import float as F
from wcodec.errors import CorruptDataError

SRC = Path(__file__).resolve().parents[2] / "src"
ext = native.ext()
needs_ext = pytest.mark.skipif(ext is None, reason="C extension wcodec._cext not built (or WCODEC_NATIVE=0)")
ISAS = ext.supported_isas() if ext is not None else []


@pytest.fixture(params=[False, True], ids=["gather", "scalar-lookup"])
def lookups(request, isa):
    """Table lookups by the gather instruction and by scalar loads (AMD's default)."""
    before = ext.set_soft_gather(request.param)
    yield
    ext.set_soft_gather(before)


def _same(a: rans.RansPlane, b: rans.RansPlane) -> bool:
    return a.params() == b.params() and all(
        np.array_equal(x, y) for x, y in zip(a.sections("p").values(), b.sections("p").values()))


def _symbols(kind, n, seed=0):
    rng = np.random.default_rng(seed)
    return {"skewed": np.clip(rng.geometric(0.25, size=n), 0, 255).astype(np.uint8),
            "constant": np.full(n, 200, np.uint8),
            "uniform": rng.integers(0, 256, n).astype(np.uint8),
            "two": rng.choice([3, 250], n).astype(np.uint8),
            # frequencies at both ends of the table (1 and near 2**prob_bits) and every magnitude
            # between: the SIMD encoders' quotient x // f over its whole range
            "dominant": np.where(rng.random(n) < 0.002, rng.integers(0, 256, n), 7).astype(np.uint8),
            "ramp": rng.choice(256, n, p=_ramp()).astype(np.uint8)}[kind]


def _ramp():
    w = 2.0 ** (np.arange(256) / 18.0)
    return w / w.sum()


def test_extension_is_built_where_a_compiler_is():
    """CI installs with a compiler: the optional extension must then really be there."""
    if os.environ.get("WCODEC_NATIVE", "1") == "0":
        pytest.skip("WCODEC_NATIVE=0")
    cc = (sysconfig.get_config_var("CC") or "cc").split()[0]
    if shutil.which(cc) is None:
        pytest.skip(f"no C compiler ({cc}): the numba path is the expected one")
    assert native.available(), "a C compiler is present but wcodec._cext is not built"
    assert native.path().startswith("native-")


def test_lookup_choice_per_isa_and_restored():
    """AVX2 looks tables up by scalar loads on every CPU, AVX-512 by gathers except on AMD (both
    measured, see lut16); set_soft_gather sets both or an (avx2, avx512) pair, returns the old pair."""
    if ext is None:
        pytest.skip("C extension wcodec._cext not built (or WCODEC_NATIVE=0)")
    before = ext.set_soft_gather(True)
    try:
        if platform.machine() in ("x86_64", "AMD64") and "avx2" in ext.supported_isas():  # SIMD built
            amd = "AuthenticAMD" in open("/proc/cpuinfo").read() if os.path.exists("/proc/cpuinfo") else None
            assert before[0] is True and (amd is None or before[1] is amd)
        assert ext.set_soft_gather((False, True)) == (True, True)
        assert ext.set_soft_gather(False) == (False, True)
    finally:
        ext.set_soft_gather(before)
    assert ext.set_soft_gather(before) == before


@pytest.mark.parametrize("n", [0, 1, 31, 32, 33, 1000, 40_000])
@pytest.mark.parametrize("kind", ["skewed", "constant", "uniform", "two", "dominant", "ramp"])
@pytest.mark.parametrize("prob_bits", [11, 12])
def test_rans_native_numba_reference_identical(isa, lookups, n, kind, prob_bits):
    sym = _symbols(kind, n, n)
    for steps in (1, 3, 1024):
        a = rans.encode(sym, prob_bits, steps, backend="native")
        assert _same(a, rans.encode(sym, prob_bits, steps, backend="numba"))
        if n <= 1000:
            assert _same(a, rans.encode(sym, prob_bits, steps, backend="reference"))
        assert np.array_equal(rans.decode(a, backend="native"), sym)


@needs_ext
@settings(max_examples=60, deadline=None)
@given(arrays(np.uint8, st.integers(0, 3000)), st.integers(1, 9), st.sampled_from([11, 12]),
       st.sampled_from(["auto", 1, 2]), st.sampled_from(ISAS or ["scalar"]))
def test_rans_property(sym, chunk_steps, prob_bits, tables, which):
    before = ext.isa()
    ext.set_isa(which)
    try:
        a = rans.encode(sym, prob_bits, chunk_steps, tables=tables, backend="native")
        assert _same(a, rans.encode(sym, prob_bits, chunk_steps, tables=tables, backend="numba"))
        assert np.array_equal(rans.decode(a, backend="native"), sym)
    finally:
        ext.set_isa(before)


@needs_ext
@settings(max_examples=40, deadline=None)
@given(arrays(np.int64, (3, 256), elements=st.integers(0, 10**6)), st.sampled_from([11, 12]))
def test_normalize_native_equals_numba(counts, prob_bits):
    counts[1, :] = counts[1, :] % 3  # many ties and ones: the overshoot loop
    assert np.array_equal(native.normalize_rows(counts, prob_bits),
                          native.normalize_rows(counts, prob_bits, numba=True))


@contextlib.contextmanager
def _threads(n):
    before = native.threads()
    native.set_threads(n)
    try:
        yield
    finally:
        native.set_threads(before)


@needs_ext
def test_helper_threads_shared_by_concurrent_calls():
    """The kept helper threads serve calls from many Python threads at once (decode and encode,
    each asking for 4 threads): every result right, no call left waiting."""
    from concurrent.futures import ThreadPoolExecutor
    planes = [(s, rans.encode(s, 12, 4)) for s in (_symbols(k, 40_000 + 32 * i, i)
                                                   for i, k in enumerate(["skewed", "uniform", "two"] * 4))]

    def job(k):
        sym, plane = planes[k % len(planes)]
        ok = True
        for _ in range(5):
            out = np.empty(plane.n_symbols, np.uint8)
            lookup, words = rans.kernel_inputs(plane)
            st_ = native.decode_chunks(plane.states, plane.offsets, words, plane.n_symbols, plane.chunk_size,
                                       plane.chunks_per_table, lookup, plane.prob_bits, out)
            ok &= not st_.any() and np.array_equal(out, sym)
            ok &= _same(rans.encode(sym, 12, 4, backend="native"), plane)
        return ok

    with _threads(4), ThreadPoolExecutor(8) as ex:
        assert all(ex.map(job, range(48)))


@needs_ext
@pytest.mark.skipif(not hasattr(os, "fork"), reason="no os.fork on this platform")
def test_helper_threads_after_fork():
    """A forked child (a DataLoader worker) has none of the parent's helper threads: its
    multi-threaded calls still finish, with the right symbols (the caller drains every task no
    helper takes; the child starts its own helpers)."""
    sym = _symbols("skewed", 200_000)
    plane = rans.encode(sym, 12, 4)
    with _threads(2):
        assert np.array_equal(rans.decode(plane, backend="native"), sym)  # helpers now exist
        pid = os.fork()
        if pid == 0:  # child: exit code 0 if the decode is right
            ok = False
            try:
                ok = np.array_equal(rans.decode(plane, backend="native"), sym)
            finally:
                os._exit(0 if ok else 1)
        import signal
        import time
        deadline = time.monotonic() + 120
        while True:  # a child stuck waiting for the parent's helpers would hang here: bounded
            done, status = os.waitpid(pid, os.WNOHANG)
            if done or time.monotonic() > deadline:
                break
            time.sleep(0.01)
        if not done:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
    assert done, "the forked child's decode did not finish"
    assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0


def test_decode_into_callers_buffer(isa):
    """out= may be a view of a torch tensor or an mmap: the decoder writes into it in place."""
    torch = pytest.importorskip("torch")
    sym = _symbols("skewed", 100_000)
    plane = rans.encode(sym)
    t = torch.zeros(plane.n_symbols, dtype=torch.uint8)
    view = t.numpy()
    assert rans.decode(plane, out=view) is view
    assert np.array_equal(t.numpy(), sym)


def _status(plane, numba):
    lookup, words = rans.kernel_inputs(plane)
    out = np.zeros(plane.n_symbols, np.uint8)
    return native.decode_chunks(plane.states, plane.offsets, words, plane.n_symbols, plane.chunk_size,
                                plane.chunks_per_table, lookup, plane.prob_bits, out, numba=numba)


def _corruptions(plane, rng):
    """Planes that pass validation but whose chunks are wrong (as hostile files can be)."""
    base = dict(n_symbols=plane.n_symbols, prob_bits=plane.prob_bits, chunk_steps=plane.chunk_steps,
                chunks_per_table=plane.chunks_per_table, alphabet_size=plane.alphabet_size,
                freqs=plane.freqs, states=plane.states, offsets=plane.offsets, words=plane.words)
    if plane.words.size:
        words = plane.words.copy()
        words[rng.integers(0, words.size, 5)] ^= np.uint16(0x1234)
        yield dict(base, words=words)
    states = plane.states.copy()
    states[3] = 5  # below the lower bound
    yield dict(base, states=states)
    states = plane.states.copy()
    states[rng.integers(0, states.size, 4)] = rng.integers(1 << 16, 1 << 32, 4, dtype=np.uint64).astype(np.uint32)
    yield dict(base, states=states)
    offsets = plane.offsets.copy()
    offsets[1:-1] = np.minimum(offsets[1:-1] + 7, offsets[-1])  # words moved between chunks
    yield dict(base, offsets=np.maximum.accumulate(offsets))
    cut = plane.words.size // 2  # truncated: every chunk ends early
    yield dict(base, words=plane.words[:cut].copy(),
               offsets=np.minimum(plane.offsets, cut).astype(np.uint32))
    yield dict(base, words=np.zeros(0, np.uint16), offsets=np.zeros_like(plane.offsets))


@pytest.mark.parametrize("seed", range(4))
def test_corrupt_streams_reported_like_numba(isa, lookups, seed):
    rng = np.random.default_rng(seed)
    sym = _symbols(["uniform", "skewed", "two", "constant"][seed], 70_000 + 999 * seed, seed)
    plane = rans.encode(sym, 12, chunk_steps=[4, 16, 64, 1024][seed])
    failed = 0
    for fields in _corruptions(plane, rng):
        bad = rans.RansPlane(**fields)
        try:
            bad.validate()
        except CorruptDataError:
            continue
        expect = _status(bad, numba=True)
        assert np.array_equal(_status(bad, numba=False), expect)
        if expect.any():
            failed += 1
            with pytest.raises(CorruptDataError):
                rans.decode(bad, backend="native")
    assert failed >= 2  # the corruptions are caught, not just survived


def _bf16(a):
    return (a.astype(np.float32).view(np.uint32) >> 16).astype(np.uint16)


def _float_inputs(dtype, n, seed):
    rng = np.random.default_rng(seed)
    w = (rng.standard_normal(n) * 0.05).astype(np.float32)
    w[:8] = [0.0, -0.0, np.inf, -np.inf, np.nan, 1e-40, -3.5e-38, 1.0]  # n >= 8 here
    if dtype == "BF16":
        return _bf16(w)
    return w.astype(np.float16) if dtype == "F16" else w


@pytest.mark.parametrize("dtype", ["BF16", "F16", "F32"])
@pytest.mark.parametrize("n", [256, 257, 4099, 70_001])
@pytest.mark.parametrize("head_bits", [None, 0, 3])
def test_float_codec_native_equals_numba(isa, lookups, dtype, n, head_bits):
    a = _float_inputs(dtype, n, n)
    rec = encode_tensor(a, dtype, head_bits=head_bits, chunk_steps=16)
    with native.disabled():
        ref = encode_tensor(a, dtype, head_bits=head_bits, chunk_steps=16)
        assert decode_tensor(rec).tobytes() == a.tobytes()
    assert rec.params == ref.params and rec.sections.keys() == ref.sections.keys()
    assert all(np.array_equal(rec.sections[k], ref.sections[k]) for k in rec.sections)
    assert decode_tensor(rec).tobytes() == a.tobytes()


@pytest.mark.parametrize("dtype", ["BF16", "F32"])
@pytest.mark.parametrize("share", [0.0, 0.01, 0.3])
def test_float_alphabet_with_gaps_native_equals_numba(isa, lookups, dtype, share):
    """Head values in runs of several lengths with gaps between, a share of them outside the
    longest run at random places: the AVX2 merge computes the placed heads of the longest run and
    looks up the vectors holding any other (both kinds of vector, next to each other)."""
    rng = np.random.default_rng(7)
    n = 40_000
    w = (rng.standard_normal(n) * 0.02).astype(np.float32)  # head_bits > 0: runs of dozens of values
    far = rng.random(n) < share
    w[far] = np.ldexp(1.0 + rng.random(int(far.sum())), rng.choice([-60, -41, -40, -39, 3, 9], int(far.sum())))
    a = _bf16(w) if dtype == "BF16" else w
    rec = encode_tensor(a, dtype, chunk_steps=16)
    with native.disabled():
        assert decode_tensor(rec).tobytes() == a.tobytes()
    assert decode_tensor(rec).tobytes() == a.tobytes()


@pytest.mark.parametrize("dtype", ["BF16", "F32"])
def test_float_merge_statuses_like_numba(isa, lookups, dtype):
    """Head symbols outside the alphabet (status 4) and corrupt words, fused decode + merge."""
    a = _float_inputs(dtype, 50_000, 3)
    rec = encode_tensor(a, dtype, chunk_steps=8)
    parts = F.parse(rec)
    head = parts.head
    W, E, M, L = parts.layout
    lookup, words = rans.kernel_inputs(head)
    low = np.zeros((L, a.size), np.uint8)
    for alphabet_size in (parts.alphabet.size, max(1, parts.alphabet.size // 2)):
        placed = F.placed_heads(parts.alphabet[:alphabet_size], M - parts.head_bits)
        for w in (words, words ^ np.uint16(0x0101)):
            got = []
            for numba in (True, False):
                out = np.zeros(a.size, F.UINT[W])
                got.append(native.decode_merge_float(head.states, head.offsets, w, head.chunk_size,
                                                     head.chunks_per_table, lookup, head.prob_bits, placed,
                                                     parts.tail, parts.tail_bits, 8 * L, W - 1, low, out,
                                                     numba=numba)[0])
            assert np.array_equal(got[0], got[1])
            if alphabet_size < parts.alphabet.size and w is words:
                assert (got[1] == 4).any()


def test_kernels_reject_inconsistent_arguments():
    if ext is None:
        pytest.skip("C extension wcodec._cext not built")
    plane = rans.encode(_symbols("skewed", 5000), 12, 4)
    lookup, words = rans.kernel_inputs(plane)
    out = np.zeros(plane.n_symbols, np.uint8)
    status = np.zeros(plane.n_chunks, np.int32)
    args = [plane.states, plane.offsets, words, plane.n_symbols, plane.chunk_size, plane.chunks_per_table,
            lookup, 12, out, status, 1]
    ext.decode_chunks(*args)
    for k, bad in ((0, plane.states[:-1]), (1, plane.offsets[::-1].copy()), (3, plane.n_symbols + 1),
                   (6, lookup[:, :100].copy()), (8, out[:-1]), (8, np.zeros(plane.n_symbols, np.uint16))):
        with pytest.raises((ValueError, BufferError)):
            ext.decode_chunks(*(args[:k] + [bad] + args[k + 1:]))


def test_numba_fallback_when_disabled(tmp_path):
    """WCODEC_NATIVE=0: the numba kernels run, the same bytes come out, and one line says so."""
    code = ("import numpy as np; from wcodec import native, rans\n"
            "assert native.path() == 'numba', native.path()\n"
            "s = np.arange(5000, dtype=np.uint8) % 7\n"
            "p = rans.encode(s)\n"
            "assert np.array_equal(rans.decode(p), s)\n"
            "print(p.words.tobytes().hex()[:64])\n")
    env = dict(os.environ, WCODEC_NATIVE="0", PYTHONPATH=str(SRC))
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr
    expect = rans.encode(np.arange(5000, dtype=np.uint8) % 7).words.tobytes().hex()[:64]
    assert r.stdout.strip() == expect


@pytest.mark.parametrize("dtype", ["BF16", "F32"])
def test_decode_tensor_into_torch_tensor(dtype):
    """decode_tensor(out=) fills a torch tensor's memory in place (no copy), any codec."""
    torch = pytest.importorskip("torch")
    a = _float_inputs(dtype, 5000, 1).reshape(50, 100)
    a.reshape(-1)[:8] = a.reshape(-1)[8:16]  # finite, for the int8 mode
    for mode in ("lossless", "int8"):
        rec = encode_tensor(a, dtype, mode=mode)
        t = torch.empty(a.shape, dtype=torch.bfloat16 if dtype == "BF16" else torch.float32)
        view = t.view(torch.int16).numpy() if dtype == "BF16" else t.numpy()
        got = decode_tensor(rec, "w", out=view)
        assert np.shares_memory(got, view)
        assert view.tobytes() == decode_tensor(rec).tobytes()
    with pytest.raises(ValueError):
        decode_tensor(rec, "w", out=np.empty(3, np.float32))


@needs_ext
@settings(max_examples=80, deadline=None)
@given(st.integers(0, 2**32 - 1), st.integers(1, 5000), st.integers(1, 8), st.integers(0, 3000),
       st.sampled_from(ISAS or ["scalar"]), st.booleans())
def test_random_streams_reported_like_numba(seed, n, chunk_steps, n_words, which, soft):
    """Garbage states and words under valid tables and offsets: same statuses, no crash."""
    rng = np.random.default_rng(seed)
    plane = rans.encode(_symbols("skewed", n, seed % 1000), 12, chunk_steps)
    n_words = min(n_words, n // 2)
    cuts = np.sort(rng.integers(0, n_words + 1, plane.n_chunks - 1))
    bad = rans.RansPlane(plane.n_symbols, 12, chunk_steps, plane.chunks_per_table, plane.alphabet_size,
                         plane.freqs, rng.integers(0, 2**32, plane.states.size, dtype=np.uint64).astype(np.uint32)
                         | np.uint32(1 << 16) * (rng.random(plane.states.size) < 0.95),
                         np.concatenate(([0], cuts, [n_words])).astype(np.uint32),
                         rng.integers(0, 2**16, n_words, dtype=np.uint32).astype(np.uint16))
    try:
        bad.validate()
    except CorruptDataError:
        assume(False)  # a chunk with more words than symbols: rejected before any kernel runs
    before, old_soft = ext.isa(), ext.set_soft_gather(soft)
    ext.set_isa(which)
    try:
        assert np.array_equal(_status(bad, numba=False), _status(bad, numba=True))
    finally:
        ext.set_isa(before)
        ext.set_soft_gather(old_soft)


# ---- the encoder's decisions in C (issue 15): the same choices as their numpy twins ----------

@needs_ext
@settings(max_examples=40, deadline=None)
@given(st.integers(1, 40), st.integers(0, 2**32 - 1), st.sampled_from([11, 12]), st.sampled_from([32, 1024, 32768]))
def test_choose_tables_native_equals_numpy(n_chunks, seed, prob_bits, chunk_size):
    """Drifting symbol statistics (where finer tables pay) and flat ones (where one table wins)."""
    rng = np.random.default_rng(seed)
    drift = rng.random() < 0.5
    p = rng.dirichlet(np.full(rng.integers(1, 257), 0.3))
    counts = np.zeros((n_chunks, 256), np.int64)
    for c in range(n_chunks):
        q = np.roll(p, c * rng.integers(1, 4)) if drift else p
        counts[c, :q.size] = rng.multinomial(chunk_size, q)
    assert (rans._choose_tables(counts, chunk_size, prob_bits) ==
            rans._choose_tables(counts, chunk_size, prob_bits, numba=True))


@needs_ext
@settings(max_examples=60, deadline=None)
@given(st.sampled_from([("BF16", 8, 8), ("F16", 5, 11), ("F32", 8, 8)]), st.integers(0, 2**32 - 1),
       st.integers(0, 5000))
def test_float_head_bits_native_equals_numpy(layout, seed, n):
    _, E, tail0 = layout
    rng = np.random.default_rng(seed)
    hist = np.zeros(1 << (E + F.MAX_HEAD_BITS), np.int64)
    where = rng.integers(0, hist.size, rng.integers(1, 600))
    np.add.at(hist, where, rng.geometric(0.01, where.size) if n else 0)
    got = ext.float_head_bits(hist, E, tail0, F.MAX_HEAD_BITS)
    with native.disabled():
        assert got == F.choose_head_bits(hist, E, tail0)


@pytest.mark.parametrize("dtype", ["BF16", "F32"])
def test_split_window_same_bits_as_scalar_lookups(isa, dtype):
    """The SIMD split's register window (any start, values outside it included) = symbol_of."""
    a = _float_inputs(dtype, 70_001, 5)
    a.reshape(-1)[100:5000] = 0  # a far-away head value (zero) beside the weights' cluster
    W, E, M, L = F.LAYOUT[dtype]
    bits = a.reshape(-1).view(F.UINT[W])
    j = 2
    R, shift, mask = 1 + M - 8 * L - j, M - j, (1 << (E + j)) - 1
    hist = native.head_histogram(bits, shift, mask)
    alphabet = np.flatnonzero(hist).astype(np.uint16)
    symbol_of = np.zeros(mask + 1, np.uint8)
    symbol_of[alphabet] = np.arange(alphabet.size)
    args = (bits, shift, mask, symbol_of, 8 * L, (1 << (R - 1)) - 1, W - 1, R, L)
    ref = native.split_float(*args, numba=True)
    for window in (-1, 0, int(alphabet[0]), int(alphabet[alphabet.size // 2]), int(alphabet[-1]),
                   F._busiest_window(alphabet, hist[alphabet]), mask):
        got = native.split_float(*args, window=window)
        assert all(np.array_equal(x, y) for x, y in zip(got, ref)), window


def test_every_bf16_pattern_native_equals_numba(isa):
    """All 65536 bf16 bit patterns (NaN payloads, infinities, subnormals, -0.0), shuffled."""
    a = np.random.default_rng(0).permutation(np.arange(1 << 16, dtype=np.uint32)).astype(np.uint16)
    for head_bits in (None, 0):  # 0: <= 256 head values, so every pattern is codable
        rec = encode_tensor(a, "BF16", head_bits=head_bits, chunk_steps=64)
        with native.disabled():
            ref = encode_tensor(a, "BF16", head_bits=head_bits, chunk_steps=64)
            assert decode_tensor(rec).tobytes() == a.tobytes()
        assert rec.params == ref.params
        assert all(np.array_equal(rec.sections[k], ref.sections[k]) for k in rec.sections)
        assert decode_tensor(rec).tobytes() == a.tobytes()


@pytest.mark.parametrize("n", [1, 7, 33, 1023, 32_769, 70_001])
@pytest.mark.parametrize("dtype", ["BF16", "F32"])
def test_one_symbol_tables_odd_lengths(isa, n, dtype):
    """Constant tensors (one head value: a table of one symbol) of odd lengths, native = numba."""
    a = np.full(n, 0.375, np.float32)
    a = _bf16(a) if dtype == "BF16" else a
    for steps in (1, 5, None):
        rec = encode_tensor(a, dtype, chunk_steps=steps)
        with native.disabled():
            ref = encode_tensor(a, dtype, chunk_steps=steps)
        assert rec.params == ref.params
        assert all(np.array_equal(rec.sections[k], ref.sections[k]) for k in rec.sections)
        assert decode_tensor(rec).tobytes() == a.tobytes()


def _coded_low_f32(n, seed):
    """F32 weights with a few low mantissa bits (fp16 values widened): both low planes are coded."""
    w = (np.random.default_rng(seed).standard_normal(n) * 0.05).astype(np.float16).astype(np.float32)
    w[:4] = [np.nan, -np.inf, -0.0, 6e-8]
    return w


@pytest.mark.parametrize("steps", [None, 16, 64])
@pytest.mark.parametrize("n", [5000, 40_001, 200_003])
def test_f32_coded_low_planes_decoded_inside_the_merge(isa, lookups, n, steps):
    a = _coded_low_f32(n, n)
    rec = encode_tensor(a, "F32", chunk_steps=steps)
    assert [lp["coded"] for lp in rec.params["low"]] == [True, True]
    low = [rans.RansPlane.from_sections(rec.params["low"][k], rec.sections, name) for k, name in enumerate(("low1", "low0"))]
    assert native.fuses_low_planes(F.parse(rec).head, low)
    got = decode_tensor(rec)
    with native.disabled():
        assert decode_tensor(rec).tobytes() == a.tobytes()
    assert got.tobytes() == a.tobytes()
    out = np.empty(n, np.float32)  # into the caller's buffer as well
    assert decode_tensor(rec, out=out).tobytes() == a.tobytes()


@pytest.mark.parametrize("plane", ["low1", "low0"])
def test_f32_corrupt_low_plane_named_like_numba(isa, plane):
    a = _coded_low_f32(100_000, 7)
    rec = encode_tensor(a, "F32", chunk_steps=8)
    states = rec.sections[f"{plane}.states"].copy()
    states[5::7] = 0x12345  # valid (>= 2**16) but not the encoder's: the chunks do not end right
    bad = F.EncodedTensor(rec.codec, rec.dtype, rec.shape, rec.params, {**rec.sections, f"{plane}.states": states})
    messages = []
    for disabled in (False, True):
        with native.disabled() if disabled else contextlib.nullcontext():
            with pytest.raises(CorruptDataError) as e:
                decode_tensor(bad)
            messages.append(str(e.value))
    assert f"{plane} plane" in messages[0] and messages[0] == messages[1]


def test_f32_low_planes_with_other_chunks_decoded_apart():
    """Low planes whose chunks differ from the head plane's (a valid file may say so) are decoded
    whole first, then merged."""
    a = _coded_low_f32(50_000, 3)
    rec = encode_tensor(a, "F32", chunk_steps=8)
    sections, params = dict(rec.sections), {**rec.params, "low": list(rec.params["low"])}
    low1 = rans.encode(((a.view(np.uint32) >> 8) & 0xFF).astype(np.uint8), 12, chunk_steps=5)
    params["low"][0] = {"coded": True, **low1.params()}
    sections.update(low1.sections("low1"))
    rec2 = F.EncodedTensor(rec.codec, rec.dtype, rec.shape, params, sections)
    assert not native.fuses_low_planes(F.parse(rec2).head, [low1])
    assert decode_tensor(rec2).tobytes() == a.tobytes()


@pytest.mark.parametrize("backend", ["native", "numba"])
@pytest.mark.parametrize("n,steps", [(100_000, None), (300_001, 16), (70_000, 7), (5_000, 2)])
@pytest.mark.parametrize("tables", ["auto", 1, 64, 10**6])
def test_encode_with_block_counts_is_the_same_plane(backend, n, steps, tables):
    """Counts per block of table segments (what the float encoder gets from its one histogram
    pass) give the plane that per-chunk counts give; wrong ones are refused."""
    if backend == "native" and ext is None:
        pytest.skip("C extension wcodec._cext not built (or WCODEC_NATIVE=0)")
    sym = _symbols("skewed", n, n)
    sym[n // 3:] = (sym[n // 3:] + 3) % 40  # drifting statistics: several tables pay
    cs = 32 * (steps or rans.auto_chunk_steps(n))
    block = rans.counts_block(n, cs)
    per_chunk = native.chunk_histograms(sym, cs, numba=True)
    blocks = np.add.reduceat(per_chunk, np.arange(0, per_chunk.shape[0], block), axis=0)
    ref = rans.encode(sym, 12, steps, tables=tables, backend=backend)
    assert _same(rans.encode(sym, 12, steps, tables=tables, backend=backend, block_counts=blocks), ref)
    bad = blocks.copy()
    bad[0, 0] += 1
    if tables == "auto" or tables % block == 0 or tables >= per_chunk.shape[0]:
        with pytest.raises(ValueError):
            rans.encode(sym, 12, steps, tables=tables, backend=backend, block_counts=bad)


@pytest.mark.parametrize("prob_bits", [11, 12])
@pytest.mark.parametrize("seed", range(6))
def test_encoder_quotients_exact_for_every_frequency(isa, prob_bits, seed):
    """The SIMD encoders divide by estimates made exact: frequencies from 1 to nearly 2**prob_bits
    (one dominant symbol, many rare ones), states across their whole range, native = numba."""
    rng = np.random.default_rng(seed)
    p = rng.dirichlet(np.full(256, [0.02, 0.2, 1.0][seed % 3]))
    p[rng.integers(0, 256)] += [0.0, 0.5, 5.0][seed // 2]
    sym = rng.choice(256, size=200_003, p=p / p.sum()).astype(np.uint8)
    for steps, tables in ((1024, 10**6), (37, 10**6), (64, 1)):  # one table; one per chunk
        a = rans.encode(sym, prob_bits, steps, tables=tables, backend="native")
        assert _same(a, rans.encode(sym, prob_bits, steps, tables=tables, backend="numba"))
        if tables > 1:
            freqs = a.freqs[a.freqs > 0]
            assert freqs.min() < 16 and freqs.max() >= 128  # a wide spread of frequencies
        assert np.array_equal(rans.decode(a, backend="native"), sym)
