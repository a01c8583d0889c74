"""Decoding Debezium change events: the pure rules (envelope) and the same rules as Spark
expressions (spark_decode) for the row path."""
