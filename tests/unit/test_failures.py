"""A job's failures in one line: each dependency named with its address and retried, a
verdict failed at once naming the column, anything else retried as unexpected. The texts
are what Spark, Iceberg and Kafka raised on the real stack (trimmed)."""
import pytest

from cdc.config.models import Settings
from cdc.errors import ApplyError, DependencyError
from cdc.jobs.failures import diagnose

CATALOG_GONE = ("[REQUIRES_SINGLE_PART_NAMESPACE] spark_catalog requires a single-part namespace, but got "
                "`lake`.`shop`. SQLSTATE: 42K05")
FILE_GONE = """[STREAM_FAILED] Query [id = 442e, runId = 904a] terminated with exception: [FOREACH_BATCH_USER_FUNCTION_ERROR] An error occurred in the user provided function in foreach batch sink. Reason: An exception was raised by the Python Proxy. Return Message: Traceback (most recent call last):
  File "/work/cdc/jobs/apply.py", line 470, in _commit
py4j.protocol.Py4JJavaError: An error occurred while calling o136.sql.
: org.apache.spark.SparkException: Job aborted due to stage failure: Task 1 in stage 4.0 failed 1 times, most recent failure: Lost task 1.0 in stage 4.0 (TID 6) (localhost executor driver): org.apache.iceberg.exceptions.NotFoundException: File does not exist: file:/lake/shop/orders/data/00000-11-0755.parquet
	at org.apache.iceberg.hadoop.HadoopInputFile.lazyStat(HadoopInputFile.java:164)
Caused by: java.io.FileNotFoundException: File file:/lake/shop/orders/data/00000-11-0755.parquet does not exist
	at org.apache.hadoop.fs.RawLocalFileSystem.deprecatedGetFileStatus(RawLocalFileSystem.java:980)
 SQLSTATE: 39000 SQLSTATE: XXKST"""
COLUMN_GONE = """[STREAM_FAILED] Query [id = 442e, runId = 1407] terminated with exception: [FOREACH_BATCH_USER_FUNCTION_ERROR] An error occurred in the user provided function in foreach batch sink. Reason: An exception was raised by the Python Proxy. Return Message: Traceback (most recent call last):
  File "/work/cdc/jobs/apply.py", line 162, in __call__
    spark.sql(f"ALTER TABLE {self.target_ref} ADD COLUMN {q(c.name)} {kind} AFTER {q(last)}")
pyspark.errors.exceptions.captured.AnalysisException: [FIELD_NOT_FOUND] No such struct field `v` in id, _cdc_op, _cdc_position. SQLSTATE: 42704
 SQLSTATE: 39000 SQLSTATE: XXKST"""
KAFKA_GONE = ("[STREAM_FAILED] Query terminated with exception: org.apache.kafka.common.errors.TimeoutException: "
              "Timed out waiting for a node assignment. Call: describeTopics\n\tat org.apache.kafka.clients.admin")


@pytest.fixture
def settings(tmp_path):
    return Settings(root=tmp_path)


def test_an_unloadable_catalog_is_named_with_its_file_and_why(settings, tmp_path):
    (tmp_path / ".state/iceberg/catalog.db").mkdir(parents=True)  # a directory where the file should be
    error = diagnose(settings, None, "shop.orders", RuntimeError(CATALOG_GONE))
    assert isinstance(error, DependencyError) and error.retriable and error.table == "shop.orders"
    assert error.message.startswith(f"catalog lake at {tmp_path}/.state/iceberg/catalog.db is unreachable (")
    assert "unable to open database file" in error.message and "REQUIRES_SINGLE" not in error.message
    assert error.detail == CATALOG_GONE  # Java's own words: the JSON log's detail


def test_an_unreadable_warehouse_is_named_with_the_file():
    error = diagnose(Settings(), None, "shop.orders", RuntimeError(FILE_GONE))
    assert isinstance(error, DependencyError)
    assert error.message.startswith("warehouse at ") and "cannot be read or written (java.io.FileNotFoundException: " \
        "File file:/lake/shop/orders/data/00000-11-0755.parquet does not exist)" in error.message
    assert "o136" not in error.message and "\n" not in error.message


def test_kafka_is_named_with_its_address():
    error = diagnose(Settings(), None, "shop.orders", RuntimeError(KAFKA_GONE))
    assert isinstance(error, DependencyError)
    assert error.message.startswith("Kafka at 127.0.0.1:")
    assert "Timed out waiting for a node assignment" in error.message


def test_a_verdict_fails_at_once_naming_the_column(settings):
    from cdc.jobs import supervision as s

    error = diagnose(Settings(), None, "shop.orders", RuntimeError(COLUMN_GONE))
    assert not error.retriable
    assert error.message == ("table shop.orders: No such struct field `v` in id, _cdc_op, _cdc_position. "
                             "([FIELD_NOT_FOUND], SQLSTATE 42704)")
    assert "retrying cannot mend this" in error.hint and "dependency" not in error.hint
    sup = s.Supervision({"shop.orders"}, {}, 300, continuous=True)
    sup.handle(s.Started("shop.orders"), 0.0)
    out = sup.handle(s.Ended("shop.orders", error), 0.0)
    assert s.Record("shop.orders", "failed", error.message, remedy=error.hint) in out and not sup.retry_at


def test_an_unknown_failure_is_retried_as_unexpected(settings):
    from cdc.jobs import supervision as s

    error = diagnose(Settings(), None, "shop.orders",
                     RuntimeError("java.lang.IllegalStateException: something odd\n\tat a.b.C(C.java:1)"))
    sup = s.Supervision({"shop.orders"}, {}, 300, continuous=True)
    (said,) = sup.handle(s.StartFailed("shop.orders", error), 0.0)
    assert (said.message, said.level) == ("unexpected failure: java.lang.IllegalStateException: something odd, "
                                          "retrying in 1 s", "warning")
    assert sup.retry_at == {"shop.orders": 1.0}


def test_an_outage_inside_a_batch_stays_an_outage():
    text = ("[STREAM_FAILED] ... Traceback ...\ncdc.errors.DependencyError: the schema registry at http://r:8081 is "
            "unreachable: connection refused\n  at x")
    error = diagnose(Settings(), None, "shop.orders", RuntimeError(text))
    assert isinstance(error, DependencyError) and error.retriable
    assert error.message == ("table shop.orders: the schema registry at http://r:8081 is unreachable: "
                             "connection refused")
    bad = diagnose(Settings(), None, "shop.orders", RuntimeError("x\ncdc.errors.ApplyError: 1 record(s) bad"))
    assert not bad.retriable and bad.message == "table shop.orders: 1 record(s) bad"
    named = diagnose(Settings(), None, "shop.orders",
                     RuntimeError("x\ncdc.errors.ApplyError: table shop.orders: 1 record(s) bad"))
    assert named.message == "table shop.orders: 1 record(s) bad"  # named once


def test_the_remedy_of_an_error_inside_a_batch_survives_sparks_wrapping():
    """A CdcError raised in a batch reaches the supervisor as Spark's text: its hint comes
    back as the error's hint (the log line's and `status`'s remedy), not as message text."""
    from cdc.planning.schema import evolve
    from cdc.sources.types import Column

    with pytest.raises(ApplyError) as raised:
        evolve("shop.orders", (Column("id", "int", False), Column("v", "int", True)),
               [Column("v", "string", True)], ("id",))
    text = f"[STREAM_FAILED] ... Traceback ...\ncdc.errors.ApplyError: {raised.value}\n\n\tat org.apache.spark.X"
    error = diagnose(Settings(), None, "shop.orders", RuntimeError(text))
    assert error.message == raised.value.message and "->" not in error.message
    assert error.hint == raised.value.hint and "cdc bootstrap --table shop.orders" in error.hint
