"""Splitting a question that asks several things into its parts, by rule."""

from __future__ import annotations

import re

__all__ = ["DIALOGUE_LINES", "MAX_PARTS", "is_window", "split_questions"]

DIALOGUE_LINES = 3
MAX_PARTS = 4
# a conjunction joins two questions only after a comma or a question mark ("A？还有B",
# "A，以及B", "A, also B") or as "and also": inside a clause 还有 / also are ordinary
# words ("我还有几天假", "helping the planet while also training the body")
_CONJUNCTION = r"(?:还有|以及|另外|并且|而且|also|as well as)"
_SPLIT = re.compile(rf"[？?；;\n]|[，,]\s*{_CONJUNCTION}\s*|\s+and also\s+", re.IGNORECASE)
_LEADING = re.compile(rf"^\s*{_CONJUNCTION}\s*", re.IGNORECASE)
_TRIM = " ，,。."


def is_window(query: str) -> bool:
    """Whether a query is a dialogue window (``DIALOGUE_LINES`` or more non-empty lines),
    not a question."""
    return sum(1 for line in query.splitlines() if line.strip()) >= DIALOGUE_LINES


def split_questions(text: str, limit: int = MAX_PARTS) -> list[str]:
    """The parts of a question that asks several things, at most ``limit``: split at
    question marks, semicolons, line breaks, a conjunction after a comma, and "and also".

    A text that does not split, or a dialogue window (:func:`is_window`: one query, not
    several questions), comes back whole as ``[text]``.
    """
    if is_window(text):
        return [text]
    pieces = (_LEADING.sub("", piece).strip(_TRIM) for piece in _SPLIT.split(text))
    parts = [piece for piece in pieces if piece]
    return parts[:limit] if len(parts) > 1 else [text]
