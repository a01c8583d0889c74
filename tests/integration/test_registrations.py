"""Registrations are data: what a source names never becomes configuration, a target has
one owner, and a refused registration changes nothing."""
from __future__ import annotations

import yaml

HOSTILE = {  # column names PostgreSQL accepts, each a piece of YAML or a comment's end
    "newline": "zz\ntarget: shop.customers\nsink: delta\n#",
    "hash": "a # b",
    "quotes": "it's \"quoted\"",
    "flow": "{key: [x]}",
    "separator": "line\u2028sep\u0085next",
    "carriage": "cr\rhere",
}


def test_tables_add_writes_only_what_cdc_decided(it_env):
    env, s = it_env, it_env.schema
    columns = ", ".join('"' + name.replace('"', '""') + '" text' for name in HOSTILE.values())
    env.sql(f'CREATE TABLE "{s}".hostile (id int PRIMARY KEY, {columns})')
    env.sql(f'INSERT INTO "{s}".hostile VALUES (1, ' + ", ".join(f"'{k}'" for k in HOSTILE) + ")")
    assert env.cdc("tables", "add", "--schema", s, "--table", "hostile") == 0
    path = env.settings.path(env.settings.tables_dir) / f"{s}.hostile.yaml"
    written = path.read_text()
    assert yaml.safe_load(written) == {"name": f"{s}.hostile", "source": {"schema": s, "table": "hostile"},
                                       "key": ["id"]}
    head, body = written.split("\nname: ", 1)
    assert all(line.startswith("#") for line in head.split("\n")), written  # comments only, one per column
    assert len(head.split("\n")) == 2 + 1 + len(HOSTILE) and written.isascii()
    # The names as data: the table registers and replicates every column.
    assert env.cdc("register", "--table", f"{s}.hostile") == 0
    env.replicate("hostile", env.transaction(f'UPDATE "{s}".hostile SET "{HOSTILE["hash"]}" = \'changed\''))
    assert env.assert_equal("hostile") == 1
