"""Light, meaning-preserving text cleaning.

Cleaning folds full-width ASCII letters, digits and the ideographic space to their
half-width forms, drops control and zero-width characters, normalises line ends and
collapses runs of blanks. Chinese punctuation (，。！？) is kept as written: it carries
meaning for readers, and the segmenter treats it as a separator either way.
"""

from __future__ import annotations

import re
import unicodedata

__all__ = ["clean_text", "is_mostly_cjk"]

_ZERO_WIDTH = dict.fromkeys(map(ord, "\u200b\u200c\u200d\u2060\ufeff"))
_BLANKS = re.compile(r"[ \t\u00a0\u3000]+")
_MANY_NEWLINES = re.compile(r"\n{3,}")


def _fold_width(char: str) -> str:
    code = ord(char)
    # Full-width digits and Latin letters only: U+FF10-FF19, U+FF21-FF3A, U+FF41-FF5A.
    if 0xFF10 <= code <= 0xFF19 or 0xFF21 <= code <= 0xFF3A or 0xFF41 <= code <= 0xFF5A:
        return chr(code - 0xFEE0)
    return char


def clean_text(text: str) -> str:
    """Return ``text`` with width, control characters and blanks normalised."""
    text = text.replace("\r\n", "\n").replace("\r", "\n").translate(_ZERO_WIDTH)
    out = []
    for char in text:
        if char == "\n" or char == "\t":
            out.append(char)
        elif unicodedata.category(char) == "Cc":
            continue
        else:
            out.append(_fold_width(char))
    text = _BLANKS.sub(" ", "".join(out))
    text = "\n".join(line.strip() for line in text.split("\n"))
    return _MANY_NEWLINES.sub("\n\n", text).strip()


def _is_cjk(char: str) -> bool:
    code = ord(char)
    return (
        0x4E00 <= code <= 0x9FFF
        or 0x3400 <= code <= 0x4DBF
        or 0x20000 <= code <= 0x2A6DF
        or 0xF900 <= code <= 0xFAFF
        or 0x3040 <= code <= 0x30FF  # kana: treat Japanese like Chinese for segmentation
    )


def is_mostly_cjk(text: str) -> bool:
    """True when CJK characters make up at least a fifth of the letters in ``text``."""
    letters = [char for char in text if char.isalnum()]
    if not letters:
        return False
    cjk = sum(1 for char in letters if _is_cjk(char))
    return cjk * 5 >= len(letters)
