"""Peer systems end to end on the same Debezium topic: each peer's own pipeline, in its own
virtualenv, from the earliest offset to a committed lake table, timed and checked row for
row against the truth computed from the events. `python -m bench.systems`."""

SECTIONS = ("systems", "systems_freshness")  # the sections of latest.json it writes


def owns(key: str) -> bool:
    """Whether a figure of latest.json is one `python -m bench.systems` writes, which a whole
    `python -m bench` run keeps."""
    return key.startswith(("peer_", "systems_")) or (
        key.startswith("cdc_vs_") and key.endswith(("_events_per_s", "_freshness_p95")))
