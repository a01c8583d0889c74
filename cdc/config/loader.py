"""Load cdc.yaml and tables/*.yaml into the frozen models, with errors that name the file,
the key and the value."""
from __future__ import annotations

import os
import re
from collections.abc import Iterable
from dataclasses import dataclass
from fnmatch import fnmatchcase
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from cdc.config.models import SECRET_PROPERTY, Settings, TableRegistration
from cdc.errors import ConfigError

ENV_REF = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")
DEFAULT_CONFIG = "cdc.yaml"
# Keys whose value is never echoed in an error: passwords, catalog credentials and tokens,
# the masking key, secret catalog properties.
SECRET_KEY = re.compile(SECRET_PROPERTY.pattern + r"|(^|\.)(api_)?key$", re.IGNORECASE)


# Secrets read only by the commands that use them (config.clients.read_secret): an unset
# reference there becomes UNSET + the variable's name until then, so `cdc stack down`
# needs no masking key.
READ_WHEN_USED = re.compile(r"\.(sources\.[^.]+\.password|kafka\.security\.(password|keystore_password)|"
                            r"(connect|schema_registry)\.password|masking\.key|lineage\.api_key)$")
UNSET = "\x00cdc-unset-variable:"


def unset_error(where: str, name: str) -> ConfigError:
    return ConfigError(f"{where} refers to ${{{name}}}, which is not set in the environment",
                       hint=f"export {name}=... before running cdc")


def expand_env(value: Any, where: str, lazy_secrets: bool = False) -> Any:
    """Replace ${NAME} in every string with the environment variable NAME. With
    `lazy_secrets`, a secret that READ_WHEN_USED names and whose variable is unset is kept
    as UNSET + NAME, for `read_secret` to refuse when a command reads it."""
    if isinstance(value, dict):
        return {k: expand_env(v, f"{where}.{k}", lazy_secrets) for k, v in value.items()}
    if isinstance(value, list):
        return [expand_env(v, f"{where}[{i}]", lazy_secrets) for i, v in enumerate(value)]
    if isinstance(value, str):
        missing = next((m.group(1) for m in ENV_REF.finditer(value) if m.group(1) not in os.environ), None)
        if missing is not None:
            if lazy_secrets and READ_WHEN_USED.search(where):
                return UNSET + missing
            raise unset_error(where, missing)
        return ENV_REF.sub(lambda m: os.environ[m.group(1)], value)
    return value


class _UniqueKeyLoader(yaml.SafeLoader):
    """YAML's safe loader, refusing a mapping that names a key twice (the last would win)."""

    def construct_mapping(self, node, deep=False):
        seen: dict = {}
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=True)
            if not isinstance(key, (str, int, float, bool)) or key is None:
                continue  # the safe loader refuses an unhashable key itself
            if key in seen:
                lines = f"lines {seen[key] + 1} and {key_node.start_mark.line + 1}"
                raise yaml.constructor.ConstructorError(None, None, f"key {key!r} is given twice ({lines})",
                                                        key_node.start_mark)
            seen[key] = key_node.start_mark.line
        return super().construct_mapping(node, deep)


def _read_yaml(path: Path) -> dict:
    try:
        data = yaml.load(path.read_text(encoding="utf-8"), Loader=_UniqueKeyLoader) or {}
    except FileNotFoundError:
        raise ConfigError(f"{path} does not exist", hint="pass --config PATH or run from the repository root")
    except UnicodeDecodeError as e:
        raise ConfigError(f"{path} is not UTF-8 text: byte 0x{e.object[e.start]:02x} at offset {e.start} is not "
                          f"valid UTF-8", hint="save the file as UTF-8") from None
    except yaml.YAMLError as e:
        raise ConfigError(f"{path} is not valid YAML: {e}")
    if not isinstance(data, dict):
        raise ConfigError(f"{path} must hold a mapping at the top level, found {type(data).__name__}")
    return data


def describe(e: ValidationError, path: Path) -> str:
    """One line per problem: file, dotted key, what is wrong, the current value."""
    lines = []
    for err in e.errors():
        loc = ".".join(str(p) for p in err["loc"]) or "(top level)"
        if err["type"] == "extra_forbidden":
            lines.append(f"{path}: unknown key {loc!r}")
        elif err["type"] == "missing":
            lines.append(f"{path}: {loc} is required")
        else:
            msg = err["msg"].removeprefix("Value error, ")
            value = err.get("input")
            # Never echo secrets, nor whole sections (they may hold one).
            shown = "" if isinstance(value, (dict, list)) or SECRET_KEY.search(loc) else f" (current value: {value!r})"
            lines.append(f"{path}: {loc}: {msg}{shown}")
    return "\n".join(lines)


def load_settings(path: str | Path | None = None) -> Settings:
    path = Path(path or os.environ.get("CDC_CONFIG") or DEFAULT_CONFIG).resolve()
    data = expand_env(_read_yaml(path), path.name, lazy_secrets=True)
    data.pop("root", None)
    try:
        return Settings(root=path.parent, **data)
    except ValidationError as e:
        raise ConfigError(describe(e, path)) from None


@dataclass(frozen=True)
class InvalidRegistration:
    """A registration file that does not load: the table it is named after, and why."""

    name: str  # the file's name without .yaml
    file: Path
    error: ConfigError


def _load_registration(settings: Settings, f: Path) -> TableRegistration:
    data = expand_env(_read_yaml(f), f.name)
    try:
        reg = TableRegistration(file=f, **data)
    except ValidationError as e:
        raise ConfigError(describe(e, f)) from None
    if f.name != f"{reg.name}.yaml":
        raise ConfigError(f"{f}: the file of table {reg.name!r} must be named {reg.name}.yaml")
    return resolve_source(reg, settings)


def load_tables(settings: Settings, only: str | Iterable[str] | None = None,
                invalid: list[InvalidRegistration] | None = None) -> list[TableRegistration]:
    """Every registration under tables_dir, validated against the sources of `settings`; or
    those `only` selects: a name or several, or fnmatch patterns such as `shop.*`. A file
    that does not load raises, unless `invalid` is given: then it is left out, and added
    to `invalid` when selected (one bad file is that table's problem, not every table's)."""
    tables_dir = settings.path(settings.tables_dir)
    files = sorted(tables_dir.glob("*.yaml")) if tables_dir.is_dir() else []
    tables, broken = [], []
    for f in files:
        try:
            tables.append(_load_registration(settings, f))
        except ConfigError as e:
            if invalid is None:
                raise
            broken.append(InvalidRegistration(f.stem, f, e))
    if only is None:
        chosen = {t.name for t in tables} | {b.name for b in broken}
    else:
        chosen = set()
        for wanted in [only] if isinstance(only, str) else only:
            pattern = is_pattern(wanted)
            found = {n for n in [t.name for t in tables] + [b.name for b in broken]
                     if (fnmatchcase(n, wanted) if pattern else n == wanted)}
            if not found:
                names = ", ".join(f.stem for f in files) or "(none registered)"
                raise ConfigError(f"no registered table {'matches' if pattern else 'named'} {wanted!r} under "
                                  f"{tables_dir}", hint=f"pick one of: {names}" if pattern else
                                  f"add {tables_dir}/{wanted}.yaml, or pick one of: {names}")
            chosen |= found
    if invalid is not None:
        invalid.extend(b for b in broken if b.name in chosen)
    return [t for t in tables if t.name in chosen]


def is_pattern(name: str) -> bool:
    """A table selection with fnmatch's wildcards (`*`, `?`, `[...]`), not a name."""
    return any(c in name for c in "*?[")


def resolve_source(reg: TableRegistration, settings: Settings) -> TableRegistration:
    name = reg.source.name
    if name is None:
        if len(settings.sources) != 1:
            raise ConfigError(f"{reg.file}: source.name is required because cdc.yaml defines "
                              f"{len(settings.sources)} sources ({', '.join(settings.sources) or 'none'})")
        name = next(iter(settings.sources))
    elif name not in settings.sources:
        raise ConfigError(f"{reg.file}: unknown source {name!r}",
                          hint="sources defined in cdc.yaml: " + (", ".join(settings.sources) or "none"))
    return reg.model_copy(update={"source": reg.source.model_copy(update={"name": name})})
