"""A registered table's path as OpenLineage events: the capture job (`capture.<table>`,
Debezium's connector as `cdc register` configures it) reads the source table and writes the
topic; the apply job (`apply.<table>`, `cdc run`) reads the topic and writes the target.
Datasets are named as OpenLineage's naming spec says (postgres://host:port, mysql://host:port,
kafka://host:port, a table's storage location); each column's lineage says which columns are
masked on the way, and a facet of cdc's own (`cdc_protection`) lists the masked and excluded
columns and the masking key's fingerprint (never the key)."""
from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from urllib.parse import urlparse

import attr
from openlineage.client.event_v2 import InputDataset, Job, OutputDataset, Run, RunEvent, RunState
from openlineage.client.facet_v2 import (column_lineage_dataset, DatasetFacet, error_message_run, job_type_job,
                                         schema_dataset, symlinks_dataset)

PRODUCER = "urn:cdc"  # who emitted the event (a URI, as OpenLineage asks)
PROTECTION_SCHEMA = "urn:cdc:facets:protection:1"  # docs/schema/lineage-protection.schema.json
CAPTURE, APPLY = "capture", "apply"


@dataclass(frozen=True)
class Place:
    """A dataset as lineage names it."""

    namespace: str
    name: str


@dataclass(frozen=True)
class Flow:
    """A registered table's path: the source table, its topic and its target (by location,
    with the catalog's name for it), the columns that reach the target, in order, with
    their source types, and what is withheld on the way."""

    table: str  # the registration's name
    source: Place
    topic: Place
    target: Place
    target_alias: Place | None  # the catalog's name of the target (a symlink), if it has one
    columns: tuple[tuple[str, str], ...]  # (name, source type) of the columns that reach the target
    masked: tuple[str, ...]
    excluded: tuple[str, ...]
    mask_fingerprint: str | None
    masked_in_connector: bool  # the connector hashes the masked columns (else the job does)


@attr.define
class ProtectionDatasetFacet(DatasetFacet):
    """cdc's own facet: the columns withheld from a dataset (masked: keyed hashes; excluded:
    never captured) and the fingerprint of the masking key the hashes were made with."""

    masked: list[str] = attr.field(factory=list)
    excluded: list[str] = attr.field(factory=list)
    maskKeyFingerprint: str | None = attr.field(default=None)  # noqa: N815 - OpenLineage's camel case

    @staticmethod
    def _get_schema() -> str:
        return PROTECTION_SCHEMA


def place_of_location(location: str) -> Place:
    """A table stored at `location` (a URI or a local path), as OpenLineage's naming spec names
    one by its storage: `s3://bucket` and the key, `file` and the path."""
    url = urlparse(location)
    if url.scheme in ("", "file"):
        return Place("file", url.path.rstrip("/") or "/")
    return Place(f"{url.scheme}://{url.netloc}", url.path.strip("/"))


def place_of_source(kind: str, host: str, port: int, database: str, schema: str, table: str) -> Place:
    """A source table: PostgreSQL's as `database.schema.table`, MariaDB's as `database.table`
    (OpenLineage's MySQL naming: a MariaDB schema is its database)."""
    if kind == "postgresql":
        return Place(f"postgres://{host}:{port}", f"{database}.{schema}.{table}")
    return Place(f"mysql://{host}:{port}", f"{schema}.{table}")


def place_of_topic(bootstrap: str, topic: str) -> Place:
    """A Kafka topic, in the namespace of the first of the brokers it is reached through."""
    first = bootstrap.split(",")[0].strip()
    return Place(f"kafka://{first.split('://')[-1]}", topic)


def _schema(columns) -> schema_dataset.SchemaDatasetFacet:
    return schema_dataset.SchemaDatasetFacet(fields=[
        schema_dataset.SchemaDatasetFacetFields(name=name, type=kind) for name, kind in columns])


def _lineage(flow: Flow, source: Place, hashes: bool) -> column_lineage_dataset.ColumnLineageDatasetFacet:
    """Each column from its namesake in `source`: a masked column's as the masking
    transformation it goes through where this step `hashes` it, every other as the identity."""
    def transformation(name: str) -> column_lineage_dataset.Transformation:
        if name in flow.masked and hashes:
            return column_lineage_dataset.Transformation(
                type="DIRECT", subtype="TRANSFORMATION", masking=True,
                description="HMAC-SHA256 with the masking key" + (
                    f" (fingerprint {flow.mask_fingerprint})" if flow.mask_fingerprint else ""))
        return column_lineage_dataset.Transformation(type="DIRECT", subtype="IDENTITY", masking=False)

    return column_lineage_dataset.ColumnLineageDatasetFacet(fields={
        name: column_lineage_dataset.Fields(inputFields=[column_lineage_dataset.InputField(
            namespace=source.namespace, name=source.name, field=name, transformations=[transformation(name)])])
        for name, _ in flow.columns})


def _protection(flow: Flow, hashed: bool) -> ProtectionDatasetFacet:
    """What the dataset withholds: its masked columns when they are hashes there (`hashed`),
    the excluded ones always."""
    return ProtectionDatasetFacet(masked=sorted(flow.masked) if hashed else [], excluded=sorted(flow.excluded),
                                  maskKeyFingerprint=flow.mask_fingerprint, producer=PRODUCER)


def _job(namespace: str, kind: str, flow: Flow) -> Job:
    integration = "DEBEZIUM" if kind == CAPTURE else "SPARK"
    return Job(namespace=namespace, name=f"{kind}.{flow.table}", facets={
        "jobType": job_type_job.JobTypeJobFacet(processingType="STREAMING", integration=integration,
                                                jobType="CONNECTOR" if kind == CAPTURE else "JOB",
                                                producer=PRODUCER)})


def captured(namespace: str, flow: Flow, run_id: str, at: dt.datetime) -> RunEvent:
    """`cdc register` configured the capture of `flow.table`: source table -> topic. The topic's
    columns are the target's (the excluded ones are never captured); with `masked_in_connector`
    the masked ones are hashes from here on, else in clear until the job hashes them."""
    topic_facets = {"schema": _schema(flow.columns),
                    "columnLineage": _lineage(flow, flow.source, hashes=flow.masked_in_connector),
                    "cdc_protection": _protection(flow, hashed=flow.masked_in_connector)}
    return RunEvent(eventType=RunState.COMPLETE, eventTime=at.isoformat(), producer=PRODUCER,
                    run=Run(runId=run_id), job=_job(namespace, CAPTURE, flow),
                    inputs=[InputDataset(namespace=flow.source.namespace, name=flow.source.name)],
                    outputs=[OutputDataset(namespace=flow.topic.namespace, name=flow.topic.name, facets=topic_facets)])


def applied(namespace: str, flow: Flow, run_id: str, at: dt.datetime, state: str,
            error: str | None = None) -> RunEvent:
    """A run of `cdc run` for `flow.table` (`state`: START, COMPLETE or FAIL, with `error`):
    topic -> target."""
    facets = {"schema": _schema(flow.columns),
              "columnLineage": _lineage(flow, flow.topic, hashes=not flow.masked_in_connector),
              "cdc_protection": _protection(flow, hashed=True)}
    if flow.target_alias is not None:
        facets["symlinks"] = symlinks_dataset.SymlinksDatasetFacet(identifiers=[symlinks_dataset.Identifier(
            namespace=flow.target_alias.namespace, name=flow.target_alias.name, type="TABLE")])
    run_facets = {}
    if error is not None:
        run_facets["errorMessage"] = error_message_run.ErrorMessageRunFacet(
            message=error, programmingLanguage="PYTHON", producer=PRODUCER)
    return RunEvent(eventType=RunState(state), eventTime=at.isoformat(), producer=PRODUCER,
                    run=Run(runId=run_id, facets=run_facets), job=_job(namespace, APPLY, flow),
                    inputs=[InputDataset(namespace=flow.topic.namespace, name=flow.topic.name)],
                    outputs=[OutputDataset(namespace=flow.target.namespace, name=flow.target.name, facets=facets)])
