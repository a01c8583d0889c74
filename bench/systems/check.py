"""A peer's result table against the truth, row for row."""
from __future__ import annotations

from decimal import Decimal, InvalidOperation

from bench.systems.workload import UNAVAILABLE


def _number(value) -> Decimal | None:
    try:
        return None if value is None else Decimal(str(value))
    except InvalidOperation:
        return None


def compare(expected: dict[int, tuple[str, str]], rows) -> dict:
    """Counts of missing keys, extra keys, duplicate keys and wrong values per column of
    `rows` (an iterable of `(id, v, n)`), the placeholder stored as data counted apart."""
    got: dict[int, tuple] = {}
    duplicates = 0
    for row_id, v, n in rows:
        duplicates += row_id in got
        got[row_id] = (v, n)
    missing = sum(1 for k in expected if k not in got)
    extra = sum(1 for k in got if k not in expected)
    wrong_v = placeholder = wrong_n = 0
    for k, (v, n) in got.items():
        if k not in expected:
            continue
        want_v, want_n = expected[k]
        if v != want_v:
            wrong_v += 1
            placeholder += v == UNAVAILABLE
        if _number(n) != _number(want_n):
            wrong_n += 1
    counts = {"rows": len(got), "expected_rows": len(expected), "missing": missing, "extra": extra,
              "duplicates": duplicates, "wrong_v": wrong_v, "placeholder_as_v": placeholder, "wrong_n": wrong_n}
    counts["correct"] = not (missing or extra or duplicates or wrong_v or wrong_n)
    counts["wrong"] = describe(counts)
    return counts


def describe(c: dict) -> str:
    """What a result got wrong, in a line ("" when nothing)."""
    parts = []
    if c["missing"]:
        parts.append(f"{c['missing']:,} keys missing")
    if c["extra"]:
        parts.append(f"{c['extra']:,} keys that should be deleted")
    if c["duplicates"]:
        parts.append(f"{c['duplicates']:,} duplicate rows")
    if c["wrong_v"]:
        text = f"{c['wrong_v']:,} wrong v"
        if c["placeholder_as_v"]:
            text += f" ({c['placeholder_as_v']:,} of them the placeholder {UNAVAILABLE} stored as data)"
        parts.append(text)
    if c["wrong_n"]:
        parts.append(f"{c['wrong_n']:,} wrong n")
    return "; ".join(parts)
