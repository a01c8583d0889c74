"""`cdc register`: Debezium connectors through Connect's REST API, Iceberg targets, and
the sources' capture health."""
