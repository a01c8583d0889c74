"""Build the driver JVM's class archive (sinks/class_archive.py) for the current JDK and
jars: `python -m cdc.sinks.archive_classes [cdc.yaml]`, which `make setup` runs."""
from __future__ import annotations

import shutil
import sys
import tempfile
from pathlib import Path

from cdc.config.models import Settings
from cdc.sinks import session
from cdc.sinks.class_archive import archive_path

WARM_UP = (
    "CREATE TABLE cdc_warm_up.db.t (id BIGINT, v STRING, n DECIMAL(10, 2), at TIMESTAMP) USING iceberg "
    "TBLPROPERTIES ('format-version' = '3', 'write.delete.mode' = 'merge-on-read', "
    "'write.update.mode' = 'merge-on-read', 'write.merge.mode' = 'merge-on-read')",
    "INSERT INTO cdc_warm_up.db.t VALUES (1, 'a', 1.5, current_timestamp()), (2, 'b', 2.5, current_timestamp())",
    "MERGE INTO cdc_warm_up.db.t t USING (SELECT 1 AS id, 'c' AS v, 3.5 AS n, current_timestamp() AS at) s "
    "ON t.id = s.id WHEN MATCHED THEN UPDATE SET * WHEN NOT MATCHED THEN INSERT *",
    "DELETE FROM cdc_warm_up.db.t WHERE id = 2",
    "SELECT count(*), max(v) FROM cdc_warm_up.db.t",
    "CREATE TABLE delta.`{delta}` (id BIGINT, v STRING) USING delta",
    "MERGE INTO delta.`{delta}` t USING (SELECT 1 AS id, 'a' AS v) s ON t.id = s.id "
    "WHEN MATCHED THEN UPDATE SET * WHEN NOT MATCHED THEN INSERT *",
    "SELECT from_json('{{\"payload\": {{\"after\": {{\"id\": 1}}, \"op\": \"c\"}}}}', "
    "'payload STRUCT<after: STRUCT<id: BIGINT>, op: STRING>').payload.op",
)


def build(settings: Settings) -> Path | None:
    """Build the class archive for the current JDK and jars, unless there is one: a driver
    JVM that writes its classes to it at exit, after the statements a job runs (an Iceberg
    and a Delta table made, merged and read in a scratch directory, JSON decoded, a Kafka
    stream planned); an archive of other jars or another JDK is removed. Returns its path
    (None when the JVM wrote none)."""
    jars = session.spark_jars(settings)
    final = archive_path(settings, jars)
    if final.is_file():
        return final
    for stale in final.parent.glob("cdc-classes-*.jsa"):
        stale.unlink()
    with tempfile.TemporaryDirectory(prefix="cdc-classes-") as scratch:
        written = Path(scratch) / "classes.jsa"
        extra = {
            "spark.sql.catalog.cdc_warm_up": "org.apache.iceberg.spark.SparkCatalog",
            "spark.sql.catalog.cdc_warm_up.type": "hadoop",
            "spark.sql.catalog.cdc_warm_up.warehouse": str(Path(scratch) / "warehouse"),
        }
        spark = session.get_session(settings, "cdc-class-archive", archive_at_exit=written, extra=extra)
        for statement in WARM_UP:
            spark.sql(statement.format(delta=Path(scratch) / "delta")).collect()
        spark.readStream.format("kafka").option("kafka.bootstrap.servers", "127.0.0.1:9").option(
            "subscribe", "cdc-class-archive").load().selectExpr("CAST(value AS STRING)")
        session.stop_spark()
        if not written.is_file():
            return None
        shutil.move(written, final)
    return final


if __name__ == "__main__":  # `make setup`
    from cdc.config.loader import load_settings

    built = build(load_settings(sys.argv[1] if len(sys.argv) > 1 else None))
    print(f"class archive: {built}" if built else "class archive: none written (the JVM refused to write one)")
