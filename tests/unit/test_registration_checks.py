"""What `cdc tables add` writes, `cdc register` takes: key columns by the loader's own
check, a key column that allows NULL refused by both, one bad file never blocking the
others."""
from contextlib import nullcontext

import pytest

from cdc.cli.main import main
from cdc.config import load_settings
from cdc.errors import ConfigError
from cdc.sources import postgres
from cdc.sources.postgres import SourceTable
from cdc.sources.types import Column


@pytest.fixture
def project(tmp_path, monkeypatch):
    """A cdc.yaml with one PostgreSQL source and two good registrations, as the current directory."""
    (tmp_path / "cdc.yaml").write_text("sources:\n  shop:\n    kind: postgresql\n    database: shop\n    user: cdc\n")
    (tmp_path / "tables").mkdir()
    for name in ("shop.orders", "shop.lines"):
        (tmp_path / "tables" / f"{name}.yaml").write_text(
            f"name: {name}\nsource: {{schema: public, table: {name.split('.')[1]}}}\n")
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("CDC_CONFIG", raising=False)
    return tmp_path


class FakeSource:
    """A source module whose one table is `described`, and says its NOT NULL statement as PostgreSQL does."""

    def __init__(self, described: SourceTable):
        self.described = described
        self.not_null_sql = postgres.not_null_sql

    def connect(self, settings, name):
        return nullcontext(None)

    def describe_table(self, conn, reg):
        return self.described


def add(project, monkeypatch, described: SourceTable, **options):
    import cdc.register.tables

    monkeypatch.setattr(cdc.register.tables, "module_of", lambda settings, name: FakeSource(described))
    return cdc.register.tables.add(load_settings(project / "cdc.yaml"), "public", "odd", **options)


def test_tables_add_refuses_a_key_column_register_would_refuse(project, monkeypatch):
    odd = SourceTable((Column("k'1", "int", nullable=False), Column("v", "string")), ("k'1",))
    with pytest.raises(ConfigError) as refused:
        add(project, monkeypatch, odd)
    message = str(refused.value)
    assert "key column \"k'1\" is not a plain identifier" in message, message
    assert "rename the column at the source, or key the table by other columns" in message, message
    assert "not written" in message and not (project / "tables" / "public.odd.yaml").exists()
    # Keyed by another column, it is written, and the loader takes what was written.
    path = add(project, monkeypatch, SourceTable(odd.columns, ("v",)), key=("v",))
    assert [t.key for t in load_settings_tables(project) if t.name == "public.odd"] == [("v",)], path.read_text()


def load_settings_tables(project):
    from cdc.config import load_tables

    return load_tables(load_settings(project / "cdc.yaml"))


def test_a_key_column_that_allows_null_is_refused_with_its_remedy(project, monkeypatch):
    nk = SourceTable((Column("a", "int"), Column("b", "string")), ("a", "b"), nullable_key=("a", "b"))
    with pytest.raises(ConfigError) as refused:
        add(project, monkeypatch, nk, key=("a", "b"))
    message = str(refused.value)
    assert "public.odd (registration public.odd): key columns a, b allow NULL" in message, message
    assert 'ALTER TABLE "public"."odd" ALTER COLUMN "a" SET NOT NULL; ALTER TABLE "public"."odd" ALTER COLUMN "b" ' \
           'SET NOT NULL' in message, message
    assert "or key the table by columns that are NOT NULL" in message, message
    assert not (project / "tables" / "public.odd.yaml").exists()
    one = SourceTable(nk.columns, ("a", "b"), nullable_key=("b",))
    with pytest.raises(ConfigError, match="key column b allows NULL"):
        add(project, monkeypatch, one, key=("a", "b"))


def test_register_goes_on_past_a_registration_that_does_not_load(project, monkeypatch, capsys):
    import cdc.register.registrar

    registered = []
    monkeypatch.setattr(cdc.register.registrar, "register",
                        lambda settings, tables, **options: registered.append(sorted(t.name for t in tables)))
    bad = project / "tables" / "shop.odd.yaml"
    bad.write_text("name: shop.odd\nsource: {schema: public, table: odd}\nkey: [\"k'1\"]\n")
    assert main(["register"]) == 2
    assert registered == [["shop.lines", "shop.orders"]]
    err = capsys.readouterr().err
    assert "table(s) shop.odd not registered: their registration does not load" in err, err
    assert f"{bad}: key: key column \"k'1\" is not a plain identifier" in err, err
    assert main(["register", "--table", "shop.odd"]) == 2 and registered == [["shop.lines", "shop.orders"]]
    bad.unlink()
    assert main(["register"]) == 0 and registered[-1] == ["shop.lines", "shop.orders"]

