"""Bootstrap: filling a target from the source at a recorded consistent point (JDBC) or
through Debezium's incremental snapshot, after which streaming applies only later changes."""
