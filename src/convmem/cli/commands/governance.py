"""Stage 2 governance commands: marks, notes, note, policy, sweep."""

from __future__ import annotations

import argparse
import json
from typing import Any

from convmem.cli.common import (
    bounded_int,
    drain_index,
    open_memory,
    print_json,
    quiet,
    read_json_file,
    seconds,
)
from convmem.errors import InvalidInputError

__all__ = ["register"]


def _mark_line(item: Any) -> tuple[str, str]:
    mark = item.mark
    label = "keep" if mark.keep else "drop"
    tags = "/".join(t for t in (mark.category, mark.subtype) if t)
    extra = " ".join(
        part
        for part in (
            tags,
            mark.evidence_level or "",
            f"imp={mark.importance:g}" if mark.keep else "",
            f"ttl={mark.ttl_seconds}s" if mark.keep and mark.ttl_seconds else "",
            "PINNED" if mark.user_triggered_save else "",
            "PENDING" if mark.requires_confirmation else "",
            "EXPIRED" if item.expired else "",
        )
        if part
    )
    return f"{item.turn_id!s:>8} {item.role:<9} {label} {extra}", f"{'':>8} {mark.reason}"


def cmd_marks(args: argparse.Namespace) -> int:
    with open_memory(args, existing=True) as memory:
        marks = memory.marks(args.conversation)
        if args.kept:
            marks = [item for item in marks if item.mark.keep]
        if quiet(args):
            print_json([mark.model_dump(mode="json") for mark in marks])
            return 0
        if not marks:
            print(
                f"(no marks: conversation {args.conversation!r} is unknown or not indexed in "
                f"{memory.stats()['store']})"
            )
        for item in marks:
            for line in _mark_line(item):
                print(line)
    return 0


def cmd_notes(args: argparse.Namespace) -> int:
    with open_memory(args, existing=True) as memory:
        notes = memory.notes(args.conversation, args.status, limit=args.limit)
        if quiet(args):
            print_json([note.model_dump(mode="json") for note in notes])
            return 0
        if not notes:
            print("(no notes)")
        for note in notes:
            tags = "/".join(t for t in (note.category, note.subtype) if t)
            print(
                f"{note.note_id} [{note.status}] {tags} {note.evidence_level} "
                f"turns {note.source_turn_ids} expires {note.expires_at or 'never'}"
            )
            for line in note.text.splitlines():
                print(f"    {line}")
    return 0


def cmd_note(args: argparse.Namespace) -> int:
    if args.action == "reject" and args.evidence is not None:
        raise InvalidInputError(
            "--evidence records the evidence level of a confirmed note; a rejected note "
            "keeps none: drop --evidence, or use 'convmem note confirm'",
            field="--evidence",
        )
    with open_memory(args, existing=True) as memory:
        note = memory.update_note(
            args.note_id, confirm=args.action == "confirm", evidence_level=args.evidence
        )
        drain_index(memory, args, timeout=args.timeout)
        print_json(note.model_dump(mode="json"))
    return 0


def cmd_policy(args: argparse.Namespace) -> int:
    with open_memory(args) as memory:
        if args.action == "set":
            if not args.file:
                raise InvalidInputError(
                    "policy set needs a JSON file: convmem policy set policy.json", field="file"
                )
            overrides = read_json_file(args.file, field="file")
            if not isinstance(overrides, dict):
                raise InvalidInputError(
                    f"{args.file} holds {json.dumps(overrides)[:40]}: the policy must be a "
                    "JSON object of overrides; use 'convmem policy clear' to clear it",
                    field="file",
                )
            memory.set_policy(overrides)
        elif args.action == "clear":
            memory.set_policy(None)
        print_json(memory.policy().as_dict())
    return 0


def cmd_sweep(args: argparse.Namespace) -> int:
    with open_memory(args, existing=True) as memory:
        result = memory.sweep_expired()
        drain_index(memory, args, timeout=args.timeout)
        print_json(result)
    return 0


def register(sub: Any, common: list[argparse.ArgumentParser]) -> None:
    marks = sub.add_parser(
        "marks", parents=common, help="show each turn's keep/drop mark and reason"
    )
    marks.add_argument("conversation")
    marks.add_argument("--kept", action="store_true", help="only kept turns")
    marks.set_defaults(func=cmd_marks)

    notes = sub.add_parser(
        "notes", parents=common, help="list notes (pending and confirmed by default)"
    )
    notes.add_argument("--conversation")
    notes.add_argument("--status", choices=["pending", "confirmed", "rejected"])
    notes.add_argument("--limit", type=bounded_int(1, 100000), default=200)
    notes.set_defaults(func=cmd_notes)

    note = sub.add_parser(
        "note", parents=common, help="confirm or reject a note (the confirmation loop)"
    )
    note.add_argument("action", choices=["confirm", "reject"])
    note.add_argument("note_id")
    note.add_argument(
        "--evidence",
        help="evidence level to record on confirm, e.g. S3_user_confirmed (not with reject)",
    )
    note.add_argument("--timeout", type=seconds, default=600.0)
    note.set_defaults(func=cmd_note)

    policy = sub.add_parser(
        "policy", parents=common, help="show, set or clear this tenant's retention policy"
    )
    policy.add_argument("action", choices=["show", "set", "clear"])
    policy.add_argument("file", nargs="?", help="JSON overrides (for set)")
    policy.set_defaults(func=cmd_policy)

    sweep = sub.add_parser(
        "sweep", parents=common, help="mark expired memory now and re-cut its chunks"
    )
    sweep.add_argument("--timeout", type=seconds, default=600.0)
    sweep.set_defaults(func=cmd_sweep)
