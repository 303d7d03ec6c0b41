"""One place that turns every failure of a command into one line on stderr and an exit
code: 2 for usage (bad flags, bad input, a setting to fix), 1 for failures (a missing file,
a store or model that failed), 130 for Ctrl-C, 141 when the reader of stdout went away
(``convmem search ... | head -1``, silent, like other Unix tools)."""

from __future__ import annotations

import argparse
import os
import sys
import traceback
from collections.abc import Callable

from pydantic import ValidationError

from convmem.errors import ConvmemError, EmbeddingMismatchError, InvalidInputError

__all__ = ["EXIT_FAILURE", "EXIT_USAGE", "run_command", "say"]

EXIT_USAGE = 2
EXIT_FAILURE = 1


def say(message: str) -> None:
    """Print one ``error:`` line (newlines in the message are folded)."""
    text = " ".join(message.split())
    print(f"error: {text}", file=sys.stderr, flush=True)


def _os_error(exc: OSError) -> str:
    name = f"{exc.filename!s}: " if exc.filename is not None else ""
    reason = exc.strerror or str(exc)
    if isinstance(exc, FileNotFoundError):
        return f"{name}no such file or directory; check the path (relative to {os.getcwd()})"
    if isinstance(exc, PermissionError):
        return f"{name}permission denied; check the file's owner and mode"
    if isinstance(exc, IsADirectoryError):
        return f"{name}is a directory; give a file"
    return f"{name}{reason}"


def _validation_error(exc: ValidationError) -> str:
    first = exc.errors()[0]
    where = ".".join(str(part) for part in first["loc"]) or exc.title
    return f"{exc.title}: {where}: {first['msg']} ({exc.error_count()} problem(s)); fix the input"


def _silence_stdout() -> None:
    # Python flushes stdout again at exit; point it at /dev/null so that flush is quiet too.
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):
        pass


def run_command(func: Callable[[argparse.Namespace], int], args: argparse.Namespace) -> int:
    """Run one command; every exception becomes one line and an exit code."""
    try:
        return int(func(args))
    except BrokenPipeError:
        _silence_stdout()
        return 141
    except KeyboardInterrupt:
        say("interrupted")
        return 130
    except (InvalidInputError, EmbeddingMismatchError) as exc:
        say(str(exc))
        return EXIT_USAGE
    except ConvmemError as exc:
        say(str(exc))
        return EXIT_FAILURE
    except ValidationError as exc:
        say(_validation_error(exc))
        return EXIT_USAGE
    except OSError as exc:
        say(_os_error(exc))
        return EXIT_FAILURE
    except ValueError as exc:  # e.g. a JSON file that does not parse
        if "embedded null" in str(exc):  # the OS refuses a path with a NUL in it
            say("a file path holds a NUL character; check the arguments")
        else:
            say(f"{type(exc).__name__}: {exc}; fix the input")
        return EXIT_USAGE
    except Exception as exc:
        if getattr(args, "verbose", False):
            traceback.print_exc()
        say(
            f"unexpected {type(exc).__name__}: {exc}; rerun with -v for the traceback and report it"
        )
        return EXIT_FAILURE
