"""Spark jobs: one streaming query per registered table, the batch apply, maintenance, and
their metrics."""
