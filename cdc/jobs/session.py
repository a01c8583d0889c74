"""The SparkSession: local[2] by default, jars from the pinned cache (never Ivy), the
Iceberg catalog under the configured name, UTC. Under `spark-submit` (cdc/jobs/submit.py)
what spark-submit was given wins: its master, its jars, its --conf."""
from __future__ import annotations

import os
import sys
from pathlib import Path

from cdc.config.models import Settings
from cdc.errors import ConfigError
from cdc.jobs.failures import spark_log
from cdc.sinks.catalog import spark_catalog_conf

LOG_CONFIG = Path(__file__).parent / "log4j2.properties"


def spark_jars(settings: Settings) -> list[str]:
    d = settings.path(settings.jars_dir) / "spark"
    jars = sorted(str(p) for p in d.glob("*.jar")) if d.is_dir() else []
    if not jars:
        raise ConfigError(f"no Spark jars in {d}", hint="run `make setup` to fetch them from Maven Central")
    return jars


def submitted_conf() -> dict[str, str]:
    """The Spark properties spark-submit gave this process (its options, --conf and
    spark-defaults.conf), or {} when spark-submit did not launch it."""
    if "PYSPARK_GATEWAY_PORT" not in os.environ:  # set by spark-submit for the Python driver it starts
        return {}
    from pyspark import SparkConf, SparkContext

    SparkContext._ensure_initialized()  # spark-submit's JVM: its system properties hold the conf
    given = {k: v for k, v in SparkConf().getAll() if v != ""}
    if given.get("spark.app.name") == Path(sys.argv[0]).name:  # not a --name: spark-submit's default
        del given["spark.app.name"]
    return given


def session_conf(settings: Settings, app_name: str = "cdc", given: dict[str, str] | None = None) -> dict[str, str]:
    """cdc's Spark properties, less those spark-submit was `given` (they win)."""
    given = given or {}
    s = settings.spark
    conf = {
        "spark.app.name": app_name,
        "spark.master": s.master,
        "spark.driver.memory": s.driver_memory,
        **({} if "spark.jars" in given else {"spark.jars": ",".join(spark_jars(settings))}),
        # Iceberg's and Delta Lake's SQL (MERGE, CALL, OPTIMIZE ...); Delta tables by path
        # (`delta.<path>`) through Delta's session catalog, Iceberg's under the catalog's name.
        "spark.sql.extensions": "org.apache.iceberg.spark.extensions.IcebergSparkSessionExtensions,"
                                "io.delta.sql.DeltaSparkSessionExtension",
        "spark.sql.catalog.spark_catalog": "org.apache.spark.sql.delta.catalog.DeltaCatalog",
        "spark.sql.session.timeZone": "UTC",
        "spark.sql.shuffle.partitions": str(s.shuffle_partitions),
        # Partitions of a Delta table's log state when Spark rebuilds it (Delta's default: 50).
        "spark.databricks.delta.snapshotPartitions": str(s.shuffle_partitions),
        "spark.scheduler.mode": "FAIR",  # each table's query has a pool of its own (jobs/runner.py)
        # A field that does not parse must not become a silent null (decoding/spark_decode.py).
        "spark.sql.json.enablePartialResults": "false",
        # The masking key's pads are binary literals in the plans of masked columns
        # (planning/protect.py): EXPLAIN, the SQL UI and event logs show them redacted.
        "spark.sql.redaction.string.regex": "(?i)(0x|x')[0-9a-f]{128}",
        "spark.ui.enabled": "false",
        "spark.ui.showConsoleProgress": "false",
        # What the driver keeps of finished queries, jobs and stages, UI or not: a job that
        # runs for weeks keeps the newest few, not a thousand plans.
        "spark.sql.ui.retainedExecutions": "50",
        "spark.ui.retainedJobs": "100",
        "spark.ui.retainedStages": "100",
        "spark.ui.retainedTasks": "10000",
        "spark.sql.streaming.ui.retainedQueries": "100",
        "spark.sql.streaming.stopGracefullyOnShutdown": "true",
        "spark.driver.extraJavaOptions": f"-Duser.timezone=UTC -Dlog4j2.configurationFile={LOG_CONFIG.as_uri()} "
                                         f'"-Dcdc.spark.log={spark_log(settings)}"',
        "spark.executor.extraJavaOptions": "-Duser.timezone=UTC",  # a cluster's executors, as the driver
        **spark_catalog_conf(settings),
        **s.extra_conf,
    }
    return {k: v for k, v in conf.items() if k not in given}


def get_session(settings: Settings, app_name: str = "cdc"):
    """The one SparkSession of this process (created on first use)."""
    from pyspark.sql import SparkSession

    os.environ.setdefault("PYSPARK_PYTHON", os.sys.executable)
    if settings.spark.master.startswith("local"):
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    builder = SparkSession.builder
    for k, v in session_conf(settings, app_name, submitted_conf()).items():
        builder = builder.config(k, v)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("WARN")
    return spark
