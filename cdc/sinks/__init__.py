"""Targets of the apply step: Iceberg tables (the catalog both engines open)."""
