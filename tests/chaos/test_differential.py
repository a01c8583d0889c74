"""Differential: a seeded generator of mixed transactions over several PostgreSQL tables
(inserts, updates of key and non-key columns, big TOASTed values left unchanged and
changed, deletes, re-inserts of deleted keys, truncates, NULLs), replicated by `cdc run`
into upsert, history and soft_delete targets on both sinks, in micro-batches cut at
different places (an Iceberg upsert target twice: written directly where it can be, and by
the MERGE alone). The oracle of upsert targets is the source table itself; that of history
and soft_delete targets is computed from the source's own row versions, logged by an audit
trigger in the same transactions.

CDC_DIFF_SEED fixes the seed; `pytest --diff-rounds N` runs longer (`make differential`)."""
from __future__ import annotations

import json
import os
import random
from dataclasses import dataclass, field
from decimal import Decimal

import psycopg
import pytest
import yaml

from cdc.sinks import delta
from tests.compare import delta_records, differences, rows_by_key, source_rows
from tests.conftest import _cleanup, postgres_env

MODES = ("upsert", "history", "soft_delete")
SINKS = ("iceberg", "delta")
TRANSACTIONS_PER_ROUND = 12


@dataclass
class Table:
    """A source table of the workload: its key, columns and how a statement picks values."""

    name: str
    key: tuple[str, ...]
    ddl: str
    identity: str  # REPLICA IDENTITY
    big: tuple[str, ...]  # columns stored out of line (TOASTed) when big
    live: set = field(default_factory=set)  # keys the source holds now
    gone: set = field(default_factory=set)  # keys deleted earlier (re-inserted or moved to later)


def tables() -> list[Table]:
    return [Table("dt_items", ("id",), "id int PRIMARY KEY, qty int, note text, body text, tags int4[]", "DEFAULT",
                  ("body", "tags")),
            Table("dt_pairs", ("a", "b"), "a int, b text, v numeric(10,2), doc text, PRIMARY KEY (a, b)", "FULL",
                  ("doc",))]


class Workload:
    """Seeded statements over the tables, tracking which keys the source holds."""

    def __init__(self, rng: random.Random, schema: str, specs: list[Table]):
        self.rng, self.schema, self.specs = rng, schema, specs
        self.next_key = 1000
        self.kinds: dict[str, int] = {}

    def q(self, t: Table) -> str:
        return f'"{self.schema}"."{t.name}"'

    def _new_key(self, t: Table, reuse: float = 0.3) -> tuple:
        if t.gone and self.rng.random() < reuse:  # a deleted key comes back
            return self.rng.choice(sorted(t.gone))
        self.next_key += 1
        return (self.next_key,) if len(t.key) == 1 else (self.next_key % 7, f"k{self.next_key}")

    def _big_text(self):
        r = self.rng.random()
        if r < 0.15:
            return None
        if r < 0.3:
            return f"small {self.rng.randrange(10**6)}"
        return "".join(self.rng.choices("0123456789abcdef", k=self.rng.randint(3000, 6000)))

    def _big_array(self):
        r = self.rng.random()
        if r < 0.15:
            return None
        return [self.rng.randrange(-2**31, 2**31) for _ in range(self.rng.choice((3, 1500)))]

    def _values(self, t: Table) -> dict:
        if t.name == "dt_items":
            return {"qty": self.rng.choice((None, self.rng.randrange(1000))),
                    "note": self.rng.choice((None, f"note {self.rng.randrange(10**6)}")),
                    "body": self._big_text(), "tags": self._big_array()}
        return {"v": self.rng.choice((None, Decimal(self.rng.randrange(-10**6, 10**6)) / 100)),
                "doc": self._big_text()}

    def _where(self, t: Table, key: tuple) -> tuple[str, list]:
        return " AND ".join(f"{k} = %s" for k in t.key), list(key)

    def insert(self, conn, t: Table) -> None:
        key = self._new_key(t)
        row = {**dict(zip(t.key, key)), **self._values(t)}
        conn.execute(f"INSERT INTO {self.q(t)} ({', '.join(row)}) VALUES ({', '.join(['%s'] * len(row))})",
                     list(row.values()))
        t.live.add(key)
        t.gone.discard(key)

    def statement(self, conn, t: Table) -> None:
        r, kind = self.rng.random(), None
        if not t.live or r < 0.22:
            kind = "insert"
            self.insert(conn, t)
        elif r < 0.99:
            key = self.rng.choice(sorted(t.live))
            where, params = self._where(t, key)
            if r < 0.45:  # other columns change, the big ones stay (placeholders)
                kind = "update"
                small = {c: v for c, v in self._values(t).items() if c not in t.big}
                sets = dict(self.rng.sample(sorted(small.items()), self.rng.randint(1, len(small))))
            elif r < 0.6:
                kind, sets = "update big", {c: v for c, v in self._values(t).items() if c in t.big}
            elif r < 0.78:  # the key changes, the big values stay; sometimes another column too
                kind, new = "key change", self._new_key(t)
                sets = dict(zip(t.key, new))
                if self.rng.random() < 0.3:
                    small = {c: v for c, v in self._values(t).items() if c not in t.big}
                    sets.update(dict([self.rng.choice(sorted(small.items()))]))
                t.live.discard(key)
                t.gone.add(key)
                t.live.add(new)
                t.gone.discard(new)
            else:
                kind, sets = "delete", None
                t.live.discard(key)
                t.gone.add(key)
            if sets is None:
                conn.execute(f"DELETE FROM {self.q(t)} WHERE {where}", params)
            else:
                conn.execute(f"UPDATE {self.q(t)} SET {', '.join(f'{c} = %s' for c in sets)} WHERE {where}",
                             [*sets.values(), *params])
        else:
            return self.truncate(conn, t)
        self.kinds[kind] = self.kinds.get(kind, 0) + 1

    def truncate(self, conn, t: Table) -> None:
        conn.execute(f"TRUNCATE {self.q(t)}")
        t.gone |= t.live
        t.live.clear()
        self.kinds["truncate"] = self.kinds.get("truncate", 0) + 1

    def round(self, dsn: str, transactions: int, truncate: bool = False) -> None:
        """`transactions` random transactions; with `truncate`, one of them truncates a table
        among its other changes."""
        at = self.rng.randrange(transactions) if truncate else -1
        with psycopg.connect(dsn) as conn:
            for i in range(transactions):
                with conn.transaction():
                    for _ in range(self.rng.randint(1, 4)):
                        self.statement(conn, self.rng.choice(self.specs))
                    if i == at:
                        self.truncate(conn, self.rng.choice(self.specs))
                        self.statement(conn, self.rng.choice(self.specs))


# ---- the oracle: what each mode's target must hold, from the source's own row versions ----

AUDIT = "dt_audit"


def audit_sql(schema: str, t: Table) -> list[str]:
    """An audit log of every row version of `t` (and its truncates), written by triggers in
    the same transactions as the changes."""
    s = f'"{schema}"'
    return [f"CREATE TABLE IF NOT EXISTS {s}.{AUDIT} (seq bigserial PRIMARY KEY, tbl text, op text, "
            f"old jsonb, new jsonb)",
            f"CREATE OR REPLACE FUNCTION {s}.dt_log() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN "
            f"INSERT INTO {s}.{AUDIT} (tbl, op, old, new) VALUES (TG_TABLE_NAME, TG_OP, "
            f"CASE WHEN TG_OP IN ('UPDATE', 'DELETE') THEN to_jsonb(OLD) END, "
            f"CASE WHEN TG_OP IN ('INSERT', 'UPDATE') THEN to_jsonb(NEW) END); RETURN NULL; END $$",
            f'CREATE TRIGGER dt_rows AFTER INSERT OR UPDATE OR DELETE ON {s}."{t.name}" '
            f"FOR EACH ROW EXECUTE FUNCTION {s}.dt_log()",
            f'CREATE TRIGGER dt_truncates AFTER TRUNCATE ON {s}."{t.name}" '
            f"FOR EACH STATEMENT EXECUTE FUNCTION {s}.dt_log()"]


def audit_log(dsn: str, schema: str, t: Table) -> list[tuple[int, str, dict | None, dict | None]]:
    """(seq, op, old row, new row) of `t` in commit order (one writer: sequence order is commit order)."""
    with psycopg.connect(dsn) as conn:
        rows = conn.execute(f'SELECT seq, op, old::text, new::text FROM "{schema}".{AUDIT} WHERE tbl = %s '
                            f"ORDER BY seq", (t.name,)).fetchall()
    parse = (lambda text: None if text is None else json.loads(text, parse_float=Decimal))  # noqa: E731
    return [(seq, op, parse(old), parse(new)) for seq, op, old, new in rows]


@dataclass
class Version:
    values: dict
    op: str  # the change that made it: r, c or u
    ended_by: str | None = None  # "next" (the key's next version), "d" or "t"; None while current


def expected_versions(log, key: tuple[str, ...], snapshot_upto: int) -> dict[tuple, list[Version]]:
    """Each key's versions, in order: what a history target holds and a soft-delete target's
    last version. A key change ends the old key (a delete) and starts the new one (a create),
    as Debezium reports it; a truncate ends every open version."""
    versions: dict[tuple, list[Version]] = {}
    open_keys: set = set()

    def end(k, how):
        versions[k][-1].ended_by = how
        open_keys.discard(k)

    def start(k, row, op):
        if k in open_keys:
            end(k, "next")
        versions.setdefault(k, []).append(Version(row, op))
        open_keys.add(k)

    for seq, op, old, new in log:
        if op == "TRUNCATE":
            for k in list(open_keys):
                end(k, "t")
            continue
        old_key = tuple(old[c] for c in key) if old else None
        new_key = tuple(new[c] for c in key) if new else None
        if op == "INSERT":
            start(new_key, new, "r" if seq <= snapshot_upto else "c")
        elif op == "DELETE":
            end(old_key, "d")
        elif old_key == new_key:
            start(new_key, new, "u")
        else:
            end(old_key, "d")
            start(new_key, new, "c")
    return versions


def same(a, b) -> bool:
    if isinstance(a, (int, Decimal)) and isinstance(b, (int, Decimal)) and not isinstance(a, bool):
        return Decimal(a) == Decimal(b)
    return a == b


def row_differences(expected: dict, got: dict, columns: list[str]) -> list[str]:
    return [f"{c}: expected {str(expected.get(c))[:60]!r}, target {str(got.get(c))[:60]!r}"
            for c in columns if not same(expected.get(c), got.get(c))]


def history_differences(versions: dict, records: list[dict], t: Table, columns: list[str]) -> list[str]:
    got: dict[tuple, list[dict]] = {}
    for r in sorted(records, key=lambda r: r["_cdc_position"]):
        got.setdefault(tuple(r[c] for c in t.key), []).append(r)
    diffs = [f"{k}: versions missing" for k in sorted(set(versions) - set(got))]
    diffs += [f"{k}: versions of a key the source never had" for k in sorted(set(got) - set(versions))]
    for k in sorted(set(versions) & set(got)):
        want, have = versions[k], got[k]
        if len(want) != len(have):
            diffs.append(f"{k}: {len(want)} versions expected, {len(have)} in the target: "
                         f"{[v.op for v in want]} vs {[r['_cdc_op'] for r in have]}")
            continue
        for i, (v, r) in enumerate(zip(want, have)):
            wrong = row_differences(v.values, r, columns)
            if v.op != r["_cdc_op"]:
                wrong.append(f"_cdc_op: expected {v.op}, target {r['_cdc_op']}")
            if (v.ended_by is None) != bool(r["_cdc_current"]) or (v.ended_by is None) != (r["_cdc_valid_to"] is None):
                wrong.append(f"current: expected {v.ended_by is None}, target {r['_cdc_current']} "
                             f"(valid to {r['_cdc_valid_to']})")
            if v.ended_by == "next" and i + 1 < len(have) and r["_cdc_valid_to"] != have[i + 1]["_cdc_valid_from"]:
                wrong.append(f"valid to {r['_cdc_valid_to']} != next version's valid from "
                             f"{have[i + 1]['_cdc_valid_from']}")
            diffs += [f"{k} version {i + 1}: {w}" for w in wrong]
    return diffs


def soft_delete_differences(versions: dict, records: list[dict], t: Table, columns: list[str]) -> list[str]:
    got = {tuple(r[c] for c in t.key): r for r in records}
    diffs = [f"{k}: missing" for k in sorted(set(versions) - set(got))]
    diffs += [f"{k}: a key the source never had" for k in sorted(set(got) - set(versions))]
    for k in sorted(set(versions) & set(got)):
        last, r = versions[k][-1], got[k]
        wrong = row_differences(last.values, r, columns)
        deleted, op = (True, last.ended_by) if last.ended_by else (False, last.op)
        if (r["_cdc_deleted"], r["_cdc_op"]) != (deleted, op):
            wrong.append(f"expected deleted {deleted} op {op}, target {r['_cdc_deleted']} {r['_cdc_op']}")
        diffs += [f"{k}: {w}" for w in wrong]
    return diffs


def test_the_oracle_follows_key_changes_deletes_and_truncates():
    log = [(1, "INSERT", None, {"id": 1, "v": "a"}), (2, "INSERT", None, {"id": 2, "v": "b"}),
           (3, "UPDATE", {"id": 1, "v": "a"}, {"id": 3, "v": "a"}),  # a key change
           (4, "UPDATE", {"id": 3, "v": "a"}, {"id": 3, "v": "c"}),
           (5, "DELETE", {"id": 2, "v": "b"}, None), (6, "INSERT", None, {"id": 2, "v": "again"}),
           (7, "TRUNCATE", None, None), (8, "INSERT", None, {"id": 1, "v": "new"})]
    got = {k[0]: [(v.values["v"], v.op, v.ended_by) for v in vs] for k, vs in expected_versions(log, ("id",), 1).items()}
    assert got == {1: [("a", "r", "d"), ("new", "c", None)], 2: [("b", "c", "d"), ("again", "c", "t")],
                   3: [("a", "c", "next"), ("c", "u", "t")]}


# ---- the test ----


@pytest.fixture(scope="module")
def diff_env(stack, spark, settings, it_env, tmp_path_factory):
    """A PostgreSQL source of its own (its tables directory holds only this test's registrations)."""
    env = postgres_env(stack, settings, tmp_path_factory.mktemp("diff"), it_env.source + "x")
    yield env
    _cleanup(env)


def target_records(env, name: str, sink: str) -> list[dict]:
    if sink == "delta":
        return delta_records(delta.location(env.settings, name))
    return env.catalog.load_table(name).scan().to_arrow().to_pylist()


def test_every_mode_on_both_sinks_equals_its_oracle(diff_env, request):
    env, s = diff_env, diff_env.schema
    seed = int(os.environ.get("CDC_DIFF_SEED") or random.randrange(10**9))
    rounds = request.config.getoption("--diff-rounds")
    rng = random.Random(seed)
    specs = tables()
    work = Workload(rng, s, specs)
    for t in specs:
        env.sql(f'CREATE TABLE "{s}"."{t.name}" ({t.ddl})')
        env.sql(f'ALTER TABLE "{s}"."{t.name}" REPLICA IDENTITY {t.identity}')
        for c in t.big:  # out of line without compression: an unchanged value is not logged
            env.sql(f'ALTER TABLE "{s}"."{t.name}" ALTER COLUMN {c} SET STORAGE EXTERNAL')
        for statement in audit_sql(s, t):
            env.sql(statement)
    with psycopg.connect(env.dsn) as conn:  # rows the initial snapshot reads: inserts only
        for _ in range(8):
            for t in specs:
                work.insert(conn, t)
    snapshot_upto = env.sql(f'SELECT max(seq) FROM "{s}".{AUDIT}')[0][0]

    targets = []  # (table, mode, sink, registration name)
    cuts = (25, 1000) if rounds > 2 else (60, 1000)  # the long run cuts finer
    # Iceberg upsert targets take the direct path where they can: one more takes the MERGE alone.
    variants = [(mode, sink, "") for mode in MODES for sink in SINKS] + [("upsert", "iceberg", "_merge_only")]
    for t in specs:
        for mode, sink, suffix in variants:
            name = f"{s}.{t.name}_{mode}_{sink}{suffix}"
            options = {"max_offsets_per_trigger": rng.choice(cuts)}  # batches cut apart
            body = {"name": name, "source": {"schema": s, "table": t.name}, "mode": mode, "sink": sink,
                    "options": {**options, **({"direct_writes": False} if suffix else {})}}
            (env.settings.path(env.settings.tables_dir) / f"{name}.yaml").write_text(yaml.safe_dump(body))
            targets.append((t, mode, sink, name))
    assert env.cdc("register") == 0

    failures = []
    for r in range(rounds):
        work.round(env.dsn, TRANSACTIONS_PER_ROUND, truncate=r == 0)
        env.wait_captured(env.marker())
        assert env.cdc("run", "--available-now") == 0, f"seed {seed}: cdc run failed in round {r + 1}"
    for t, mode, sink, name in targets:
        records = target_records(env, name, sink)
        columns = [c for c in records[0] if not c.startswith("_cdc_")] if records else list(t.key)
        if mode == "upsert":
            diffs = differences(source_rows(env.dsn, s, t.name, t.key), rows_by_key(records, t.key))
        else:
            versions = expected_versions(audit_log(env.dsn, s, t), t.key, snapshot_upto)
            check = history_differences if mode == "history" else soft_delete_differences
            diffs = check(versions, records, t, columns)
        letters = (delta_records(delta.location(env.settings, name + "__cdc_dead_letters")) if sink == "delta"
                   else env.catalog.load_table(name + "__cdc_dead_letters").scan().to_arrow().to_pylist())
        diffs += [f"dead letter: {d['error_class']}: {d['error_message'][:200]}" for d in letters]
        if diffs:
            failures.append(f"{name} ({mode}, {sink}): " + "\n  ".join(diffs[:15]))
    print(f"\ndifferential: seed {seed}, {rounds} round(s), statements {work.kinds}")
    assert not failures, f"seed {seed} (CDC_DIFF_SEED={seed} reproduces it):\n" + "\n".join(failures)
