"""The local stack: Kafka (KRaft), Kafka Connect with Debezium, PostgreSQL, as background
processes with logs and data under the state directory."""
