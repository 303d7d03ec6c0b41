"""Seed 001's module name; see :mod:`convmem.compat.rag_ingest_incremental`."""

from convmem.compat import rag_ingest_incremental as _implementation
from convmem.compat.rag_ingest_incremental import *  # noqa: F403

__all__ = _implementation.__all__
