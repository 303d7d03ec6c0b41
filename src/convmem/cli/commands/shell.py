"""``convmem completion bash|zsh``: a completion script generated from the parser."""

from __future__ import annotations

import argparse
from typing import Any

__all__ = ["completion_script", "register"]

_BASH = """\
# convmem completion for {shell}. Install: convmem completion {shell} > {target}
{preamble}_convmem() {{
    local cur=${{COMP_WORDS[COMP_CWORD]}} cmd="" word i
    for ((i = 1; i < COMP_CWORD; i++)); do
        word=${{COMP_WORDS[i]}}
        case " {commands} " in *" $word "*) cmd=$word; break ;; esac
    done
    local opts
    case $cmd in
{cases}
        *) opts="{commands} {top}" ;;
    esac
    COMPREPLY=($(compgen -W "$opts" -- "$cur"))
}}
complete -o default -F _convmem convmem
"""


def _options(parser: argparse.ArgumentParser) -> list[str]:
    names: list[str] = []
    for action in parser._actions:
        names += [o for o in action.option_strings if o.startswith("--")]
        if action.choices and not action.option_strings and isinstance(action.choices, list):
            names += [str(choice) for choice in action.choices]
    return names


def completion_script(parser: argparse.ArgumentParser, shell: str) -> str:
    """The completion script for ``shell`` (bash, or zsh through bashcompinit)."""
    subparsers = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    commands: dict[str, argparse.ArgumentParser] = dict(subparsers.choices)
    cases = "\n".join(
        f'        {name}) opts="{" ".join(_options(sub))}" ;;' for name, sub in commands.items()
    )
    return _BASH.format(
        shell=shell,
        target="/etc/bash_completion.d/convmem" if shell == "bash" else "~/.zfunc/convmem.zsh",
        preamble="autoload -U +X bashcompinit && bashcompinit\n" if shell == "zsh" else "",
        commands=" ".join(commands),
        cases=cases,
        top=" ".join(_options(parser)),
    )


def cmd_completion(args: argparse.Namespace) -> int:
    print(completion_script(args.root_parser, args.shell), end="")
    return 0


def register(sub: Any, common: list[argparse.ArgumentParser]) -> None:
    completion = sub.add_parser(
        "completion",
        help="print a shell completion script (bash or zsh)",
        description='Print a completion script: eval "$(convmem completion bash)" in '
        "~/.bashrc, or the zsh one in ~/.zshrc.",
    )
    completion.add_argument("shell", choices=["bash", "zsh"])
    completion.set_defaults(func=cmd_completion)
