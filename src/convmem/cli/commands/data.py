"""Write and read commands: ingest, search, delete, reindex, rechunk, purge, stats, jobs."""

from __future__ import annotations

import argparse
import contextlib
import json
import re
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from convmem.cli.common import (
    bounded_float,
    bounded_int,
    drain_index,
    open_memory,
    print_json,
    quiet,
    seconds,
)
from convmem.cli.errors import EXIT_USAGE, say
from convmem.cli.progress import Progress
from convmem.errors import ConvmemError, InvalidInputError
from convmem.ids import check_conversation_id
from convmem.models import MAX_TEXT_CHARS, Turn, parse_turns
from convmem.retrieve import DEFAULT_MIN_SCORE

if TYPE_CHECKING:
    from convmem import Memory

__all__ = ["ingest_file", "register", "show_hits"]


_TURN_FIELD = re.compile(r"turns\[(\d+)\]\.?(.*)")


def _located(
    exc: InvalidInputError, conversation_id: str, where: Sequence[str], stored: str
) -> InvalidInputError:
    """``exc`` about ``turns[i].field`` of a batch, told as the file line it came from."""
    errors: list[dict[str, Any]] = []
    for problem in exc.errors:
        match = _TURN_FIELD.fullmatch(str(problem.get("field") or ""))
        line = where[int(match[1])] if match and int(match[1]) < len(where) else where[0]
        field = match[2] if match and match[2] else "turn"
        errors.append({"line": line, "field": field, "message": str(problem.get("message"))})
    first = errors[0]
    more = f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""
    return type(exc)(
        f"{first['line']} (conversation {conversation_id!r}): {first['field']}: "
        f"{first['message']}{more}; fix the line and ingest the file again. {stored}",
        field=f"{first['line']}.{first['field']}",
        errors=[{"field": f"{e['line']}.{e['field']}", "message": e["message"]} for e in errors],
    )


def _stored_so_far(counts: dict[str, int]) -> str:
    if not counts:
        return "Nothing from the file was stored."
    named = ", ".join(f"{cid!r} ({n})" for cid, n in list(counts.items())[:5])
    more = f" and {len(counts) - 5} more" if len(counts) > 5 else ""
    return (
        f"Stored before it: {sum(counts.values())} new turn(s) of {len(counts)} "
        f"conversation(s), {named}{more}; ingesting the file again skips them as duplicates."
    )


def _read_turns(path: Path, batch: int) -> list[tuple[str, list[tuple[list[Turn], list[str]]]]]:
    """Every conversation of the file, validated as add_turns would, in batches of ``batch``.

    The whole file is checked before anything is stored, so a bad line stores nothing.
    """
    from convmem.ingest.formats import iter_located_conversations

    nothing = _stored_so_far({})
    conversations: list[tuple[str, list[tuple[list[Turn], list[str]]]]] = []
    for conversation_id, rows, where in iter_located_conversations(path):
        try:
            check_conversation_id(conversation_id)
        except InvalidInputError as exc:
            raise InvalidInputError(
                f"{where[0]}: {exc}; fix the line and ingest the file again. {nothing}",
                field=f"{where[0]}.conversation_id",
            ) from None
        batches: list[tuple[list[Turn], list[str]]] = []
        for start in range(0, len(rows), batch):
            lines = where[start : start + batch]
            try:
                turns = parse_turns(rows[start : start + batch], max_text_chars=MAX_TEXT_CHARS)
            except InvalidInputError as exc:
                raise _located(exc, conversation_id, lines, nothing) from None
            batches.append((turns, lines))
        conversations.append((conversation_id, batches))
    return conversations


def ingest_file(
    memory: Memory, path: Path, *, bar: Progress | None = None, batch: int = 500
) -> dict[str, int]:
    """Store every turn of a ``.jsonl`` or LoCoMo ``.json`` file; returns the counts.

    Raises:
        InvalidInputError: a line is invalid (nothing was stored), or a turn conflicts with
            one already stored (the message says what was stored before it); either names
            ``FILE:LINE`` and the conversation.
    """
    conversations = _read_turns(path, batch)
    stored: dict[str, int] = {}
    duplicates = 0
    for conversation_id, batches in conversations:
        for turns, lines in batches:
            try:
                receipt = memory.add_turns(conversation_id, turns)
            except InvalidInputError as exc:  # a conflict with a turn already in the store
                raise _located(exc, conversation_id, lines, _stored_so_far(stored)) from None
            if receipt.accepted_turn_ids:
                stored[conversation_id] = stored.get(conversation_id, 0) + len(
                    receipt.accepted_turn_ids
                )
            duplicates += len(receipt.duplicate_turn_ids)
            if bar is not None:
                bar.advance(len(turns))
    return {
        "conversations": len(conversations),
        "accepted": sum(stored.values()),
        "duplicates": duplicates,
    }


def cmd_ingest(args: argparse.Namespace) -> int:
    if "\x00" in args.file:
        raise InvalidInputError("the file path holds a NUL character; check it", field="file")
    path = Path(args.file)
    with path.open("rb"):  # a missing or unreadable file fails before the store is opened
        pass
    with open_memory(args) as memory:
        try:
            with Progress.for_terminal("reading turns", quiet=quiet(args)) as bar:
                counts = ingest_file(memory, path, bar=bar)
        except ConvmemError:
            # what was stored before the failure is searchable, not left pending; the
            # failure itself is the error to report
            if not args.no_wait:
                with contextlib.suppress(ConvmemError):
                    drain_index(memory, args, timeout=args.timeout)
            raise
        if not args.no_wait:
            counts["failed_jobs"] = drain_index(memory, args, timeout=args.timeout)
        print_json(counts)
    return 0


def show_hits(hits: Sequence[Any], as_json: bool) -> None:
    if as_json:
        print_json([hit.model_dump() for hit in hits])
        return
    if not hits:
        print("(no hits)")
    for rank, hit in enumerate(hits, start=1):
        meta = hit.metadata
        print(
            f"{rank}. score={hit.score:.3f} {meta['conversation_id']} turns "
            f"{meta['turn_range'][0]}-{meta['turn_range'][1]} {hit.chunk_id}"
        )
        for line in hit.text.splitlines():
            print(f"   {line}")


def cmd_search(args: argparse.Namespace) -> int:
    try:
        filters: Any = json.loads(args.filter) if args.filter else {}
    except json.JSONDecodeError as exc:
        raise InvalidInputError(
            f'--filter is not valid JSON ({exc}); write e.g. \'{{"speakers": "user"}}\'',
            field="--filter",
        ) from None
    if not isinstance(filters, dict):
        raise InvalidInputError("--filter must be a JSON object", field="--filter")
    if args.conversation:
        named = filters.get("conversation_id", args.conversation)
        if named != args.conversation:
            raise InvalidInputError(
                f"--conversation {args.conversation!r} and --filter's conversation_id "
                f"{json.dumps(named, ensure_ascii=False)} disagree; name the conversation once "
                "(drop one of them)",
                field="--conversation",
            )
        filters["conversation_id"] = args.conversation
    with open_memory(args, existing=True) as memory:
        hits = memory.search(
            args.query,
            top_k=args.top_k,
            filters=filters or None,
            granularity=args.granularity,
            min_score=args.min_score,
            decompose=not args.whole,
        )
        if not hits and not quiet(args):
            print(
                f"nothing in memory scores {args.min_score} or more for this question "
                "(--min-score 0 lists the closest anyway)",
                file=sys.stderr,
            )
        show_hits(hits, quiet(args))
    return 0


def _parse_range(value: str) -> tuple[int, int]:
    try:
        if "-" in value:
            start, end = value.split("-", 1)
            return int(start), int(end)
        return int(value), int(value)
    except ValueError:
        raise InvalidInputError(
            f"--turns {value!r} is not a range; write 3-7 or 5", field="--turns"
        ) from None


def cmd_delete(args: argparse.Namespace) -> int:
    chosen = [bool(args.turns), bool(args.chunk_id), args.all]
    if sum(chosen) != 1:
        raise InvalidInputError(
            "delete needs exactly one of --turns RANGE, --chunk-id ID (repeatable) or --all "
            f"(the whole conversation {args.conversation!r})",
            field="--all",
        )
    with open_memory(args, existing=True) as memory:
        result = memory.delete(
            args.conversation,
            turn_range=_parse_range(args.turns) if args.turns else None,
            chunk_ids=args.chunk_id or None,
        )
        # the delete is done; wait for its conversation's re-cut, not for other writers
        drain_index(memory, args, timeout=args.timeout, conversation_id=args.conversation)
        what = (
            f"turns {args.turns}"
            if args.turns
            else f"{len(args.chunk_id)} chunk id(s)"
            if args.chunk_id
            else "the whole conversation"
        )
        print_json(
            {
                "conversation_id": args.conversation,
                "scope": what,
                "deleted": result.deleted,
                "turns_deleted": result.turns_deleted,
                "errors": result.errors,
            }
        )
    if result.errors:
        # the JSON above says what was deleted; the exit code says not all of it was
        say(
            f"{len(result.errors)} --chunk-id value(s) deleted nothing: {result.errors[0]}"
            f"{' (and more)' if len(result.errors) > 1 else ''}; check the ids (each "
            "search hit shows its chunk_id)"
        )
        return EXIT_USAGE
    return 0


def cmd_reindex(args: argparse.Namespace) -> int:
    with open_memory(args, allow_model_change=True, existing=True) as memory:
        with Progress.for_terminal("re-embedding", quiet=quiet(args), spin=True):
            count = memory.reindex()
        print_json({"reindexed": count, "embedding_model": memory.stats()["embedding_model"]})
    return 0


def cmd_rechunk(args: argparse.Namespace) -> int:
    from convmem.ingest import ChunkingPolicy

    if args.overlap >= args.max_turns:
        raise InvalidInputError(
            f"--overlap {args.overlap} must be smaller than --max-turns {args.max_turns} "
            "(turns a chunk repeats from the one before it); lower --overlap or raise "
            "--max-turns",
            field="--overlap",
        )
    policy = ChunkingPolicy(
        max_chars=args.max_chars,
        max_turns=args.max_turns,
        overlap_turns=args.overlap,
        version=args.version,
    )
    # the handle keeps no policy of its own: the rechunk records this one for the tenant,
    # and the jobs of other tenants it drains are cut under theirs
    with open_memory(args, existing=True) as memory:
        queued = memory.rechunk(args.conversation, chunking=policy)
        drain_index(memory, args, timeout=args.timeout, conversation_id=args.conversation)
        print_json({"conversations": queued, "chunks": memory.stats()["chunks"]})
    return 0


def cmd_purge(args: argparse.Namespace) -> int:
    with open_memory(args, existing=True) as memory:
        with Progress.for_terminal("purging", quiet=quiet(args), spin=True):
            removed = memory.purge(all_tenants=args.all_tenants)
        print_json(removed)
    return 0


def cmd_stats(args: argparse.Namespace) -> int:
    with open_memory(args) as memory:
        print_json(memory.stats())
    return 0


def cmd_jobs(args: argparse.Namespace) -> int:
    with open_memory(args, existing=True) as memory:
        if args.retry is not None:
            print_json(memory.retry_job(args.retry).model_dump(mode="json"))
        else:
            jobs = memory.jobs(args.status, limit=args.limit)
            print_json([job.model_dump(mode="json") for job in jobs])
    return 0


def register(sub: Any, common: list[argparse.ArgumentParser]) -> None:
    ingest = sub.add_parser(
        "ingest", parents=common, help="ingest a .jsonl of turns or a LoCoMo-style .json"
    )
    ingest.add_argument(
        "file", help="checked whole (UTF-8, a BOM is fine) before any of it is stored"
    )
    ingest.add_argument("--no-wait", action="store_true", help="return once turns are durable")
    ingest.add_argument("--timeout", type=seconds, default=600.0)
    ingest.set_defaults(func=cmd_ingest)

    search = sub.add_parser("search", parents=common, help="hybrid search")
    search.add_argument("query")
    search.add_argument("--top-k", type=bounded_int(1, 1000), default=6)
    search.add_argument("--conversation", help="only this conversation")
    search.add_argument("--filter", help='filters as JSON, e.g. \'{"speakers": "user"}\'')
    search.add_argument(
        "--min-score",
        type=bounded_float(0.0, 1.0),
        default=DEFAULT_MIN_SCORE,
        help=f"drop hits whose calibrated score is below this (default {DEFAULT_MIN_SCORE}; 0 keeps all)",
    )
    search.add_argument(
        "--granularity",
        choices=["turn", "chunk"],
        default="turn",
        help="turn: evidence turns with their chunk as context (default); chunk: whole chunks",
    )
    search.add_argument(
        "--whole",
        action="store_true",
        help="search the text as one question (by default a question that asks several "
        "things, 'A？还有B', is searched part by part)",
    )
    search.set_defaults(func=cmd_search)

    delete = sub.add_parser(
        "delete", parents=common, help="logically delete turns, chunks or a conversation"
    )
    delete.add_argument("conversation")
    scope = delete.add_mutually_exclusive_group()
    scope.add_argument("--turns", help="turn range, e.g. 3-7")
    scope.add_argument("--chunk-id", action="append", help="a chunk id (repeatable)")
    scope.add_argument("--all", action="store_true", help="the whole conversation")
    delete.add_argument("--timeout", type=seconds, default=600.0)
    delete.set_defaults(func=cmd_delete)

    reindex = sub.add_parser("reindex", parents=common, help="re-embed every chunk with --embedder")
    reindex.set_defaults(func=cmd_reindex)

    rechunk = sub.add_parser(
        "rechunk", parents=common, help="re-cut dialogue under a new chunking policy"
    )
    rechunk.add_argument("--conversation", help="only this conversation")
    rechunk.add_argument(
        "--version", type=bounded_int(0), required=True, help="the new chunk_version"
    )
    rechunk.add_argument("--max-chars", type=bounded_int(1), default=600)
    rechunk.add_argument("--max-turns", type=bounded_int(1), default=4)
    rechunk.add_argument("--overlap", type=bounded_int(0), default=1)
    rechunk.add_argument("--timeout", type=seconds, default=3600.0)
    rechunk.set_defaults(func=cmd_rechunk)

    purge = sub.add_parser("purge", parents=common, help="physically remove deleted text")
    purge.add_argument(
        "--all-tenants",
        action="store_true",
        help="operators: purge every tenant's deleted text, not only --tenant's",
    )
    purge.set_defaults(func=cmd_purge)

    stats = sub.add_parser("stats", parents=common, help="counts and metrics as JSON")
    stats.set_defaults(func=cmd_stats)

    jobs = sub.add_parser("jobs", parents=common, help="list index jobs, or retry one")
    jobs.add_argument("--status", choices=["pending", "running", "done", "failed"])
    jobs.add_argument("--limit", type=bounded_int(1, 100000), default=50)
    jobs.add_argument("--retry", type=bounded_int(0, 2**63 - 1), metavar="JOB_ID")
    jobs.set_defaults(func=cmd_jobs)
