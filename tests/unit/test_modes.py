"""Registration modes and protected columns: validation, the SQL per mode, the masking key."""
from __future__ import annotations

import pytest
from pydantic import ValidationError

from cdc.config.models import MaskingSettings, Settings, TableRegistration
from cdc.errors import ConfigError
from cdc.planning.merge import history_merge_sql, merge_sql, truncate_sql
from cdc.planning.protect import mask_key, protected_columns
from cdc.sinks.iceberg import build_schema
from cdc.sinks.targets import check_protection, protection_properties
from cdc.sources.types import Column

SRC = {"name": "pg", "schema": "s", "table": "t"}
COLUMNS = (Column("id", "int", nullable=False), Column("email", "string"), Column("ssn", "string"))


def reg(**kw) -> TableRegistration:
    return TableRegistration(name="s.t", source=SRC, **kw)


def test_protected_columns_are_validated():
    with pytest.raises(ValidationError, match="both in exclude and in mask"):
        reg(mask=["email"], exclude=["email"])
    with pytest.raises(ValidationError, match="key column"):
        reg(key=["id"], mask=["id"])
    with pytest.raises(ValidationError, match="give a source column's name"):
        reg(mask=[""])
    assert reg(mask=["e mail"]).mask == ("e mail",)  # a source's name, any it allows
    with pytest.raises(ValidationError):
        reg(mode="scd2")
    with pytest.raises(ConfigError, match="does not have"):
        protected_columns(reg(exclude=["nope"]), COLUMNS, ("id",))
    with pytest.raises(ConfigError, match="cannot be excluded or masked"):
        protected_columns(reg(mask=["id"]), COLUMNS, ("id",))  # the key introspected from the source
    assert [c.name for c in protected_columns(reg(exclude=["ssn"], mask=["email"]), COLUMNS, ("id",))] == [
        "id", "email"]


def test_a_target_keeps_its_mode_and_protected_columns():
    props = protection_properties(reg(mode="history", mask=["email"]))
    check_protection(reg(mode="history", mask=["email"]), props)
    check_protection(reg(), {})  # a target from before modes: upsert, nothing masked
    with pytest.raises(ConfigError, match=r"mode history -> upsert; masked \[\"email\"\] -> \[\]"):
        check_protection(reg(), props)


def test_schema_per_mode():
    history = build_schema(COLUMNS, ("id",), "history", ("email",))
    names = [f.name for f in history.fields]
    assert names[-3:] == ["_cdc_valid_from", "_cdc_valid_to", "_cdc_current"]
    assert str(history.find_field("email").field_type) == "string" and not history.identifier_field_ids
    soft = build_schema(COLUMNS, ("id",), "soft_delete")
    assert soft.fields[-1].name == "_cdc_deleted" and soft.identifier_field_ids == [1]


def test_sql_per_mode():
    soft = merge_sql("t", "v", ("id",), ("id", "email"), mode="soft_delete")
    assert "THEN DELETE" not in soft and "t._cdc_deleted = true, t._cdc_op = 'd', t._cdc_position = s._position" in soft
    # a deleted row keeps the values of the batch's newest upsert when they are newer than its own
    assert ("t.`email` = CASE WHEN (s._values_at IS NOT NULL AND (t._cdc_position IS NULL OR "
            "s._values_at > t._cdc_position)) THEN s.`email` ELSE t.`email` END") in soft
    assert "`_cdc_deleted` = s._op = 'd'" in soft.replace("t.`_cdc_deleted`", "`_cdc_deleted`")
    # a key created and deleted within the batch is inserted, marked deleted
    assert "WHEN NOT MATCHED AND (s._op IN ('c', 'u', 'r') OR (s._op = 'd' AND s._values_at IS NOT NULL))" in soft
    assert "WHEN NOT MATCHED AND s._op IN ('c', 'u', 'r') AND" in merge_sql("t", "v", ("id",), ("id", "email"))
    assert "THEN DELETE" in merge_sql("t", "v", ("id",), ("id", "email"))
    hist = history_merge_sql("t", "v", ("id",), ("id", "email"))
    assert "ON t.`id` = s.`id` AND s._role = 'c' AND t._cdc_current" in hist
    assert "s._source_ts, s._valid_to, s._last" in hist
    assert truncate_sql("t", "0a", "soft_delete").startswith("UPDATE t SET _cdc_deleted = true, _cdc_op = 't'")
    assert "timestamp_millis(1700000000000)" in truncate_sql("t", "0a", "history", 1_700_000_000_000)
    with pytest.raises(ValueError):
        truncate_sql("t", "x' OR 1=1 --", "soft_delete")


def test_the_masking_key_comes_from_the_environment_or_a_file(tmp_path, monkeypatch):
    masked = reg(mask=["email"])
    assert mask_key(Settings(), reg()) is None
    with pytest.raises(ConfigError, match="no masking key"):
        mask_key(Settings(), masked)
    assert mask_key(Settings(masking=MaskingSettings(key="k1")), masked) == b"k1"
    (tmp_path / "key").write_text("k2\n")
    assert mask_key(Settings(root=tmp_path, masking=MaskingSettings(key_file="key")), masked) == b"k2"
    with pytest.raises(ConfigError, match="does not exist"):
        mask_key(Settings(root=tmp_path, masking=MaskingSettings(key_file="missing")), masked)
    assert "k1" not in repr(Settings(masking=MaskingSettings(key="k1")))
