"""Questions on the terminal. Without one (stdin not a TTY) nothing is asked: the caller
gets a usage error that names the option to pass instead."""
from __future__ import annotations

import sys

from cdc.errors import ConfigError


def interactive() -> bool:
    return sys.stdin is not None and sys.stdin.isatty()


def confirm(question: str, instead: str) -> bool:
    """A yes or no on the terminal (default no); without one, a ConfigError saying to pass
    `instead` (e.g. --yes)."""
    if not interactive():
        raise ConfigError(f"{question} (no terminal to answer on)", hint=f"pass {instead} to go on without asking")
    return _input(f"{question} [y/N] ").strip().lower() in ("y", "yes")


def ask(question: str, default: str | None = None, choices: tuple[str, ...] = (), optional: bool = False) -> str | None:
    """An answer typed on the terminal, asked again until it is given (and one of `choices`);
    `optional`: an empty answer is None."""
    shown = f" ({'/'.join(choices)})" if choices else ""
    while True:
        answer = _input(f"{question}{shown}" + (f" [{default}]" if default else "") + ": ").strip() or default
        if not answer and optional:
            return None
        if answer and (not choices or answer in choices):
            return answer
        print(f"  please answer{' one of ' + ', '.join(choices) if choices else ''}", file=sys.stderr)


def _input(text: str) -> str:
    try:
        return input(text)
    except EOFError:
        raise ConfigError("no answer (end of input)") from None
