"""How a registered table's existing rows reach its target (`snapshot:`), and `register
--no-wait`, on a connector that runs already."""
from __future__ import annotations

import time

from cdc.sinks.targets import PROP_SNAPSHOT


def test_snapshot_never_jdbc_and_initial_without_waiting(it_env, capsys):
    env, s = it_env, it_env.schema
    for t in ("snap_never", "snap_jdbc", "snap_later"):
        env.sql(f'CREATE TABLE "{s}".{t} (id int PRIMARY KEY, v text)')
        env.sql(f'INSERT INTO "{s}".{t} SELECT g, \'v\' || g FROM generate_series(1, 40) g')
    never = env.register_table("snap_never", snapshot="never")
    jdbc = env.register_table("snap_jdbc", snapshot="jdbc")
    later = env.register_table("snap_later")
    capsys.readouterr()
    for name in (never, jdbc):
        assert env.cdc("register", "--table", name) == 0
    out = capsys.readouterr().out
    assert "incremental snapshot" not in out  # neither asks Debezium for one
    assert f"{never}: no snapshot (snapshot: never)" in out and f"{jdbc}: next, `cdc bootstrap --table {jdbc}`" in out
    assert env.catalog.load_table(never).properties[PROP_SNAPSHOT] == "never"

    # never: only the changes made from now on
    env.replicate("snap_never", env.transaction(f'UPDATE "{s}".snap_never SET v = \'changed\' WHERE id <= 3',
                                                f'INSERT INTO "{s}".snap_never VALUES (41, \'new\')'))
    rows = sorted((r["id"], r["v"]) for r in env.target_records("snap_never"))
    assert rows == [(1, "changed"), (2, "changed"), (3, "changed"), (41, "new")]

    # jdbc: the job waits for the bootstrap, which reads the rows in parallel, then streams on
    env.sql(f'UPDATE "{s}".snap_jdbc SET v = \'before\' WHERE id = 1')
    assert env.cdc("run", "--available-now", "--table", jdbc) == 3
    assert f"`cdc bootstrap --table {jdbc}`" in capsys.readouterr().err
    assert env.cdc("bootstrap", "--yes", "--table", jdbc) == 0
    env.replicate("snap_jdbc", env.transaction(f'DELETE FROM "{s}".snap_jdbc WHERE id = 2'))
    assert env.assert_equal("snap_jdbc") == 39

    # initial, without waiting: register returns while the connector's snapshot goes on
    capsys.readouterr()
    assert env.cdc("register", "--table", later, "--no-wait") == 0
    assert "goes on in the connector" in capsys.readouterr().out
    assert env.catalog.load_table(later).properties[PROP_SNAPSHOT] == "incremental"
    deadline = time.monotonic() + 120
    while True:  # the snapshot's chunk lands when the connector gets to it
        env.replicate("snap_later", env.marker())
        if len(env.target_records("snap_later")) == 40 or time.monotonic() > deadline:
            break
    assert env.assert_equal("snap_later") == 40
