"""Spark jobs: the session, and one streaming query per registered table."""
