"""Calibration text for the lossy target search: the shipped sentence set or the caller's file,
split into the sentences the Fisher rows are estimated on and held-out ones the result is
measured on.

The shipped set (``data/calibration.txt``, 439 English lines: everyday prose on news, science,
software, food, travel, questions and instructions, and other registers: lower-case reviews with
spaced punctuation, chat, fragments, dialogue, technical, legal and formal prose, older literary
prose, longer passages) was written for wcodec by its engineers and is released with it under
Apache-2.0. The search joins its lines into items of 1 to 4
lines (:func:`passages`: a mix of lengths like a user's inputs). A ``--calibration FILE`` is
UTF-8 text, one item (a sentence or passage, as the model will see them) per line, used as
given; blank lines and lines starting with ``#`` are skipped.
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


#: the shipped lines are joined into items of this many consecutive lines, in turn (mean 2):
#: its lines are short (~17 tokens) and the cosine of MiniLM's output falls with the input's
#: length (on 1,000 corpus lines: 1 - cos 0.00112 at 10-20 tokens, 0.00138 at 30-50, 0.0015 at
#: 50-80), so the Fisher rows and the held-out figure need longer items too
SHIPPED_GROUPS = (1, 2, 1, 3, 1, 4)


def passages(sentences: list[str], groups=SHIPPED_GROUPS) -> list[str]:
    """Consecutive sentences joined by a space into items of ``groups[i % len(groups)]``
    sentences (the last item may hold fewer). Deterministic; the caller's list is not modified."""
    out, i, k = [], 0, 0
    while i < len(sentences):
        n = groups[k % len(groups)]
        out.append(" ".join(sentences[i:i + n]))
        i, k = i + n, k + 1
    return out


def split(sentences: list[str]) -> tuple[list[str], list[str]]:
    """(Fisher sentences, held-out sentences): every HELD_OUT_EVERY-th one is held out, so both
    halves cover the whole file. Deterministic; the caller's list is not modified."""
    held = [s for i, s in enumerate(sentences) if i % HELD_OUT_EVERY == HELD_OUT_EVERY - 1]
    fit = [s for i, s in enumerate(sentences) if i % HELD_OUT_EVERY != HELD_OUT_EVERY - 1]
    return fit, held
