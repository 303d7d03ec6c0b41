"""Render the CLI reference (docs/cli.md) from the parser's own help texts."""

from __future__ import annotations

import argparse

from convmem.cli.main import build_parser

__all__ = ["render_reference"]


def render_reference() -> str:
    """Markdown with ``convmem --help`` and each command's ``--help``, in parser order."""
    parser = build_parser()
    parser.prog = "convmem"
    parts = [
        "# convmem command line",
        "",
        "Generated from `--help` by `python -m convmem.cli.reference > docs/cli.md`;",
        "a test fails when this file and the parser disagree.",
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
