"""The Apache Iceberg Kafka Connect sink peer: a Connect worker of its own, its reader in
.cache/peers/iceberg_connect/."""
