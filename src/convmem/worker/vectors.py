"""A chunk's vectors: its own, and one per turn it holds (turn-level evidence reads them).

All come from one ``embed_array`` call per batch: the chunk texts, then every distinct
turn line (label off) of chunks the chunker gave turn offsets, and the clauses of those
lines that say several things (:func:`~convmem.ingest.line_clauses`). A chunk's turn
vectors are its lines' rows in turn order, then each line's clause rows in the same order
(:func:`~convmem.ingest.vector_rows` reads this layout). A chunk without offsets
(caller-made, story) has no turn vectors.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from convmem.embed import EmbeddingService
from convmem.ingest import line_clauses, turn_lines

__all__ = ["embed_chunks"]


def embed_chunks(
    embedding: EmbeddingService, chunks: Sequence[tuple[str, Sequence[Sequence[int]]]]
) -> list[tuple[np.ndarray, np.ndarray | None]]:
    """``(vector, turn_vectors)`` for each ``(text, turn_offsets)``: a row per turn line,
    then a row per clause of each line."""
    lines_of = [turn_lines(text, offsets) if offsets else [] for text, offsets in chunks]
    lines_of = [
        lines + [part for line in lines for part in line_clauses(line)] for lines in lines_of
    ]
    distinct = list(dict.fromkeys(line for lines in lines_of for line in lines))
    matrix = embedding.embed_array([text for text, _ in chunks] + distinct)
    row_of = {line: len(chunks) + i for i, line in enumerate(distinct)}
    return [
        (matrix[i], matrix[[row_of[line] for line in lines]] if lines else None)
        for i, lines in enumerate(lines_of)
    ]
