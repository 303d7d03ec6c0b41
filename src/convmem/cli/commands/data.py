"""Write and read commands: ingest, search, delete, reindex, rechunk, purge, stats, jobs."""

from __future__ import annotations

import argparse
import json
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
from convmem.cli.progress import Progress
from convmem.errors import InvalidInputError
from convmem.retrieve import DEFAULT_MIN_SCORE

if TYPE_CHECKING:
    from convmem import Memory

__all__ = ["ingest_file", "register", "show_hits"]


def ingest_file(
    memory: Memory, path: Path, *, bar: Progress | None = None, batch: int = 500
) -> dict[str, int]:
    from convmem.ingest.formats import iter_conversations

    accepted = duplicates = conversations = 0
    for conversation_id, turns in iter_conversations(path):
        conversations += 1
        for start in range(0, len(turns), batch):
            receipt = memory.add_turns(conversation_id, turns[start : start + batch])
            accepted += len(receipt.accepted_turn_ids)
            duplicates += len(receipt.duplicate_turn_ids)
            if bar is not None:
                bar.advance(len(turns[start : start + batch]))
    return {"conversations": conversations, "accepted": accepted, "duplicates": duplicates}


def cmd_ingest(args: argparse.Namespace) -> int:
    if "\x00" in args.file:
        raise InvalidInputError("the file path holds a NUL character; check it", field="file")
    path = Path(args.file)
    with path.open("rb"):  # a missing or unreadable file fails before the store is opened
        pass
    with open_memory(args) as memory:
        with Progress.for_terminal("reading turns", quiet=quiet(args)) as bar:
            counts = ingest_file(memory, path, bar=bar)
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
        filters["conversation_id"] = args.conversation
    with open_memory(args) as memory:
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
    with open_memory(args) as memory:
        result = memory.delete(
            args.conversation,
            turn_range=_parse_range(args.turns) if args.turns else None,
            chunk_ids=args.chunk_id or None,
        )
        drain_index(memory, args, timeout=args.timeout)
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
    return 0


def cmd_reindex(args: argparse.Namespace) -> int:
    with open_memory(args, allow_model_change=True) as memory:
        with Progress.for_terminal("re-embedding", quiet=quiet(args), spin=True):
            count = memory.reindex()
        print_json({"reindexed": count, "embedding_model": memory.stats()["embedding_model"]})
    return 0


def cmd_rechunk(args: argparse.Namespace) -> int:
    from convmem.ingest import ChunkingPolicy

    policy = ChunkingPolicy(
        max_chars=args.max_chars,
        max_turns=args.max_turns,
        overlap_turns=args.overlap,
        version=args.version,
    )
    with open_memory(args, chunking=policy) as memory:
        queued = memory.rechunk(args.conversation)
        drain_index(memory, args, timeout=args.timeout)
        print_json({"conversations": queued, "chunks": memory.stats()["chunks"]})
    return 0


def cmd_purge(args: argparse.Namespace) -> int:
    with open_memory(args) as memory:
        with Progress.for_terminal("purging", quiet=quiet(args), spin=True):
            removed = memory.purge(all_tenants=args.all_tenants)
        print_json(removed)
    return 0


def cmd_stats(args: argparse.Namespace) -> int:
    with open_memory(args) as memory:
        print_json(memory.stats())
    return 0


def cmd_jobs(args: argparse.Namespace) -> int:
    with open_memory(args) as memory:
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
    ingest.add_argument("file")
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
