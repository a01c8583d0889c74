"""`cdc replay`: a window of a table's topic read again and applied again, up to the topic's
current end, under the table's lock."""
from __future__ import annotations

import shutil
import sys
import time

from cdc.config.clients import kafka_access
from cdc.config.models import Settings, TableRegistration
from cdc.control import jobstate
from cdc.control.replay import check_start, window as replay_window
from cdc.jobs.failures import diagnose
from cdc.jobs.queries import Queries
from cdc.jobs.targets import open_target
from cdc.log import log
from cdc.register.connector import topic_for
from cdc.control.kafka import offsets_at, watermarks
from cdc.sinks.session import get_session


def replay(settings: Settings, reg: TableRegistration, **window_args) -> None:
    """Re-read a window of the table's topic up to its current end and re-apply it.
    Position guards and the delete memory keep newer rows and deleted keys as they are;
    the committed offsets and position never go backwards."""
    with jobstate.exclusive(settings.state_dir, [reg.name]):
        _replay(settings, reg, **window_args)


def _replay(settings: Settings, reg: TableRegistration, **window_args) -> None:
    topic = topic_for(reg.source.name, reg)
    check_start(topic, watermarks(kafka_access(settings), topic),  # before Spark starts
                offsets_at=lambda ms: offsets_at(kafka_access(settings), topic, ms), **window_args)
    spark = get_session(settings).newSession()
    target = open_target(spark, settings, reg)
    start = replay_window(target.topic, list(target.partitions), **window_args)
    checkpoint = settings.path(settings.spark.checkpoint_dir) / f"{reg.name}.replay-{int(time.time() * 1000)}"
    queries = Queries(spark, settings)
    query = queries.stream(spark, reg, target, checkpoint, start, available_now=True, skip_committed=False)
    try:
        query.awaitTermination()
    except Exception as e:  # noqa: BLE001 - StreamingQueryException from py4j
        raise diagnose(settings, reg, reg.name, e) from None
    finally:
        queries.stop(reg.name, query)  # interrupted: the batch under way commits first
    shutil.rmtree(checkpoint, ignore_errors=True)
    log(f"replayed up to the end of {target.topic}", table=reg.name, event="replayed", stream=sys.stdout)
