"""A question as asked, by rule: its parts when it asks several things, without the
recall frame around it ("你还记得…吗"), and whether it is a dialogue window instead."""

from __future__ import annotations

import re

from convmem.text.clean import is_mostly_cjk

__all__ = [
    "DIALOGUE_LINES",
    "MAX_PARTS",
    "asked_part",
    "is_window",
    "split_questions",
    "without_recall_frame",
]

DIALOGUE_LINES = 3
MAX_PARTS = 4
# a conjunction joins two questions only after a comma ("A，以及B", "A, also B") or as
# "and also": inside a clause 还有 / also are ordinary words ("我还有几天假", "helping the
# planet while also training the body"). 还有, 并且, 而且 and a bare "also" also join two
# statements ("我明天去北京，还有点紧张"), so after them the next part must ask something
# or name whose thing it is ("，还有我的电话号码")
_CONJUNCTION = r"(?:还有|以及|另外|并且|而且|also|as well as)"
_AMBIGUOUS = re.compile(r"^[，,]\s*(?:还有|并且|而且|also)\s*$", re.IGNORECASE)
_HARD = re.compile(r"[？?；;\n]")
_SOFT = re.compile(rf"[，,]\s*{_CONJUNCTION}\s*|\s+and also\s+", re.IGNORECASE)
_LEADING = re.compile(rf"^\s*{_CONJUNCTION}\s*", re.IGNORECASE)
_ASKS = re.compile(
    r"什么|啥|哪|谁|几|多少|怎么|怎样|如何|为什么|为何|吗|呢|是否|有没有|是不是|"
    r"^(?:我|我们|你|你们|他|她|他们)的|"
    r"\b(?:what|when|where|who|whom|whose|which|why|how|is|are|was|were|do|does|did|"
    r"can|could|will|would|should|have|has)\b|^(?:my|our|your|his|her|their)\b",
    re.IGNORECASE,
)
_WORD = re.compile(r"\w")
_TRIM = " ，,。.、“”\"'「」：:"


# "你还记得…吗", "do you remember…": how a question to a memory is often framed; the frame
# is no part of what is asked (its words match lines like 记得带伞, and pull the vector)
_RECALL_FRAME = re.compile(
    r"^\s*(?:请问|你还记得|你还知道|你记不记得|你记得|还记得|记不记得|你知道|我想知道|"
    r"告诉我|帮我查一下|帮我查查|帮我想想|帮我回忆一下|"
    r"do you (?:still )?remember|can you remember|do you know|can you tell me|"
    r"could you tell me|please tell me|tell me|i want to know)[，,:：\s]*",
    re.IGNORECASE,
)
# the frame's closing particle ("…吗？"); not 么 or 不, which end 什么 and 要不要
_FRAME_END = re.compile(r"吗?\s*([？?。.!！]*)\s*$")


def without_recall_frame(question: str) -> str:
    """The question without a recall frame around it: "你还记得我护照哪天过期吗？" →
    "我护照哪天过期？", "Do you remember where I parked?" → "where I parked?". A question
    without one, or with nothing else, comes back as it was."""
    rest = _RECALL_FRAME.sub("", question, count=1)
    if rest == question:
        return question
    rest = _FRAME_END.sub(lambda match: match.group(1), rest).strip()
    return rest if _WORD.search(rest) else question


# a sentence ends at a full stop or an exclamation, Chinese or not (a question mark ends a
# question: split_questions reads those); an English full stop after a word, not after an
# initial or a title (C. S. Lewis, Dr. Seuss)
_SENTENCE = re.compile(r"(?<=[。！!…])\s*|(?<=[a-z0-9]{2}[.])\s+")
# what else marks a question: its mark, and 多大 / 多高 / 多久 (how old, tall, long)
_ALSO_ASKS = re.compile(r"[？?]\s*$|多[大高久远重长宽深]")


def asked_part(question: str) -> str:
    """The sentences of a message that ask something, when it also says things that ask
    nothing: "我昨天吃了火锅，好辣。对了，张伟在哪家公司上班？" → "对了，张伟在哪家公司上班？".
    Chat wraps a question in news of the day, whose words would pull the search towards
    lines about hotpot. A message whose every sentence asks, or none, comes back whole."""
    sentences = [part for part in _SENTENCE.split(question.strip()) if _WORD.search(part)]
    if len(sentences) < 2:
        return question
    asking = [sentence for sentence in sentences if _question_sentence(sentence)]
    if not asking or len(asking) == len(sentences):
        return question
    return "".join(asking) if is_mostly_cjk(question) else " ".join(asking)


def _question_sentence(sentence: str) -> bool:
    return _asks(sentence) or bool(_ALSO_ASKS.search(sentence))


def is_window(query: str) -> bool:
    """Whether a query is a dialogue window (``DIALOGUE_LINES`` or more non-empty lines),
    not a question."""
    return sum(1 for line in query.splitlines() if line.strip()) >= DIALOGUE_LINES


def _asks(text: str) -> bool:
    return _ASKS.search(text) is not None


def _at_conjunctions(piece: str) -> list[str]:
    """``piece`` cut at each conjunction that joins two questions."""
    cuts = list(_SOFT.finditer(piece))
    parts: list[str] = []
    start = 0
    for index, cut in enumerate(cuts):
        end = cuts[index + 1].start() if index + 1 < len(cuts) else len(piece)
        if not _AMBIGUOUS.match(cut.group()) or _asks(piece[cut.end() : end]):
            parts.append(piece[start : cut.start()])
            start = cut.end()
    parts.append(piece[start:])
    return parts


def _without_leading(piece: str) -> str:
    rest = _LEADING.sub("", piece)
    return rest if rest != piece and _asks(rest) else piece


def split_questions(text: str, limit: int = MAX_PARTS) -> list[str]:
    """The parts of a question that asks several things, at most ``limit`` (past it, the
    last part asks the rest together): split at
    question marks, semicolons and line breaks, and at a conjunction after a comma or
    "and also" (after 还有, 并且, 而且 or "also" only when the next part asks something).

    A text that does not split, or a dialogue window (:func:`is_window`: one query, not
    several questions), comes back whole as ``[text]``.
    """
    if is_window(text):
        return [text]
    parts = [
        _without_leading(part).strip(_TRIM)
        for piece in _HARD.split(text)
        for part in _at_conjunctions(piece)
    ]
    parts = [part for part in parts if _WORD.search(part)]
    if len(parts) <= 1 or limit <= 1:
        return [text]
    if len(parts) > limit:  # the rest asked together as the last part, never dropped
        parts = [*parts[: limit - 1], "，".join(parts[limit - 1 :])]
    return parts
