"""Times stay text (docs/types.md): the pinned Iceberg runtime maps no Spark TIME. When a
release lifts that, this test fails, and a native time type can be offered to new targets."""
from __future__ import annotations

import pytest


def test_the_iceberg_runtime_still_refuses_spark_time_columns(scratch, table_name):
    spark = scratch[0]
    spark.conf.set("spark.sql.timeType.enabled", "true")
    try:
        # Spark's own TIME works (a text time converts exactly) ...
        assert spark.sql("SELECT CAST(CAST('12:34:56.123456' AS TIME(6)) AS STRING) AS t").first()["t"] == \
            "12:34:56.123456"
        # ... but an Iceberg table cannot have such a column
        with pytest.raises(Exception, match="Not a supported type: time"):
            spark.sql(f"CREATE TABLE scratch.ns.{table_name} (id int, t TIME(6)) USING iceberg")
    finally:
        spark.conf.unset("spark.sql.timeType.enabled")
