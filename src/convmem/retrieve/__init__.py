"""Retrieval layer (seed 004): PreRetrieval operators, routing hints, the hierarchical service.

PreRetrieval and routing only transform the query (they import nothing from the store or
the service); ``MemoryRetrieval`` hands query, vector and hints to the one
``HierarchicalMemoryService``, which decides which tiers to read.
"""

from convmem.retrieve.hierarchy import HierarchicalMemoryService, RetrievalResult
from convmem.retrieve.pipeline import MemoryRetrieval, Pipeline, build_pipeline, load_config
from convmem.retrieve.preretrieval import ACTIONS, PreRetrieval
from convmem.retrieve.routing import DEFAULT_KEYWORD_RULES, STRATEGIES, Router, load_rules

__all__ = [
    "ACTIONS",
    "DEFAULT_KEYWORD_RULES",
    "STRATEGIES",
    "HierarchicalMemoryService",
    "MemoryRetrieval",
    "Pipeline",
    "PreRetrieval",
    "RetrievalResult",
    "Router",
    "build_pipeline",
    "load_config",
    "load_rules",
]
