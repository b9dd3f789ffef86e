"""Replayed launches of CompressedLinear (wcodec.gpu.replay): the recording's checks on any
machine; on a CUDA GPU, every replayed output bit-identical to the normal launch's, for new
inputs, strides, biases, shapes and after the weight's tensors change."""

from __future__ import annotations

import copy
import pickle
import re
import sys
import types
from pathlib import Path

import pytest

torch = pytest.importorskip("torch", reason="torch is needed for CompressedLinear")

from wcodec.gpu import fixed as fx  # noqa: E402
from wcodec.gpu import replay  # noqa: E402
from wcodec.gpu.replay import Launch, checked  # noqa: E402
from wcodec.torch.linear import CompressedLinear  # noqa: E402

cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="replay needs a CUDA GPU (CI has none)")


class Hooks:  # Triton's HookChain
    def __init__(self, calls=()):
        self.calls = list(calls)


HEAD = (4, 1, 1, 777, "function", "packed", "metadata", Hooks(), Hooks())


def _run(*a):
    pass


def test_checked_finds_each_tensor_by_identity():
    x, w, b, y = (torch.zeros(1) for _ in range(4))
    launch = checked([HEAD + (x, x, w, 7, b, y)], _run, (x, x, b, y), 0, 777)
    assert isinstance(launch, Launch)
    assert sorted(launch.slots) == [(9, 0), (9, 1), (10, 0), (10, 1), (13, 2), (14, 3)]
    assert launch.args[11] is w and launch.args[12] == 7
    assert launch.args[9] is launch.args[10] is launch.args[13] is launch.args[14] is None  # filled per replay
    assert launch.args[6:9] == (None, None, None)  # no metadata, no hooks to call
    HEAD[7].calls.append(print)  # a profiler's hook installed later: no replay
    try:
        assert not launch.ready()
    finally:
        HEAD[7].calls.clear()


@pytest.mark.parametrize("case", ["two calls", "no call", "other stream", "enter hook", "foreign hook",
                                  "tensor missing"])
def test_checked_refuses(case):
    x, y = torch.zeros(1), torch.zeros(1)
    call = HEAD + (x, y)
    calls = {"two calls": [call, call], "no call": [],
             "other stream": [HEAD[:3] + (778,) + HEAD[4:] + (x, y)],
             "enter hook": [HEAD[:7] + (Hooks([print]),) + HEAD[8:] + (x, y)],
             "foreign hook": [HEAD[:7] + (print,) + HEAD[8:] + (x, y)],
             "tensor missing": [HEAD + (x, torch.zeros(1))]}[case]
    assert checked(calls, _run, (x, y), 0, 777) is None


@pytest.mark.parametrize("version, tested", [("3.6.0", True), ("3.9.1+git5a3e9f1", True), ("3.7.0", True),
                                              ("3.5.2", False), ("3.10.0", False), ("4.0.0", False),
                                              ("2.3.1", False), ("unknown", False)])
def test_tested_triton_versions(version, tested):
    assert replay.triton_tested(version) is tested


def test_pyproject_states_the_tested_versions():
    tomllib = pytest.importorskip("tomllib")  # Python >= 3.11
    pyproject = Path(__file__).resolve().parents[2] / "pyproject.toml"
    spec = tomllib.loads(pyproject.read_text())["tool"]["wcodec"]["replay-triton"]
    lo_major, lo_minor, hi_major, hi_minor = map(int, re.fullmatch(r">=(\d+)\.(\d+),<(\d+)\.(\d+)", spec).groups())
    assert replay.TRITON_TESTED == ((lo_major, lo_minor), (hi_major, hi_minor - 1))


class _Compiled:  # Triton >= 3.3's CompiledKernel: the launcher behind a ``run`` property
    def __init__(self, launcher):
        self._run = launcher

    @property
    def run(self):
        return self._run


class _JITFunction:
    """fn[grid](*args) calls the compiled kernel's launcher as Triton does: HEAD, then args."""

    def __init__(self):
        self.launched, self.warmups = [], 0
        self.compiled = _Compiled(lambda *a: self.launched.append(a))

    def warmup(self, *args, grid):
        self.warmups += 1
        return self.compiled

    def __getitem__(self, grid):
        return lambda *args: self.compiled.run(*HEAD, *args)


@pytest.fixture
def triton_version(monkeypatch):
    """Set the Triton version replay sees (a stand-in module; the check is made afresh)."""
    def set_version(version):
        monkeypatch.setitem(sys.modules, "triton", types.SimpleNamespace(__version__=version))
        monkeypatch.setattr(replay, "_triton_ok", None)
        monkeypatch.setattr(replay, "_stream", lambda device: 777)
        monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    return set_version


def test_untested_triton_launches_the_plain_way_with_one_notice(triton_version, capsys):
    triton_version("3.11.0")
    fn, x, y = _JITFunction(), torch.zeros(1), torch.zeros(1)
    for _ in range(3):
        assert replay.record(fn, (4,), (x, y), {}, (x, y)) is None
    assert fn.warmups == 0 and len(fn.launched) == 3 and fn.launched[0][9:] == (x, y)
    notice = capsys.readouterr().err.splitlines()
    assert len(notice) == 1 and "Triton 3.11.0" in notice[0] and "3.6-3.9" in notice[0]


def test_tested_triton_records_and_replays(triton_version, capsys):
    triton_version("3.6.0")
    fn, x, w, y = _JITFunction(), torch.zeros(1), torch.zeros(1), torch.zeros(1)
    launch = replay.record(fn, (4,), (x, w, y), {}, (x, None, y))
    assert isinstance(launch, Launch) and fn.warmups == 1 and len(fn.launched) == 1
    assert capsys.readouterr().err == ""
    x2, y2 = torch.ones(1), torch.ones(1)
    launch((x2, None, y2))
    assert fn.launched[1][9:] == (x2, w, y2) and fn.launched[1][3] == 777


def _layer(n=96, k=80, seed=0, bias=False, device="cpu", scale=0.05):
    g = torch.Generator().manual_seed(seed)
    w = (torch.randn(n, k, generator=g) * scale).to(torch.bfloat16)
    w.view(torch.int16).view(-1)[:5 + seed] = 0  # escapes (zeros are outside the window)
    b = torch.randn(n, generator=g).to(torch.bfloat16) if bias else None
    return CompressedLinear.from_weight(w.to(device), None if b is None else b.to(device))


def test_copies_and_pickles_start_with_no_recordings():
    layer = _layer()
    with torch.inference_mode():
        layer(torch.randn(2, 80).to(torch.bfloat16))
    for other in (copy.deepcopy(layer), pickle.loads(pickle.dumps(layer))):
        assert other._replays is not layer._replays and other._replays.entries == {}
        assert torch.equal(other.decoded_weight(), layer.decoded_weight())


def test_moves_and_loads_drop_the_recordings():
    layer = _layer()
    for change in (lambda: layer.to("cpu"), lambda: layer.float(), lambda: layer.load_state_dict(layer.state_dict())):
        layer._replays.entries["key"] = "a launch holding the old tensors"
        change()
        assert layer._replays.entries == {}


@cuda
def test_a_model_moved_off_the_gpu_frees_its_memory():
    layer = _layer(n=1024, k=1024, device="cuda")
    x = torch.randn(1, 1024, device="cuda").to(torch.bfloat16)
    _check_calls(layer, [x] * 4, None)
    assert any(layer._replays.entries.values())
    del x
    before = torch.cuda.memory_allocated()
    layer.to("cpu")
    assert torch.cuda.memory_allocated() <= before - layer.compressed_nbytes


def _check_calls(layer, xs, bias):
    fw = layer.fixed_weight
    with torch.inference_mode():
        for x in xs:
            y = layer(x)
            assert torch.equal(y, fx.linear(x, fw, bias)), (tuple(x.shape), x.stride())


@cuda
@pytest.mark.parametrize("m", [1, 3, 16, 24, 40])
@pytest.mark.parametrize("bias", [False, True])
def test_replay_equals_the_normal_launch(m, bias):
    layer = _layer(bias=bias, device="cuda")
    g = torch.Generator(device="cuda").manual_seed(m)
    xs = [torch.randn(1, m, 80, device="cuda", generator=g).to(torch.bfloat16) for _ in range(5)]
    _check_calls(layer, xs, layer.bias)
    launches = [e for e in layer._replays.entries.values() if e]
    assert launches, "no launch was recorded for replay"
    # rows of a wider tensor (a view with a row stride), then fp32 activations
    wide = torch.randn(m, 160, device="cuda", generator=g).to(torch.bfloat16)
    _check_calls(layer, [wide[:, :80], wide[:, 80:], wide[:, :80] * 2], layer.bias)
    if not bias:
        _check_calls(layer, [torch.randn(m, 80, device="cuda", generator=g) for _ in range(4)], None)


@cuda
@pytest.mark.parametrize("bias", [False, True])
def test_replay_of_a_split_k_launch(bias):
    """Few output rows and a long K: the tiled kernel in K slices and their sum, two launches
    replayed with a new scratch each call."""
    layer = _layer(n=64, k=4096, bias=bias, device="cuda")
    assert fx.split_k(16, 64, 4096, torch.device("cuda")) > 1
    g = torch.Generator(device="cuda").manual_seed(5)
    xs = [torch.randn(16, 4096, device="cuda", generator=g).to(torch.bfloat16) for _ in range(5)]
    _check_calls(layer, xs, layer.bias)
    (rec,) = [e for e in layer._replays.entries.values() if e]
    assert len(rec) == 2 and rec.scratch[0] > 1


@cuda
def test_replay_follows_new_weights():
    layer = _layer(device="cuda")
    x = torch.randn(1, 80, device="cuda").to(torch.bfloat16)
    _check_calls(layer, [x] * 4, None)
    other = _layer(seed=3, device="cuda")  # another escape count: load_state_dict replaces tensors
    layer.load_state_dict(other.state_dict())
    _check_calls(layer, [x] * 4, None)
    assert torch.equal(layer(x), other(x))
    shifted = _layer(seed=3, scale=0.05 * 2 ** 10, device="cuda")  # same shapes, in place; other base
    assert shifted.base != layer.base
    layer.load_state_dict(shifted.state_dict())
    _check_calls(layer, [x] * 4, None)
    assert torch.equal(layer(x), shifted(x))
    layer.to("cpu").to("cuda")
    _check_calls(layer, [x] * 4, None)
