"""The SparkSession: local[2] by default, jars from the pinned cache (never Ivy), the
Iceberg catalog under the configured name, UTC."""
from __future__ import annotations

import os

from pathlib import Path

from cdc.config.models import Settings
from cdc.errors import ConfigError
from cdc.sinks.catalog import spark_catalog_conf

LOG_CONFIG = Path(__file__).parent / "log4j2.properties"


def spark_jars(settings: Settings) -> list[str]:
    d = settings.path(settings.jars_dir) / "spark"
    jars = sorted(str(p) for p in d.glob("*.jar")) if d.is_dir() else []
    if not jars:
        raise ConfigError(f"no Spark jars in {d}", hint="run `make setup` to fetch them from Maven Central")
    return jars


def session_conf(settings: Settings, app_name: str = "cdc") -> dict[str, str]:
    s = settings.spark
    conf = {
        "spark.app.name": app_name,
        "spark.master": s.master,
        "spark.driver.memory": s.driver_memory,
        "spark.jars": ",".join(spark_jars(settings)),
        "spark.sql.extensions": "org.apache.iceberg.spark.extensions.IcebergSparkSessionExtensions",
        "spark.sql.session.timeZone": "UTC",
        "spark.sql.shuffle.partitions": str(s.shuffle_partitions),
        "spark.scheduler.mode": "FAIR",  # each table's query has a pool of its own (jobs/runner.py)
        # A field that does not parse must not become a silent null (decoding/spark_decode.py).
        "spark.sql.json.enablePartialResults": "false",
        "spark.ui.enabled": "false",
        "spark.ui.showConsoleProgress": "false",
        "spark.sql.streaming.stopGracefullyOnShutdown": "true",
        "spark.driver.extraJavaOptions": f"-Duser.timezone=UTC -Dlog4j2.configurationFile={LOG_CONFIG.as_uri()}",
        **spark_catalog_conf(settings),
        **s.extra_conf,
    }
    return conf


def get_session(settings: Settings, app_name: str = "cdc"):
    """The one SparkSession of this process (created on first use)."""
    from pyspark.sql import SparkSession

    os.environ.setdefault("PYSPARK_PYTHON", os.sys.executable)
    if settings.spark.master.startswith("local"):
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    builder = SparkSession.builder
    for k, v in session_conf(settings, app_name).items():
        builder = builder.config(k, v)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("WARN")
    return spark
