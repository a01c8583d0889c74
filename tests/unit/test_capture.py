"""Capture health in words (register/capture.py) and the record size limit's settings."""
import re
from pathlib import Path

import pytest
from pydantic import ValidationError

from cdc.config.models import KafkaSettings, Settings, SourceSettings, TableRegistration
from cdc.register.capture import explain, format_text, task_error
from cdc.register.connector import connector_config

TRACE = """org.apache.kafka.connect.errors.ConnectException: Unrecoverable exception from producer send callback
\tat org.apache.kafka.connect.runtime.AbstractWorkerSourceTask.maybeThrowProducerSendException(AbstractWorkerSourceTask.java:340)
\tat org.apache.kafka.connect.runtime.AbstractWorkerSourceTask.execute(AbstractWorkerSourceTask.java:407)
Caused by: org.apache.kafka.common.errors.RecordTooLargeException: The message is 1573190 bytes when serialized \
which is larger than 1048576, which is the value of the max.request.size configuration.
"""


def settings(**kafka) -> Settings:
    return Settings(root=Path(__file__).resolve().parents[2], kafka=KafkaSettings(**kafka),
                    sources={"pg": SourceSettings(database="shop", user="cdc", password="x")})


def test_a_failed_task_is_told_by_its_root_cause_and_a_record_too_large_by_the_setting_to_raise():
    first, cause = task_error(TRACE)
    assert first.startswith("org.apache.kafka.connect.errors.ConnectException: Unrecoverable")
    assert cause.startswith("org.apache.kafka.common.errors.RecordTooLargeException: The message is 1573190")
    text = explain(settings(max_record_bytes=2**20), "pg", TRACE)
    assert "1,573,190 bytes, larger than kafka.max_record_bytes (1,048,576)" in text and "cdc register" in text
    assert explain(settings(), "pg", "java.lang.IllegalStateException: boom") is None
    assert task_error(None) == (None, None) and task_error("one line") == ("one line", "one line")


def test_status_lines_of_a_source():
    lines = format_text([{"source": "pg", "state": "RUNNING", "tasks": [{"id": 0, "state": "FAILED"}],
                          "capturing": False, "reason": "connector cdc-pg task 0 is FAILED: boom",
                          "slot": {"name": "cdc_pg", "active": False, "retained_wal_bytes": 3 * 2**20}}])
    assert lines == ["capture pg: connector RUNNING, task 0 FAILED; slot cdc_pg INACTIVE, 3.0 MB of WAL held",
                     "  not capturing: connector cdc-pg task 0 is FAILED: boom"]


def test_the_connector_hands_over_changes_within_a_tenth_of_a_second():
    """Debezium waits up to `poll.interval.ms` (500 by default) for a full batch of changes
    before it sends any: at a moderate rate, each change waited up to half a second."""
    reg = TableRegistration(name="shop.orders", source={"name": "pg", "schema": "shop", "table": "orders"})
    pg = connector_config(settings(), "pg", [reg], "ref")
    maria = Settings(root=Path(__file__).resolve().parents[2], sources={"db": SourceSettings(
        kind="mariadb", database="shop", user="cdc", password="x")})
    reg_maria = TableRegistration(name="shop.orders", source={"name": "db", "schema": "shop", "table": "orders"})
    for config in (pg, connector_config(maria, "db", [reg_maria], "ref")):
        assert int(config["poll.interval.ms"]) <= 100


def test_the_connector_gives_transactions_on_a_topic_of_one_partition_whatever_the_table_topics_have():
    reg = TableRegistration(name="shop.orders", source={"name": "pg", "schema": "shop", "table": "orders"})
    six = Settings(root=Path(__file__).resolve().parents[2], kafka=KafkaSettings(topics={"partitions": 6}),
                   sources={"pg": SourceSettings(database="shop", user="cdc", password="x")})
    config = connector_config(six, "pg", [reg], "ref")
    assert config["provide.transaction.metadata"] == "true"
    group = config["topic.creation.groups"]
    assert re.fullmatch(config[f"topic.creation.{group}.include"], "pg.transaction")
    assert not re.fullmatch(config[f"topic.creation.{group}.include"], "pg.shop.orders")
    assert config[f"topic.creation.{group}.partitions"] == "1" and config["topic.creation.default.partitions"] == "6"


def test_the_connector_producer_takes_records_up_to_the_limit_compressed():
    reg = TableRegistration(name="shop.orders", source={"name": "pg", "schema": "shop", "table": "orders"})
    config = connector_config(settings(), "pg", [reg], "ref")
    assert config["producer.override.max.request.size"] == str(32 * 2**20)
    assert config["producer.override.compression.type"] == "zstd"
    assert int(config["producer.override.buffer.memory"]) >= 32 * 2**20
    assert config["topic.creation.default.max.message.bytes"] == str(32 * 2**20)
    big = connector_config(settings(max_record_bytes=100 * 2**20, compression="lz4"), "pg", [reg], "ref")
    assert big["producer.override.buffer.memory"] == str(200 * 2**20)
    with pytest.raises(ValidationError, match="max_record_bytes"):
        KafkaSettings(max_record_bytes=1000)
