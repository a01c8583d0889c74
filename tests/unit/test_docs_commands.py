"""The command lines the documentation shows parse with cdc's parser, and docs/cli.md is
what `python -m cdc.cli.reference` writes from it now."""
import argparse
import re
import shlex
from pathlib import Path

import pytest

from cdc.cli.main import parser
from cdc.cli.reference import DOC, commands, render

ROOT = Path(__file__).resolve().parents[2]
PREFIX = re.compile(r"^(?:\$ )?(?:\.venv/bin/)?cdc(?=\s)")
# A synopsis word: a metavar may carry its own brackets (COL[,COL...], HOST:PORT[,...]).
WORD = re.compile(r"\[|\]|\(|\)|(?<=\s)\|(?=\s)|[^\s\[\]()]+(?:\[[^\]\s]*\])?")


def documented_commands():
    """(file:line, command line) of each line of a fenced block that runs cdc, continued
    lines joined. Lines that print `cdc <command>: ...` are output, not commands."""
    for doc in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        fenced, pending = False, None
        for n, line in enumerate(doc.read_text().splitlines(), 1):
            if line.lstrip().startswith("```"):
                fenced = not fenced
                continue
            if pending is not None:
                pending = (pending[0], pending[1].removesuffix("\\").rstrip() + " " + line.strip())
            elif fenced and PREFIX.match(line.strip()):
                pending = (f"{doc.name}:{n}", line.strip())
            if pending is not None and not pending[1].endswith("\\"):
                where, text = pending
                pending = None
                text = PREFIX.sub("", text).strip()
                if not re.match(r"^[a-z-]+:", text):
                    yield where, text


def expand(text: str, metavars: set[str]) -> list[list[str]]:
    """A command line's argument lists. A synopsis (`[optional]`, `(a | b)`, `text|json`)
    gives lists that together use every choice once; metavars stand for a value ("1")."""
    text = _shell_command(re.sub(r"(^|\s)#.*$", "", text).strip())
    if not re.search(r"[\[(|]", text):
        return [[("1" if w in metavars else w) for w in shlex.split(text)]]
    tokens = WORD.findall(text)
    variants, rest = _sequence(tokens)
    assert not rest, f"unbalanced synopsis: {text}"
    return [[("1" if w in metavars else w) for w in v if w != "..."] for v in variants]


def _shell_command(text: str) -> str:
    """The line up to a shell pipe outside brackets."""
    depth = 0
    for i, c in enumerate(text):
        depth += c in "[(" and 1 or c in "])" and -1 or 0
        if c == "|" and depth == 0 and text[i - 1:i] == " ":
            return text[:i].strip()
    return text


def _sequence(tokens: list[str]):
    """Variants of the items up to a `|`, `]` or `)`; variant k takes choice k (cycling) of each item."""
    items = []
    while tokens and tokens[0] not in ("|", "]", ")"):
        token, tokens = tokens[0], tokens[1:]
        if token in ("[", "("):
            alternatives, tokens = _alternatives(tokens)
            assert tokens and tokens[0] == {"[": "]", "(": ")"}[token], "unbalanced synopsis"
            tokens = tokens[1:]
            items.append(alternatives + ([[]] if token == "[" else []))
        else:
            items.append([[part] for part in token.split("|")] if "|" in token else [[token]])
    count = max((len(i) for i in items), default=1)
    return [[w for i in items for w in i[k % len(i)]] for k in range(count)], tokens


def _alternatives(tokens: list[str]):
    out, (variants, tokens) = [], _sequence(tokens)
    out += variants
    while tokens and tokens[0] == "|":
        variants, tokens = _sequence(tokens[1:])
        out += variants
    return out, tokens


def _metavars(p: argparse.ArgumentParser) -> set[str]:
    found = {a.metavar for a in p._actions if isinstance(a.metavar, str)}
    for _, sub, _ in commands(p):
        found |= {a.metavar for a in sub._actions if isinstance(a.metavar, str)}
    return found - {"COMMAND", "ACTION"}


DOCUMENTED = list(documented_commands())


def test_the_documentation_shows_commands():
    assert len(DOCUMENTED) > 30 and any(w.startswith("cli.md") for w, _ in DOCUMENTED)


@pytest.mark.parametrize("where, text", DOCUMENTED, ids=[w for w, _ in DOCUMENTED])
def test_every_documented_command_parses(where, text, capsys):
    p = parser()
    for argv in expand(text, _metavars(p)):
        try:
            p.parse_args(argv)
        except SystemExit:
            pytest.fail(f"{where}: `cdc {' '.join(argv)}` does not parse: {capsys.readouterr().err.strip()}")


def test_synopses_expand_to_every_choice():
    metavars = {"NAME", "N", "JSON"}
    assert expand("status [--table NAME] [--json] # a comment", metavars) == [["status", "--table", "1", "--json"],
                                                                              ["status"]]
    assert expand("replay --table NAME (--from-earliest | --from-offsets JSON)", metavars) == [
        ["replay", "--table", "1", "--from-earliest"], ["replay", "--table", "1", "--from-offsets", "1"]]
    assert expand("reconcile [--format text|json] [--deep [--limit N]]", metavars) == [
        ["reconcile", "--format", "text", "--deep", "--limit", "1"], ["reconcile", "--format", "json", "--deep"],
        ["reconcile"]]
    assert expand("status --json | jq .tables", metavars) == [["status", "--json"]]


def test_the_cli_reference_is_up_to_date():
    assert DOC.read_text() == render(), "docs/cli.md is out of date: run `python -m cdc.cli.reference` (make docs)"
