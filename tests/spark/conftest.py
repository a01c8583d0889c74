"""Spark tier: the run's SparkSession with a scratch Iceberg catalog on a temp warehouse,
opened by pyiceberg too (the second reader)."""
from __future__ import annotations

import itertools

import pytest

SCRATCH = "scratch"
_names = itertools.count()


@pytest.fixture(scope="session")
def scratch(spark, tmp_path_factory):
    """(spark, pyiceberg catalog) for the scratch catalog."""
    from pyiceberg.catalog import load_catalog

    d = tmp_path_factory.mktemp("iceberg")
    (d / "warehouse").mkdir()
    prefix = f"spark.sql.catalog.{SCRATCH}"
    for k, v in {prefix: "org.apache.iceberg.spark.SparkCatalog", f"{prefix}.type": "jdbc",
                 f"{prefix}.uri": f"jdbc:sqlite:{d / 'catalog.db'}", f"{prefix}.jdbc.schema-version": "V1",
                 f"{prefix}.warehouse": (d / "warehouse").as_uri(), f"{prefix}.cache-enabled": "false"}.items():
        spark.conf.set(k, v)
    catalog = load_catalog(SCRATCH, type="sql", uri=f"sqlite:///{d / 'catalog.db'}",
                           warehouse=(d / "warehouse").as_uri())
    return spark, catalog


@pytest.fixture
def table_name():
    return f"t{next(_names)}"
