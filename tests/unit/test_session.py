"""The session's properties: cdc.yaml's, less what spark-submit was given (no JVM)."""
from __future__ import annotations

import pytest

from cdc.config.models import Settings
from cdc.errors import ConfigError
from cdc.sinks import class_archive
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
    settings = Settings(root=tmp_path, jars_dir=tmp_path / "jars")
    conf = session_conf(settings, "cdc", submitted_conf())
    assert conf["spark.master"] == "local[2]"
    # A local driver cdc starts has the jars on its class path, not copied for its executor.
    assert conf["spark.driver.extraClassPath"] == str(tmp_path / "jars" / "spark" / "iceberg.jar")
    assert "spark.jars" not in conf and "SharedArchiveFile" not in conf["spark.driver.extraJavaOptions"]
    archive = class_archive.archive_path(settings, [str(tmp_path / "jars" / "spark" / "iceberg.jar")])
    archive.write_bytes(b"")  # built by `make setup` for these jars and this JDK: mapped in, quietly
    options = session_conf(settings, "cdc", {})["spark.driver.extraJavaOptions"]
    assert f'"-XX:SharedArchiveFile={archive}" {class_archive.QUIET}' in options
    (tmp_path / "jars" / "spark" / "delta.jar").write_bytes(b"")  # other jars: that archive is not theirs
    assert "SharedArchiveFile" not in session_conf(settings, "cdc", {})["spark.driver.extraJavaOptions"]
    writing = session_conf(settings, "cdc", {}, archive_at_exit=tmp_path / "new.jsa")["spark.driver.extraJavaOptions"]
    assert f'"-XX:ArchiveClassesAtExit={tmp_path / "new.jsa"}"' in writing
    on_a_cluster = session_conf(settings.model_copy(update={"spark": settings.spark.model_copy(
        update={"master": "spark://10.0.0.1:7077"})}), "cdc", {})
    assert "spark.driver.extraClassPath" not in on_a_cluster and on_a_cluster["spark.jars"].count(".jar") == 2


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
