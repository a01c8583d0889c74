"""Targets of the apply step: Iceberg tables (the catalog both engines open) and Delta Lake
tables, and the SparkSession that writes them."""
