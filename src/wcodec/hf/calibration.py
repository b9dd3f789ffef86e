"""Calibration text for the lossy target search: the shipped sentence set or the caller's file,
split into the sentences the Fisher rows are estimated on and held-out ones the result is
measured on.

The shipped set (``data/calibration.txt``, 330 English sentences on everyday topics: news,
science, software, food, travel, questions, instructions) was written for wcodec by its
engineers and is released with it under Apache-2.0. A ``--calibration FILE`` is UTF-8 text, one
sentence (or short passage) per line; blank lines and lines starting with ``#`` are skipped.
"""

from __future__ import annotations

from pathlib import Path

from ..errors import InvalidInputError, NotFoundError

SHIPPED = Path(__file__).with_name("data") / "calibration.txt"
#: every HELD_OUT_EVERY-th sentence is held out for measuring (the rest estimate the Fisher rows)
HELD_OUT_EVERY = 4
#: fewest sentences a calibration file must hold: enough for both halves to mean something
MIN_SENTENCES = 8
#: characters kept of one line (longer lines are cut: the models truncate anyway)
MAX_CHARS = 2000


def read_sentences(path=None) -> list[str]:
    """The calibration sentences of ``path`` (None: the shipped set), in file order.

    Raises NotFoundError (no such file), InvalidInputError (not UTF-8 text, or fewer than
    MIN_SENTENCES non-blank lines)."""
    p = SHIPPED if path is None else Path(path)
    if not p.is_file():
        raise NotFoundError(p, "calibration file")
    try:
        text = p.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise InvalidInputError(f"calibration file '{p}' is not UTF-8 text (one sentence per line)") from None
    lines = [s.strip()[:MAX_CHARS] for s in text.splitlines()]
    out = [s for s in lines if s and not s.startswith("#")]
    if len(out) < MIN_SENTENCES:
        raise InvalidInputError(f"calibration file '{p}' holds {len(out)} sentence(s); the search needs at "
                                f"least {MIN_SENTENCES} (one per line)")
    return out


def split(sentences: list[str]) -> tuple[list[str], list[str]]:
    """(Fisher sentences, held-out sentences): every HELD_OUT_EVERY-th one is held out, so both
    halves cover the whole file. Deterministic; the caller's list is not modified."""
    held = [s for i, s in enumerate(sentences) if i % HELD_OUT_EVERY == HELD_OUT_EVERY - 1]
    fit = [s for i, s in enumerate(sentences) if i % HELD_OUT_EVERY != HELD_OUT_EVERY - 1]
    return fit, held
