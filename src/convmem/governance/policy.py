"""The TTL / forget-policy table of seed 002 §4.2 and its explicit overrides.

Retention is product policy: a marker (rules or model) chooses the *row* (category,
open or done, user claim or tool grounded); the values come from this table. Defaults
are overridden only by explicit configuration: a product policy given to
``Memory.open(policy=...)`` (a dict or a JSON file), then a tenant's policy stored with
``Memory.set_policy``. Changing policy applies to turns marked afterwards.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from types import MappingProxyType
from typing import Any

from convmem.errors import InvalidInputError
from convmem.governance.schema import FORGET_POLICIES, MAX_TTL_SECONDS
from convmem.text import read_utf8

__all__ = [
    "DAY",
    "DEFAULT_TTL_POLICY",
    "GovernancePolicy",
    "RetentionRule",
    "load_policy",
    "policy_key",
]

DAY = 86400


@dataclass(frozen=True)
class RetentionRule:
    forget_policy: str
    ttl_seconds: int

    def as_dict(self) -> dict[str, Any]:
        return {"forget_policy": self.forget_policy, "ttl_seconds": self.ttl_seconds}


DEFAULT_TTL_POLICY: Mapping[str, RetentionRule] = MappingProxyType(
    {
        "preference": RetentionRule("until_changed", 0),
        "rule": RetentionRule("permanent", 0),
        "task(open)": RetentionRule("temporary", 30 * DAY),
        "task(done)": RetentionRule("temporary", 7 * DAY),
        "fact(user claim)": RetentionRule("temporary", 180 * DAY),
        "fact(tool grounded)": RetentionRule("permanent", 0),
        # Not a row of the seed's table: a user's passing state ("今天有点累") is true for
        # a day or two, not the half year of a user fact; overridable like the rest.
        "fact(transient)": RetentionRule("temporary", 3 * DAY),
        "note": RetentionRule("temporary", 30 * DAY),
        # Not a row of the seed's table: what an explicit user save gets (§4.3 "stronger
        # retention"); overridable like the rest.
        "pinned": RetentionRule("permanent", 0),
    }
)


def policy_key(
    category: str, evidence_level: str | None, *, task_done: bool = False, transient: bool = False
) -> str:
    """The table row for a kept turn.

    Facts are ``tool grounded`` only with S2 evidence; user claims, confirmed or not, and
    AI inferences are ``user claim`` (the table has no row for them, and a shorter life
    is the safer default), or ``transient`` when they state a passing condition.
    """
    if category == "task":
        return "task(done)" if task_done else "task(open)"
    if category == "fact" and transient and evidence_level != "S2_tool_grounded":
        return "fact(transient)"
    if category == "fact":
        return "fact(tool grounded)" if evidence_level == "S2_tool_grounded" else "fact(user claim)"
    return category


@dataclass(frozen=True)
class GovernancePolicy:
    """Retention rows plus the marking knobs a tenant may set.

    Attributes:
        rules: the table (keys as in :data:`DEFAULT_TTL_POLICY`).
        pin_window: K, the turns before a save request that it targets (seed: 4).
        pin_importance: importance given to pinned turns (seed: at least 0.9).
        pin_max_gap_seconds: a save request this long after its targets is ambiguous.
        keep_threshold: value score a turn without a category cue needs to be kept by
            the rule marker; higher drops more (see bench/README.md for the trade-off).
    """

    rules: Mapping[str, RetentionRule] = field(default_factory=lambda: dict(DEFAULT_TTL_POLICY))
    pin_window: int = 4
    pin_importance: float = 0.9
    pin_max_gap_seconds: int = 1800
    keep_threshold: float = 0.55

    def rule(self, key: str) -> RetentionRule:
        return self.rules.get(key) or DEFAULT_TTL_POLICY[key]

    def as_dict(self) -> dict[str, Any]:
        return {
            "rules": {key: rule.as_dict() for key, rule in self.rules.items()},
            "pin_window": self.pin_window,
            "pin_importance": self.pin_importance,
            "pin_max_gap_seconds": self.pin_max_gap_seconds,
            "keep_threshold": self.keep_threshold,
        }

    def merged(
        self, overrides: Mapping[str, Any] | None, *, source: str = "policy"
    ) -> GovernancePolicy:
        """This policy with ``overrides`` applied (only the keys given change).

        Raises:
            InvalidInputError: an unknown key, row or value; names the field and the fix.
        """
        if not overrides:
            return self
        if not isinstance(overrides, Mapping):
            raise InvalidInputError(f"{source} must be a JSON object", field=source)
        known = {"rules", "pin_window", "pin_importance", "pin_max_gap_seconds", "keep_threshold"}
        unknown = sorted(set(overrides) - known)
        if unknown:
            raise InvalidInputError(
                f"{source} has unknown keys {unknown}; allowed: {sorted(known)}",
                field=f"{source}.{unknown[0]}",
            )
        rules = dict(self.rules)
        raw_rules = overrides.get("rules", {})
        if not raw_rules and source == "tenant policy":
            raw_rules = {}  # stored before "rules": [] (or null, "", 0) was refused: no rules
        if not isinstance(raw_rules, Mapping):
            raise InvalidInputError(f"{source}.rules must be an object", field=f"{source}.rules")
        for key, value in raw_rules.items():
            where = f"{source}.rules.{key}"
            if key not in DEFAULT_TTL_POLICY:
                raise InvalidInputError(
                    f"{where}: no such row; rows are {', '.join(DEFAULT_TTL_POLICY)}", field=where
                )
            if not isinstance(value, Mapping) or not set(value) <= {"forget_policy", "ttl_seconds"}:
                raise InvalidInputError(
                    f'{where} must be {{"forget_policy": ..., "ttl_seconds": ...}}', field=where
                )
            base = rules.get(key) or DEFAULT_TTL_POLICY[key]
            forget = value.get("forget_policy", base.forget_policy)
            ttl = value.get("ttl_seconds", base.ttl_seconds)
            if forget not in FORGET_POLICIES:
                raise InvalidInputError(
                    f"{where}.forget_policy must be one of {', '.join(FORGET_POLICIES)}",
                    field=f"{where}.forget_policy",
                )
            if isinstance(ttl, bool) or not isinstance(ttl, int) or not 0 <= ttl <= MAX_TTL_SECONDS:
                raise InvalidInputError(
                    f"{where}.ttl_seconds must be an integer in 0..{MAX_TTL_SECONDS} "
                    "(0 = long-term, at most 100 years)",
                    field=f"{where}.ttl_seconds",
                )
            rules[key] = RetentionRule(forget, ttl)
        changes: dict[str, Any] = {"rules": rules}
        for name, low, high, kind in (
            ("pin_window", 1, 32, int),
            ("pin_max_gap_seconds", 0, 10**9, int),
            ("pin_importance", 0.0, 1.0, float),
            ("keep_threshold", -10.0, 10.0, float),
        ):
            if name not in overrides:
                continue
            value = overrides[name]
            ok = not isinstance(value, bool) and isinstance(value, int | float)
            if kind is int:
                ok = ok and isinstance(value, int)
            if not ok or not low <= value <= high:
                raise InvalidInputError(
                    f"{source}.{name} must be a {kind.__name__} in [{low}, {high}], got {value!r}",
                    field=f"{source}.{name}",
                )
            changes[name] = value
        return replace(self, **changes)


def load_policy(
    source: GovernancePolicy | Mapping[str, Any] | str | Path | None,
) -> GovernancePolicy:
    """A product policy from a policy object, a dict of overrides or a JSON file."""
    if source is None:
        return GovernancePolicy()
    if isinstance(source, GovernancePolicy):
        return source
    if isinstance(source, str | Path):
        path = Path(source)
        try:
            data = json.loads(read_utf8(path, field="policy", name=f"policy file {str(path)!r}"))
        except InvalidInputError:
            raise
        except (OSError, ValueError) as exc:  # ValueError: bad JSON, or a NUL in the path
            raise InvalidInputError(
                f"cannot read policy file {str(path)!r}: {exc}", field="policy"
            ) from None
        return GovernancePolicy().merged(data, source="policy")
    return GovernancePolicy().merged(source, source="policy")
