"""The lossy target search (wcodec.lossy_target.search) on synthetic rate-distortion curves, the
calibration text (wcodec.hf.calibration) and the word-embedding row weights; the search on real
(tiny) models is tests/hf/test_lossy_target_models.py."""

from __future__ import annotations

import math

import numpy as np
import pytest

from wcodec.errors import InvalidInputError, NotFoundError, UnsupportedError
from wcodec.hf.calibration import HELD_OUT_EVERY, MIN_SENTENCES, read_sentences, split
from wcodec.lossy_target import RESOLUTION, Probe, check_goal, search


def curve(floor_cos: float = 0.9999):
    """A probe on a smooth curve: bits fall by 0.3 per doubling of lam, the cosine deficit
    grows linearly with lam (reaching floor_cos's deficit at the finest lam). Counts calls."""
    calls = []

    def probe(lam):
        x = math.log2(lam)
        bits = min(8.0, max(1.0, 5.4 - 0.3 * (x + 31.6)))
        cos = 1.0 - max(1.0 - floor_cos, 1e-3 * lam / 3e-10)
        calls.append(lam)
        return Probe(lam, bits, cos, cos - 0.001)

    return probe, calls


@pytest.mark.parametrize("lam0", [1e-14, 3e-10, 1e-6])
def test_cosine_target_met_with_fewest_bits(lam0):
    probe, calls = curve()
    chosen, probes = search(probe, lam0, target_cosine=0.999)
    assert chosen.cosine >= 0.999
    # the next coarser lam within the resolution misses the target: no cheaper setting was left
    assert probe(chosen.lam * 2 ** RESOLUTION).cosine < 0.999
    assert chosen in probes and len(calls) <= 20
    assert [p.lam for p in probes] == sorted(p.lam for p in probes)


def test_bits_budget_gives_best_cosine_within_it():
    probe, _ = curve()
    chosen, _ = search(probe, 3e-10, bits_per_weight=4.0)
    assert chosen.bits <= 4.0
    assert probe(chosen.lam / 2 ** RESOLUTION).bits > 4.0  # a finer setting would not fit


def test_both_goals():
    probe, _ = curve()
    chosen, _ = search(probe, 3e-10, target_cosine=0.998, bits_per_weight=6.0)
    assert chosen.cosine >= 0.998 and chosen.bits <= 6.0
    with pytest.raises(UnsupportedError, match="over the budget"):
        search(probe, 3e-10, target_cosine=0.999, bits_per_weight=4.0)


def test_unreachable_goals_name_the_best_figures():
    probe, _ = curve(floor_cos=0.995)
    with pytest.raises(UnsupportedError, match=r"cosine 0.999 is out of reach.*0\.995"):
        search(probe, 3e-10, target_cosine=0.999)
    probe, _ = curve()
    with pytest.raises(UnsupportedError, match=r"0.5 bits/weight is out of reach.*1\.000"):
        search(probe, 3e-10, bits_per_weight=0.5)


@pytest.mark.parametrize("cos, bits", [(None, None), (1.0, None), (0.0, None), (float("nan"), None),
                                       (None, 0.0), (None, -1.0), (None, 40.0), (None, float("inf"))])
def test_bad_goals(cos, bits):
    with pytest.raises(InvalidInputError):
        check_goal(cos, bits)
    with pytest.raises(InvalidInputError):
        search(lambda lam: pytest.fail("probed"), 1.0, cos, bits)


def test_shipped_calibration_and_split():
    s = read_sentences()
    assert len(s) >= 300 and len(set(s)) == len(s) and not any(x.startswith("#") for x in s)
    fit, held = split(s)
    assert len(held) == len(s) // HELD_OUT_EVERY and not set(fit) & set(held) and len(fit) + len(held) == len(s)


def test_calibration_file_errors(tmp_path):
    with pytest.raises(NotFoundError, match="calibration file"):
        read_sentences(tmp_path / "none.txt")
    p = tmp_path / "few.txt"
    p.write_text("# a comment\none\n\ntwo\n")
    with pytest.raises(InvalidInputError, match=f"holds 2 sentence.*at least {MIN_SENTENCES}"):
        read_sentences(p)
    p.write_bytes(b"\xff\xfe" + b"x\n" * 20)
    with pytest.raises(InvalidInputError, match="not UTF-8"):
        read_sentences(p)
    p.write_text("\n".join(f"sentence {i}" for i in range(MIN_SENTENCES)))
    assert read_sentences(p)[-1] == f"sentence {MIN_SENTENCES - 1}"


def test_embedding_rows_good_turing_floor():
    pytest.importorskip("torch")
    from wcodec.hf.fisher import embedding_rows

    counts = np.array([10.0, 1.0, 1.0, 0.0, 0.0, 0.0, 0.0, 2.0])
    fisher = counts * 0.5  # the sample's rows: Fisher per occurrence x count
    rows = embedding_rows(fisher, counts)
    assert np.allclose(rows[counts > 0], fisher[counts > 0])
    # unseen tokens: 2 tokens seen once / 4 never seen = count 0.5 each
    assert np.allclose(rows[counts == 0], 0.25)
    assert np.array_equal(counts, [10.0, 1.0, 1.0, 0.0, 0.0, 0.0, 0.0, 2.0])  # not modified
