"""The Delta sink's pure parts: where targets live, their DDL, and which commit's offsets
a job resumes from."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
from pydantic import ValidationError

from cdc.config.models import Settings, TableRegistration
from cdc.errors import ApplyError
from cdc.sinks import delta
from cdc.sources.types import Column


def commit(version, operation="MERGE", offsets=None, params=None):
    meta = json.dumps({"cdc.offsets": json.dumps({"t": {"0": offsets}})}) if offsets is not None else None
    return {"version": version, "operation": operation, "operationParameters": params or {}, "userMetadata": meta}


def test_the_newest_commit_with_offsets_is_where_a_job_resumes():
    commits = [commit(4, "OPTIMIZE"), commit(3, offsets=30), commit(2, offsets=20), commit(0, "CREATE TABLE")]
    assert json.loads(delta.committed_summary(commits)["cdc.offsets"]) == {"t": {"0": 30}}
    assert delta.committed_summary([commit(1, "SET TBLPROPERTIES"), commit(0, "CREATE TABLE")]) is None


def test_offsets_of_commits_a_restore_undid_no_longer_count():
    commits = [commit(5, "RESTORE", params={"version": "2"}), commit(4, offsets=40), commit(3, offsets=30),
               commit(2, offsets=20), commit(1, offsets=10)]
    assert json.loads(delta.committed_summary(commits)["cdc.offsets"]) == {"t": {"0": 20}}
    with pytest.raises(ApplyError, match="restored to a timestamp"):
        delta.committed_summary([commit(5, "RESTORE", params={"timestamp": "2026-01-01 00:00:00"}),
                                 commit(4, offsets=40)])


def test_targets_live_under_the_delta_root_and_are_named_by_quoted_path(tmp_path):
    settings = Settings(root=tmp_path, delta={"root": "lake/delta"})
    path = delta.location(settings, "shop.orders", "__cdc_deletes")
    assert path == tmp_path / "lake" / "delta" / "shop" / "orders__cdc_deletes"
    assert delta.ref(Path("/x/y")) == "delta.`/x/y`"
    for bad in ("s3://bucket/lake", "/tmp/a`b"):
        with pytest.raises(ValidationError, match="local or mounted directory"):
            Settings(delta={"root": bad})


def test_create_sql_has_the_columns_the_metadata_and_mode_columns_and_the_properties():
    columns = (Column("id", "int", nullable=False), Column("email", "string"), Column("n", "decimal", True, 10, 2))
    sql = delta.create_sql("delta.`/t`", columns, "soft_delete", ("email",), {"cdc.key": '["id"]', "cdc.note": "it's"})
    assert sql.startswith("CREATE TABLE delta.`/t` (`id` INT NOT NULL, `email` STRING, `n` DECIMAL(10,2), ")
    assert "`_cdc_position` STRING COMMENT" in sql and "`_cdc_source_ts` TIMESTAMP COMMENT" in sql
    assert "`_cdc_deleted` BOOLEAN" in sql and "USING delta" in sql
    assert "'delta.enableDeletionVectors' = 'true'" in sql and "'cdc.key' = '[\"id\"]'" in sql
    assert "'cdc.note' = 'it\\'s'" in sql  # a quote in a value cannot end the literal


def test_a_registration_names_its_sink():
    reg = TableRegistration(name="s.t", source={"schema": "s", "table": "t"}, sink="delta")
    assert reg.sink == "delta" and TableRegistration(name="s.t", source={"schema": "s", "table": "t"}).sink == "iceberg"
    with pytest.raises(ValidationError):
        TableRegistration(name="s.t", source={"schema": "s", "table": "t"}, sink="hudi")
