"""`cdc tables remove`: a table out of capture (connector include list and publication),
the others going on; the source's last table takes its connector, slot and publication
with it; a kept target is snapshotted anew when registered again; `--drop-target` takes
the target and its topic."""
from __future__ import annotations

import pytest
import requests

from cdc.register.connector import ConnectClient, connector_name
from cdc.control.kafka import existing_topics
from cdc.sinks.targets import PROP_CAPTURE_REMOVED, PROP_SNAPSHOT
from tests.conftest import _cleanup, postgres_env


@pytest.fixture(scope="module")
def renv(stack, spark, settings, it_env, tmp_path_factory):
    """A source of its own: removing its last table retires its connector."""
    env = postgres_env(stack, settings, tmp_path_factory.mktemp("rm"), it_env.source + "r")
    yield env
    _cleanup(env)


def publication_tables(env) -> set[str]:
    return {t for (t,) in env.sql("SELECT tablename FROM pg_publication_tables WHERE pubname = %s",
                                  (f"cdc_{env.source}",))}


def include_list(env) -> set[str]:
    config = ConnectClient(env.settings.connect_url).config(connector_name(env.source))
    return {t.split(".")[1] for t in config["table.include.list"].split(",")}


def test_a_table_leaves_capture_and_the_last_one_takes_the_slot_with_it(renv, capsys):
    env, s = renv, renv.schema
    for t in ("stays", "goes"):
        env.sql(f'CREATE TABLE "{s}".{t} (id int PRIMARY KEY, v text)')
        env.sql(f'INSERT INTO "{s}".{t} SELECT g, \'v\' || g FROM generate_series(1, 20) g')
        env.register_table(t)
    assert env.cdc("register") == 0
    env.replicate("stays")
    env.replicate("goes")
    goes, file = f"{s}.goes", env.settings.path(env.settings.tables_dir) / f"{s}.goes.yaml"

    capsys.readouterr()
    assert env.cdc("tables", "remove", goes) == 0
    out = capsys.readouterr().out
    assert f"{goes}: connector cdc-{env.source} no longer captures {goes} (1 table(s) left)" in out
    assert not file.exists() and "goes" not in include_list(env) and "goes" not in publication_tables(env)
    props = env.catalog.load_table(goes).properties
    assert props[PROP_SNAPSHOT] == "" and props[PROP_CAPTURE_REMOVED]  # the target stays, out of capture
    assert env.cdc("run", "--available-now", "--table", goes) == 2  # no longer registered
    # changes to both: the one left applies, the removed one's never reach Kafka
    env.replicate("stays", env.transaction(f'UPDATE "{s}".stays SET v = \'new\' WHERE id <= 5',
                                           f'UPDATE "{s}".goes SET v = \'new\' WHERE id <= 5',
                                           f'INSERT INTO "{s}".goes VALUES (21, \'late\')'))
    assert env.assert_equal("stays") == 20

    # Registered again: snapshotted anew, with a warning of what a snapshot cannot bring back.
    env.register_table("goes")
    capsys.readouterr()
    assert env.cdc("register", "--table", goes) == 0
    assert "was out of capture from" in capsys.readouterr().err
    env.replicate("goes", env.marker())
    assert env.assert_equal("goes") == 21
    assert env.catalog.load_table(goes).properties[PROP_SNAPSHOT] == "incremental"

    # --drop-target: the target, its delete memory and dead letters, and its topic go.
    topic = f"{env.source}.{s}.goes"
    assert env.cdc("tables", "remove", goes, "--drop-target") == 0
    assert f"{goes}: topic {topic} deleted" in capsys.readouterr().out
    assert not env.catalog.table_exists(goes) and topic not in existing_topics(env.settings.kafka_bootstrap)

    # The last table: its connector (offsets forgotten), slot and publication go; its target stays.
    slot = f"cdc_{env.source}"
    assert env.cdc("tables", "remove", f"{s}.stays") == 0
    out = capsys.readouterr().out
    assert f"connector cdc-{env.source} deleted (its last table)" in out and f"replication slot {slot} dropped" in out
    assert not env.sql("SELECT 1 FROM pg_replication_slots WHERE slot_name = %s", (slot,))
    assert not env.sql("SELECT 1 FROM pg_publication WHERE pubname = %s", (slot,))
    assert requests.get(f"{env.settings.connect_url}/connectors/cdc-{env.source}", timeout=10).status_code == 404
    assert env.catalog.table_exists(f"{s}.stays")
    capsys.readouterr()
    assert env.cdc("tables", "remove", f"{s}.stays") == 2  # gone: an unknown registration
