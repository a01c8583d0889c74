"""The backlog section: a long outage's changes (5M, 500k with --quick) caught up by
`cdc run --available-now` with the default batch sizing, against the append limit, with
the number of batches and the driver JVM's peak memory while it ran."""
from __future__ import annotations

from pathlib import Path

from bench.workload import Events, changes, fill, jvm_pid, produce, registration, timed
from cdc.control import commits
from cdc.jobs.supervisor import run


def measure(spark, settings, catalog, template, key_doc, value_doc, sizes: dict,
            limit_events_per_s: int | None) -> dict:
    n, rows = sizes["backlog"], sizes["small"]
    reg = registration(settings, "backlog")  # no max_offsets_per_trigger: the job sizes its batches
    topic = fill(spark, settings, catalog, reg, template, rows)
    produced = produce(settings, topic, changes(Events(key_doc, value_doc), rows, n, seed=11))
    jvm = jvm_pid(spark)
    _reset_peak(jvm)
    seconds = timed(lambda: run(settings, [reg], available_now=True))
    peak_mb = _peak_mb(jvm)
    batches = sum(1 for s in catalog.load_table(reg.target).snapshots()
                  if commits.OFFSETS in s.summary.additional_properties) - 1  # the fill's commit
    rate = round(produced / seconds)
    print(f"backlog: {produced:,} events in {seconds:.1f}s, {rate:,} events/s in {batches} batches, "
          f"driver peak {peak_mb:,} MB", flush=True)
    figures = {"backlog_events": produced, "backlog_events_per_s": rate, "backlog_batches": batches,
               "backlog_peak_rss_mb": peak_mb}
    if limit_events_per_s:
        figures["backlog_vs_append_limit"] = round(rate / limit_events_per_s, 3)
    if produced >= 5_000_000:
        figures["backlog_5m_events_per_s"] = rate
    return figures


def _reset_peak(pid: int) -> None:
    """The process's peak resident memory starts again from now (Linux: clear_refs 5)."""
    try:
        Path(f"/proc/{pid}/clear_refs").write_text("5")
    except OSError:
        pass


def _peak_mb(pid: int) -> int | None:
    """The process's peak resident memory (VmHWM) in MB, None where /proc does not say."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return None
    kb = next((int(line.split()[1]) for line in status.splitlines() if line.startswith("VmHWM:")), None)
    return None if kb is None else kb // 1024
