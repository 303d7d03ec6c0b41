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
from convmem.ids import check_whole
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
        if config is not None and not isinstance(config, Mapping):
            raise InvalidInputError("memory_retrieval must be an object", field="memory_retrieval")
        config = dict(config or {})
        unknown = sorted(str(key) for key in config if key not in RETRIEVAL_KEYS)
        if unknown:
            raise InvalidInputError(
                f"memory_retrieval has unknown keys {unknown}; it reads {sorted(RETRIEVAL_KEYS)}",
                field=f"memory_retrieval.{unknown[0]}",
            )
        self.top_k = check_whole(config.get("top_k", 6), "memory_retrieval.top_k", 1, 1000)
        self.filters = _filters(config.get("filters"), "memory_retrieval.filters")
        # the dialogue tier's options, as Memory.search takes them
        self.options = {
            key: config[key] for key in ("mode", "granularity", "min_score") if key in config
        }

    def execute(self, data: dict[str, Any]) -> dict[str, Any]:
        filters = dict(self.filters or {})
        filters.update(_filters(data.get("filters"), "filters") or {})
        top_k = check_whole(data.get("top_k", self.top_k), "top_k", 1, 1000)
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


#: What ``memory_retrieval`` reads (``stm_turns`` is the service's, read by build_pipeline).
RETRIEVAL_KEYS = frozenset({"top_k", "filters", "mode", "granularity", "min_score", "stm_turns"})


def _filters(value: Any, field: str) -> Mapping[str, Any] | None:
    if value is not None and not isinstance(value, Mapping):
        raise InvalidInputError(
            f"{field} must be an object mapping fields to conditions, got {value!r}", field=field
        )
    return value


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
    """A pipeline config as a dict: from a dict, a YAML or TOML string, or a file (``.toml``,
    ``.json``, else YAML or TOML).

    Raises:
        InvalidInputError: naming ``config``: a missing or unreadable file, text that is
            no object in any of the formats, or another type.
    """
    if isinstance(config, Mapping):
        return dict(config)
    if not isinstance(config, str | Path):
        raise InvalidInputError(
            f"config must be a dict, a YAML or TOML string or a file path, got "
            f"{type(config).__name__}",
            field="config",
        )
    suffix = ""
    if isinstance(config, Path) or ("\n" not in config and Path(config).is_file()):
        path = Path(config)
        try:
            text = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise InvalidInputError(
                f"cannot read pipeline config {path}: {exc}", field="config"
            ) from None
        suffix = path.suffix
    else:
        text = config
    loaded: Any = None
    try:
        if suffix == ".toml":
            loaded = tomllib.loads(text)
        elif suffix == ".json":
            loaded = json.loads(text)
        else:
            try:
                loaded = yaml.safe_load(text)
            except yaml.YAMLError:
                loaded = None
            if not isinstance(loaded, dict):
                loaded = tomllib.loads(text)
    except (tomllib.TOMLDecodeError, json.JSONDecodeError) as exc:
        raise InvalidInputError(
            f"pipeline config is not valid {suffix.lstrip('.') or 'YAML or TOML'}: {exc}",
            field="config",
        ) from None
    if not isinstance(loaded, dict):
        raise InvalidInputError(
            f"pipeline config must be an object, got {type(loaded).__name__}", field="config"
        )
    return dict(loaded)


def build_pipeline(config: Mapping[str, Any] | str | Path, *, memory: RetrievalHost) -> Pipeline:
    """A PreRetrieval -> MemoryRetrieval pipeline over ``memory``'s hierarchical service."""
    data = load_config(config)
    operators = data.get("operators", data)
    if not isinstance(operators, Mapping):
        raise InvalidInputError("operators must be an object", field="operators")
    pre_config = operators.get("pre_retrieval") or {"action": "none"}
    if not isinstance(pre_config, Mapping):
        raise InvalidInputError(
            "pre_retrieval must be an object: {actions: [...]} or one action", field="pre_retrieval"
        )
    pre_config = dict(pre_config)
    steps = pre_config.get("actions", [pre_config])
    if isinstance(steps, list):
        pre_config["actions"] = steps = [
            dict(step) if isinstance(step, Mapping) else step for step in steps
        ]
        for step in steps:
            if isinstance(step, dict) and step.get("action") in ("embedding", "multi_embed"):
                step.setdefault("embedder", memory.embedding)
    pre = PreRetrieval(pre_config)
    retrieval_config = operators.get("memory_retrieval") or {}
    if not isinstance(retrieval_config, Mapping):
        raise InvalidInputError("memory_retrieval must be an object", field="memory_retrieval")
    service = memory.hierarchy(stm_turns=retrieval_config.get("stm_turns", 8))
    return Pipeline(pre, MemoryRetrieval(service, retrieval_config))
