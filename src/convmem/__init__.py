"""convmem: long-term conversation memory with a durable write path and hybrid retrieval.

>>> from convmem import Memory
>>> with Memory.open("sqlite:///memory.db") as memory:  # doctest: +SKIP
...     memory.add_turns("c1", [{"turn_id": 1, "role": "user", "text": "我护照明年二月过期"}])
...     memory.flush()
...     hits = memory.search("护照什么时候过期")
"""

from convmem.embed import EmbeddingService, HashingEmbedder, OpenAIEmbedder, TransformerEmbedder
from convmem.errors import (
    ConvmemError,
    EmbedderError,
    EmbeddingMismatchError,
    FilterError,
    FlushTimeoutError,
    InvalidInputError,
    NotFoundError,
    StoreError,
    TurnConflictError,
)
from convmem.ingest import ChunkingPolicy, chunk_id
from convmem.memory import DeleteResult, Memory, UpsertResult
from convmem.models import (
    AddTurnsReceipt,
    ChunkMetadata,
    ChunkRecord,
    FlushResult,
    Hit,
    JobInfo,
    Turn,
)

__version__ = "0.1.0"

__all__ = [
    "AddTurnsReceipt",
    "ChunkMetadata",
    "ChunkRecord",
    "ChunkingPolicy",
    "ConvmemError",
    "DeleteResult",
    "EmbedderError",
    "EmbeddingMismatchError",
    "EmbeddingService",
    "FilterError",
    "FlushResult",
    "FlushTimeoutError",
    "HashingEmbedder",
    "Hit",
    "InvalidInputError",
    "JobInfo",
    "Memory",
    "NotFoundError",
    "OpenAIEmbedder",
    "StoreError",
    "TransformerEmbedder",
    "Turn",
    "TurnConflictError",
    "UpsertResult",
    "__version__",
    "chunk_id",
]
