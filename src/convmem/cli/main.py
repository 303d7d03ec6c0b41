"""``convmem``: ingest, search, delete, marks, notes, policy, reindex, purge, stats, jobs,
worker, demo.

Settings come from options, else the environment: ``CONVMEM_STORE`` (store URL),
``CONVMEM_EMBEDDER`` (embedder spec), ``CONVMEM_TENANT``, ``CONVMEM_MARKER`` (``rules``,
``keep-all`` or ``llm``; ``llm`` reads ``CONVMEM_LLM_URL``, ``CONVMEM_LLM_MODEL`` and
``CONVMEM_LLM_KEY``), ``CONVMEM_POLICY`` (a product policy JSON file).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import signal
import sys
import threading
from collections.abc import Sequence
from importlib import resources
from pathlib import Path
from typing import Any

from convmem.errors import ConvmemError, InvalidInputError

__all__ = ["build_parser", "main"]


def _memory(
    args: argparse.Namespace,
    *,
    workers: int = 0,
    allow_model_change: bool = False,
    chunking: Any = None,
) -> Any:
    from convmem.embed import resolve_embedder
    from convmem.memory import Memory

    embedder = resolve_embedder(args.embedder) if args.embedder else None
    return Memory.open(
        args.store,
        embedder=embedder,
        tenant=args.tenant,
        workers=workers,
        allow_model_change=allow_model_change,
        chunking=chunking,
        marker=_marker(args.marker),
        policy=args.policy,
    )


def _marker(name: str) -> Any:
    from convmem.governance import resolve_marker

    return resolve_marker(
        name,
        llm_url=os.environ.get("CONVMEM_LLM_URL"),
        llm_model=os.environ.get("CONVMEM_LLM_MODEL"),
        llm_key=os.environ.get("CONVMEM_LLM_KEY"),
    )


def _print_json(value: Any) -> None:
    print(json.dumps(value, ensure_ascii=False, indent=2, default=str))


def _ingest_file(memory: Any, path: Path, *, batch: int = 500) -> dict[str, int]:
    from convmem.ingest.formats import iter_conversations

    accepted = duplicates = conversations = 0
    for conversation_id, turns in iter_conversations(path):
        conversations += 1
        for start in range(0, len(turns), batch):
            receipt = memory.add_turns(conversation_id, turns[start : start + batch])
            accepted += len(receipt.accepted_turn_ids)
            duplicates += len(receipt.duplicate_turn_ids)
    return {"conversations": conversations, "accepted": accepted, "duplicates": duplicates}


def cmd_ingest(args: argparse.Namespace) -> int:
    with _memory(args) as memory:
        counts = _ingest_file(memory, Path(args.file))
        if not args.no_wait:
            result = memory.flush(timeout=args.timeout)
            counts["failed_jobs"] = result.failed
        _print_json(counts)
    return 0


def _show_hits(hits: Sequence[Any], as_json: bool) -> None:
    if as_json:
        _print_json([hit.model_dump() for hit in hits])
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
    filters: dict[str, Any] = json.loads(args.filter) if args.filter else {}
    if not isinstance(filters, dict):
        raise InvalidInputError("--filter must be a JSON object", field="--filter")
    if args.conversation:
        filters["conversation_id"] = args.conversation
    with _memory(args) as memory:
        hits = memory.search(args.query, top_k=args.top_k, filters=filters or None)
        _show_hits(hits, args.json)
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
    with _memory(args) as memory:
        result = memory.delete(
            args.conversation,
            turn_range=_parse_range(args.turns) if args.turns else None,
            chunk_ids=args.chunk_id or None,
        )
        memory.flush(timeout=args.timeout)
        _print_json(
            {
                "deleted": result.deleted,
                "turns_deleted": result.turns_deleted,
                "errors": result.errors,
            }
        )
    return 0


def cmd_reindex(args: argparse.Namespace) -> int:
    with _memory(args, allow_model_change=True) as memory:
        count = memory.reindex()
        _print_json({"reindexed": count, "embedding_model": memory.embedding.model_id})
    return 0


def cmd_rechunk(args: argparse.Namespace) -> int:
    from convmem.ingest import ChunkingPolicy

    with _memory(
        args,
        chunking=ChunkingPolicy(
            max_chars=args.max_chars,
            max_turns=args.max_turns,
            overlap_turns=args.overlap,
            version=args.version,
        ),
    ) as memory:
        queued = memory.rechunk(args.conversation)
        memory.flush(timeout=args.timeout)
        _print_json({"conversations": queued, "chunks": memory.stats()["chunks"]})
    return 0


def cmd_purge(args: argparse.Namespace) -> int:
    with _memory(args) as memory:
        _print_json(memory.purge())
    return 0


def cmd_stats(args: argparse.Namespace) -> int:
    with _memory(args) as memory:
        _print_json(memory.stats())
    return 0


def cmd_jobs(args: argparse.Namespace) -> int:
    with _memory(args) as memory:
        if args.retry is not None:
            _print_json(memory.retry_job(args.retry).model_dump(mode="json"))
        else:
            _print_json(
                [job.model_dump(mode="json") for job in memory.jobs(args.status, limit=args.limit)]
            )
    return 0


def cmd_worker(args: argparse.Namespace) -> int:
    if args.once:
        with _memory(args) as memory:
            done = 0
            while True:
                ran = memory.run_pending()
                if not ran:
                    break
                done += ran
            _print_json({"jobs_done": done})
        return 0
    stop = threading.Event()
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, lambda *_: stop.set())
    with _memory(args, workers=args.threads):
        print(f"convmem worker running with {args.threads} threads; Ctrl-C stops", file=sys.stderr)
        stop.wait()
    return 0


def cmd_marks(args: argparse.Namespace) -> int:
    with _memory(args) as memory:
        marks = memory.marks(args.conversation)
        if args.json:
            _print_json([mark.model_dump(mode="json") for mark in marks])
            return 0
        if not marks:
            print("(no marks yet: the conversation is unknown or not indexed)")
        for item in marks:
            mark = item.mark
            if args.kept and not mark.keep:
                continue
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
            print(f"{item.turn_id!s:>8} {item.role:<9} {label} {extra}")
            print(f"{'':>8} {mark.reason}")
    return 0


def cmd_notes(args: argparse.Namespace) -> int:
    with _memory(args) as memory:
        notes = memory.notes(args.conversation, args.status, limit=args.limit)
        if args.json:
            _print_json([note.model_dump(mode="json") for note in notes])
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
    with _memory(args) as memory:
        note = memory.update_note(
            args.note_id, confirm=args.action == "confirm", evidence_level=args.evidence
        )
        memory.flush(timeout=args.timeout)
        _print_json(note.model_dump(mode="json"))
    return 0


def cmd_policy(args: argparse.Namespace) -> int:
    with _memory(args) as memory:
        if args.action == "set":
            if not args.file:
                raise InvalidInputError("policy set needs a JSON file", field="file")
            overrides = json.loads(Path(args.file).read_text(encoding="utf-8"))
            memory.set_policy(overrides)
        elif args.action == "clear":
            memory.set_policy(None)
        _print_json(memory.policy().as_dict())
    return 0


def cmd_sweep(args: argparse.Namespace) -> int:
    with _memory(args) as memory:
        result = memory.sweep_expired()
        memory.flush(timeout=args.timeout)
        _print_json(result)
    return 0


def cmd_serve(args: argparse.Namespace) -> int:
    import uvicorn

    from convmem.server import ServerSettings, create_app

    settings = ServerSettings(
        store=args.store,
        embedder=args.embedder,
        host=args.host,
        port=args.port,
        auth=not args.no_auth,
        admin_key=os.environ.get("CONVMEM_ADMIN_KEY"),
        workers=args.threads,
        marker=args.marker,
        policy=args.policy,
        max_body_bytes=args.max_body_bytes,
    )
    app = create_app(settings)
    print(
        f"convmem serving on http://{args.host}:{args.port} (auth {'off' if args.no_auth else 'on'}, "
        f"{args.threads} index threads); OpenAPI at /openapi.json",
        file=sys.stderr,
        flush=True,
    )
    uvicorn.run(app, host=args.host, port=args.port, log_level="warning")
    return 0


def cmd_keys(args: argparse.Namespace) -> int:
    from convmem.store import open_store

    store = open_store(args.store)
    try:
        if args.action == "create":
            if not args.key_tenant:
                raise InvalidInputError("keys create needs --tenant", field="--tenant")
            key_id, secret = store.create_api_key(args.key_tenant, args.name or "")
            _print_json({"key_id": key_id, "key": secret, "tenant": args.key_tenant})
        elif args.action == "list":
            _print_json(store.list_api_keys())
        else:
            if not args.key_id:
                raise InvalidInputError("keys revoke needs a KEY_ID", field="key_id")
            store.revoke_api_key(args.key_id)
            _print_json({"key_id": args.key_id, "status": "revoked"})
    finally:
        store.close()
    return 0


def cmd_story(args: argparse.Namespace) -> int:
    from convmem.story import load_project

    with _memory(args) as memory:
        _print_json(load_project(memory, args.project, Path(args.folder)))
    return 0


def cmd_scene(args: argparse.Namespace) -> int:
    from convmem.story import CharactersConfig, ScenePlan, build_scene_memory_context, load_project
    from convmem.story.loader import read_characters

    with _memory(args) as memory:
        if args.demo:
            folder = resources.files("convmem") / "data" / "story_demo"
            with resources.as_file(folder) as demo:
                load_project(memory, args.project, demo)
                plan = ScenePlan.model_validate_json((demo / "scene_plan.json").read_text("utf-8"))
                characters = read_characters(demo)
        else:
            if not args.plan:
                raise InvalidInputError("scene needs --plan FILE (or --demo)", field="--plan")
            plan = ScenePlan.model_validate_json(Path(args.plan).read_text(encoding="utf-8"))
            characters = (
                CharactersConfig.model_validate_json(
                    Path(args.characters).read_text(encoding="utf-8")
                )
                if args.characters
                else CharactersConfig()
            )
        context = build_scene_memory_context(
            plan,
            characters,
            args.project,
            args.chapter if args.chapter is not None else plan.chapter_index,
            args.scene if args.scene is not None else plan.scene_index,
            memory=memory,
            output_path=args.output,
            top_k=args.top_k,
        )
        if args.output is None:
            _print_json(context.model_dump(mode="json"))
        else:
            print(
                f"wrote {args.output}: {len(context.entity_states)} entity states, "
                f"{len(context.relevant_memories)} memories, "
                f"{len((context.timeline_context or {}).get('events', []))} timeline events"
                + (f"; degraded: {context.degraded}" if context.degraded else ""),
                file=sys.stderr,
            )
    return 0


DEMO_QUERIES = [
    ("我的护照什么时候到期？", None),
    ("团队下季度主推什么产品", None),
    ("我在饮食和座位上有什么偏好", None),
    ("报告要什么时候交给谁", {"conversation_id": "demo_work"}),
    ("华东区销售额是多少", None),
]


def cmd_demo(args: argparse.Namespace) -> int:
    from convmem.store import default_store_path

    if args.store is None:
        path = default_store_path().with_name("demo.db")
        for suffix in ("", "-wal", "-shm"):
            Path(f"{path}{suffix}").unlink(missing_ok=True)
        for stale in path.parent.glob("demo.db.*.usearch*"):
            stale.unlink()
        args.store = str(path)
    sample = resources.files("convmem") / "data" / "sample_zh.jsonl"
    with resources.as_file(sample) as sample_path, _memory(args) as memory:
        counts = _ingest_file(memory, sample_path)
        memory.flush(timeout=args.timeout)
        print(f"store: {memory.store.url}")
        stats = memory.stats()
        print(
            f"ingested {counts['accepted']} turns of {counts['conversations']} conversations "
            f"with {memory.embedding.model_id}; {stats['chunks']} chunks"
        )
        print(
            f"Stage 2 marking kept {stats['turns_kept']} of {stats['turns_marked']} turns "
            f"(assistant small talk and speculation dropped; 'convmem marks demo_trip' shows "
            f"why) and wrote {sum(stats['notes'].values())} notes\n"
        )
        for query, filters in DEMO_QUERIES:
            where = f"  filters={json.dumps(filters, ensure_ascii=False)}" if filters else ""
            print(f"? {query}{where}")
            _show_hits(memory.search(query, top_k=2, filters=filters), False)
            print()
        result = memory.delete("demo_trip", turn_range=(3, 4))
        memory.flush(timeout=args.timeout)
        print(f"deleted turns 3-4 of demo_trip ({result.deleted} chunks); searching again:")
        print(f"? {DEMO_QUERIES[0][0]}")
        _show_hits(memory.search(DEMO_QUERIES[0][0], top_k=2), False)
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="convmem", description="Long-term conversation memory (embedded SQLite by default)."
    )
    parser.add_argument(
        "--store",
        default=os.environ.get("CONVMEM_STORE"),
        help="store URL or file (env CONVMEM_STORE; default: memory.db in the user data dir)",
    )
    parser.add_argument(
        "--embedder",
        default=os.environ.get("CONVMEM_EMBEDDER"),
        help="embedder spec: hashing, hashing:512, all-MiniLM-L6-v2, org/name, or a model "
        "folder (env CONVMEM_EMBEDDER; default: the store's model)",
    )
    parser.add_argument(
        "--tenant",
        default=os.environ.get("CONVMEM_TENANT", "default"),
        help="tenant (env CONVMEM_TENANT)",
    )
    parser.add_argument(
        "--marker",
        default=os.environ.get("CONVMEM_MARKER", "rules"),
        help="Stage 2 marker: rules (default), keep-all (marking off) or llm (env CONVMEM_MARKER)",
    )
    parser.add_argument(
        "--policy",
        default=os.environ.get("CONVMEM_POLICY"),
        help="product retention policy JSON file (env CONVMEM_POLICY)",
    )
    parser.add_argument("-v", "--verbose", action="store_true", help="log INFO to stderr")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    ingest = sub.add_parser("ingest", help="ingest a .jsonl of turns or a LoCoMo-style .json")
    ingest.add_argument("file")
    ingest.add_argument("--no-wait", action="store_true", help="return once turns are durable")
    ingest.add_argument("--timeout", type=float, default=600.0)
    ingest.set_defaults(func=cmd_ingest)

    search = sub.add_parser("search", help="hybrid search")
    search.add_argument("query")
    search.add_argument("--top-k", type=int, default=6)
    search.add_argument("--conversation", help="only this conversation")
    search.add_argument("--filter", help='filters as JSON, e.g. \'{"speakers": "user"}\'')
    search.add_argument("--json", action="store_true", help="print hits as JSON")
    search.set_defaults(func=cmd_search)

    delete = sub.add_parser("delete", help="logically delete turns or chunks")
    delete.add_argument("conversation")
    delete.add_argument("--turns", help="turn range, e.g. 3-7")
    delete.add_argument("--chunk-id", action="append", help="a chunk id (repeatable)")
    delete.add_argument("--timeout", type=float, default=600.0)
    delete.set_defaults(func=cmd_delete)

    marks = sub.add_parser("marks", help="show each turn's keep/drop mark and reason")
    marks.add_argument("conversation")
    marks.add_argument("--kept", action="store_true", help="only kept turns")
    marks.add_argument("--json", action="store_true")
    marks.set_defaults(func=cmd_marks)

    notes = sub.add_parser("notes", help="list notes (pending and confirmed by default)")
    notes.add_argument("--conversation")
    notes.add_argument("--status", choices=["pending", "confirmed", "rejected"])
    notes.add_argument("--limit", type=int, default=200)
    notes.add_argument("--json", action="store_true")
    notes.set_defaults(func=cmd_notes)

    note = sub.add_parser("note", help="confirm or reject a note (the confirmation loop)")
    note.add_argument("action", choices=["confirm", "reject"])
    note.add_argument("note_id")
    note.add_argument(
        "--evidence", help="evidence level to record on confirm, e.g. S3_user_confirmed"
    )
    note.add_argument("--timeout", type=float, default=600.0)
    note.set_defaults(func=cmd_note)

    policy = sub.add_parser("policy", help="show, set or clear this tenant's retention policy")
    policy.add_argument("action", choices=["show", "set", "clear"])
    policy.add_argument("file", nargs="?", help="JSON overrides (for set)")
    policy.set_defaults(func=cmd_policy)

    sweep = sub.add_parser("sweep", help="mark expired memory now and re-cut its chunks")
    sweep.add_argument("--timeout", type=float, default=600.0)
    sweep.set_defaults(func=cmd_sweep)

    reindex = sub.add_parser("reindex", help="re-embed every chunk with --embedder")
    reindex.set_defaults(func=cmd_reindex)

    rechunk = sub.add_parser("rechunk", help="re-cut dialogue under a new chunking policy")
    rechunk.add_argument("--conversation", help="only this conversation")
    rechunk.add_argument("--version", type=int, required=True, help="the new chunk_version")
    rechunk.add_argument("--max-chars", type=int, default=600)
    rechunk.add_argument("--max-turns", type=int, default=4)
    rechunk.add_argument("--overlap", type=int, default=1)
    rechunk.add_argument("--timeout", type=float, default=3600.0)
    rechunk.set_defaults(func=cmd_rechunk)

    purge = sub.add_parser("purge", help="physically remove deleted text")
    purge.set_defaults(func=cmd_purge)

    stats = sub.add_parser("stats", help="counts and metrics as JSON")
    stats.set_defaults(func=cmd_stats)

    jobs = sub.add_parser("jobs", help="list index jobs, or retry one")
    jobs.add_argument("--status", choices=["pending", "running", "done", "failed"])
    jobs.add_argument("--limit", type=int, default=50)
    jobs.add_argument("--retry", type=int, metavar="JOB_ID")
    jobs.set_defaults(func=cmd_jobs)

    worker = sub.add_parser("worker", help="run index workers against the store")
    worker.add_argument("--threads", type=int, default=1)
    worker.add_argument("--once", action="store_true", help="drain ready jobs, then exit")
    worker.set_defaults(func=cmd_worker)

    serve = sub.add_parser("serve", help="run the HTTP service (FastAPI; OpenAPI at /openapi.json)")
    serve.add_argument("--host", default="127.0.0.1")
    serve.add_argument("--port", type=int, default=8077)
    serve.add_argument(
        "--no-auth", action="store_true", help="no API keys (loopback only; tenant 'default')"
    )
    serve.add_argument("--threads", type=int, default=1, help="index worker threads (0: none)")
    serve.add_argument("--max-body-bytes", type=int, default=4 * 1024 * 1024)
    serve.set_defaults(func=cmd_serve)

    keys = sub.add_parser("keys", help="create, list or revoke API keys of the HTTP service")
    keys.add_argument("action", choices=["create", "list", "revoke"])
    keys.add_argument("key_id", nargs="?", help="the key to revoke")
    keys.add_argument("--tenant", dest="key_tenant", help="the tenant a new key acts for")
    keys.add_argument("--name", help="a label for the new key")
    keys.set_defaults(func=cmd_keys)

    story = sub.add_parser(
        "story", help="load a story project folder (chapters, characters, states)"
    )
    story.add_argument("project")
    story.add_argument("folder")
    story.set_defaults(func=cmd_story)

    scene = sub.add_parser("scene", help="build the memory context of one scene as JSON")
    scene.add_argument("project")
    scene.add_argument("--plan", help="ScenePlan JSON file")
    scene.add_argument("--characters", help="CharactersConfig JSON file")
    scene.add_argument("--chapter", type=int, help="default: the plan's chapter_index")
    scene.add_argument("--scene", type=int, help="default: the plan's scene_index")
    scene.add_argument("--top-k", type=int, default=10)
    scene.add_argument("-o", "--output", help="write the SceneMemoryContext JSON here")
    scene.add_argument(
        "--demo", action="store_true", help="load the bundled Chinese story and use its plan"
    )
    scene.set_defaults(func=cmd_scene)

    demo = sub.add_parser("demo", help="ingest the bundled Chinese sample and search it")
    demo.add_argument("--timeout", type=float, default=120.0)
    demo.set_defaults(func=cmd_demo)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=logging.INFO if args.verbose else logging.WARNING,
        format="%(levelname)s %(name)s: %(message)s",
    )
    try:
        return int(args.func(args))
    except ConvmemError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except json.JSONDecodeError as exc:
        print(f"error: invalid JSON: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
