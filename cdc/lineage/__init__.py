"""OpenLineage events of registrations and runs (events.py: built from values, no I/O;
emit.py: sent where cdc.yaml's `lineage` says)."""
