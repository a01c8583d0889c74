"""cdc: Debezium change events applied to Apache Iceberg with Spark MERGE."""
