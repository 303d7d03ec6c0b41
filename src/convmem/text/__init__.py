"""Text cleaning and Chinese/English segmentation, shared by the index and the query side."""

from convmem.text import bm25, segment
from convmem.text.clean import clean_text, is_mostly_cjk, read_utf8
from convmem.text.questions import (
    DIALOGUE_LINES,
    asked_part,
    is_window,
    split_questions,
    without_recall_frame,
)
from convmem.text.segment import *  # noqa: F403 (the names in segment.__all__)

__all__ = [
    "DIALOGUE_LINES",
    "asked_part",
    "bm25",
    "clean_text",
    "is_mostly_cjk",
    "is_window",
    "read_utf8",
    "split_questions",
    "without_recall_frame",
]
__all__ += segment.__all__  # the tokenizer's names, listed once in segment.py
