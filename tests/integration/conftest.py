"""Integration tier: see tests/conftest.py for the run's own source on the real stack (`it_env`)."""
