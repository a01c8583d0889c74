"""The sample shop database that `make run` replicates."""
