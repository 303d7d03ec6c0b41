"""Search filters: parsed once, compiled to SQL with bound values, and a reference evaluator.

The filter language (a dict; its keys are ANDed):

======================  ==========================================================
``conversation_id``     ``"c1"``, ``{"$eq": "c1"}``, ``{"$ne": "c1"}``, ``{"$in": [...]}``
``intent_tag``          same operators as ``conversation_id``
``category``            same operators as ``conversation_id``
``chunk_version``       an int, ``{"$eq"|"$ne": n}``, ``{"$in": [...]}``
``participants``        ``"Ann"`` (contains), ``[..]`` or ``{"$contains_any": [..]}``,
``speakers``            ``{"$contains": "user"}``, ``{"$contains_all": [..]}``
``tags``                as ``participants``: the ``tags`` list a chunk's metadata carries
                        (story chunks; an upserted chunk's own), none when it is no list
``timestamp_range``     ``[start, end]``: ISO 8601 with zone, either may be null;
                        chunks whose time span overlaps it
``turn_range``          ``[start, end]`` ints, either may be null; chunks holding a turn
                        in it (chunks that list no ``turn_seqs``: overlapping it)
``importance``          a number, or ``{"$gte"|"$gt"|"$lte"|"$lt"|"$eq": x}``
``pinned``              ``true`` / ``false`` (a chunk: any of its turns; a turn-level
                        search then checks each turn's own flag)
``requires_confirmation``  ``true`` / ``false`` (as ``pinned``)
``deleted``             only ``false`` (deleted memory is never returned)
``tenant``              only the caller's own tenant
======================  ==========================================================

Field names are never put into SQL: each known field maps to a fixed column expression,
and every value is a bound parameter. Unknown fields or operators and wrongly typed values
raise :class:`~convmem.errors.FilterError` naming the field and what is allowed.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from convmem.errors import FilterError
from convmem.models import MAX_SEQ, text_problem

__all__ = ["Condition", "FilterSpec", "matches", "parse_filters", "to_sql"]

STRING_FIELDS = {
    "conversation_id": "c.conversation_id",
    "intent_tag": "c.intent_tag",
    "category": "c.category",
}
INT_FIELDS = {"chunk_version": "c.chunk_version"}
ARRAY_FIELDS = {"participants": "c.participants", "speakers": "c.speakers"}
#: Lists inside a chunk's metadata JSON, filtered like ARRAY_FIELDS (only when a list)
METADATA_LISTS = ("tags",)
BOOL_FIELDS = {"pinned": "c.pinned", "requires_confirmation": "c.requires_confirmation"}
RANGE_FIELDS = ("timestamp_range", "turn_range")
NUMBER_FIELDS = {"importance": "c.importance"}
ALL_FIELDS = sorted(
    [
        *STRING_FIELDS,
        *INT_FIELDS,
        *ARRAY_FIELDS,
        *METADATA_LISTS,
        *BOOL_FIELDS,
        *RANGE_FIELDS,
        *NUMBER_FIELDS,
        "deleted",
        "tenant",
    ]
)
COMPARE_OPS = {"$gte": ">=", "$gt": ">", "$lte": "<=", "$lt": "<", "$eq": "="}
MAX_LIST = 1000
#: An internal operator no caller can write (:func:`parse_filters` never produces it): a
#: chunk *holds* a turn of one of the categories, by its column (its most important
#: turn's, and every turn's in a chunk cut before the list existed) or by the
#: ``turn_categories`` list the worker writes. A turn-level search reads chunks under it
#: and then checks each turn's own category.
HOLDS = "$holds"
#: Another internal operator, for what a chunk's column alone cannot tell of its turns (a
#: category's ``$ne``, an importance ``$eq`` or ceiling; the column is only the most
#: important turn's): a chunk holds a turn meeting ``(op, value)`` by its column (every
#: turn's in a chunk cut before the lists existed) or by an entry of its per-turn list
#: (:data:`TURN_LISTS`). A turn-level search reads chunks under it and then checks each
#: turn's own value, so a turn beyond the best chunks of every kind is not missed.
HOLDS_TURN = "$holds_turn"
#: The per-turn lists (in ``turn_seqs`` order) the worker writes beside a chunk's columns.
TURN_LISTS = {"category": "turn_categories", "importance": "turn_importance"}


@dataclass(frozen=True)
class Condition:
    """One parsed condition: ``field op value`` with the value already type-checked."""

    field: str
    op: str
    value: Any


@dataclass(frozen=True)
class FilterSpec:
    """A parsed filter: ANDed conditions, plus the single conversation it pins, if any."""

    conditions: tuple[Condition, ...]

    @property
    def conversation_id(self) -> str | None:
        """The conversation when the filter selects exactly one (enables the fast path)."""
        for condition in self.conditions:
            if condition.field == "conversation_id" and condition.op == "$eq":
                return str(condition.value)
        return None


def _describe(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _string(field: str, value: Any) -> str:
    if not isinstance(value, str):
        raise FilterError(
            f"filter {field} expects a string, got {_describe(value)}", field=f"filters.{field}"
        )
    problem = text_problem(value)
    if problem is not None:
        raise FilterError(f"filter {field}'s value {problem}", field=f"filters.{field}")
    return value


def _int(field: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or abs(value) > MAX_SEQ:
        raise FilterError(
            f"filter {field} expects an integer within ±2**62, got {_describe(value)}",
            field=f"filters.{field}",
        )
    return value


def _number(field: str, value: Any) -> float:
    if (
        isinstance(value, bool)
        or not isinstance(value, int | float)
        or (isinstance(value, int) and abs(value) > MAX_SEQ)
        or not math.isfinite(value)
    ):
        raise FilterError(
            f"filter {field} expects a finite number, got {_describe(value)}",
            field=f"filters.{field}",
        )
    return float(value)


def _list(field: str, value: Any) -> list[Any]:
    if not isinstance(value, list | tuple) or not value or len(value) > MAX_LIST:
        raise FilterError(
            f"filter {field} expects a non-empty list of at most {MAX_LIST} values, "
            f"got {_describe(value)}",
            field=f"filters.{field}",
        )
    return list(value)


def _timestamp(field: str, value: Any) -> float | None:
    if value is None:
        return None
    if not isinstance(value, str):
        raise FilterError(
            f"filter {field} bounds must be ISO 8601 strings or null, got {_describe(value)}",
            field=f"filters.{field}",
        )
    try:
        parsed = datetime.fromisoformat(value)
    except ValueError:
        raise FilterError(
            f"filter {field} bound {_describe(value)} is not ISO 8601; "
            "use for example 2026-02-02T10:00:00+08:00",
            field=f"filters.{field}",
        ) from None
    if parsed.tzinfo is None:
        raise FilterError(
            f"filter {field} bound {_describe(value)} has no time zone; add one (+08:00 or Z)",
            field=f"filters.{field}",
        )
    return parsed.timestamp()


def _operator(field: str, spec: Mapping[str, Any], allowed: tuple[str, ...]) -> tuple[str, Any]:
    if len(spec) != 1:
        raise FilterError(
            f"filter {field} takes exactly one operator, got {sorted(map(str, spec))}",
            field=f"filters.{field}",
        )
    op, value = next(iter(spec.items()))
    if op not in allowed:
        raise FilterError(
            f"filter {field} does not support the operator {_describe(op)}; "
            f"use one of {', '.join(allowed)}",
            field=f"filters.{field}",
        )
    return op, value


def parse_filters(filters: Mapping[str, Any] | None, *, tenant: str) -> FilterSpec:
    """Check and parse a filter dict (see the module docstring).

    Raises:
        FilterError: an unknown field or operator, a wrongly typed value, ``deleted: true``
            or another tenant.
    """
    if filters is None:
        return FilterSpec(())
    if not isinstance(filters, Mapping):
        raise FilterError(
            f"filters must be an object mapping fields to conditions, got {type(filters).__name__}",
            field="filters",
        )
    conditions: list[Condition] = []
    for field, spec in filters.items():
        if not isinstance(field, str) or field not in ALL_FIELDS:
            raise FilterError(
                f"unknown filter field {_describe(field)}; filterable fields: {', '.join(ALL_FIELDS)}",
                field=f"filters.{field}" if isinstance(field, str) else "filters",
            )
        if field == "deleted":
            if spec is not False:
                raise FilterError(
                    "filter deleted accepts only false: deleted memory is never returned",
                    field="filters.deleted",
                )
            continue
        if field == "tenant":
            if spec != tenant:
                raise FilterError(
                    "filter tenant may only name the caller's own tenant", field="filters.tenant"
                )
            continue
        conditions.append(_condition(field, spec))
    return FilterSpec(tuple(conditions))


def _condition(field: str, spec: Any) -> Condition:
    """One field's condition, its operator and value checked against the field's type."""
    if field in STRING_FIELDS or field in INT_FIELDS:
        check = _string if field in STRING_FIELDS else _int
        if isinstance(spec, Mapping):
            op, value = _operator(field, spec, ("$eq", "$ne", "$in"))
            if op == "$in":
                return Condition(field, op, tuple(check(field, v) for v in _list(field, value)))
            else:
                return Condition(field, op, check(field, value))
        else:
            return Condition(field, "$eq", check(field, spec))
    elif field in ARRAY_FIELDS or field in METADATA_LISTS:
        if isinstance(spec, Mapping):
            op, value = _operator(field, spec, ("$contains", "$contains_any", "$contains_all"))
            if op == "$contains":
                return Condition(field, "$contains_any", (_string(field, value),))
            else:
                items = tuple(_string(field, v) for v in _list(field, value))
                return Condition(field, op, items)
        elif isinstance(spec, list | tuple):
            items = tuple(_string(field, v) for v in _list(field, spec))
            return Condition(field, "$contains_any", items)
        else:
            return Condition(field, "$contains_any", (_string(field, spec),))
    elif field in BOOL_FIELDS:
        if not isinstance(spec, bool):
            raise FilterError(
                f"filter {field} expects true or false, got {_describe(spec)}",
                field=f"filters.{field}",
            )
        return Condition(field, "$eq", spec)
    elif field in NUMBER_FIELDS:
        if isinstance(spec, Mapping):
            op, value = _operator(field, spec, tuple(COMPARE_OPS))
            return Condition(field, op, _number(field, value))
        else:
            return Condition(field, "$eq", _number(field, spec))
    else:  # ranges
        if not isinstance(spec, list | tuple) or len(spec) != 2:
            raise FilterError(
                f"filter {field} expects [start, end], got {_describe(spec)}",
                field=f"filters.{field}",
            )
        if field == "turn_range":
            low = None if spec[0] is None else _int(field, spec[0])
            high = None if spec[1] is None else _int(field, spec[1])
            bounds: tuple[float | None, float | None] = (low, high)
        else:
            bounds = (_timestamp(field, spec[0]), _timestamp(field, spec[1]))
        if bounds[0] is not None and bounds[1] is not None and bounds[0] > bounds[1]:
            raise FilterError(
                f"filter {field} start is after its end: {_describe(list(spec))}",
                field=f"filters.{field}",
            )
        return Condition(field, "$overlaps", bounds)


def to_sql(spec: FilterSpec, *, dialect: str = "sqlite") -> tuple[str, list[Any]]:
    """Compile to an ``AND`` clause over the ``chunks`` table aliased ``c``.

    ``dialect`` is ``"sqlite"`` (array columns are JSON text) or ``"postgres"`` (array
    columns are ``jsonb``); both take ``?`` parameters.
    """
    clauses: list[str] = []
    params: list[Any] = []
    for cond in spec.conditions:
        field, op, value = cond.field, cond.op, cond.value
        if op == HOLDS:
            clause, values = _contains("turn_categories", "$contains_any", value, dialect)
            marks = _marks(value)
            said, quoted = _says_any(value, dialect)
            column = STRING_FIELDS[field]
            clauses.append(f"({column} IN ({marks}) OR ({said} AND {clause}))")
            params.extend([*value, *quoted, *values])
        elif op == HOLDS_TURN:
            test, operand = value
            clause, values = _holds_turn(field, test, operand, dialect)
            clauses.append(clause)
            params.extend(values)
        elif field in STRING_FIELDS or field in INT_FIELDS:
            column = STRING_FIELDS.get(field) or INT_FIELDS[field]
            if op == "$eq":
                clauses.append(f"{column} = ?")
                params.append(value)
            elif op == "$ne":
                clauses.append(f"({column} IS NULL OR {column} <> ?)")
                params.append(value)
            else:
                clauses.append(f"{column} IN ({_marks(value)})")
                params.extend(value)
        elif field in ARRAY_FIELDS or field in METADATA_LISTS:
            clause, values = _contains(field, op, value, dialect)
            clauses.append(clause)
            params.extend(values)
        elif field in BOOL_FIELDS:
            clauses.append(f"{BOOL_FIELDS[field]} = ?")
            params.append(1 if value else 0)
        elif field in NUMBER_FIELDS:
            column = NUMBER_FIELDS[field]
            clauses.append(f"({column} IS NOT NULL AND {column} {COMPARE_OPS[op]} ?)")
            params.append(value)
        else:
            low_col, high_col = (
                ("c.start_seq", "c.end_seq")
                if field == "turn_range"
                else ("c.ts_start", "c.ts_end")
            )
            low, high = value
            if field == "timestamp_range":
                # a chunk without a time span never matches a time filter, open or not
                clauses.append(f"{low_col} IS NOT NULL")
            if high is not None:
                clauses.append(f"{low_col} <= ?")
                params.append(high)
            if low is not None:
                clauses.append(f"{high_col} >= ?")
                params.append(low)
            if field == "turn_range" and (low is not None or high is not None):
                clause, bounds = _holds_turn_in(low, high, dialect)
                clauses.append(clause)
                params.extend(bounds)
    return (" AND ".join(clauses) if clauses else "1=1"), params


def _contains(field: str, op: str, value: Any, dialect: str) -> tuple[str, list[Any]]:
    """An array field holds any (``$contains_any``) or all of the strings in ``value``.
    A metadata list (``tags``, ``turn_categories``) counts only when it is a JSON array,
    as :func:`matches` reads it (its strings): PostgreSQL's ``?|`` would match a lone
    string, SQLite's ``json_each`` an object's values or a nested list's text."""
    if dialect == "postgres":
        test = "jsonb_exists_any" if op == "$contains_any" else "jsonb_exists_all"
        if field in ARRAY_FIELDS:
            return f"{test}({ARRAY_FIELDS[field]}, CAST(? AS text[]))", [list(value)]
        member = f"(CAST(c.metadata AS jsonb) -> '{field}')"
        return (
            f"(jsonb_typeof({member}) = 'array' AND {test}({member}, CAST(? AS text[])))",
            [list(value)],
        )
    # one IN list, not a test per value joined by OR / AND: SQLite nests each join one
    # level deeper, and past about 990 values it refused the statement as too deep
    wanted = list(dict.fromkeys(value))
    source = ARRAY_FIELDS.get(field) or f"c.metadata, '$.{field}'"
    found = f"FROM json_each({source}) j WHERE j.type = 'text' AND j.value IN ({_marks(wanted)})"
    if op == "$contains_any":
        clause = f"EXISTS (SELECT 1 {found})"
    else:
        clause = f"(SELECT count(DISTINCT j.value) {found}) = {len(wanted)}"
    if field not in ARRAY_FIELDS:
        clause = f"(json_type(c.metadata, '$.{field}') = 'array' AND {clause})"
    return clause, wanted


def _holds_turn(field: str, op: str, value: Any, dialect: str) -> tuple[str, list[Any]]:
    """A chunk's column meets ``op value``, or an entry of its per-turn list does (only
    when the list is a JSON array; a category entry that is no string differs from every
    value, an importance entry counts only when it is a number), as :func:`matches` reads
    :data:`HOLDS_TURN`."""
    listed = TURN_LISTS[field]
    if field == "category":
        column = f"({STRING_FIELDS[field]} IS NULL OR {STRING_FIELDS[field]} <> ?)"
        test = (
            "NOT (jsonb_typeof(j.v) = 'string' AND j.v #>> '{}' = ?)"
            if dialect == "postgres"
            else "NOT (j.type = 'text' AND j.value = ?)"
        )
    else:
        compare = COMPARE_OPS[op]
        column = f"({NUMBER_FIELDS[field]} IS NOT NULL AND {NUMBER_FIELDS[field]} {compare} ?)"
        test = (
            "(CASE WHEN jsonb_typeof(j.v) = 'number' "
            f"THEN CAST(j.v #>> '{{}}' AS double precision) {compare} ? ELSE FALSE END)"
            if dialect == "postgres"
            else f"(j.type IN ('integer', 'real') AND j.value {compare} ?)"
        )
    if dialect == "postgres":
        member = f"(CAST(c.metadata AS jsonb) -> '{listed}')"
        entries = (
            f"(CASE WHEN jsonb_typeof({member}) = 'array' THEN EXISTS (SELECT 1 FROM "
            f"jsonb_array_elements({member}) AS j(v) WHERE {test}) ELSE FALSE END)"
        )
    else:
        entries = (
            f"(json_type(c.metadata, '$.{listed}') = 'array' AND EXISTS (SELECT 1 FROM "
            f"json_each(c.metadata, '$.{listed}') j WHERE {test}))"
        )
    return f"({column} OR {entries})", [value, value]


def _says_any(values: tuple[str, ...], dialect: str) -> tuple[str, list[str]]:
    """Whether a chunk's metadata text may list one of ``values``: it holds one as a JSON
    string (``"preference"``), every writer encoding a string without quotes, backslashes
    or control characters so. A cheap test before the JSON is parsed (parsing every
    chunk's metadata made a tenant-wide filtered search half again as slow); a value that
    would be escaped skips it."""
    if len(values) > SAID_TESTS or any(_escaped(value) for value in values):
        return "1=1", []  # a long list: the JSON is read, as without the test
    test = "strpos(c.metadata, ?) > 0" if dialect == "postgres" else "instr(c.metadata, ?) > 0"
    return "(" + " OR ".join([test] * len(values)) + ")", [f'"{value}"' for value in values]


#: The most values :func:`_says_any` tests one by one (each an ``instr`` joined by OR).
SAID_TESTS = 64


def _marks(values: Sequence[Any]) -> str:
    return ", ".join("?" * len(values))


def _escaped(value: str) -> bool:
    return any(ch in '"\\' or ord(ch) < 0x20 or 0x7F <= ord(ch) <= 0x9F for ch in value)


def _holds_turn_in(low: Any, high: Any, dialect: str) -> tuple[str, list[Any]]:
    """A chunk that lists its ``turn_seqs`` must hold one inside [low, high]: its span
    alone can straddle deleted turns (a chunk of turns 3, 4, 6, 7 after turn 5 was
    deleted spans 3..7 but holds nothing of 5). Chunks that list none keep span overlap."""
    tests, bounds = [], []
    if low is not None:
        tests.append("{value} >= ?")
        bounds.append(low)
    if high is not None:
        tests.append("{value} <= ?")
        bounds.append(high)
    if dialect == "postgres":
        seqs = "(CAST(c.metadata AS jsonb) -> 'turn_seqs')"
        within = " AND ".join(tests).format(value="CAST(j.value AS bigint)")
        clause = (
            f"(CASE WHEN jsonb_typeof({seqs}) IS DISTINCT FROM 'array' THEN TRUE "
            f"WHEN jsonb_array_length({seqs}) = 0 THEN TRUE "
            f"ELSE EXISTS (SELECT 1 FROM jsonb_array_elements_text({seqs}) j WHERE {within}) END)"
        )
    else:
        within = " AND ".join(tests).format(value="j.value")
        clause = (
            "(CASE WHEN json_type(c.metadata, '$.turn_seqs') IS NOT 'array' THEN 1 "
            "WHEN json_array_length(c.metadata, '$.turn_seqs') = 0 THEN 1 "
            "ELSE EXISTS (SELECT 1 FROM json_each(c.metadata, '$.turn_seqs') j "
            f"WHERE {within}) END)"
        )
    return clause, bounds


def _epoch(value: str | None) -> float | None:
    return None if value is None else datetime.fromisoformat(value).timestamp()


def matches(metadata: Mapping[str, Any], spec: FilterSpec) -> bool:
    """Reference semantics: does a chunk's metadata satisfy the filter?

    The SQL compiled by :func:`to_sql` must agree with this on every input; the test
    suite checks it with generated records and filters.
    """
    for cond in spec.conditions:
        field, op, value = cond.field, cond.op, cond.value
        if op == HOLDS:
            ok = metadata.get(field) in value or bool(
                _members(metadata, "turn_categories") & set(value)
            )
        elif op == HOLDS_TURN:
            test, operand = value
            listed = metadata.get(TURN_LISTS[field])
            entries = listed if isinstance(listed, list) else []
            column = metadata.get(field)
            ok = any(_meets_turn(field, test, operand, have) for have in [column, *entries])
        elif field in ARRAY_FIELDS or field in METADATA_LISTS:
            members = _members(metadata, field)
            ok = (
                any(v in members for v in value)
                if op == "$contains_any"
                else all(v in members for v in value)
            )
        elif field in RANGE_FIELDS:
            if field == "turn_range":
                start, end = metadata["turn_range"]
            else:
                span = metadata.get("timestamp_range")
                if not span:
                    return False
                start, end = _epoch(span[0]), _epoch(span[1])
            low, high = value
            ok = (high is None or start <= high) and (low is None or end >= low)
            seqs = metadata.get("turn_seqs") if field == "turn_range" else None
            if ok and isinstance(seqs, list) and seqs:
                ok = any(
                    (low is None or seq >= low) and (high is None or seq <= high) for seq in seqs
                )
        elif field in NUMBER_FIELDS:
            have = metadata.get(field)
            ok = have is not None and _compare(op, have, value)
        else:
            have = metadata.get(field)
            if field in BOOL_FIELDS:
                have = bool(have)
            if op == "$eq":
                ok = have == value
            elif op == "$ne":
                ok = have != value
            else:
                ok = have in value
        if not ok:
            return False
    return True


def _meets_turn(field: str, op: str, value: Any, have: Any) -> bool:
    """Whether a chunk's column value, or an entry of its per-turn list, meets a
    :data:`HOLDS_TURN` condition (a category that is no string differs from every value;
    an importance counts only when it is a number)."""
    if field == "category":
        return not (isinstance(have, str) and have == value)
    if isinstance(have, bool) or not isinstance(have, int | float):
        return False
    return _compare(op, have, value)


def _compare(op: str, have: Any, value: Any) -> bool:
    """``have op value`` for a number comparison of the filter language."""
    return bool(
        {
            "$gte": have >= value,
            "$gt": have > value,
            "$lte": have <= value,
            "$lt": have < value,
            "$eq": have == value,
        }[op]
    )


def _members(metadata: Mapping[str, Any], field: str) -> set[str]:
    """The strings of a list field (none when it is no list)."""
    listed = metadata.get(field)
    return {v for v in listed if isinstance(v, str)} if isinstance(listed, list) else set()


def dumps_list(values: list[str]) -> str:
    """JSON for array columns (kept here so every writer encodes arrays the same way)."""
    return json.dumps(values, ensure_ascii=False)
