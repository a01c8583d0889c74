"""The session's properties: cdc.yaml's, less what spark-submit was given (no JVM)."""
from __future__ import annotations

import pytest

from cdc.config.models import Settings
from cdc.errors import ConfigError
from cdc.sinks.session import session_conf, submitted_conf


def test_spark_submit_master_jars_and_conf_win_over_cdc_yaml(tmp_path):
    settings = Settings(root=tmp_path, jars_dir=tmp_path / "no-jars")  # no cache: it must not be needed
    given = {"spark.master": "spark://10.0.0.1:7077", "spark.jars": "s3://jars/iceberg.jar",
             "spark.sql.shuffle.partitions": "64"}
    conf = session_conf(settings, "cdc", given)
    assert not set(given) & set(conf)
    assert conf["spark.sql.catalog.lake"] == "org.apache.iceberg.spark.SparkCatalog"
    assert conf["spark.app.name"] == "cdc"
    with pytest.raises(ConfigError, match="no Spark jars"):  # on its own, cdc takes the jars from its cache
        session_conf(settings)


def test_without_spark_submit_cdc_yaml_sets_master_and_jars(tmp_path, monkeypatch):
    (tmp_path / "jars" / "spark").mkdir(parents=True)
    (tmp_path / "jars" / "spark" / "iceberg.jar").write_bytes(b"")
    monkeypatch.delenv("PYSPARK_GATEWAY_PORT", raising=False)
    assert submitted_conf() == {}  # not launched by spark-submit: nothing was given
    conf = session_conf(Settings(root=tmp_path, jars_dir=tmp_path / "jars"), "cdc", submitted_conf())
    assert conf["spark.master"] == "local[2]"
    assert conf["spark.jars"] == str(tmp_path / "jars" / "spark" / "iceberg.jar")


def test_the_driver_keeps_its_heap_small_unless_spark_submit_sets_its_java_options(tmp_path):
    """G1 may take more of the time and gives free heap back (DRIVER_GC), down to half of
    `driver_memory`; options given to spark-submit replace cdc's."""
    from cdc.sinks.session import DRIVER_GC, driver_gc

    settings = Settings(root=tmp_path, jars_dir=tmp_path / "no-jars", spark={"driver_memory": "3g"})
    given = {"spark.jars": "s3://jars/iceberg.jar"}
    assert session_conf(settings, "cdc", given)["spark.driver.extraJavaOptions"].endswith(f"{DRIVER_GC} -Xms1536m")
    assert "-XX:GCTimeRatio=4" in DRIVER_GC.split()
    assert driver_gc("2G").endswith(" -Xms1024m") and driver_gc("1000m").endswith(" -Xms500m")
    assert driver_gc("2048").endswith(" -Xms1024m") and driver_gc("4gb").endswith(" -Xms2048m")  # MiB alone
    assert driver_gc("1k") == driver_gc("2 gigabytes") == DRIVER_GC  # nothing to halve, or not the JVM's syntax
    given["spark.driver.extraJavaOptions"] = "-XX:+UseParallelGC"
    assert "spark.driver.extraJavaOptions" not in session_conf(settings, "cdc", given)
