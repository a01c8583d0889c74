"""One Iceberg catalog, opened by Spark (SparkCatalog) and pyiceberg under the same name.
sqlite: Iceberg's JdbcCatalog and pyiceberg's SqlCatalog on the same SQLite file, with the
same (V1) schema. rest: both engines' REST clients on the same REST catalog, with the same
catalog properties (FileIO, s3.*, ...)."""
from __future__ import annotations

from pathlib import Path

from cdc.config.models import Settings

# Spark's default spark.redaction.regex, plus REST catalog credentials (OAuth2 client
# secrets), which it does not match: keeps them out of the UI and event logs.
REDACTION_REGEX = "(?i)secret|password|token|access[.]?key|credential"


def _rest_properties(settings: Settings) -> dict[str, str]:
    """A REST catalog's properties, as both engines take them (secrets in clear)."""
    c = settings.catalog
    props = {"uri": c.uri}
    if c.warehouse is not None:
        props["warehouse"] = str(c.warehouse)  # as given: a URI, a path or a warehouse name
    for key in ("credential", "token"):
        secret = getattr(c, key)
        if secret is not None:
            props[key] = secret.get_secret_value()
    return {**props, **c.properties}


def pyiceberg_properties(settings: Settings) -> dict[str, str]:
    """What `pyiceberg.catalog.load_catalog(name, **props)` takes, `name` included."""
    c = settings.catalog
    if c.type == "rest":
        return {"name": c.name, "type": "rest", **_rest_properties(settings)}
    return {
        "name": c.name,
        "type": "sql",
        "uri": f"sqlite:///{settings.path(c.path)}",
        "warehouse": settings.path(c.warehouse).as_uri(),
    }


def spark_catalog_conf(settings: Settings) -> dict[str, str]:
    c = settings.catalog
    prefix = f"spark.sql.catalog.{c.name}"
    if c.type == "rest":
        props = {"type": "rest",
                 "cache-enabled": "false",  # other writers commit too: always read the latest metadata
                 **_rest_properties(settings)}
        return {prefix: "org.apache.iceberg.spark.SparkCatalog",
                **{f"{prefix}.{k}": v for k, v in props.items()},
                "spark.redaction.regex": REDACTION_REGEX}
    return {
        prefix: "org.apache.iceberg.spark.SparkCatalog",
        f"{prefix}.type": "jdbc",
        f"{prefix}.uri": f"jdbc:sqlite:{settings.path(c.path)}",
        f"{prefix}.jdbc.schema-version": "V1",
        f"{prefix}.warehouse": settings.path(c.warehouse).as_uri(),
        # Other writers (maintenance, pyiceberg) commit too: always read the latest metadata.
        f"{prefix}.cache-enabled": "false",
    }


def local_dirs(settings: Settings) -> list[Path]:
    """The directories the catalog needs on this machine (a REST catalog: none)."""
    c = settings.catalog
    if c.type != "sqlite":
        return []
    return [settings.path(c.path).parent, settings.path(c.warehouse)]


def load_catalog(settings: Settings):
    """The pyiceberg catalog (the second reader, and the way cdc creates tables)."""
    from pyiceberg.catalog import load_catalog as _load

    props = pyiceberg_properties(settings)
    for d in local_dirs(settings):
        d.mkdir(parents=True, exist_ok=True)
    name = props.pop("name")
    return _load(name, **props)
