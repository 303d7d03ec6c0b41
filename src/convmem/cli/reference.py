"""Render the CLI reference (docs/cli.md) from the parser's own help texts."""

from __future__ import annotations

import argparse
import os

from convmem.cli.main import build_parser

__all__ = ["render_reference"]


def render_reference() -> str:
    """Markdown with ``convmem --help`` and each command's ``--help``, in parser order.

    Rendered 100 columns wide whatever the terminal, so the file is the same everywhere.
    """
    saved = os.environ.get("COLUMNS")
    os.environ["COLUMNS"] = "100"
    try:
        return _render()
    finally:
        if saved is None:
            del os.environ["COLUMNS"]
        else:
            os.environ["COLUMNS"] = saved


def _render() -> str:
    parser = build_parser()
    parser.prog = "convmem"
    parts = [
        "# convmem command line",
        "",
        "Generated from `--help` by `python -m convmem.cli.reference > docs/cli.md`;",
        "a test fails when this file and the parser disagree.",
        "",
        "Global options (`--store`, `--embedder`, `--tenant`, `--marker`, `--policy`,",
        "`--config`, `--json`, `--log-level`, `-v`) go before or after the command:",
        "`convmem reindex --embedder all-MiniLM-L6-v2` and",
        "`convmem --embedder all-MiniLM-L6-v2 reindex` are the same. Each also comes from a",
        "`CONVMEM_*` variable or the `--config` TOML file; see [configuration](configuration.md).",
        "",
        "API keys of the HTTP service are made per tenant, so `keys create` needs the tenant:",
        "`convmem keys create --tenant acme` (or `CONVMEM_TENANT=acme`); it prints the secret once.",
        "",
        "Exit codes: 0 success; 2 usage (a bad flag, input or setting: the one `error:` line",
        "says which and how to fix it); 1 failure (a missing file, a store or model error);",
        "130 interrupted; 141 when the reader of stdout went away (`| head`), silently.",
        "A port in use (`serve --port`, `mcp --http`) is a usage error; `delete --chunk-id`",
        "exits 2 when an id deleted nothing, after printing the JSON result. `ingest` checks",
        "the whole file before it stores any of it, and its errors name `FILE:LINE` and the",
        "conversation. Commands that read or maintain a store (`search`, `delete`, `marks`,",
        "`notes`, `note`, `sweep`, `purge`, `reindex`, `rechunk`, `jobs`) never create one: a",
        "SQLite path with no store is a usage error naming it (`ingest`, `demo`, `policy`",
        "and `stats` open or create it).",
        "Progress bars go to stderr only when it is a terminal and `--json` is off.",
        "",
        "```text",
        parser.format_help().rstrip(),
        "```",
    ]
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                parts += [
                    "",
                    f"## convmem {name}",
                    "",
                    "```text",
                    sub.format_help().rstrip(),
                    "```",
                ]
    return "\n".join(parts) + "\n"


if __name__ == "__main__":  # pragma: no cover
    print(render_reference(), end="")
