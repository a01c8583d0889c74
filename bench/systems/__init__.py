"""Peer systems end to end on the same Debezium topic: each peer's own pipeline, in its own
virtualenv, from the earliest offset to a committed lake table, timed and checked row for
row against the truth computed from the events. `python -m bench.systems`."""
