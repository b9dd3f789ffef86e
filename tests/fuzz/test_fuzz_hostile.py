"""Bounded fuzz run (fixed seed): hostile files with recomputed checksums raise only WcodecError.

Each kind (container header, codec params of float / int8 / int8-quant / raw, section bytes,
sharded index, safetensors input, vectors index, fixed records read by every CPU consumer,
fixed records through the Triton kernels in the interpreter, module state dicts) gets CASES
(slower kinds: KIND_CASES) mutated files from
``hostile.Fuzzer`` (seed fixed, so a failure reproduces); every checksum is recomputed after
the mutation, so the schema checks and decoders, not the checksums, must catch them. Long runs:
``tools/fuzz.py``.
"""

from __future__ import annotations

import collections

import pytest

import hostile

SEED = 20261122
CASES = 350
#: fewer cases of the slower kinds: five kernels in the Triton interpreter (~1 s; a mismatch is
#: leak:KernelMismatch), a record through every CPU consumer, a torch.save/load round trip
KIND_CASES = {"fixed-kernels": 8, "fixed-record": 40, "state-dict": 80}


@pytest.fixture(scope="module")
def fuzzer(tmp_path_factory):
    return hostile.Fuzzer(tmp_path_factory.mktemp("fuzz"), seed=SEED)


@pytest.mark.parametrize("kind", hostile.KINDS)
def test_hostile_files_raise_only_wcodec_errors(fuzzer, kind):
    outcomes = collections.Counter()
    leaks = []
    cases = KIND_CASES.get(kind, CASES)
    for _ in range(cases):
        fn, path, desc, _ = fuzzer.make(kind)
        res = hostile.outcome(fn, path)
        outcomes[res] += 1
        if res.startswith("leak"):
            leaks.append(f"{res}: {desc}")
    assert not leaks, f"{len(leaks)} of {cases} cases raised a non-WcodecError:\n" + "\n".join(leaks[:20])
    if kind.startswith("fixed"):  # a mutated nibble or low byte of a plain weight is a valid record
        assert outcomes["rejected"] >= cases // 4 and outcomes["ok"] >= 1, dict(outcomes)
    else:  # the mutations must be hostile enough that most are caught (else this test proves nothing)
        assert outcomes["rejected"] >= cases // 2, dict(outcomes)


def test_params_mutations_cover_every_codec(fuzzer):
    """The seed container holds records of every built-in codec, so params mutations reach each."""
    _, header = hostile.split_container(fuzzer.data["container"])
    codecs = {e.get("codec") for e in header["tensors"].values() if "alias_of" not in e}
    assert codecs >= {"float", "int8", "int8-quant", "raw", "fixed", "fp8"}, codecs
    assert any("hi" in e.get("params", {}) for e in header["tensors"].values())  # transform tiles
    dtypes = {e.get("dtype") for e in header["tensors"].values() if e.get("codec") == "float"}
    assert dtypes == {"BF16", "F16", "F32"}
    assert len(set(fuzzer.index["weight_map"].values())) >= 2  # the sharded seed has several shards
