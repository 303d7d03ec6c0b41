"""Each line's search tokens, stored beside its chunk, so that a search need not tokenize it.

The turn ranking reads the search tokens of every candidate line: each line of the chunk's
text (its context prefix and its labelled turn lines) and each turn's words without its
label. Tokenizing Chinese takes jieba a fraction of a millisecond a line, so a search whose
candidate lines were never tokenized in this process (after a restart, or of a conversation
not searched lately) spent a good part of its time there: on 100k chunks, paired, p50 / p99
19.6 / 55.1 ms tokenizing against 16.8 / 38.8 ms reading them (bench/README.md, stop 33).
The index worker tokenizes them anyway, so it stores them: :func:`line_tokens` writes them,
:func:`known_tokens` reads them back as the tokens of each line's text.

The stored form is text: the tokenizer's signature and a digest of the chunk's text on the
first line, then one line per non-empty text line and one per turn, each its tokens joined
by spaces (a token never holds whitespace). Tokens of another tokenizer signature (a user
dictionary loaded since) or of another text are not read: the search tokenizes as before.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence

from convmem.ingest.chunker import turn_lines
from convmem.text import tokenize, tokenizer_signature

__all__ = ["known_tokens", "line_tokens"]


def _text_lines(text: str) -> list[str]:
    return [line for line in text.split("\n") if line]


def _header(text: str) -> str:
    """What stored tokens are valid for: this tokenizer, this text."""
    digest = hashlib.blake2b(text.encode("utf-8"), digest_size=8).hexdigest()
    return f"{tokenizer_signature()} {digest}"


def line_tokens(text: str, offsets: Sequence[Sequence[int]]) -> str | None:
    """The stored tokens of a chunk's ``text`` whose turns sit at ``offsets``; None for a
    chunk without turns (nothing ranks its lines)."""
    if not offsets:
        return None
    rows = [_header(text)]
    rows += [" ".join(tokenize(line)) for line in _text_lines(text)]
    rows += [" ".join(tokenize(line)) for line in turn_lines(text, offsets)]
    return "\n".join(rows)


def known_tokens(
    stored: str | None, text: str, offsets: Sequence[Sequence[int]]
) -> dict[str, tuple[str, ...]]:
    """``line -> its search tokens`` for each line :func:`line_tokens` stored for this
    ``text``, and for the whole text (its lines' tokens in order, as ``tokenize`` gives
    them); empty when nothing was stored, or for another tokenizer or text."""
    if not stored or not offsets:
        return {}
    rows = stored.split("\n")
    lines = _text_lines(text)
    turns = turn_lines(text, offsets)
    if rows[0] != _header(text) or len(rows) != 1 + len(lines) + len(turns):
        return {}
    found: dict[str, tuple[str, ...]] = {}
    whole: list[str] = []
    for line, row in zip(lines, rows[1 : 1 + len(lines)], strict=True):
        tokens = tuple(row.split())
        found[line] = tokens
        whole.extend(tokens)
    for line, row in zip(turns, rows[1 + len(lines) :], strict=True):
        found[line] = tuple(row.split())
    found[text] = tuple(whole)
    return found
