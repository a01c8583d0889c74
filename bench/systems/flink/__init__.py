"""The Flink SQL peers, into Apache Iceberg and Apache Paimon (run in their own virtualenv, .cache/peers/flink/)."""
