"""Query routing (seed 004): retrieval *hints* for the one memory service, never a service choice.

Output: ``{"strategies": [...], "route_strategy": "keyword|classifier|llm", "params": {...}}``.
Strategies: ``semantic_search`` (default), ``deep_search``, ``temporal_search``,
``persona_search``. Rules are ``{"keywords": [...], "strategy": ..., "params": {...}}``;
old configs that say ``route:`` instead of ``strategy:`` still load, with a warning.

A rule's strategy, ``default_strategy`` and the params the memory service reads
(:data:`PARAMS`) are checked when the router is built, so a config the service would
refuse fails there instead of on every matching question. An ``llm`` router's answer is
checked the same way; an answer that is not valid hints falls back to the keyword rules
(logged as a warning, and said in ``hints["fallback"]``), never stopping the pipeline.
"""

from __future__ import annotations

import logging
import math
import re
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from convmem.chat import ChatClient, ChatError
from convmem.errors import InvalidInputError

__all__ = [
    "DEFAULT_KEYWORD_RULES",
    "PARAMS",
    "PARAM_RANGES",
    "STRATEGIES",
    "TIME_RANGES",
    "TIME_WINDOWS",
    "KeywordRule",
    "Router",
    "check_params",
    "load_rules",
]

logger = logging.getLogger(__name__)

STRATEGIES = ("semantic_search", "deep_search", "temporal_search", "persona_search")
#: The hint params the hierarchical memory service reads (others are passed through).
PARAMS = ("time_range", "top_k", "include_persona", "candidates_multiplier")
#: The named windows ``time_range`` takes (besides ``[start, end]``).
#: Each named window back from the conversation's newest turn (``recent``: a week).
TIME_WINDOWS = {
    "recent": timedelta(days=7),
    "24h": timedelta(hours=24),
    "7d": timedelta(days=7),
    "30d": timedelta(days=30),
}
TIME_RANGES = tuple(TIME_WINDOWS)
#: The whole-number hint params and the range the service takes each in.
PARAM_RANGES = {"top_k": (1, 1000), "candidates_multiplier": (1, 10)}

DEFAULT_KEYWORD_RULES: list[dict[str, Any]] = [
    {
        "keywords": [
            "昨天",
            "前天",
            "刚才",
            "刚刚",
            "最近",
            "上周",
            "上个月",
            "这几天",
            "今天早上",
            "前几天",
            "yesterday",
            "recent",
            "recently",
            "just now",
            "last week",
            "earlier today",
            "this morning",
            "the other day",
        ],
        "strategy": "temporal_search",
        "params": {"time_range": "recent"},
    },
    {
        "keywords": [
            "还记得",
            "记不记得",
            "之前说过",
            "以前说",
            "上次",
            "曾经",
            "之前提到",
            "我说过",
            "remember",
            "recall",
            "what did",
            "did i tell",
            "i mentioned",
            "last time",
        ],
        "strategy": "deep_search",
        "params": {"candidates_multiplier": 3},
    },
    {
        "keywords": [
            "我喜欢",
            "我的习惯",
            "习惯",
            "性格",
            "偏好",
            "口味",
            "我是什么样",
            "我不喜欢",
            "my preference",
            "personality",
            "traits",
            "character",
            "what do i like",
            "my habits",
            "i prefer",
        ],
        "strategy": "persona_search",
        "params": {"include_persona": True},
    },
]


@dataclass(frozen=True)
class KeywordRule:
    keywords: tuple[str, ...]
    strategy: str
    params: Mapping[str, Any] = field(default_factory=dict)

    def matches(self, question: str) -> list[str]:
        folded = question.casefold()
        found = []
        for keyword in self.keywords:
            word = keyword.casefold()
            if word.isascii():
                if re.search(rf"\b{re.escape(word)}\b", folded):
                    found.append(keyword)
            elif word in folded:
                found.append(keyword)
        return found


def load_rules(raw: Sequence[Mapping[str, Any]] | None) -> list[KeywordRule]:
    """Parse keyword rules; ``route:`` (the old name of ``strategy:``) loads with a warning."""
    rules = []
    for index, item in enumerate(raw if raw is not None else DEFAULT_KEYWORD_RULES):
        where = f"keyword_rules[{index}]"
        if not isinstance(item, Mapping):
            raise InvalidInputError(f"{where} must be an object", field=where)
        item = dict(item)
        if "route" in item:
            warnings.warn(
                f"{where}: 'route' is deprecated, write 'strategy' (a retrieval strategy hint, "
                "not a service)",
                DeprecationWarning,
                stacklevel=3,
            )
            item.setdefault("strategy", item.pop("route"))
        keywords = item.get("keywords")
        if (
            not isinstance(keywords, list)
            or not keywords
            or not all(isinstance(k, str) and k for k in keywords)
        ):
            raise InvalidInputError(
                f"{where}.keywords must be a non-empty list of strings", field=f"{where}.keywords"
            )
        strategy = item.get("strategy")
        if not isinstance(strategy, str) or not strategy:
            raise InvalidInputError(
                f"{where}.strategy is required: one of {', '.join(STRATEGIES)}",
                field=f"{where}.strategy",
            )
        check_strategy(strategy, f"{where}.strategy")
        params = item.get("params") or {}
        if not isinstance(params, Mapping):
            raise InvalidInputError(f"{where}.params must be an object", field=f"{where}.params")
        check_params(params, f"{where}.params")
        rules.append(KeywordRule(tuple(keywords), strategy, dict(params)))
    return rules


def check_strategy(strategy: Any, field: str) -> str:
    """A retrieval strategy the memory service knows (:data:`STRATEGIES`)."""
    if not isinstance(strategy, str) or strategy not in STRATEGIES:
        raise InvalidInputError(
            f"{field} must be one of {', '.join(STRATEGIES)}, got {strategy!r}", field=field
        )
    return strategy


def check_params(params: Mapping[str, Any], field: str, *, windows_only: bool = False) -> None:
    """Refuse hint params the memory service would refuse: ``top_k`` a whole number in
    1..1000, ``candidates_multiplier`` in 1..10, ``include_persona`` true or false,
    ``time_range`` one of :data:`TIME_RANGES` or ``[start, end]`` (``windows_only``: a named
    window only, as an LLM is asked for). Other keys are passed through unchecked."""
    for name, (low, high) in PARAM_RANGES.items():
        value = params.get(name)
        if name in params and (
            isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high
        ):
            raise InvalidInputError(
                f"{field}.{name} must be a whole number in {low}..{high}, got {value!r}",
                field=f"{field}.{name}",
            )
    if "include_persona" in params and not isinstance(params["include_persona"], bool):
        raise InvalidInputError(
            f"{field}.include_persona must be true or false, got {params['include_persona']!r}",
            field=f"{field}.include_persona",
        )
    if params.get("time_range") is not None:  # None: no window, as the service reads it
        value = params["time_range"]
        span = (
            not windows_only
            and isinstance(value, list | tuple)
            and len(value) == 2
            and all(v is None or isinstance(v, str) for v in value)
        )
        if not span and value not in TIME_RANGES:
            shapes = ", ".join(repr(name) for name in TIME_RANGES)
            raise InvalidInputError(
                f"{field}.time_range must be one of {shapes}"
                + ("" if windows_only else " or [start, end] (ISO timestamps or null)")
                + f", got {value!r}",
                field=f"{field}.time_range",
            )


# The classifier: a linear score per strategy over cue and time-expression features.
_TIME = re.compile(
    r"\d{1,4}[年月日号点]|[上下这]个?(星期|周|月)|几点|什么时候|哪天|when|what time|what day|"
    r"\b(19|20)\d\d\b|\b(monday|tuesday|wednesday|thursday|friday|saturday|sunday)\b",
    re.IGNORECASE,
)
_FIRST_PERSON = re.compile(r"我|\b(i|my|me)\b", re.IGNORECASE)


class Router:
    """Produces ``retrieval_hints`` from a question (no memory access)."""

    def __init__(self, config: Mapping[str, Any] | None = None) -> None:
        config = dict(config or {})
        self.route_strategy = config.get("route_strategy", "keyword")
        if self.route_strategy not in ("keyword", "classifier", "llm"):
            raise InvalidInputError(
                "route_strategy must be keyword, classifier or llm", field="route_strategy"
            )
        self.rules = load_rules(config.get("keyword_rules"))
        self.default_strategy = check_strategy(
            config.get("default_strategy", "semantic_search"), "default_strategy"
        )
        threshold = config.get("classifier_threshold", 1.0)
        if (
            isinstance(threshold, bool)
            or not isinstance(threshold, int | float)
            or not math.isfinite(threshold)
        ):
            raise InvalidInputError(
                f"classifier_threshold must be a number (a strategy is chosen when its score "
                f"reaches it; default 1.0), got {threshold!r}",
                field="classifier_threshold",
            )
        self.threshold = float(threshold)
        self._chat: ChatClient | None = None
        if self.route_strategy == "llm":
            if config.get("llm") is None:
                raise InvalidInputError(
                    'route_strategy llm needs llm: {"base_url": ..., "model": ...} (an '
                    "OpenAI-compatible chat endpoint); or use route_strategy keyword",
                    field="llm",
                )
            self._chat = ChatClient.from_config(config["llm"])

    def route(self, question: str) -> dict[str, Any]:
        if self.route_strategy == "llm":
            try:
                return self._by_llm(question)
            except (ChatError, InvalidInputError) as exc:
                logger.warning("llm routing failed (%s); using the keyword rules", exc)
                hints = self._by_keyword(question)
                hints["fallback"] = f"llm routing failed ({exc}); used keyword rules"
                return hints
        if self.route_strategy == "classifier":
            return self._by_classifier(question)
        return self._by_keyword(question)

    def _hints(self, strategies: list[str], params: dict[str, Any], **extra: Any) -> dict[str, Any]:
        return {
            "strategies": strategies or [self.default_strategy],
            "route_strategy": self.route_strategy,
            "params": params,
            **extra,
        }

    def _by_keyword(self, question: str) -> dict[str, Any]:
        strategies: list[str] = []
        params: dict[str, Any] = {}
        matched: list[str] = []
        for rule in self.rules:
            found = rule.matches(question)
            if found:
                matched.extend(found)
                if rule.strategy not in strategies:
                    strategies.append(rule.strategy)
                params.update(rule.params)
        return self._hints(strategies, params, matched=matched)

    def _by_classifier(self, question: str) -> dict[str, Any]:
        cues = {rule.strategy: len(rule.matches(question)) for rule in self.rules}
        time_hits = len(_TIME.findall(question))
        about_me = 1 if _FIRST_PERSON.search(question) else 0
        scores = {
            "temporal_search": 1.2 * cues.get("temporal_search", 0) + 0.6 * time_hits,
            "deep_search": 1.2 * cues.get("deep_search", 0) + 0.3 * time_hits,
            "persona_search": 1.2 * cues.get("persona_search", 0) + 0.2 * about_me,
        }
        chosen = [
            s for s, score in sorted(scores.items(), key=lambda x: -x[1]) if score >= self.threshold
        ]
        params: dict[str, Any] = {}
        for rule in self.rules:
            if rule.strategy in chosen:
                params.update(rule.params)
        return self._hints(chosen, params, scores={k: round(v, 3) for k, v in scores.items()})

    def _by_llm(self, question: str) -> dict[str, Any]:
        assert self._chat is not None
        system = (
            "Classify a question to a memory service. Choose retrieval strategies from "
            f"{list(STRATEGIES)} (temporal_search: about recent events; deep_search: recalling "
            "something said before; persona_search: the user's preferences or personality; "
            'semantic_search: anything else). Answer JSON only: {"strategies": [...], '
            '"params": {"time_range"?: "recent", "top_k"?: int, "include_persona"?: bool}}.'
        )
        answer = self._chat.json(system, question)
        strategies = answer.get("strategies") if isinstance(answer, dict) else None
        params = answer.get("params", {}) if isinstance(answer, dict) else None
        if (
            not isinstance(strategies, list)
            or not strategies
            or not all(isinstance(s, str) and s in STRATEGIES for s in strategies)
            or not isinstance(params, dict)
        ):
            raise InvalidInputError(
                f"llm routing answer is not valid hints: {answer!r}"[:300], field="strategies"
            )
        # only the params the service reads, each checked as the service would check it
        kept = {k: v for k, v in params.items() if k in PARAMS and v is not None}
        check_params(kept, "params", windows_only=True)
        return self._hints(list(dict.fromkeys(strategies)), kept)
