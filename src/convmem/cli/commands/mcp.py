"""``convmem mcp``: the memory as an MCP server, over stdio or streamable HTTP."""

from __future__ import annotations

import argparse
from typing import Any

from convmem.cli.common import bounded_int, check_port_free, open_memory
from convmem.embed.threads import one_blas_thread_for_process
from convmem.worker.heap import freeze_startup_heap

__all__ = ["register"]


def cmd_mcp(args: argparse.Namespace) -> int:
    from convmem.mcp import build_server

    if args.http is not None:
        check_port_free("127.0.0.1", args.http, option="--http")
    with open_memory(args, workers=1) as memory:
        server = build_server(memory)
        memory.warm_up()
        freeze_startup_heap()
        one_blas_thread_for_process()
        if args.http is None:
            server.run("stdio")
        else:
            server.run("streamable-http", host="127.0.0.1", port=args.http)
    return 0


def register(sub: Any, common: list[argparse.ArgumentParser]) -> None:
    mcp = sub.add_parser(
        "mcp",
        parents=common,
        help="serve the memory to MCP clients (stdio, or streamable HTTP with --http PORT)",
        description="Run an MCP server with the tools remember, recall, forget, list_notes, "
        "confirm_note and scene_context over this store and tenant.",
    )
    mcp.add_argument(
        "--http",
        type=bounded_int(0, 65535),
        metavar="PORT",
        help="serve streamable HTTP on 127.0.0.1:PORT",
    )
    mcp.set_defaults(func=cmd_mcp)
