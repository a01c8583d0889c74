"""The SparkSession: local[2] by default, jars from the pinned cache (never Ivy), the
Iceberg catalog under the configured name, UTC. Under `spark-submit` (cdc/jobs/submit.py)
what spark-submit was given wins: its master, its jars, its --conf.

Otherwise the driver JVM is this process's child in a session of its own: a signal to
this process's group (Ctrl-C, systemd, Kubernetes) reaches only the Python driver, which
stops Spark in order (jobs/shutdown.py, `stop_spark`). The JVM exits when its standard
input closes, so it never outlives this process, however this process ends."""
from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
import weakref
from contextlib import contextmanager
from pathlib import Path

from cdc.config.models import Settings
from cdc.errors import ConfigError
from cdc.sinks import class_archive
from cdc.sinks.catalog import spark_catalog_conf

LOG_CONFIG = Path(__file__).parent / "log4j2.properties"
# The driver's heap is committed as far as G1 needs to keep its collections under 8% of the
# time (its default), up to `driver_memory`, and the JVM needs about 0.8 GB beside it: a
# backlog of 5M changes took the driver to 3.2 GB of resident memory with a 2 GB heap. With
# 20% allowed and free heap given back after a collection, it peaked at 2.5 to 2.7 GB, as fast.
# Given back down to half of `driver_memory` only (`driver_gc`): a heap shrunk to what is live
# made G1 mark it again and again, 0.7 CPU seconds for each batch of a few records (0.03 to
# 0.05 s with that floor).
DRIVER_GC = "-XX:GCTimeRatio=4 -XX:MaxHeapFreeRatio=30 -XX:MinHeapFreeRatio=10"
# `spark.driver.memory`'s units; a number alone is MiB, as Spark reads it
MEMORY_UNITS = {"": 1 << 20, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}
CODEGEN_CACHE_ENTRIES = 4000  # generated classes the driver keeps compiled (session_conf)


def driver_gc(driver_memory: str) -> str:
    """The driver JVM's collector options (DRIVER_GC), with an initial heap of half of
    `driver_memory` (none for a size that is not Spark's `<number>[k|m|g|t][b]`)."""
    found = re.fullmatch(r"(\d+)([kmgt]?)b?", driver_memory.strip().lower())
    if not found:
        return DRIVER_GC
    half_mb = int(found[1]) * MEMORY_UNITS[found[2]] // 2 >> 20
    return f"{DRIVER_GC} -Xms{half_mb}m" if half_mb else DRIVER_GC


def spark_log(settings: Settings):
    """The Spark driver's log file: every Java warning and error with its stack trace."""
    return settings.state_dir / "logs" / "spark.log"


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


def session_conf(settings: Settings, app_name: str = "cdc", given: dict[str, str] | None = None,
                 archive_at_exit: Path | None = None) -> dict[str, str]:
    """cdc's Spark properties, less those spark-submit was `given` (they win). A local driver
    JVM that cdc starts itself (nothing `given`) has the jars on its class path, where its
    class archive (sinks/class_archive.py) maps them in, instead of added to the session
    (and copied for its executor) at every start; `archive_at_exit` makes it write one."""
    given = given or {}
    s = settings.spark
    jars = [] if "spark.jars" in given else spark_jars(settings)
    on_class_path = not given and s.master.startswith("local")
    archive = "" if not on_class_path else f'"-XX:ArchiveClassesAtExit={archive_at_exit}" {class_archive.QUIET}' \
        if archive_at_exit else class_archive.java_options(settings, jars)
    class_path = os.pathsep.join([*jars, *filter(None, [s.extra_conf.get("spark.driver.extraClassPath")])])
    conf = {
        "spark.app.name": app_name,
        "spark.master": s.master,
        "spark.driver.memory": s.driver_memory,
        **({"spark.driver.extraClassPath": class_path} if on_class_path else
           {} if "spark.jars" in given else {"spark.jars": ",".join(jars)}),
        # Iceberg's and Delta Lake's SQL (MERGE, CALL, OPTIMIZE ...); Delta tables by path
        # (`delta.<path>`) through Delta's session catalog, Iceberg's under the catalog's name.
        "spark.sql.extensions": "org.apache.iceberg.spark.extensions.IcebergSparkSessionExtensions,"
                                "io.delta.sql.DeltaSparkSessionExtension",
        "spark.sql.catalog.spark_catalog": "org.apache.spark.sql.delta.catalog.DeltaCatalog",
        "spark.sql.session.timeZone": "UTC",
        "spark.sql.shuffle.partitions": str(s.shuffle_partitions),
        # Generated code is compiled once and kept (Spark keeps 100 classes by default). A
        # table's batches need tens of them, by its shape: with Spark's default, a hundred
        # tables of three widths compiled 20 to 30 classes a second, and the JIT then
        # compiled the new classes again; with 4000, none after their first batches.
        "spark.sql.codegen.cache.maxEntries": str(CODEGEN_CACHE_ENTRIES),
        # Partitions of a Delta table's log state when Spark rebuilds it (Delta's default: 50).
        "spark.databricks.delta.snapshotPartitions": str(s.shuffle_partitions),
        "spark.scheduler.mode": "FAIR",  # a batch's jobs run in a pool by its size (jobs/apply.size_pool)
        # A field that does not parse must not become a silent null (decoding/spark_decode.py).
        "spark.sql.json.enablePartialResults": "false",
        # The masking key's pads are binary literals in the plans of masked columns
        # (planning/protect.py): EXPLAIN, the SQL UI and event logs show them redacted.
        "spark.sql.redaction.string.regex": "(?i)(0x|x')[0-9a-f]{128}",
        # Without the Python call site kept for every Column function (a few py4j round
        # trips each), a batch's decode plan is built with a third of the round trips.
        "spark.python.sql.dataFrameDebugging.enabled": "false",
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
                                         f'"-Dcdc.spark.log={spark_log(settings)}" {driver_gc(s.driver_memory)}'
                                         f'{" " + archive if archive else ""}',
        "spark.executor.extraJavaOptions": "-Duser.timezone=UTC",  # a cluster's executors, as the driver
        # Local files (a local warehouse, the checkpoints) with their permissions set in the JVM:
        # Hadoop's own local file system runs a chmod process for each file it creates, two with
        # its checksum (about 10 ms a file), and a batch's commit creates several
        # (jvm/direct, LocalFiles).
        "spark.hadoop.fs.file.impl": "cdc.direct.LocalFiles",
        "spark.hadoop.fs.AbstractFileSystem.file.impl": "cdc.direct.LocalFiles$Context",
        **spark_catalog_conf(settings),
        **{k: v for k, v in s.extra_conf.items() if not (on_class_path and k == "spark.driver.extraClassPath")},
    }
    return {k: v for k, v in conf.items() if k not in given}


def get_session(settings: Settings, app_name: str = "cdc", archive_at_exit: Path | None = None,
                extra: dict[str, str] | None = None):
    """The one SparkSession of this process (created on first use), with `extra` properties;
    its JVM writes its class archive to `archive_at_exit` when given (`session_conf`)."""
    from pyspark.sql import SparkSession

    os.environ.setdefault("PYSPARK_PYTHON", os.sys.executable)
    if settings.spark.master.startswith("local"):
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    conf = {**session_conf(settings, app_name, submitted_conf(), archive_at_exit), **(extra or {})}
    launch_jvm(conf)
    builder = SparkSession.builder
    for k, v in conf.items():
        builder = builder.config(k, v)
    on_sigint = signal.getsignal(signal.SIGINT)
    spark = builder.getOrCreate()
    if threading.current_thread() is threading.main_thread() and on_sigint is not None:
        signal.signal(signal.SIGINT, on_sigint)  # a new SparkContext sets its own; cdc's (jobs/shutdown.py) stays
    spark.sparkContext.setLogLevel("WARN")
    return spark


def jvm_class(spark, name: str):
    """The JVM class of fully qualified `name`, looked up once per JVM: `spark._jvm.a.b.C`
    asks it for `a`, then `a.b` (each a failed class lookup over the whole class path), and
    even one lookup is a round trip to the JVM, several for every table a batch opens."""
    classes = _classes.setdefault(spark._jvm, {})
    found = classes.get(name)
    if found is None:
        found = classes[name] = getattr(spark._jvm, name)
    return found


_classes: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # a JVM's classes by name, for `jvm_class`


@contextmanager
def conf_for_block(spark, conf: dict[str, str], restore: bool = False):
    """The session's settings `conf` in this block only: unset after it (a setting outlives
    the statement it was meant for), or with `restore` set back to what the session had."""
    given = {k: spark.conf.get(k, None) for k in conf} if restore else {}
    for k, v in conf.items():
        spark.conf.set(k, v)
    try:
        yield
    finally:
        for k in conf:
            if given.get(k) is None:
                spark.conf.unset(k)
            else:
                spark.conf.set(k, given[k])


def make_active(spark) -> None:
    """`spark` as the calling thread's active session. Spark and Iceberg read a session's
    settings (the catalogs among them) through the thread's active session; a thread that
    did not create one has none, and they then see none of the settings."""
    jvm_class(spark, "org.apache.spark.sql.SparkSession").setActiveSession(spark._jsparkSession)


_launched: dict[str, subprocess.Popen] = {}  # "jvm": the driver JVM this process started


def launch_jvm(conf: dict[str, str]) -> None:
    """Start the driver JVM with `conf` in a session of its own, unless one is up already
    or spark-submit started this process (its JVM is this process's parent)."""
    from pyspark import SparkConf, SparkContext
    from pyspark.java_gateway import launch_gateway

    if SparkContext._gateway is not None or "PYSPARK_GATEWAY_PORT" in os.environ:
        return
    # PySpark adds a stdin pipe (the JVM's PythonGatewayServer exits at its end of file)
    # and makes the JVM ignore SIGINT; the new session keeps SIGTERM to the group away too.
    gateway = launch_gateway(SparkConf(loadDefaults=False).setAll(conf.items()),
                             popen_kwargs={"start_new_session": True})
    _launched["jvm"] = gateway.__dict__["proc"]  # not getattr: a JavaGateway looks unknown names up in the JVM
    SparkContext._ensure_initialized(gateway=gateway)


def stop_spark(timeout_s: float = 60) -> None:
    """Stop the SparkContext (its jobs cancelled), then the driver JVM this process started,
    and wait for both: after a stop signal, before the process exits."""
    if "pyspark" not in sys.modules:
        return
    from pyspark import SparkContext

    gateway = SparkContext._gateway

    def stop() -> None:
        sc = SparkContext._active_spark_context
        try:
            if sc is not None:
                sc.cancelAllJobs()
                sc.stop()
        except BaseException:  # noqa: BLE001 - the JVM is stopped below all the same
            pass
        if gateway is not None and _launched.get("jvm") is not None:
            # Closed before the JVM exits: py4j's client is then disconnected, so a call
            # still to come (its finalizer thread releasing Java objects, a callback
            # winding down) fails quietly instead of logging a reset connection.
            gateway.shutdown()

    # Its own thread, with its own py4j connection: an interrupted main thread's may be mid-call.
    stopping = threading.Thread(target=stop, name="cdc-stop-spark", daemon=True)
    stopping.start()
    stopping.join(timeout_s)
    jvm = _launched.pop("jvm", None)
    if jvm is None:
        return
    SparkContext._gateway = SparkContext._jvm = None  # a later session would start a JVM anew
    jvm.stdin.close()
    try:
        jvm.wait(timeout_s)
    except subprocess.TimeoutExpired:
        jvm.kill()
        jvm.wait()
