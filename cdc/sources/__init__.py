"""Source databases: connection, introspection of tables, and their types. Each kind
(`postgres`, `mariadb`) is a module with the same functions; `module_of` picks it."""
from __future__ import annotations

from cdc.config.clients import read_secret
from cdc.config.models import Settings, SourceSettings
from cdc.errors import ConfigError, SourceError


def no_key(schema: str, table: str, reg) -> ConfigError:
    """A source table without a primary key whose registration names no key columns."""
    return ConfigError(f"{schema}.{table} has no primary key and {reg.file or 'the registration'} gives no key "
                       f"columns", hint="add a primary key at the source, or name the key columns: `key:` in the "
                                        "registration, or `cdc tables add --key COL[,COL...]`")


def check_key_not_null(kind, reg, src) -> None:
    """Refused before capture: a key column the source allows NULL in (`src.nullable_key`;
    only a registration's own `key:` can name one, a primary key never holds NULL). A row
    with a NULL in its key matches no row by it (NULL equals nothing) and cannot be applied:
    its changes would only reach the dead letters. `kind`: the source's module."""
    if not src.nullable_key:
        return
    columns = [c for c in src.columns if c.name in src.nullable_key]
    named = ", ".join(src.nullable_key)
    one = len(src.nullable_key) == 1
    raise ConfigError(f"{reg.source.schema_}.{reg.source.table} (registration {reg.name}): key column{'' if one else 's'} "
                      f"{named} allow{'s' if one else ''} NULL, and a row with a NULL in its key cannot be applied "
                      f"by key: its changes would go to the dead letters",
                      hint=f"declare {'it' if one else 'them'} NOT NULL at the source "
                           f"({'; '.join(kind.not_null_sql(reg, c) for c in columns)}), or key the table by columns "
                           f"that are NOT NULL (`key:` in {reg.file or 'the registration'}, "
                           f"`cdc tables add --key COL[,COL...]`)")


def password(settings: Settings, source: SourceSettings, name: str) -> str:
    if source.password is None and source.password_file is not None \
            and not settings.path(source.password_file).is_file():
        raise SourceError(f"source {name!r}: password_file {settings.path(source.password_file)} does not exist",
                          hint="start the local stack (`cdc stack up`) or point password_file at the secret")
    secret = read_secret(settings, source.password, source.password_file, f"sources.{name}.password")
    if secret is not None:
        return secret
    raise ConfigError(f"source {name!r} has neither password nor password_file",
                      hint="set password: ${SOME_ENV_VAR} or password_file: PATH in cdc.yaml")


def module_of(settings: Settings, name: str):
    """The module of source `name`'s kind."""
    if settings.sources[name].kind == "mariadb":
        from cdc.sources import mariadb
        return mariadb
    from cdc.sources import postgres
    return postgres
