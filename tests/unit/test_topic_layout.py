"""Table topics as `kafka.topics` in cdc.yaml says, and what `cdc register` warns of them."""
import pytest
from pydantic import ValidationError

from cdc.config.models import KafkaSettings, TableRegistration, TopicSettings
from cdc.register.connector import connector_config
from cdc.register.topics import layout_warnings
from tests.unit.test_capture import settings

H = 3_600_000  # ms


def reg(name: str, **options) -> TableRegistration:
    return TableRegistration(name=name, source={"name": "pg", "schema": "s", "table": name.split(".")[1]},
                             options=options)


def test_topic_settings_default_to_one_partition_the_broker_factor_and_for_ever():
    shape = TopicSettings()
    assert (shape.partitions, shape.replication_factor, shape.retention_hours, shape.retention_ms) == (1, -1, None, -1)
    assert TopicSettings(retention_hours=48).retention_ms == 48 * H
    for bad in ({"partitions": 0}, {"replication_factor": 0}, {"retention_hours": 0}, {"retention": 5}):
        with pytest.raises(ValidationError):
            TopicSettings(**bad)


def test_the_connector_makes_its_own_topics_alike():
    config = connector_config(settings(topics=TopicSettings(partitions=6, replication_factor=3, retention_hours=72)),
                              "pg", [reg("s.orders")], "ref")
    assert {k: v for k, v in config.items() if k.startswith("topic.creation.default.")
            and k != "topic.creation.default.max.message.bytes"} == {
        "topic.creation.default.partitions": "6", "topic.creation.default.replication.factor": "3",
        "topic.creation.default.cleanup.policy": "delete", "topic.creation.default.retention.ms": str(72 * H)}
    assert connector_config(settings(), "pg", [reg("s.orders")], "ref")["topic.creation.default.retention.ms"] == "-1"


def test_register_warns_of_a_retention_too_short_for_the_table_and_of_a_layout_not_as_configured():
    forever, tables = TopicSettings(), [(reg("s.a"), "pg.s.a"), (reg("s.b", delete_horizon_hours=24), "pg.s.b")]
    assert layout_warnings(forever, tables, {}, new={"s.a", "s.b"}) == []  # made as configured, kept for ever
    # a new topic kept 48 h: below s.a's 168 h delete horizon, and a first run must come within 48 h
    two_days = TopicSettings(retention_hours=48)
    found = layout_warnings(two_days, tables, {}, new={"s.a", "s.b"})
    assert len(found) == 3
    assert found[0].startswith("topic pg.s.a keeps changes 48 h, less than table s.a's delete_horizon_hours (168 h)")
    assert found[1].startswith("topic pg.s.a keeps changes 48 h: table s.a's first `cdc run` reads its snapshot")
    assert found[2].startswith("topic pg.s.b keeps changes 48 h: table s.b's first `cdc run`")
    assert layout_warnings(two_days, tables[1:], {}, new=set()) == []  # registered before, horizon 24 h
    # topics that exist keep what they have: told apart from the configuration
    found = layout_warnings(forever, tables[:1], {"pg.s.a": (3, 168 * H)}, new=set())
    assert found == ["topic pg.s.a has 3 partition(s), kafka.topics.partitions says 1: partitions are set when a "
                     "topic is created",
                     "topic pg.s.a keeps changes 168 h, kafka.topics.retention_hours says for ever: retention is set "
                     "when a topic is created; change it with `kafka-configs.sh --alter --entity-type topics "
                     "--entity-name pg.s.a --add-config retention.ms=-1`"]


def test_kafka_settings_take_a_topics_block():
    assert KafkaSettings(topics={"partitions": 4}).topics.partitions == 4


def test_the_initial_snapshot_leaves_out_tables_that_take_none_or_a_bootstrap():
    tables = [reg("s.a"), reg("s.b").model_copy(update={"snapshot": "never"}),
              reg("s.c").model_copy(update={"snapshot": "jdbc"})]
    config = connector_config(settings(), "pg", tables, "ref")
    assert config["table.include.list"] == "public.cdc_signal,s.a,s.b,s.c"
    assert config["snapshot.include.collection.list"] == "public.cdc_signal,s.a"
    assert "snapshot.include.collection.list" not in connector_config(settings(), "pg", tables[:1], "ref")
    with pytest.raises(ValidationError, match="snapshot"):
        TableRegistration(name="s.d", source={"schema": "s", "table": "d"}, snapshot="later")


def test_a_config_keeps_the_tables_another_deployment_captures_with_their_settings():
    """Two cdc.yaml on one source and Connect share its connector: one's config keeps what
    the other's tables need (include list, keys, excluded and masked columns, snapshot)."""
    from cdc.errors import ConfigError
    from cdc.register.connector import MASK_TRANSFORM, keeping_others

    theirs = [reg("s.x").model_copy(update={"key": ("code",), "exclude": ("secret",), "mask": ("email",)}),
              reg("s.y").model_copy(update={"snapshot": "never"})]
    mine = [reg("s.a").model_copy(update={"key": ("id",)})]
    previous = connector_config(settings(), "pg", theirs, "ref", mask_key_ref="${file:k}")
    config, others = keeping_others(connector_config(settings(), "pg", mine, "ref"), previous, {"s.a"},
                                    "public.cdc_signal")
    assert others == ["s.x", "s.y"]
    assert config["table.include.list"] == "public.cdc_signal,s.a,s.x,s.y"
    assert config["message.key.columns"] == "s.a:id;s.x:code"
    assert config["column.exclude.list"] == previous["column.exclude.list"]
    assert config[f"transforms.{MASK_TRANSFORM}.columns"] == "s.x.email"
    assert config["transforms"].split(",")[0] == MASK_TRANSFORM
    assert config["snapshot.include.collection.list"] == "public.cdc_signal,s.a,s.x"  # s.y took none
    # Nothing to keep: the config as it was; a table of ours left out is dropped.
    assert keeping_others(config, config, {"s.a", "s.x", "s.y"}, "public.cdc_signal") == (config, [])
    masking_too = [reg("s.a").model_copy(update={"mask": ("email",)})]
    with pytest.raises(ConfigError, match="another masking key"):
        keeping_others(connector_config(settings(), "pg", masking_too, "ref", mask_key_ref="${file:other}"),
                       previous, {"s.a"}, "public.cdc_signal")
