"""Retrieval layer (seed 004): the hybrid searcher, PreRetrieval operators, routing hints and
the hierarchical service.

PreRetrieval and routing only transform the query (they import nothing from the store);
``HybridSearcher`` is the one place chunks are ranked, behind the ``Searcher`` protocol that
the facade, the hierarchical service and story memory all call; ``MemoryRetrieval`` hands
query, vector and hints to the one ``HierarchicalMemoryService``, which decides which tiers
to read. Nothing here imports the ``Memory`` facade.
"""

from convmem.retrieve.calibration import DEFAULT_MIN_SCORE
from convmem.retrieve.hierarchy import (
    HierarchicalMemoryService,
    RetrievalResult,
    TierSource,
    VisibleTurn,
)
from convmem.retrieve.pipeline import (
    MemoryRetrieval,
    Pipeline,
    RetrievalHost,
    build_pipeline,
    load_config,
)
from convmem.retrieve.preretrieval import ACTIONS, PreRetrieval
from convmem.retrieve.request import MODES, Searcher, SearchRequest
from convmem.retrieve.routing import DEFAULT_KEYWORD_RULES, STRATEGIES, Router, load_rules
from convmem.retrieve.searcher import HybridSearcher

__all__ = [
    "ACTIONS",
    "DEFAULT_KEYWORD_RULES",
    "DEFAULT_MIN_SCORE",
    "MODES",
    "STRATEGIES",
    "HierarchicalMemoryService",
    "HybridSearcher",
    "MemoryRetrieval",
    "Pipeline",
    "PreRetrieval",
    "RetrievalHost",
    "RetrievalResult",
    "Router",
    "SearchRequest",
    "Searcher",
    "TierSource",
    "VisibleTurn",
    "build_pipeline",
    "load_config",
    "load_rules",
]
