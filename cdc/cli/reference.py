"""docs/cli.md, written from the parser: every command with its options, the exit codes
(errors.EXIT_CODES) and the JSON field names (report.document.FIELDS).

    python -m cdc.cli.reference [PATH]      # default: docs/cli.md of this checkout
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from cdc.cli.main import parser
from cdc.errors import EXIT_CODES
from cdc.report.document import FIELDS, SCHEMA_VERSION

DOC = Path(__file__).resolve().parents[2] / "docs" / "cli.md"
GLOBAL = ("--config", "--log-format")  # taken before the command and after it alike


def commands(p: argparse.ArgumentParser, path: tuple[str, ...] = ()):
    """(path, parser, help) of every command and subcommand, in the parser's order."""
    for action in p._actions:
        if isinstance(action, argparse._SubParsersAction):
            helps = {a.dest: a.help for a in action._choices_actions}
            for name, sub in action.choices.items():
                yield (*path, name), sub, helps.get(name, "")
                yield from commands(sub, (*path, name))


def _options(p: argparse.ArgumentParser) -> list[argparse.Action]:
    return [a for a in p._actions if not isinstance(a, (argparse._HelpAction, argparse._SubParsersAction))
            and not set(a.option_strings) & set(GLOBAL)]


def _spelling(a: argparse.Action) -> str:
    """`--table NAME`, `--purge`, `SOURCE_TABLE`, `--format text|json|html`."""
    if not a.option_strings:
        return a.metavar or a.dest
    flag = max(a.option_strings, key=len)
    if a.nargs == 0:
        return flag
    return f"{flag} {a.metavar or '|'.join(map(str, a.choices or ())) or a.dest.upper()}"


def synopsis(path: tuple[str, ...], p: argparse.ArgumentParser) -> str:
    """One line: `cdc stack down [--purge]`, `cdc replay --table NAME (--from-earliest | ...)`;
    a repeatable option written once, a deprecated one left out."""
    words, done = ["cdc", *path], set()
    groups = {id(a): g for g in p._mutually_exclusive_groups for a in g._group_actions}
    for a in _options(p):
        if id(a) in done or (a.help or "").startswith("deprecated"):
            continue
        group = groups.get(id(a))
        members = [m for m in group._group_actions] if group else [a]
        done.update(id(m) for m in members)
        text = " | ".join(_spelling(m) for m in members)
        required = group.required if group else a.required
        words.append((f"({text})" if len(members) > 1 else text) if required else f"[{text}]")
    return " ".join(words)


def _text(text: str) -> str:
    """Help text as one line of Markdown: what it would read as HTML or emphasis escaped."""
    return " ".join(str(text).split()).replace("<", "&lt;").replace(">", "&gt;").replace("*", "\\*")


def _cell(text: str, code: bool = False) -> str:
    """A table cell's text (a code span's when `code`): pipes escaped."""
    return (" ".join(str(text).split()) if code else _text(text)).replace("|", "\\|")


def _option(a: argparse.Action) -> str:
    """`--output FILE`, `-o`: the spelling, then its other flags."""
    others = [o for o in a.option_strings if o != max(a.option_strings, key=len)]
    return ", ".join(f"`{_cell(t, code=True)}`" for t in [_spelling(a), *others])


def _described(a: argparse.Action) -> str:
    text = a.help or ""
    if a.default not in (None, False, argparse.SUPPRESS) and "default" not in text:
        text += f" (default {a.default})"
    return _cell(text)


def render() -> str:
    p = parser()
    every = list(commands(p))
    out = ["# cdc command line\n",
           "Written from the parser by `python -m cdc.cli.reference` (`make docs`); a unit test fails when this",
           "file is out of date. Do not edit it by hand.\n",
           "`cdc [--config PATH] [--log-format text|json] COMMAND ...`, and `cdc --version`. `--config` and",
           "`--log-format` go before the command or after it (`cdc status --config prod.yaml`). Where a command",
           "takes `--table NAME` for a selection, NAME is a registered table's name or an fnmatch pattern such as",
           "`'shop.*'` (quoted in a shell), and `--table` may be repeated; `replay` and `bootstrap` act on one",
           "table. `--json` prints a command's structured output (see \"JSON field names\" below).\n",
           "| option | |", "|---|---|"]
    for a in p._actions:
        if a.option_strings and not isinstance(a, argparse._HelpAction):
            out.append(f"| {_option(a)} | {_cell(a.help)} |")
    out += ["", "## Commands\n", "| command | |", "|---|---|"]
    out += [f"| `cdc {' '.join(path)}` | {_cell(text)} |" for path, sub, text in every]
    for path, sub, text in every:
        out += ["", f"### cdc {' '.join(path)}\n", _text(sub.description or text) + "\n"]
        group = next((a for a in sub._actions if isinstance(a, argparse._SubParsersAction)), None)
        out += ["```sh", synopsis(path, sub), "```"] if group is None else \
            [f"Subcommands: {', '.join(f'`{name}`' for name in group.choices)}."]
        options = _options(sub)
        if options:
            out += ["", "| option | |", "|---|---|"]
            out += [f"| {_option(a)} | {_described(a)} |" for a in options]
    out += ["", "## Exit codes\n", "The same in every command (`cdc/errors.py`):\n", "| code | meaning |", "|---|---|"]
    out += [f"| {code} | {_cell(meaning)} |" for code, meaning in sorted(EXIT_CODES.items())]
    out += ["| 128 + N | stopped by signal N: 130 SIGINT, 143 SIGTERM |", "",
            "## JSON field names\n",
            f"Every `--json` output is one object that starts with `\"schema_version\": {SCHEMA_VERSION}`, and",
            "names the same things alike (`cdc/report/document.py`):\n",
            "| field | what it is | in the `--json` of |", "|---|---|---|"]
    out += [f"| `{name}` | {_cell(what)} | {_cell(where)} |" for name, what, where in FIELDS]
    return "\n".join(out) + "\n"


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    path = Path(args[0]) if args else DOC
    path.write_text(render())
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
