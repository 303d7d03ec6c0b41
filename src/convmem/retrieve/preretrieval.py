"""PreRetrieval (seed 004): pure operators over a data dict; they never touch memory.

``PreRetrieval(config).execute(data) -> data`` with ``data["question"]``. Config:
``{"action": ...}`` or ``{"actions": [{"action": ...}, ...]}`` (run in order). Actions:

- ``none``: pass through.
- ``embedding``: ``query_embedding`` from ``embedder`` (an instance or a spec) through its
  query side, optionally with an ``instruction`` prefix; after ``decompose`` also
  ``sub_query_embeddings``, one per sub-question. Computation only; no memory service is
  called.
- ``optimize``: ``operations`` among ``keywords`` (``data["keywords"]``), ``rewrite``
  (drops recall filler like "你还记得" / "do you remember"; the original stays in
  ``original_question``), ``expand`` (``synonyms``: a map from a word to a list of
  alternatives, or to one alternative as a string; ``expanded_queries``) and
  ``instruction`` (``embedding_text``). With ``llm`` the rewrite is asked of a chat
  endpoint, falling back to the rules.
- ``multi_embed``: ``query_embeddings`` for the ``views`` ``full``, ``keywords``,
  ``last_line``, ``lines`` and ``dialogue`` (for a query that is a dialogue window: one
  vector per line, pooled with weights that decay by ``recency`` per line back from the
  newest and shrink by ``role_weights``; roles come from ``data["dialogue"]`` or from
  ``speaker: text`` lines). ``query_view`` names the view that becomes
  ``query_embedding`` (default ``dialogue`` when asked for, else ``full``).
- ``decompose``: ``sub_queries`` split at conjunctions and question marks (or by ``llm``);
  ``MemoryRetrieval`` searches each and merges their hits.
- ``route``: ``retrieval_hints`` (see :mod:`convmem.retrieve.routing`).
- ``validate``: ``valid`` and ``validation_errors``: whatever retrieval would refuse
  (:func:`convmem.models.check_query_text`: an empty question, a NUL, a lone surrogate,
  over 8,000 characters), more than ``max_chars`` (default 4,000) or control characters;
  ``strict: true`` raises instead.

Every step's options are checked when the operator is built (an unknown action, key or
``optimize`` operation, a value of the wrong type), each error naming the option as
``actions[i].key``. Failures of LLM variants are recorded in ``data["pre_retrieval_errors"]``.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

import numpy as np

from convmem.chat import ChatClient, ChatError
from convmem.embed import Embedder, resolve_embedder
from convmem.embed.base import embed_query, normalise_rows
from convmem.embed.service import resolve_spec
from convmem.errors import InvalidInputError
from convmem.ids import check_flag, check_whole
from convmem.models import check_query_text
from convmem.retrieve.routing import Router
from convmem.text import clean_text, keywords, split_questions, without_recall_frame, words

__all__ = ["ACTIONS", "PreRetrieval"]

ACTIONS = ("none", "embedding", "optimize", "multi_embed", "decompose", "route", "validate")
#: The keys each action reads (a misspelt key was ignored, and its default silently used).
ACTION_KEYS: dict[str, frozenset[str]] = {
    "none": frozenset(),
    "embedding": frozenset({"embedder", "instruction"}),
    "optimize": frozenset({"operations", "max_keywords", "synonyms", "instruction", "llm"}),
    "multi_embed": frozenset({"embedder", "views", "query_view", "recency", "role_weights"}),
    "decompose": frozenset({"max_parts", "llm"}),
    "route": frozenset(
        {"route_strategy", "keyword_rules", "default_strategy", "classifier_threshold", "llm"}
    ),
    "validate": frozenset({"max_chars", "strict"}),
}

#: ``optimize``'s operations.
OPERATIONS = ("keywords", "rewrite", "expand", "instruction")
#: ``multi_embed``'s views (``lines`` gives one vector per line, so it is never ``query_view``).
VIEWS = ("full", "keywords", "last_line", "lines", "dialogue")

_SPEAKER = re.compile(r"^\s*<?([^<>:：\n]{1,32}?)>?\s*[:：]\s*(.+)$")
ASSISTANT_ROLES = frozenset({"assistant", "ai", "bot", "agent", "助手", "助理", "system"})


def _embedder(spec: Any) -> Any:
    if spec is None:
        return resolve_embedder("hashing")
    if isinstance(spec, str):
        return resolve_spec(spec)
    if not hasattr(spec, "embed") and not hasattr(spec, "embed_array"):
        raise InvalidInputError("embedder must be an Embedder or a spec string", field="embedder")
    return spec


def _vectors(embedder: Any, texts: list[str]) -> list[list[float]]:
    """Query vectors: the model's query side (its own prefix, if any), L2-normalised."""
    if hasattr(embedder, "embed_query_array"):  # an EmbeddingService (already normalised)
        return [list(map(float, row)) for row in embedder.embed_query_array(texts)]
    model: Embedder = embedder
    return [list(map(float, row)) for row in normalise_rows(embed_query(model, texts))]


class PreRetrieval:
    def __init__(self, config: Mapping[str, Any] | None = None) -> None:
        if config is not None and not isinstance(config, Mapping):
            raise InvalidInputError(
                "pre_retrieval must be an object: {actions: [...]} or one action",
                field="pre_retrieval",
            )
        config = dict(config or {"action": "none"})
        steps = config.get("actions")
        if steps is None:
            steps = [config]
        if not isinstance(steps, list) or not steps:
            raise InvalidInputError("actions must be a non-empty list", field="actions")
        self.steps: list[dict[str, Any]] = []
        for index, step in enumerate(steps):
            if not isinstance(step, Mapping) or step.get("action") not in ACTIONS:
                raise InvalidInputError(
                    f"actions[{index}].action must be one of {', '.join(ACTIONS)}",
                    field=f"actions[{index}].action",
                )
            known = ACTION_KEYS[step["action"]]
            unknown = sorted(str(key) for key in step if key != "action" and key not in known)
            if unknown:
                raise InvalidInputError(
                    f"actions[{index}] ({step['action']}) has unknown keys {unknown}; it reads "
                    f"{sorted(known) or 'no other key'}",
                    field=f"actions[{index}].{unknown[0]}",
                )
            self.steps.append(_checked_step(dict(step), f"actions[{index}]"))
        self._embedders: dict[int, Any] = {}
        self._routers: dict[int, Router] = {}
        self._chats: dict[int, ChatClient] = {}
        for index, step in enumerate(self.steps):
            with _under(f"actions[{index}]"):
                if step["action"] in ("embedding", "multi_embed"):
                    self._embedders[index] = _embedder(step.get("embedder"))
                if step["action"] == "route":
                    self._routers[index] = Router(step)
                if step.get("llm") and step["action"] in ("optimize", "decompose"):
                    self._chats[index] = ChatClient.from_config(step["llm"])

    def execute(self, data: dict[str, Any]) -> dict[str, Any]:
        if not isinstance(data, dict) or not isinstance(data.get("question"), str):
            raise InvalidInputError(
                "data must be a dict with a 'question' string", field="question"
            )
        for index, step in enumerate(self.steps):
            data = getattr(self, f"_{step['action']}")(index, step, data)
        return data

    # -- actions ----------------------------------------------------------------------

    def _none(self, index: int, step: dict[str, Any], data: dict[str, Any]) -> dict[str, Any]:
        return data

    def _embedding(self, index: int, step: dict[str, Any], data: dict[str, Any]) -> dict[str, Any]:
        text = data.get("embedding_text") or data["question"]
        if step.get("instruction"):
            text = f"{step['instruction']}{data['question']}"
        data["query_embedding"] = _vectors(self._embedders[index], [clean_text(text) or text])[0]
        parts = data.get("sub_queries") or []
        if len(parts) > 1:  # each sub-question is searched with its own vector
            prefix = step.get("instruction") or ""
            texts = [f"{prefix}{part}" for part in parts]
            data["sub_query_embeddings"] = _vectors(
                self._embedders[index], [clean_text(t) or t for t in texts]
            )
        return data

    def _optimize(self, index: int, step: dict[str, Any], data: dict[str, Any]) -> dict[str, Any]:
        operations = step["operations"]
        question = data["question"]
        if "rewrite" in operations:
            rewritten = None
            chat = self._chats.get(index)
            if chat is not None:
                try:
                    answer = chat.json(
                        "Rewrite the question as a standalone search query in its own language. "
                        'Answer JSON only: {"query": "..."}',
                        question,
                    )
                    query = answer.get("query") if isinstance(answer, dict) else None
                    if isinstance(query, str) and query.strip():
                        rewritten = query.strip()
                    else:
                        raise ChatError(f"no 'query' string in {answer!r}"[:200], kind="bad_json")
                except ChatError as exc:
                    data.setdefault("pre_retrieval_errors", []).append(f"optimize: {exc}")
            if rewritten is None:
                rewritten = without_recall_frame(question.strip())
            if rewritten != question:
                data["original_question"] = question
                data["question"] = question = rewritten
        if "keywords" in operations:
            data["keywords"] = keywords(words(question), limit=step.get("max_keywords", 6))
        if "expand" in operations:
            synonyms: Mapping[str, list[str]] = step["synonyms"]
            expanded = [question]
            for word, alternatives in synonyms.items():
                if word in question:
                    expanded.extend(question.replace(word, alt) for alt in alternatives)
            data["expanded_queries"] = list(dict.fromkeys(expanded))
        if "instruction" in operations and step.get("instruction"):
            data["embedding_text"] = f"{step['instruction']}{question}"
        return data

    def _multi_embed(
        self, index: int, step: dict[str, Any], data: dict[str, Any]
    ) -> dict[str, Any]:
        question = data["question"]
        lines = [line.strip() for line in question.splitlines() if line.strip()] or [question]
        views: dict[str, str | list[str]] = {}
        turns: list[tuple[str, str]] = []
        for view in step.get("views", ["full", "keywords", "last_line"]):
            if view == "dialogue":
                turns = _dialogue_turns(data, lines)
                views["dialogue"] = [text for _, text in turns]
            elif view == "full":
                views["full"] = question
            elif view == "keywords":
                views["keywords"] = " ".join(keywords(words(question), limit=8)) or question
            elif view == "last_line":
                views["last_line"] = lines[-1]
            elif view == "lines":
                views["lines"] = lines
            else:
                raise InvalidInputError(
                    f"unknown multi_embed view {view!r}; use full, keywords, last_line, "
                    "lines, dialogue",
                    field="views",
                )
        primary = step.get("query_view", "dialogue" if "dialogue" in views else "full")
        if primary not in views or primary == "lines":
            raise InvalidInputError(
                f"query_view {primary!r} must be one of the single-vector views asked for "
                f"({', '.join(v for v in views if v != 'lines')}); add it to views",
                field="query_view",
            )
        flat: list[tuple[str, str]] = []
        for name, value in views.items():
            for text in value if isinstance(value, list) else [value]:
                flat.append((name, text))
        vectors = _vectors(self._embedders[index], [clean_text(t) or t for _, t in flat])
        out: dict[str, Any] = {}
        for (name, _), vector in zip(flat, vectors, strict=True):
            if isinstance(views[name], list):
                out.setdefault(name, []).append(vector)
            else:
                out[name] = vector
        if "dialogue" in out:  # one vector per line so far
            out["dialogue"] = _pool_dialogue(out["dialogue"], turns, step)
        data["query_embeddings"] = out
        if "query_view" in step or primary == "dialogue":
            data["query_embedding"] = out[primary]
        else:  # an earlier embedding step's vector stands
            data.setdefault("query_embedding", out[primary])
        return data

    def _decompose(self, index: int, step: dict[str, Any], data: dict[str, Any]) -> dict[str, Any]:
        question = data["question"]
        limit: int = step.get("max_parts", 4)
        parts: list[str] | None = None
        chat = self._chats.get(index)
        if chat is not None:
            try:
                answer = chat.json(
                    "Split the question into independent sub-questions (at most "
                    f'{limit}). Answer JSON only: {{"sub_queries": ["..."]}}',
                    question,
                )
                got = answer.get("sub_queries") if isinstance(answer, dict) else None
                if (
                    not isinstance(got, list)
                    or not got
                    or not all(isinstance(p, str) and p.strip() for p in got)
                ):
                    raise ChatError(f"no 'sub_queries' list in {answer!r}"[:200], kind="bad_json")
                parts = [p.strip() for p in got]
            except ChatError as exc:
                data.setdefault("pre_retrieval_errors", []).append(f"decompose: {exc}")
        if parts is None:
            parts = split_questions(question, limit)
        # a question that does not split stays as it was asked
        data["sub_queries"] = parts[:limit] if len(parts) > 1 else [question]
        return data

    def _route(self, index: int, step: dict[str, Any], data: dict[str, Any]) -> dict[str, Any]:
        # route on what the user wrote: recall cues ("还记得") are what a rewrite drops
        question = data.get("original_question") or data["question"]
        data["retrieval_hints"] = self._routers[index].route(question)
        return data

    def _validate(self, index: int, step: dict[str, Any], data: dict[str, Any]) -> dict[str, Any]:
        question = data["question"]
        errors = []
        limit: int = step.get("max_chars", 4000)
        try:  # what retrieval refuses, by the check retrieval makes
            check_query_text(question, "question")
        except InvalidInputError as exc:
            errors.append({"field": "question", "message": str(exc)})
        else:
            if len(question) > limit:
                errors.append(
                    {
                        "field": "question",
                        "message": f"question has {len(question)} characters; limit {limit}",
                    }
                )
            if any(ord(ch) < 32 and ch not in "\n\t\r" for ch in question):
                errors.append({"field": "question", "message": "question has control characters"})
        data["valid"] = not errors
        data["validation_errors"] = errors
        if errors and step.get("strict"):
            raise InvalidInputError(errors[0]["message"], field="question", errors=errors)
        if not errors:
            data["question"] = clean_text(question) or question
        return data


@contextmanager
def _under(where: str) -> Iterator[None]:
    """Re-raise an InvalidInputError from a step's own checks (a Router, a chat client)
    with its field under the step's path: ``default_strategy`` -> ``actions[0].default_strategy``."""
    try:
        yield
    except InvalidInputError as exc:
        if not exc.field or exc.field.startswith("actions"):
            raise
        raise type(exc)(f"{where}: {exc}", field=f"{where}.{exc.field}") from None


def _number(value: Any, field: str, what: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise InvalidInputError(f"{field} must be {what}, got {value!r}", field=field)
    return float(value)


def _checked_step(step: dict[str, Any], where: str) -> dict[str, Any]:
    """One step's options, refused when the operator is built (a wrong type failed with a
    bare ValueError or AttributeError on the first question, or silently did nothing)."""
    action = step["action"]
    if action == "validate":
        if "max_chars" in step:
            check_whole(step["max_chars"], f"{where}.max_chars", 1)
        if "strict" in step:
            check_flag(step["strict"], f"{where}.strict")
    elif action == "decompose":
        if "max_parts" in step:
            check_whole(step["max_parts"], f"{where}.max_parts", 1)
    elif action == "optimize":
        operations = step.get("operations", ["keywords", "rewrite"])
        if isinstance(operations, str):
            operations = [operations]
        if not isinstance(operations, list | tuple) or not all(
            isinstance(op, str) for op in operations
        ):
            raise InvalidInputError(
                f"{where}.operations must be a list of {', '.join(OPERATIONS)}, got {operations!r}",
                field=f"{where}.operations",
            )
        unknown = [op for op in operations if op not in OPERATIONS]
        if unknown:
            raise InvalidInputError(
                f"{where}.operations has unknown operations {unknown}; the operations are "
                f"{', '.join(OPERATIONS)}",
                field=f"{where}.operations",
            )
        step["operations"] = list(operations)
        if "max_keywords" in step:
            check_whole(step["max_keywords"], f"{where}.max_keywords", 0)
        step["synonyms"] = _synonyms(step.get("synonyms"), f"{where}.synonyms")
    elif action == "multi_embed":
        views = step.get("views", ["full", "keywords", "last_line"])
        if (
            not isinstance(views, list | tuple)
            or not views
            or not all(isinstance(v, str) and v in VIEWS for v in views)
        ):
            raise InvalidInputError(
                f"{where}.views must be a non-empty list of {', '.join(VIEWS)}, got {views!r}",
                field=f"{where}.views",
            )
        if "query_view" in step and (
            step["query_view"] not in views or step["query_view"] == "lines"
        ):
            raise InvalidInputError(
                f"{where}.query_view {step['query_view']!r} must be one of the single-vector "
                f"views asked for ({', '.join(v for v in views if v != 'lines')}); add it to "
                "views",
                field=f"{where}.query_view",
            )
        if "recency" in step:
            recency = _number(step["recency"], f"{where}.recency", "a number in (0, 1]")
            if not 0 < recency <= 1:
                raise InvalidInputError(
                    f"{where}.recency must be a number in (0, 1], got {recency}",
                    field=f"{where}.recency",
                )
        weights = step.get("role_weights", {})
        if not isinstance(weights, Mapping):
            raise InvalidInputError(
                f'{where}.role_weights must map a role to a weight (e.g. {{"assistant": 0.5}}), '
                f"got {weights!r}",
                field=f"{where}.role_weights",
            )
        for role, weight in weights.items():
            if _number(weight, f"{where}.role_weights.{role}", "a number >= 0") < 0:
                raise InvalidInputError(
                    f"{where}.role_weights.{role} must be a number >= 0, got {weight!r}",
                    field=f"{where}.role_weights.{role}",
                )
    return step


def _synonyms(value: Any, field: str) -> dict[str, list[str]]:
    """``expand``'s map from a word to its alternatives; a string value is one alternative
    (it was expanded character by character)."""
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise InvalidInputError(
            f'{field} must map a word to its alternatives (e.g. {{"护照": ["证件"]}}), '
            f"got {type(value).__name__}",
            field=field,
        )
    synonyms: dict[str, list[str]] = {}
    for word, alternatives in value.items():
        if isinstance(alternatives, str):
            alternatives = [alternatives]
        if (
            not isinstance(word, str)
            or not word
            or not isinstance(alternatives, list | tuple)
            or not all(isinstance(alt, str) and alt for alt in alternatives)
        ):
            raise InvalidInputError(
                f"{field}.{word} must be a non-empty word mapped to a string or a list of "
                f"strings, got {alternatives!r}",
                field=f"{field}.{word}",
            )
        synonyms[word] = list(alternatives)
    return synonyms


def _dialogue_turns(data: Mapping[str, Any], lines: list[str]) -> list[tuple[str, str]]:
    """``(role, text)`` per line: from ``data["dialogue"]`` when given, else from the
    question's ``speaker: text`` lines (a line without a speaker counts as the user's)."""
    given = data.get("dialogue")
    if given is not None:
        if not isinstance(given, list) or not all(
            isinstance(t, Mapping) and isinstance(t.get("text"), str) for t in given
        ):
            raise InvalidInputError(
                'dialogue must be a list of {"role": ..., "text": ...}', field="dialogue"
            )
        turns = [(str(t.get("role", "user")), t["text"]) for t in given if t["text"].strip()]
    else:
        turns = []
        for line in lines:
            match = _SPEAKER.match(line)
            turns.append((match.group(1).strip(), match.group(2)) if match else ("user", line))
    return turns or [("user", data["question"])]


def _pool_dialogue(
    vectors: list[list[float]], turns: list[tuple[str, str]], step: Mapping[str, Any]
) -> list[float]:
    """The weighted mean of the lines' vectors, normalised: the newest line weighs 1, each
    earlier one ``recency`` times the next; a role's lines are scaled by its weight
    (assistant-like roles 0.5 unless ``role_weights`` says otherwise)."""
    recency = float(step.get("recency", 0.8))
    if not 0 < recency <= 1:
        raise InvalidInputError(f"recency must be in (0, 1], got {recency}", field="recency")
    role_weights = {str(k).casefold(): float(v) for k, v in step.get("role_weights", {}).items()}
    matrix = np.asarray(vectors, dtype=np.float64)
    weights = np.empty(len(turns))
    for position, (role, _) in enumerate(turns):
        role = role.casefold()
        default = 0.5 if role in ASSISTANT_ROLES else 1.0
        weights[position] = recency ** (len(turns) - 1 - position) * role_weights.get(role, default)
    pooled = weights @ matrix
    norm = float(np.linalg.norm(pooled))
    return [float(x) for x in (pooled / norm if norm > 0 else matrix[-1])]


def dialogue_vector(lines: list[str], embed: Callable[[Sequence[str]], Any]) -> list[float]:
    """The dialogue view of a query that is a dialogue window (one ``speaker: text`` line
    per turn): each line embedded, pooled towards the newest, assistant lines at half
    weight. ``embed`` embeds a list of texts (the query side of the model)."""
    turns = _dialogue_turns({"question": "\n".join(lines)}, lines)
    vectors = embed([text for _, text in turns])
    return _pool_dialogue([list(map(float, row)) for row in vectors], turns, {})
