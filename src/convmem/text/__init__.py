"""Text cleaning and Chinese/English segmentation, shared by the index and the query side."""

from convmem.text.clean import clean_text, is_mostly_cjk
from convmem.text.segment import keywords, tokenize

__all__ = ["clean_text", "is_mostly_cjk", "keywords", "tokenize"]
