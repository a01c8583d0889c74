"""Shared fixtures: one SparkSession and one local stack per test run.

Under CI=true nothing skips: a missing service fails the run."""
from __future__ import annotations

import os
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
IN_CI = os.environ.get("CI", "").lower() in ("1", "true", "yes")


def pytest_collection_modifyitems(config, items):
    for item in items:
        tier = Path(str(item.fspath)).parent.name
        if tier in ("spark", "integration"):
            item.add_marker(getattr(pytest.mark, tier))


@pytest.fixture(scope="session")
def settings():
    from cdc.config import load_settings

    return load_settings(ROOT / "cdc.yaml")


@pytest.fixture(scope="session")
def spark(settings):
    """The run's one SparkSession (the same one `cdc run` in-process gets)."""
    from cdc.jobs.session import get_session

    session = get_session(settings, app_name="cdc-tests")
    yield session
    session.stop()


@pytest.fixture(scope="session")
def stack(settings):
    """The local stack, started if it is not running (idempotent)."""
    from cdc.errors import StackError
    from cdc.stack.manager import Stack

    stack = Stack(settings)
    try:
        stack.up()
    except StackError as e:
        if IN_CI:
            raise
        pytest.skip(f"local stack unavailable: {e}")
    return stack
