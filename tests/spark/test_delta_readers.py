"""A Delta target with deletion vectors (cdc creates them on, and MERGE, UPDATE and DELETE
write them) read by delta-rs as cdc reads it (status, reconcile, tables list: its
DataFusion engine, `QueryBuilder` and `DeltaTable.scan`), equal to Spark; and the delta-rs
calls that refuse such a table, which docs/registrations.md names."""
from __future__ import annotations

import json

import pyarrow as pa
import pytest
from deltalake import DeltaTable
from deltalake.exceptions import DeltaProtocolError

from cdc.sinks import delta
from cdc.sources.types import Column
from tests.compare import delta_records


def deletion_vectors(path) -> int:
    """The live data files of the table's log that carry a deletion vector."""
    live: set[tuple[str, str]] = set()  # (path, its deletion vector): a new vector removes and adds the path
    for commit in sorted((path / "_delta_log").glob("*.json")):
        for line in commit.read_text().splitlines():
            action = json.loads(line)
            for kind, change in (("add", live.add), ("remove", live.discard)):
                if kind in action:
                    change((action[kind]["path"], json.dumps(action[kind].get("deletionVector"), sort_keys=True)))
    return sum(dv != "null" for _, dv in live)


def test_a_delta_target_with_deletion_vectors_is_read_by_delta_rs_as_spark_reads_it(spark, tmp_path):
    path = tmp_path / "dv_target"
    ref = delta.ref(path)
    spark.sql(delta.create_sql(ref, (Column("id", "long", nullable=False), Column("v", "string")), "upsert", (), {}))
    spark.sql(f"INSERT INTO {ref} (id, v, _cdc_op) SELECT id, CAST(id AS STRING), 'r' FROM range(100)")
    spark.sql(f"DELETE FROM {ref} WHERE id % 10 = 0")
    spark.sql(f"UPDATE {ref} SET v = 'changed', _cdc_op = 'u' WHERE id < 5")
    spark.range(95, 105).selectExpr("id", "'merged' AS v").createOrReplaceTempView("dv_changes")
    spark.sql(f"MERGE INTO {ref} t USING dv_changes s ON t.id = s.id WHEN MATCHED THEN UPDATE SET v = s.v "
              f"WHEN NOT MATCHED THEN INSERT (id, v, _cdc_op) VALUES (s.id, s.v, 'c')")
    assert deletion_vectors(path) > 0  # the file written first now has rows marked deleted
    assert "deletionVectors" in (DeltaTable(str(path)).protocol().reader_features or [])

    expected = sorted((r.id, r.v) for r in spark.read.format("delta").load(str(path)).select("id", "v").collect())
    assert len(expected) == 100 - 10 + 5 and (4, "changed") in expected and (97, "merged") in expected
    table = delta.open_table(path)
    assert delta.live_rows(table, "upsert") == len(expected)  # status's dead letters, reconcile's count
    assert sorted((r["id"], r["v"]) for r in delta_records(path)) == expected
    scanned = pa.table(DeltaTable(str(path)).scan(columns=["id", "v"]).read_all()).to_pylist()
    assert sorted((r["id"], r["v"]) for r in scanned) == expected
    assert delta.properties(table)["delta.enableDeletionVectors"] == "true"
    assert DeltaTable(str(path)).count() > len(expected)  # file statistics: rows marked deleted count
    # delta-rs's pyarrow Dataset path does not read deletion vectors: it refuses the table.
    for read in (lambda t: t.to_pyarrow_dataset(), lambda t: t.to_pyarrow_table(), lambda t: t.to_pandas()):
        with pytest.raises(DeltaProtocolError, match="deletionVectors"):
            read(DeltaTable(str(path)))
