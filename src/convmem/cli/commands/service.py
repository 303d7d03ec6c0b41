"""Service commands: worker, serve, keys."""

from __future__ import annotations

import argparse
import signal
import sys
import time
from typing import Any

from convmem.cli.common import (
    bounded_float,
    bounded_int,
    check_port_free,
    open_memory,
    print_json,
    settings_of,
)
from convmem.embed.threads import one_blas_thread_for_process
from convmem.engine import MAX_WORKERS
from convmem.errors import InvalidInputError
from convmem.worker.heap import freeze_startup_heap, trim_heap

__all__ = ["register"]


def cmd_worker(args: argparse.Namespace) -> int:
    if args.once:
        with open_memory(args) as memory:
            done = 0
            while ran := memory.run_pending():
                done += ran
            print_json({"jobs_done": done})
        return 0
    # The handler only records the signal: it runs in the main thread between two bytecodes,
    # and setting a threading.Event there could wait forever on the Event's own lock when
    # the signal lands while the main thread holds it (inside Event.wait), a Ctrl-C that
    # never stops the worker. The loop sleeps in short slices, which a signal interrupts.
    stopping: list[int] = []
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, lambda signum, _frame: stopping.append(signum))
    with open_memory(args, workers=args.threads):
        print(f"convmem worker running with {args.threads} threads; Ctrl-C stops", file=sys.stderr)
        since_trim = time.monotonic()
        while not stopping:
            time.sleep(0.2)
            if time.monotonic() - since_trim >= 30:
                trim_heap()  # glibc keeps what index passes freed; give it back
                since_trim = time.monotonic()
    return 0


def cmd_serve(args: argparse.Namespace) -> int:
    import uvicorn

    from convmem.server import ServerSettings, create_app

    settings = settings_of(args)
    check_port_free(args.host, args.port, option="--port")
    server_settings = ServerSettings(
        store=settings.store,
        embedder=settings.embedder,
        host=args.host,
        port=args.port,
        auth=not args.no_auth,
        default_tenant=settings.tenant,
        admin_key=settings.admin_key,
        workers=args.threads,
        marker=settings.marker,
        policy=settings.policy,
        max_body_bytes=args.max_body_bytes,
        heap_trim_seconds=args.heap_trim_seconds,
    )
    app = create_app(server_settings)
    # no request waits for a dictionary or a model, and what they hold is frozen with the
    # rest of the start-up heap
    app.state.convmem.memory.warm_up()
    freeze_startup_heap()
    # a search's small products on one BLAS thread, whichever request thread runs it
    one_blas_thread_for_process()
    print(
        f"convmem serving on http://{args.host}:{args.port} (auth {'off' if args.no_auth else 'on'}, "
        f"{args.threads} index threads); OpenAPI at /openapi.json",
        file=sys.stderr,
        flush=True,
    )
    uvicorn.run(app, host=args.host, port=args.port, log_level=settings.log_level)
    return 0


def cmd_keys(args: argparse.Namespace) -> int:
    from convmem.store import open_store

    settings = settings_of(args)
    if args.action == "create" and "tenant" not in settings.model_fields_set:
        raise InvalidInputError(
            "keys create needs the tenant the key acts for: convmem keys create --tenant NAME "
            "(or CONVMEM_TENANT)",
            field="--tenant",
        )
    if args.action == "revoke" and not args.key_id:
        raise InvalidInputError(
            "keys revoke needs a KEY_ID: convmem keys revoke key_... (see convmem keys list)",
            field="key_id",
        )
    store = open_store(settings.store)
    try:
        if args.action == "create":
            key_id, secret = store.create_api_key(settings.tenant, args.name or "")
            print_json({"key_id": key_id, "key": secret, "tenant": settings.tenant})
        elif args.action == "list":
            print_json(store.list_api_keys())
        else:
            store.revoke_api_key(args.key_id)
            print_json({"key_id": args.key_id, "status": "revoked"})
    finally:
        store.close()
    return 0


def register(sub: Any, common: list[argparse.ArgumentParser]) -> None:
    worker = sub.add_parser("worker", parents=common, help="run index workers against the store")
    worker.add_argument("--threads", type=bounded_int(0, MAX_WORKERS), default=1)
    worker.add_argument("--once", action="store_true", help="drain ready jobs, then exit")
    worker.set_defaults(func=cmd_worker)

    serve = sub.add_parser(
        "serve", parents=common, help="run the HTTP service (FastAPI; OpenAPI at /openapi.json)"
    )
    serve.add_argument(
        "--host",
        default="127.0.0.1",
        help="bind address; the admin key comes from CONVMEM_ADMIN_KEY or the config file, "
        "and --log-level sets the server's log level too",
    )
    serve.add_argument("--port", type=bounded_int(0, 65535), default=8077)
    serve.add_argument(
        "--no-auth",
        action="store_true",
        help="no API keys (loopback only): every request acts on --tenant ('default')",
    )
    serve.add_argument(
        "--threads",
        type=bounded_int(0, MAX_WORKERS),
        default=1,
        help="index worker threads (0: none)",
    )
    serve.add_argument(
        "--max-body-bytes", type=bounded_int(1024, 2**31 - 1), default=4 * 1024 * 1024
    )
    serve.add_argument(
        "--heap-trim-seconds",
        type=bounded_float(0, 86400),
        default=30.0,
        help="give freed heap memory back to the OS this often (glibc malloc_trim; 0: never)",
    )
    serve.set_defaults(func=cmd_serve)

    keys = sub.add_parser(
        "keys",
        parents=common,
        help="create, list or revoke API keys of the HTTP service",
        description="API keys of the HTTP service. 'keys create' needs --tenant NAME (the "
        "tenant the key acts for) and prints the secret once.",
    )
    keys.add_argument("action", choices=["create", "list", "revoke"])
    keys.add_argument("key_id", nargs="?", help="the key to revoke")
    keys.add_argument("--name", help="a label for the new key")
    keys.set_defaults(func=cmd_keys)
