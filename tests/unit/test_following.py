"""A continuous job follows the registrations: what changed under the tables directory
decides which tables it starts, stops or starts again (supervision.registration_changes and
the events around it), the loop that reads the directory performs it (jobs/supervisor.py),
`cdc status` names a table no running job takes (control/jobstate.py), the lag watcher
forgets a table the job no longer runs, and the run's lineage hears of each table's state
(a FAIL when it is given up, a new START when it runs again: tests/unit/test_lineage.py)."""
from __future__ import annotations

import json
import os
import threading

from cdc.config.models import Settings
from cdc.control import jobstate
from cdc.errors import Busy, ConfigError
from cdc.jobs import supervision as s
from cdc.jobs.supervision import Changes, registration_changes
from tests.unit.test_supervisor import FakeQuery, of, state, supervisor


# The decision, pure.

def test_a_new_registration_starts_once_it_is_ready_a_gone_one_stops_a_changed_one_starts_again():
    runs = {"s.a": "1", "s.b": "1", "s.c": "1"}
    found = {"s.a": "1", "s.c": "2", "s.d": "1", "s.e": "1"}
    assert registration_changes(runs, found, ready={"s.d"}) == Changes(added=("s.d",), removed=("s.b",),
                                                                       changed=("s.c",))
    assert registration_changes(runs, runs) == Changes()  # nothing changed: nothing to do
    assert registration_changes({}, {"s.d": "1"}) == Changes()  # its target or topic not there yet


def test_a_registration_that_does_not_load_leaves_its_table_as_it_is():
    runs = {"s.a": "1", "s.b": "1"}
    assert registration_changes(runs, {"s.a": "1"}, invalid={"s.b"}) == Changes()  # run on, as it was loaded
    assert registration_changes({}, {}, ready={"s.x"}, invalid={"s.x"}) == Changes()  # not started


def test_a_table_whose_registration_the_job_never_read_is_not_taken_for_changed():
    assert registration_changes({"s.a": None}, {"s.a": "9"}) == Changes()


# The decision inside the job's state: events in, actions out.

def test_a_table_registered_while_the_job_runs_is_adopted_then_started_in_its_own_query():
    sup = state(["s.a"])
    sup.handle(s.Started("s.a"), 0.0)
    sup.fingerprints = {"s.a": "1"}
    assert sup.handle(s.Registrations({"s.a": "1", "s.n": "1"}), 1.0) == []  # not ready: its target is not there
    assert sup.handle(s.Registrations({"s.a": "1", "s.n": "1"}, ready=frozenset({"s.n"})), 2.0) == [s.Adopt("s.n")]
    out = sup.handle(s.Adopted("s.n"), 2.0)
    assert out == [s.Log("registered: the job starts it", "s.n", "table-added"), s.StartOwn("s.n")]
    assert sup.tables == {"s.a", "s.n"} and sup.fingerprints["s.n"] == "1"
    assert sup.handle(s.Started("s.n"), 2.5) == [s.Record("s.n", jobstate.RUNNING)]
    assert sup.handle(s.Registrations({"s.a": "1", "s.n": "1"}), 3.0) == []  # a look that finds it again


def test_a_table_whose_lock_another_process_holds_is_asked_again_and_said_once():
    sup = state(["s.a"])
    found = s.Registrations({"s.a": "1", "s.n": "1"}, ready=frozenset({"s.n"}))
    sup.handle(found, 1.0)
    busy = Busy("table s.n is being run, replayed or bootstrapped by another process (pid 7)")
    assert of(sup.handle(s.AdoptRefused("s.n", busy), 1.0), s.Log)[0].event == "table-held-elsewhere"
    assert sup.handle(found, 3.0) == [s.Adopt("s.n")]  # asked again
    assert sup.handle(s.AdoptRefused("s.n", busy), 3.0) == []  # said once
    assert sup.tables == {"s.a"}


def test_a_table_whose_registration_went_is_stopped_and_its_lock_let_go():
    sup = state(["s.a", "s.b"])
    sup.fingerprints = {"s.a": "1", "s.b": "1"}
    for t in ("s.a", "s.b"):
        sup.handle(s.Started(t), 0.0)
    out = sup.handle(s.Registrations({"s.a": "1"}), 1.0)
    assert out == [s.StopQuery("s.b"), s.Forget("s.b"),
                   s.Log("no longer registered: the job runs it no more", "s.b", "table-removed")]
    assert sup.tables == {"s.a"} and sup.running == {"s.a"}


def test_a_table_leaves_its_shared_query_when_its_registration_goes_and_the_query_starts_again_without_it():
    sup = state(["s.a", "s.b", "s.c"], groups={"shared-2s": ["s.a", "s.b", "s.c"]})
    sup.fingerprints = {t: "1" for t in sup.tables}
    sup.handle(s.Started("shared-2s"), 0.0)
    out = sup.handle(s.Registrations({"s.a": "1", "s.c": "1"}), 1.0)
    assert [type(a) for a in out] == [s.Log, s.StopQuery, s.StartShared, s.Forget, s.Log]
    assert sup.groups == {"shared-2s": ["s.a", "s.c"]} and "s.b" not in sup.home


def test_a_changed_registration_starts_its_table_again_with_it_a_failed_one_at_once():
    sup = state(["s.a", "s.b"])
    sup.fingerprints = {"s.a": "1", "s.b": "1"}
    sup.handle(s.Started("s.a"), 0.0)
    sup.handle(s.StartFailed("s.b", ConfigError("target s.b has another key")), 0.0)
    assert set(sup.failed) == {"s.b"}
    out = sup.handle(s.Registrations({"s.a": "2", "s.b": "2"}), 1.0)
    assert out == [s.StopQuery("s.a"), s.Adopt("s.a"), s.Adopt("s.b")] and not sup.failed
    assert sup.handle(s.Adopted("s.a"), 1.0) == [
        s.Log("its registration changed: its query starts again with it", "s.a", "registration-changed"),
        s.StartOwn("s.a")]
    assert sup.handle(s.Adopted("s.b"), 1.0)[1:] == [s.StartOwn("s.b")]  # not a minute later: now
    assert sup.fingerprints == {"s.a": "2", "s.b": "2"}


def test_a_table_lent_to_a_command_is_left_to_its_return():
    sup = state(["s.a", "s.b"])
    sup.fingerprints = {"s.a": "1", "s.b": "1"}
    sup.handle(s.Started("s.b"), 0.0)
    sup.handle(s.HandoverAsked("s.b", 42), 0.5)
    assert sup.handle(s.Registrations({"s.a": "1"}), 1.0) == []  # `cdc tables remove` is at work on it
    assert sup.handle(s.Registrations({"s.a": "1", "s.b": "2"}), 1.0) == []
    sup.handle(s.Returned("s.b", True, fingerprint="2"), 2.0)
    assert sup.handle(s.Registrations({"s.a": "1", "s.b": "2"}), 3.0) == []  # read again on its return


def test_a_registration_that_stops_loading_is_said_once_and_its_table_runs_on():
    sup = state(["s.a"])
    sup.fingerprints = {"s.a": "1"}
    sup.handle(s.Started("s.a"), 0.0)
    broken = s.Registrations({}, invalid={"s.a": "tables/s.a.yaml is not valid YAML", "s.x": "no key"})
    out = sup.handle(broken, 1.0)
    assert [(a.table, a.event, a.level) for a in out] == [("s.a", "registration-invalid", "error"),
                                                          ("s.x", "registration-invalid", "error")]
    assert "the job goes on with the registration it loaded" in out[0].message and "not started" in out[1].message
    assert sup.handle(broken, 3.0) == [] and sup.running == {"s.a"} and sup.tables == {"s.a"}
    assert sup.handle(s.Registrations({"s.a": "1"}), 5.0) == []  # mended as it was: nothing to start again


def test_after_a_stop_is_asked_for_no_registration_starts_anything():
    sup = state(["s.a"])
    sup.handle(s.StopAsked(), 0.0)
    assert sup.handle(s.Registrations({"s.n": "1"}, ready=frozenset({"s.n"})), 1.0) == []


# The loop: the tables directory read, the actions performed.

def registration(directory, name: str, **more) -> None:
    body = {"name": name, "source": {"name": "pg", "schema": "s", "table": name.split(".")[1]}, **more}
    (directory / f"{name}.yaml").write_text(json.dumps(body))


def test_the_loop_starts_a_table_registered_beside_it_stops_one_removed_and_survives_a_bad_file(tmp_path, capsys):
    from cdc.jobs.supervisor import REGISTRATIONS_EVERY_S

    tables = tmp_path / "tables"
    tables.mkdir()
    registration(tables, "s.a")
    ready: set[str] = set()
    sup, clock = supervisor(tmp_path, {"s.a": FakeQuery(active=True), "s.n": FakeQuery(active=True)},
                            available_now=False)
    sup.registrations.pop("s.n")  # the job starts with s.a alone
    sup.state.tables.discard("s.n")
    sup.state.fingerprints.pop("s.n")
    sup.follow, sup.ready = True, lambda regs: [r.name for r in regs if r.name in ready]
    sup.spark.streams.quiet = True
    sup.start_all()

    def look() -> None:
        clock.now += REGISTRATIONS_EVERY_S
        sup.look()

    look()
    assert sup.starter.started == ["s.a"]  # its registration read: nothing changed
    registration(tables, "s.n")
    look()
    assert sup.starter.started == ["s.a"]  # registered, but `cdc register` has not made its target yet
    ready.add("s.n")
    look()
    assert sup.starter.started == ["s.a", "s.n"] and set(sup.queries) == {"s.a", "s.n"}
    assert jobstate.read(tmp_path, "s.n")["state"] == jobstate.RUNNING
    (tables / "s.a.yaml").write_text("name: [s.a\n")  # half written, or broken by hand
    look()
    assert set(sup.queries) == {"s.a", "s.n"}
    assert "s.a: its registration does not load, the job goes on with the registration it loaded" in \
        capsys.readouterr().err
    registration(tables, "s.a", options={"trigger_interval_s": 5})  # mended, and changed
    look()
    assert sup.starter.started == ["s.a", "s.n", "s.a"] and sup.registrations["s.a"].options.trigger_interval_s == 5
    (tables / "s.n.yaml").unlink()
    look()
    assert set(sup.queries) == {"s.a"} and "s.n" not in sup.tables
    assert [r.name for r in sup.watched()] == ["s.a"]
    assert "s.n: no longer registered: the job runs it no more" in capsys.readouterr().err


def test_the_loop_starts_a_new_table_once_the_process_holding_its_lock_lets_it_go(tmp_path, capsys):
    import subprocess
    import sys

    from cdc.jobs.supervisor import REGISTRATIONS_EVERY_S

    tables = tmp_path / "tables"
    tables.mkdir()
    for t in ("s.a", "s.n"):
        registration(tables, t)
    lent = jobstate.Lent(tmp_path)
    lent.take("s.a")
    sup, clock = supervisor(tmp_path, {"s.a": FakeQuery(active=True), "s.n": FakeQuery(active=True)},
                            available_now=False, lent=lent)
    sup.registrations.pop("s.n")
    sup.state.tables.discard("s.n")
    sup.follow, sup.ready = True, lambda regs: [r.name for r in regs]
    sup.spark.streams.quiet = True
    sup.start_all()
    other = subprocess.Popen([sys.executable, "-c", "import sys, time; from pathlib import Path; "
                              "from cdc.control import jobstate; jobstate._acquire(Path(sys.argv[1]), 's.n'); "
                              "print('held', flush=True); sys.stdin.read()", str(tmp_path)],
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert other.stdout.readline().strip() == "held"  # a bootstrap of the new table, say
        for _ in range(2):
            clock.now += REGISTRATIONS_EVERY_S
            sup.look()
        assert "s.n" not in sup.tables and sup.starter.started == ["s.a"]
        assert capsys.readouterr().err.count("the job starts it once that process lets it go") == 1
    finally:
        other.stdin.close()
        other.wait()
    clock.now += REGISTRATIONS_EVERY_S
    sup.look()
    assert sup.starter.started == ["s.a", "s.n"] and lent.held == {"s.a", "s.n"}
    lent.release_all()


def test_the_loop_goes_on_while_it_cannot_tell_whether_a_new_table_is_registered(tmp_path, capsys):
    from cdc.errors import DependencyError
    from cdc.jobs.supervisor import REGISTRATIONS_EVERY_S

    tables = tmp_path / "tables"
    tables.mkdir()
    for t in ("s.a", "s.n"):
        registration(tables, t)
    sup, clock = supervisor(tmp_path, {"s.a": FakeQuery(active=True), "s.n": FakeQuery(active=True)},
                            available_now=False)
    sup.registrations.pop("s.n")
    sup.state.tables.discard("s.n")
    answers = [DependencyError("Kafka at k:9092 is unreachable")] * 2 + [["s.n"]]

    def ready(regs):
        answer = answers.pop(0)
        if isinstance(answer, BaseException):
            raise answer
        return answer

    sup.follow, sup.ready = True, ready
    sup.spark.streams.quiet = True
    sup.start_all()
    for _ in range(3):
        clock.now += REGISTRATIONS_EVERY_S
        sup.look()
    assert capsys.readouterr().err.count("whether s.n are registered could not be told: Kafka at k:9092") == 1
    assert sup.starter.started == ["s.a", "s.n"]
    (tables / "s.a.yaml").unlink()
    tables.rename(tmp_path / "gone")  # the directory itself: taken for unreadable, not for every table removed
    clock.now += REGISTRATIONS_EVERY_S
    sup.look()
    assert set(sup.queries) == {"s.a", "s.n"} and "could not be read" in capsys.readouterr().err


# `cdc status`: a registered table no running job takes.

def test_a_table_no_running_job_takes_is_not_running_and_one_a_job_follows_is_not(tmp_path):
    assert jobstate.read(tmp_path, "s.b")["state"] == jobstate.NEVER_RUN  # no job runs
    with jobstate.following(tmp_path, ["s.a", "t.*"]):
        assert jobstate.runs(tmp_path) == {os.getpid(): ["s.a", "t.*"]}
        doc = jobstate.read(tmp_path, "s.b")
        assert doc["state"] == jobstate.NOT_RUNNING
        assert doc["error"] == f"no running job applies it (pid {os.getpid()} runs --table s.a --table t.*)"
        assert "--table s.b" in doc["remedy"]
        assert jobstate.read(tmp_path, "t.x")["state"] == jobstate.NEVER_RUN  # its pattern takes it once registered
        jobstate.record(tmp_path, "s.b", jobstate.STOPPED)
        assert jobstate.read(tmp_path, "s.b")["state"] == jobstate.NOT_RUNNING
        jobstate.record(tmp_path, "s.b", jobstate.FAILED, "boom")
        assert jobstate.read(tmp_path, "s.b")["state"] == jobstate.FAILED  # its own state says more
        with jobstate.following(tmp_path, None):
            pass  # the same process: its file goes with the inner block
        jobstate.forget(tmp_path, "s.b")
    assert jobstate.runs(tmp_path) == {} and jobstate.read(tmp_path, "s.b")["state"] == jobstate.NEVER_RUN
    (tmp_path / "runs" / "999999999.json").write_text(json.dumps({"pid": 999999999, "tables": ["s.a"]}))
    assert jobstate.read(tmp_path, "s.b")["state"] == jobstate.NEVER_RUN  # a dead job's file counts for nothing


def test_status_check_fails_on_a_table_no_running_job_takes(tmp_path):
    from cdc.report.status import problems

    with jobstate.following(tmp_path, ["s.a"]):
        row = {"table": "s.b", "registered": True, "lag": 0, "job": jobstate.read(tmp_path, "s.b")}
        code, lines = problems([row], [])
    assert code == 3 and lines == [f"table s.b: job not-running: no running job applies it "
                                   f"(pid {os.getpid()} runs --table s.a)"]


# The lag watcher: a table the job runs no more is watched no more.

def test_the_lag_watcher_reads_only_the_tables_the_job_runs_now(monkeypatch):
    from cdc.config.models import TableRegistration
    from cdc.jobs import watchers

    regs = [TableRegistration(name=n, source={"name": "pg", "schema": "s", "table": n[2:]}) for n in ("s.a", "s.b")]
    now = [regs, regs[:1]]
    stop, read = threading.Event(), []
    monkeypatch.setattr(watchers, "LAG_EVERY_S", 0.0)
    monkeypatch.setattr(watchers, "watch_kafka", lambda settings, reachable: True)
    monkeypatch.setattr(watchers, "watch_capture", lambda settings, source, capturing: None)
    monkeypatch.setattr(watchers, "kafka_access", lambda settings: None)
    monkeypatch.setattr(watchers, "end_offsets", lambda access, topics: {t: {0: 10} for t in topics})

    def read_lag(settings, reg, ends, done):
        read.append(reg.name)
        return None

    def tables_now():
        if not now:
            stop.set()
            return []
        return now.pop(0)

    monkeypatch.setattr(watchers, "read_lag", read_lag)
    settings = Settings(sources={"pg": {"kind": "postgresql", "database": "db", "user": "cdc"}})
    watchers.watch_lag(settings, tables_now, stop)
    assert read == ["s.a", "s.b", "s.a"]  # s.b removed (or lent) after the first look: no more progress lines


# Lineage: the supervisor tells it each table's recorded state (register/lineage.RunLineage).

def test_the_supervisor_tells_the_lineage_each_table_s_recorded_state(tmp_path):
    told = []

    class Told:
        def record(self, table, state, error=None, reg=None):
            told.append((table, state, error, reg.name if reg else None))

        def removed(self, table):
            told.append((table, "removed", None, None))

    sup, _ = supervisor(tmp_path, {"s.a": ConfigError("target gone"), "s.b": FakeQuery()}, available_now=False)
    sup.lineage = Told()
    sup.start_all()
    sup.perform_all([s.Forget("s.b")])
    assert told == [("s.a", jobstate.FAILED, "target gone", "s.a"), ("s.b", jobstate.RUNNING, None, "s.b"),
                    ("s.b", "removed", None, None)]
