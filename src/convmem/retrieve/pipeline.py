"""MemoryRetrieval and pipelines built from config in the seed's shape.

```yaml
operators:
  pre_retrieval:
    actions:
      - {action: validate}
      - {action: optimize, operations: [rewrite, keywords]}
      - action: route
        route_strategy: keyword
        keyword_rules:
          - {keywords: ["还记得", "remember"], strategy: deep_search, params: {top_k: 10}}
        default_strategy: semantic_search
      - {action: decompose}
      - {action: embedding}
  memory_retrieval:
    top_k: 6
    min_score: 0.3        # also mode, granularity: the dialogue tier's, as in Memory.search
```

``build_pipeline(config, memory=...)`` takes a dict, a YAML or TOML string, or a path.
The ``embedding`` action uses the memory's embedding model unless the config names one.
"""

from __future__ import annotations

import json
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Protocol

import yaml

from convmem.embed import EmbeddingService
from convmem.errors import InvalidInputError
from convmem.retrieve.hierarchy import HierarchicalMemoryService, merge_results
from convmem.retrieve.preretrieval import PreRetrieval

__all__ = ["MemoryRetrieval", "Pipeline", "RetrievalHost", "build_pipeline", "load_config"]


class RetrievalHost(Protocol):
    """What a pipeline needs of a memory (``convmem.Memory`` is one)."""

    @property
    def embedding(self) -> EmbeddingService: ...

    def hierarchy(self, *, stm_turns: int = 8) -> HierarchicalMemoryService: ...


class MemoryRetrieval:
    """Passes query, vector and hints to the service; sets ``data["memory_data"]``.

    A question that ``decompose`` split (``sub_queries``) or ``optimize`` expanded
    (``expanded_queries``) is searched once per part, each with its own vector
    (``sub_query_embeddings`` from an ``embedding`` step after ``decompose``, else the
    service embeds it), and the parts' hits are merged by :func:`merge_results`;
    ``memory_data["hints"]["sub_queries"]`` says what each part found.
    """

    def __init__(self, service: HierarchicalMemoryService, config: Mapping[str, Any] | None = None):
        self.service = service
        config = dict(config or {})
        self.top_k = int(config.get("top_k", 6))
        self.filters = config.get("filters")
        # the dialogue tier's options, as Memory.search takes them
        self.options = {
            key: config[key] for key in ("mode", "granularity", "min_score") if key in config
        }

    def execute(self, data: dict[str, Any]) -> dict[str, Any]:
        filters = dict(self.filters or {})
        filters.update(data.get("filters") or {})
        top_k = int(data.get("top_k", self.top_k))
        queries = _queries(data)
        vectors = _vectors(data, queries)
        results = [
            self.service.retrieve(
                query,
                vector=vector,
                hints=data.get("retrieval_hints"),
                filters=filters or None,
                top_k=top_k,
                **self.options,
            )
            for query, vector in zip(queries, vectors, strict=True)
        ]
        result = results[0] if len(results) == 1 else merge_results(queries, results, top_k)
        data["memory_data"] = result.as_dict()
        return data


def _vectors(data: Mapping[str, Any], queries: list[str]) -> list[Any]:
    """Each query's vector: the question's, or each part's from ``sub_query_embeddings``;
    None where there is none (the service embeds that part)."""
    if len(queries) == 1:
        return [data.get("query_embedding")]
    given = data.get("sub_query_embeddings")
    if (
        isinstance(given, list)
        and len(given) == len(queries)
        and queries == data.get("sub_queries")
    ):
        return given
    return [None] * len(queries)


def _queries(data: Mapping[str, Any]) -> list[str]:
    """What to search: the ``decompose`` step's sub-questions when it split the question,
    else the ``optimize`` step's expansions when it made any, else the question."""
    for key in ("sub_queries", "expanded_queries"):
        queries = data.get(key)
        if isinstance(queries, list) and len(queries) > 1:
            return [str(query) for query in queries]
    return [data["question"]]


class Pipeline:
    def __init__(self, pre: PreRetrieval, retrieval: MemoryRetrieval) -> None:
        self.pre = pre
        self.retrieval = retrieval

    def run(self, question: str, **extra: Any) -> dict[str, Any]:
        data = {"question": question, **extra}
        return self.retrieval.execute(self.pre.execute(data))


def load_config(config: Mapping[str, Any] | str | Path) -> dict[str, Any]:
    if isinstance(config, Mapping):
        return dict(config)
    text = config
    if isinstance(config, Path) or (
        isinstance(config, str) and "\n" not in config and Path(config).is_file()
    ):
        path = Path(config)
        text = path.read_text(encoding="utf-8")
        if path.suffix == ".toml":
            return tomllib.loads(text)
        if path.suffix == ".json":
            return dict(json.loads(text))
    assert isinstance(text, str)
    try:
        loaded = yaml.safe_load(text)
    except yaml.YAMLError:
        loaded = None
    if not isinstance(loaded, dict):
        try:
            loaded = tomllib.loads(text)
        except tomllib.TOMLDecodeError as exc:
            raise InvalidInputError(
                f"pipeline config is neither YAML nor TOML: {exc}", field="config"
            ) from None
    return dict(loaded)


def build_pipeline(config: Mapping[str, Any] | str | Path, *, memory: RetrievalHost) -> Pipeline:
    """A PreRetrieval -> MemoryRetrieval pipeline over ``memory``'s hierarchical service."""
    data = load_config(config)
    operators = data.get("operators", data)
    if not isinstance(operators, Mapping):
        raise InvalidInputError("operators must be an object", field="operators")
    pre_config = dict(operators.get("pre_retrieval") or {"action": "none"})
    steps = pre_config.get("actions", [pre_config])
    for step in steps:
        if isinstance(step, dict) and step.get("action") in ("embedding", "multi_embed"):
            step.setdefault("embedder", memory.embedding)
    pre = PreRetrieval(pre_config)
    retrieval_config = operators.get("memory_retrieval") or {}
    service = memory.hierarchy(stm_turns=int(retrieval_config.get("stm_turns", 8)))
    return Pipeline(pre, MemoryRetrieval(service, retrieval_config))
