"""Both sinks implement the one interface (sinks/table.py) whole, and the jobs use it
without asking which format a table is in."""
from __future__ import annotations

import inspect
import re
from pathlib import Path

import pytest

from cdc.sinks.delta_target import DeltaTarget
from cdc.sinks.iceberg_target import IcebergTarget
from cdc.sinks.table import SinkTable

JOBS = Path(__file__).resolve().parents[2] / "cdc" / "jobs"
MEMBERS = [n for n, v in vars(SinkTable).items() if callable(v) and not n.startswith("_")]


@pytest.mark.parametrize("implementation", [IcebergTarget, DeltaTarget])
def test_each_sink_implements_every_method_of_the_interface_with_its_parameters(implementation):
    assert len(MEMBERS) > 30
    for name in MEMBERS:
        assert name in vars(implementation), f"{implementation.__name__} lacks {name}"
        wanted = list(inspect.signature(getattr(SinkTable, name)).parameters)
        assert list(inspect.signature(getattr(implementation, name)).parameters) == wanted, name
    assert isinstance(implementation.has_direct_path, bool)


def test_the_jobs_never_ask_which_format_a_table_is_in():
    asking = re.compile(r"format_of\(|\.sink\s*[!=]=|DeltaTarget|IcebergTarget|delta_target|iceberg_target")
    found = [f"{path.name}:{n}: {line.strip()}" for path in sorted(JOBS.glob("*.py"))
             for n, line in enumerate(path.read_text().splitlines(), 1) if asking.search(line)]
    assert not found, found
