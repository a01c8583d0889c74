"""The consistent cut's decision (control/cut.py): transactions and marks in, a cut out."""
from cdc.control.cut import At, Mark, TableCut, Transaction, next_cut

A, B = "public.accounts", "public.transfers"


def tx(i: int, **counts: int) -> Transaction:
    return Transaction(f"t{i}", {{"a": A, "b": B}[k]: n for k, n in counts.items()}, ts_ms=i, offset=i)


def table(name: str, marks=(), base: At | None = At(1), partitions: int = 1) -> TableCut:
    return TableCut(name, {"a": A, "b": B}[name], tuple(Mark(s, t) for s, t in marks), base, partitions)


def test_the_cut_is_the_last_transaction_every_table_holds_whole():
    txs = [tx(1, a=1, b=1), tx(2, a=2, b=1), tx(3, a=1, b=1)]
    a = table("a", [(10, ("t1", 1)), (11, ("t2", 2)), (12, ("t3", 1))])
    b = table("b", [(20, ("t1", 1)), (21, ("t2", 1))])  # t3 not committed yet
    out = next_cut(txs, [a, b])
    assert out.cut.transaction.id == "t2" and out.cut.tables == {"a": At(11), "b": At(21)}
    assert "b" in out.held and "t3" in out.held["b"] and "a" not in out.held


def test_a_commit_that_ends_inside_a_transaction_is_no_cut_until_a_later_one_ends_it():
    txs = [tx(1, a=3, b=1), tx(2, a=1, b=1)]
    a = table("a", [(10, ("t1", 2)), (11, ("t2", 1))])  # t1 split over two batches: 10 ends inside it
    b = table("b", [(20, ("t1", 1)), (21, ("t2", 1))])
    out = next_cut(txs, [a, b])
    assert out.cut.transaction.id == "t2" and out.cut.tables == {"a": At(11), "b": At(21)}
    assert next_cut(txs[:1], [a, b]).cut.transaction is None  # only the window's start: no commit ends t1


def test_a_quiet_table_keeps_its_state_and_does_not_hold_the_cut():
    txs = [tx(1, a=1), tx(2, a=1), tx(3, a=2)]
    a = table("a", [(10, ("t1", 1)), (11, ("t2", 1)), (12, ("t3", 2))])
    b = table("b", [], base=At(7))
    out = next_cut(txs, [a, b])
    assert out.cut.transaction.id == "t3" and out.cut.tables == {"a": At(12), "b": At(7)} and not out.held


def test_a_table_that_changed_keeps_the_commit_of_its_last_transaction_while_others_move_on():
    txs = [tx(1, a=1, b=1), tx(2, a=1), tx(3, a=1)]
    a = table("a", [(10, ("t1", 1)), (11, ("t2", 1)), (12, ("t3", 1))])
    b = table("b", [(20, ("t1", 1)), (21, None)])  # then a commit of no transaction's change (a snapshot read)
    out = next_cut(txs, [a, b])
    assert out.cut.transaction.id == "t3" and out.cut.tables == {"a": At(12), "b": At(20)}


def test_a_table_behind_holds_the_cut_and_says_at_which_transaction():
    txs = [tx(1, a=1, b=1), tx(2, a=1, b=2)]
    a = table("a", [(10, ("t1", 1)), (11, ("t2", 1))])
    b = table("b", [(20, ("t1", 1)), (21, ("t2", 1))])  # one of its two changes of t2
    out = next_cut(txs, [a, b])
    assert out.cut.transaction.id == "t1" and out.cut.tables == {"a": At(10), "b": At(20)}
    assert out.held == {"b": "no commit holds all of its 2 change(s) of transaction t2 yet"}


def test_an_unknown_start_waits_for_the_table_s_first_transaction():
    txs = [tx(1, a=1), tx(2, b=1), tx(3, a=1)]
    a = table("a", [(10, ("t1", 1)), (11, ("t3", 1))])
    b = table("b", [(20, ("t2", 1))], base=None)
    out = next_cut(txs, [a, b])
    assert out.cut.transaction.id == "t3" and out.cut.tables == {"a": At(11), "b": At(20)}
    assert next_cut(txs[:1], [a, b]).cut is None
    assert "not known" in next_cut(txs[:1], [a, b]).held["b"]


def test_an_empty_table_is_in_the_cut_with_no_snapshot():
    out = next_cut([tx(1, a=1)], [table("a", [(10, ("t1", 1))]), table("b", base=At(None))])
    assert out.cut.tables == {"a": At(10), "b": At(None)}


def test_a_table_of_several_partitions_is_left_out_and_says_why():
    out = next_cut([tx(1, a=1, b=1)], [table("a", [(10, ("t1", 1))]), table("b", partitions=3)])
    assert out.cut.tables == {"a": At(10)} and "3 partitions" in out.left_out["b"]


def test_the_latest_commit_with_the_same_mark_is_taken():
    a = table("a", [(10, ("t1", 1)), (11, ("t1", 1))])  # a later commit of no new change (a tombstone, say)
    assert next_cut([tx(1, a=1)], [a]).cut.tables == {"a": At(11)}


def test_a_transaction_topic_record_is_an_end_with_its_counts_or_a_begin():
    import json

    import pytest

    from cdc.control.cut import transaction_end
    from cdc.errors import DecodeError

    end = {"status": "END", "id": "571:53195832", "event_count": 3, "ts_ms": 1700,
           "data_collections": [{"data_collection": A, "event_count": 2}, {"data_collection": B, "event_count": 1}]}
    with_schema = json.dumps({"schema": {"type": "struct"}, "payload": end}).encode()
    assert transaction_end(with_schema, 7) == Transaction("571", {A: 2, B: 1}, 1700, 7)  # PostgreSQL's txId
    assert transaction_end(json.dumps(end).encode(), 7, "mariadb") == Transaction("571:53195832", {A: 2, B: 1},
                                                                                   1700, 7)
    begin = {"status": "BEGIN", "id": "571:53195832", "event_count": None, "data_collections": None}
    assert transaction_end(json.dumps(begin).encode(), 6) is None
    with pytest.raises(DecodeError, match="offset 5"):
        transaction_end(b'{"op": "c"}', 5)
    with pytest.raises(DecodeError, match="offset 6"):
        transaction_end(b"\x00\x00\x00\x00\x01\xff", 6)  # Avro


def test_an_avro_transaction_topic_record_is_read_by_its_writer_schema():
    import io
    import json

    import fastavro
    import pytest

    from cdc.control.cut import transaction_end
    from cdc.decoding.avro import record_value
    from cdc.errors import DecodeError

    schema = {"type": "record", "name": "TransactionMetadataValue", "namespace": "io.debezium.connector.common",
              "fields": [{"name": "status", "type": "string"}, {"name": "id", "type": "string"},
                         {"name": "event_count", "type": ["null", "long"], "default": None},
                         {"name": "data_collections", "default": None, "type": ["null", {"type": "array", "items": {
                             "type": "record", "name": "ConnectDefault", "fields": [
                                 {"name": "data_collection", "type": "string"},
                                 {"name": "event_count", "type": "long"}]}}]},
                         {"name": "ts_ms", "type": "long"}]}

    class Registry:  # the registry's one answer: schema 7
        def schema(self, schema_id: int):
            return json.dumps(schema) if schema_id == 7 else None

    def framed(doc: dict, schema_id: int = 7) -> bytes:
        out = io.BytesIO()
        fastavro.schemaless_writer(out, fastavro.parse_schema(schema), doc)
        return b"\x00" + schema_id.to_bytes(4, "big") + out.getvalue()

    end = {"status": "END", "id": "571:53195832", "event_count": 3, "ts_ms": 1700,
           "data_collections": [{"data_collection": A, "event_count": 2}, {"data_collection": B, "event_count": 1}]}
    assert transaction_end(record_value(framed(end), 9, Registry()), 9) == Transaction("571", {A: 2, B: 1}, 1700, 9)
    begin = {**end, "status": "BEGIN", "event_count": None, "data_collections": None}
    assert transaction_end(record_value(framed(begin), 8, Registry()), 8) is None
    with pytest.raises(DecodeError, match="offset 5: not a Confluent Avro record"):
        record_value(json.dumps(end).encode(), 5, Registry())
    with pytest.raises(DecodeError, match="no schema 8"):
        record_value(framed(end, 8), 6, Registry())


def commit(snapshot_id: int, offset: int, transaction: tuple[str, int] | None = None):
    """A target's commit: its id and cdc's keys on it."""
    from cdc.control.commits import summary_properties
    from cdc.report.cut import Commit

    return Commit(snapshot_id, summary_properties("t", {0: offset}, snapshot_id, "job", "00", None,
                                                  transaction=transaction))


def test_a_table_s_state_before_the_transactions_read_is_known_when_it_read_only_snapshots_to_the_end():
    from cdc.report.cut import first_base

    assert first_base([commit(1, 5), commit(2, 9)], {0: 9}) == At(2)
    assert first_base([commit(1, 5)], {0: 9}) is None  # behind its topic's end
    assert first_base([commit(1, 5, ("t1", 1)), commit(2, 9)], {0: 9}) is None  # it changed in a transaction
    assert first_base([], {0: 0}) == At(None) and first_base([], {}) == At(None)  # never committed, nothing to read
    assert first_base([], {0: 3}) is None


def test_a_delta_target_s_line_of_history_leaves_out_what_a_restore_undid():
    import json

    from cdc.control.commits import parse_transaction, summary_properties
    from cdc.report.cut import delta_commits

    def version(n: int, operation: str = "MERGE", restored=None, meta: str | None = None) -> dict:
        props = summary_properties("t", {0: n * 10}, n, "job", "00", None, transaction=(f"t{n}", 1))
        return {"version": n, "operation": operation, "operationParameters": {"version": restored},
                "userMetadata": meta if meta is not None else json.dumps(props) if operation == "MERGE" else None}

    history = [version(5), version(4, "RESTORE", 1), version(3), version(2), version(1), version(0, "CREATE TABLE")]
    line = delta_commits(history)  # newest first, as delta-rs gives it
    assert [c.id for c in line] == [0, 1, 4, 5]  # 2 and 3 undone by the restore to 1
    assert line[0].props == {} and parse_transaction(line[1].props) == ("t1", 1) and line[2].props == {}
    assert [c.id for c in delta_commits([version(1, meta="not json"), version(2, "RESTORE", "")])] == [2]


def test_a_delta_target_s_history_is_read_from_its_version_at_the_last_cut():
    from types import SimpleNamespace

    from cdc.report.cut import commits

    class Log:  # delta-rs's DeltaTable: its version, and its history newest first
        def __init__(self, history: list[dict]):
            self.history_read, self.log = [], history

        def version(self) -> int:
            return self.log[0]["version"]

        def history(self, limit=None):
            self.history_read.append(limit)
            return self.log[:limit]

    reg = SimpleNamespace(sink="delta")
    merges = Log([{"version": n, "operation": "MERGE"} for n in range(9, -1, -1)])
    assert [c.id for c in commits(reg, merges, 6)] == [6, 7, 8, 9] and merges.history_read == [4]
    assert [c.id for c in commits(reg, merges, None)] == list(range(10)) and merges.history_read[-1] is None
    restored = Log([{"version": 9, "operation": "RESTORE", "operationParameters": {"version": 2}},
                    *({"version": n, "operation": "MERGE"} for n in range(8, -1, -1))])
    assert [c.id for c in commits(reg, restored, 6)] == [0, 1, 2, 9]  # 6 undone: the whole log is read
    assert restored.history_read == [4, None]


def test_cut_prints_each_table_s_snapshot_and_what_holds_the_cut():
    from cdc.report.cut import format_text

    text = format_text([
        {"source": "pg", "transaction": "571:90", "age_s": 1.25, "tables": {"s.a": 11, "s.d": 0, "s.e": None},
         "versions": ["s.d"], "held": {"s.b": "no commit holds all of its 2 change(s) of transaction 572:95 yet"},
         "left_out": {"s.f": "its target does not exist yet: `cdc register` creates it"}},
        {"source": "maria", "transaction": None, "age_s": None, "tables": {}, "versions": [], "held": {},
         "left_out": {}}])
    lines = text.splitlines()
    assert lines[0] == "pg: cut at transaction 571:90, 1.2 s behind the source"
    assert "s.a" in lines[1] and "snapshot 11" in lines[1] and "version 0" in lines[2] and "- (empty)" in lines[3]
    assert "holds the cut: no commit holds all of its 2 change(s)" in lines[4] and "not in the cut" in lines[5]
    assert lines[6] == "maria: no cut yet"


def test_a_running_job_s_cut_that_cannot_advance_is_logged_once_and_tried_again(tmp_path, monkeypatch, capsys):
    """`cdc run`'s thread (`cut_every_s`): a round that fails is a warning, once until it
    succeeds, and the thread goes on; a source without `cut_every_s` is not advanced."""
    import threading

    from cdc.config import load_settings
    from cdc.errors import DependencyError
    from cdc.report.cut import advance_logged, keep_advancing

    monkeypatch.setenv("CDC_TEST_PW", "s3cret")
    (tmp_path / "cdc.yaml").write_text(
        "sources:\n  pg: {database: app, user: repl, password: '${CDC_TEST_PW}', cut_every_s: 0.5}\n"
        "  quiet: {database: app, user: repl, password: '${CDC_TEST_PW}'}\n"
        "tables_dir: tables\n")
    (tmp_path / "tables").mkdir()
    settings = load_settings(tmp_path / "cdc.yaml")

    def unreachable(*args):
        raise DependencyError("Kafka at 127.0.0.1:1 cannot be reached")

    monkeypatch.setattr("cdc.report.cut.advance", unreachable)
    opened, failing = {"catalog": None}, {}
    assert advance_logged(settings, "pg", opened, failing) is None
    assert advance_logged(settings, "pg", opened, failing) is None
    assert "127.0.0.1:1" in failing["pg"]
    stop = threading.Event()
    stop.set()  # one round, then the stop is seen
    keep_advancing(settings, ["pg", "quiet"], stop)
    keep_advancing(settings, ["quiet"], stop)  # nothing to advance: returns at once
    err = capsys.readouterr().err
    assert err.count("the consistent cut of source pg could not advance") == 2, err  # once per `failing`
    assert "source quiet" not in err


def test_a_cut_keeps_only_the_tables_whose_target_still_holds_their_state_there():
    from cdc.control.cut import still_standing

    standing = {"s.a": 11, "s.b": 21, "s.c": None, "s.d": 4, "s.e": 7}
    lines = {"s.a": [10, 11, 12], "s.b": [30, 31], "s.c": [40], "s.d": [0, 1, 2, 3, 4, 5]}
    # s.b's snapshot is gone (its target re-created), s.e could not be read or was removed;
    # an empty table at the cut stays empty there whatever came after
    assert still_standing(standing, lines) == {"s.a": 11, "s.c": None, "s.d": 4}
    assert still_standing({}, lines) == {} and still_standing(standing, {}) == {}


def test_a_cut_that_holds_every_transaction_read_to_the_topic_s_end_is_current():
    from cdc.control.cut import cut_age_s

    now = 1_000_000
    assert cut_age_s(now - 688_000, [], True, now) == 0.0  # a quiet source: nothing after the cut
    pending = [tx(7, a=1), tx(8, a=1)]  # ts_ms 7 and 8: the oldest one not in the cut counts
    assert cut_age_s(5, pending, True, now) == round((now - 7) / 1000, 3)
    assert cut_age_s(5, pending, False, now) == round((now - 7) / 1000, 3)
    # the topic not read to its end: later transactions are unknown; the cut's own time stands
    assert cut_age_s(now - 3_000, [], False, now) == 3.0
    assert cut_age_s(None, [], False, now) is None and cut_age_s(None, [], True, now) == 0.0
    assert cut_age_s(now - 2_000, [Transaction("x", {A: 1}, None, 9)], True, now) == 2.0  # no time on it
    assert cut_age_s(now + 5_000, [], False, now) == 0.0  # clocks apart: never below 0


class FakeTarget:
    """What `_advance` reads of a target: its identity (an Iceberg uuid or a Delta id) and its tag."""

    def __init__(self, sink: str, ident: str, tagged: int | None = None):
        from types import SimpleNamespace

        refs = {"cdc_consistent": SimpleNamespace(snapshot_id=tagged)} if tagged is not None else {}
        self.meta = SimpleNamespace(table_uuid=ident, id=ident, refs=refs)
        self.metadata = self.meta if sink == "iceberg" else (lambda: self.meta)


def advance_over(tmp_path, monkeypatch, targets: dict, lines: dict, state: dict | None, transactions=(),
                 read_all=True):
    """`advance` of source pg over the tables of `targets` (name: (sink, FakeTarget or an
    exception to raise)), each with its line of commit ids, from the kept `state`; Kafka,
    the catalog and Spark stand aside. Returns (published, the tags moved as (name, snapshot))."""
    import yaml

    from cdc.config import load_settings, load_tables
    from cdc.report import cut as report_cut

    (tmp_path / "cdc.yaml").write_text(yaml.safe_dump({
        "sources": {"pg": {"database": "app", "user": "repl", "password": "x"}}, "tables_dir": "tables",
        "stack": {"state_dir": str(tmp_path / "state")}}))
    (tmp_path / "tables").mkdir(exist_ok=True)
    for name, (sink, _) in targets.items():
        (tmp_path / "tables" / f"{name}.yaml").write_text(yaml.safe_dump(
            {"name": name, "sink": sink, "source": {"schema": "s", "table": name.split(".")[1]}, "key": ["id"]}))
    settings = load_settings(tmp_path / "cdc.yaml")
    if state is not None:
        report_cut.write_state(settings, "pg", state)
    moved = []

    def target(settings, reg, catalog):
        found = targets[reg.name][1]
        if isinstance(found, Exception):
            raise found
        return found

    def line(reg, table, since):
        return [report_cut.Commit(i, {}) for i in lines[reg.name]]

    def tag(settings, reg, table, at):
        moved.append((reg.name, at.snapshot))
        assert at.snapshot in lines[reg.name]  # never a snapshot the table does not have
        return True

    monkeypatch.setattr(report_cut, "kafka_access", lambda settings: None)
    monkeypatch.setattr(report_cut, "existing_topics", lambda kafka: set())
    monkeypatch.setattr(report_cut, "read_transactions", lambda *a: (list(transactions), read_all))
    monkeypatch.setattr(report_cut, "end_offsets", lambda kafka, topics: {})
    monkeypatch.setattr(report_cut, "load_target", target)
    monkeypatch.setattr(report_cut, "commits", line)
    monkeypatch.setattr(report_cut, "move_tag", tag)
    return report_cut.advance(settings, "pg", load_tables(settings), None), moved


def test_a_re_created_target_leaves_the_cut_and_no_tag_names_a_snapshot_it_does_not_have(tmp_path, monkeypatch):
    """A table held the cut, then its target was re-created: its remembered snapshot (an Iceberg
    id gone; a Delta version number the new table has again) is not handed out, nor tagged."""
    state = {"transaction": "t5", "offset": 5, "ts_ms": 5, "tables": {"s.a": 11, "s.b": 3, "s.c": 40},
             "targets": {"s.a": "ua", "s.b": "ub", "s.c": "uc"}}
    targets = {"s.a": ("iceberg", FakeTarget("iceberg", "ua2")), "s.b": ("delta", FakeTarget("delta", "ub2")),
               "s.c": ("iceberg", FakeTarget("iceberg", "uc"))}
    lines = {"s.a": [90, 91], "s.b": [0, 1, 2, 3, 4], "s.c": [39, 40]}
    published, moved = advance_over(tmp_path, monkeypatch, targets, lines, state)
    assert published.standing["tables"] == {"s.c": 40} and moved == [("s.c", 40)]
    assert "re-created" in published.outcome.left_out["s.a"] and "re-created" in published.outcome.left_out["s.b"]
    assert published.standing["targets"] == {"s.a": "ua2", "s.b": "ub2", "s.c": "uc"}
    # a snapshot rolled back or expired away from an unchanged target is not handed out either
    lines["s.c"] = [41, 42]
    published, moved = advance_over(tmp_path, monkeypatch, targets, lines, None)  # the state just written
    assert published.standing["tables"] == {} and moved == []
    assert "is no longer in its target's history" in published.outcome.left_out["s.c"]


def test_an_unreadable_or_removed_target_is_its_own_table_s_problem(tmp_path, monkeypatch):
    state = {"transaction": "t5", "offset": 5, "ts_ms": 5, "tables": {"s.a": 11, "s.b": 21, "s.c": 31}}
    targets = {"s.a": ("iceberg", FileNotFoundError("/w/s/a/metadata/00007.metadata.json")),
               "s.b": ("iceberg", None), "s.c": ("iceberg", FakeTarget("iceberg", "uc"))}
    published, moved = advance_over(tmp_path, monkeypatch, targets, {"s.c": [30, 31]}, state,
                                    [tx(6, a=1), tx(7, a=1)])
    assert published.standing["tables"] == {"s.c": 31} and moved == [("s.c", 31)]
    assert "cannot be read: FileNotFoundError: /w/s/a/metadata/00007.metadata.json" in published.outcome.left_out["s.a"]
    assert "does not exist" in published.outcome.left_out["s.b"]
    (error,) = published.unreadable
    assert error.table == "s.a" and "cdc register --table s.a" in error.hint
    assert [t.id for t in published.pending] == []  # t6 and t7 change only s.a, which is out: the cut moved on
    assert published.standing["transaction"] == "t7"
