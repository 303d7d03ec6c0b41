"""Text cleaning and Chinese/English segmentation, shared by the index and the query side."""

from convmem.text import bm25
from convmem.text.clean import clean_text, is_mostly_cjk
from convmem.text.segment import (
    TOKENIZER_VERSION,
    fold,
    keywords,
    load_user_dict,
    stem,
    tokenize,
    tokenizer_signature,
    words,
)

__all__ = [
    "TOKENIZER_VERSION",
    "bm25",
    "clean_text",
    "fold",
    "is_mostly_cjk",
    "keywords",
    "load_user_dict",
    "stem",
    "tokenize",
    "tokenizer_signature",
    "words",
]
