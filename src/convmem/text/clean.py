"""Light, meaning-preserving text cleaning.

Cleaning folds full-width ASCII letters, digits and the ideographic space to their
half-width forms, drops control and zero-width characters, normalises line ends and
collapses runs of blanks. Chinese punctuation (，。！？) is kept as written: it carries
meaning for readers, and the segmenter treats it as a separator either way.
"""

from __future__ import annotations

import re
from pathlib import Path

from convmem.errors import InvalidInputError

__all__ = ["clean_text", "is_mostly_cjk", "read_utf8"]


def _translation() -> dict[int, int | None]:
    table: dict[int, int | None] = {}
    # Full-width digits and Latin letters only: U+FF10-FF19, U+FF21-FF3A, U+FF41-FF5A.
    for low, high in ((0xFF10, 0xFF19), (0xFF21, 0xFF3A), (0xFF41, 0xFF5A)):
        for code in range(low, high + 1):
            table[code] = code - 0xFEE0
    for code in [*range(0x00, 0x20), *range(0x7F, 0xA0)]:  # control characters
        table[code] = None
    table[ord("\n")] = ord("\n")
    table[ord("\t")] = ord("\t")
    for char in "\u200b\u200c\u200d\u2060\ufeff":  # zero-width characters
        table[ord(char)] = None
    return table


_TABLE = _translation()
_BLANKS = re.compile(r"[ \t\u00a0\u3000]+")
_EDGE_BLANKS = re.compile(r" *\n *")
_MANY_NEWLINES = re.compile(r"\n{3,}")
_CJK_CHAR = re.compile(
    r"[\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\u3040-\u30ff\U00020000-\U0002a6df]"
)
_LETTER = re.compile(r"[^\W_]")


def clean_text(text: str) -> str:
    """Return ``text`` with width, control characters and blanks normalised."""
    text = text.replace("\r\n", "\n").replace("\r", "\n").translate(_TABLE)
    text = _EDGE_BLANKS.sub("\n", _BLANKS.sub(" ", text))
    return _MANY_NEWLINES.sub("\n\n", text).strip()


def is_mostly_cjk(text: str) -> bool:
    """True when CJK characters make up at least a fifth of the letters in ``text``."""
    cjk = len(_CJK_CHAR.findall(text))
    if cjk == 0:
        return False
    return cjk * 5 >= len(_LETTER.findall(text))


def read_utf8(path: Path, *, field: str, name: str | None = None) -> str:
    """A file's text: UTF-8, a byte order mark accepted (editors on Windows save one).

    Raises:
        InvalidInputError: naming ``field``: the file is not UTF-8 (``name``: how the
            message names the file, by default its path).
        OSError: the file is missing or unreadable.
    """
    try:
        return path.read_bytes().decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise InvalidInputError(
            f"{name or path} is not UTF-8 (byte {exc.start}); save it as UTF-8", field=field
        ) from None
