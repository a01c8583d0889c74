"""One Iceberg catalog, opened by Spark (JdbcCatalog) and pyiceberg (SqlCatalog) under
the same name, on the same SQLite file, with the same (V1) schema."""
from __future__ import annotations

from cdc.config.models import Settings


def pyiceberg_properties(settings: Settings) -> dict[str, str]:
    """What `pyiceberg.catalog.load_catalog(name, **props)` takes, `name` included."""
    c = settings.catalog
    return {
        "name": c.name,
        "type": "sql",
        "uri": f"sqlite:///{settings.path(c.path)}",
        "warehouse": settings.path(c.warehouse).as_uri(),
    }


def spark_catalog_conf(settings: Settings) -> dict[str, str]:
    c = settings.catalog
    prefix = f"spark.sql.catalog.{c.name}"
    return {
        prefix: "org.apache.iceberg.spark.SparkCatalog",
        f"{prefix}.type": "jdbc",
        f"{prefix}.uri": f"jdbc:sqlite:{settings.path(c.path)}",
        f"{prefix}.jdbc.schema-version": "V1",
        f"{prefix}.warehouse": settings.path(c.warehouse).as_uri(),
        # Other writers (maintenance, pyiceberg) commit too: always read the latest metadata.
        f"{prefix}.cache-enabled": "false",
    }


def load_catalog(settings: Settings):
    """The pyiceberg catalog (the second reader, and the way cdc creates tables)."""
    from pyiceberg.catalog import load_catalog as _load

    props = pyiceberg_properties(settings)
    settings.path(settings.catalog.path).parent.mkdir(parents=True, exist_ok=True)
    settings.path(settings.catalog.warehouse).mkdir(parents=True, exist_ok=True)
    name = props.pop("name")
    return _load(name, **props)
