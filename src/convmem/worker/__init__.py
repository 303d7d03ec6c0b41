"""The index worker: claiming jobs, preparing each conversation (marks, pins, notes,
chunks), embedding in batches, writing in one transaction, and the threads that run it."""

from convmem.worker.indexer import Indexer, IndexerMetrics, RetryPolicy, error_code
from convmem.worker.pool import WorkerPool
from convmem.worker.prepare import Prepared, iso, prepare

__all__ = [
    "Indexer",
    "IndexerMetrics",
    "Prepared",
    "RetryPolicy",
    "WorkerPool",
    "error_code",
    "iso",
    "prepare",
]
