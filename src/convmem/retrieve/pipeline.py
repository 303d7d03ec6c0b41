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
      - {action: embedding}
  memory_retrieval:
    top_k: 6
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
from convmem.retrieve.hierarchy import HierarchicalMemoryService
from convmem.retrieve.preretrieval import PreRetrieval

__all__ = ["MemoryRetrieval", "Pipeline", "RetrievalHost", "build_pipeline", "load_config"]


class RetrievalHost(Protocol):
    """What a pipeline needs of a memory (``convmem.Memory`` is one)."""

    @property
    def embedding(self) -> EmbeddingService: ...

    def hierarchy(self, *, stm_turns: int = 8) -> HierarchicalMemoryService: ...


class MemoryRetrieval:
    """Passes query, vector and hints to the service; sets ``data["memory_data"]``."""

    def __init__(self, service: HierarchicalMemoryService, config: Mapping[str, Any] | None = None):
        self.service = service
        config = dict(config or {})
        self.top_k = int(config.get("top_k", 6))
        self.filters = config.get("filters")

    def execute(self, data: dict[str, Any]) -> dict[str, Any]:
        filters = dict(self.filters or {})
        filters.update(data.get("filters") or {})
        result = self.service.retrieve(
            data["question"],
            vector=data.get("query_embedding"),
            hints=data.get("retrieval_hints"),
            filters=filters or None,
            top_k=int(data.get("top_k", self.top_k)),
        )
        data["memory_data"] = result.as_dict()
        return data


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
