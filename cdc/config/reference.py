"""The configuration reference, generated from the models: every key of cdc.yaml and of a
table registration with its type, default and the description on its field, as Markdown
under docs/reference/ and as JSON Schema under docs/schema/.

    python -m cdc.config.reference [REPO_ROOT]     (`make docs`)

`documents()` builds the files without writing them; tests/unit/test_reference.py holds
the committed files equal to it."""
from __future__ import annotations

import inspect
import json
import sys
from dataclasses import dataclass
from pathlib import Path

from pydantic import BaseModel

from cdc.config.models import MIB, Settings, TableRegistration

COMMAND = "make docs"
GENERATED = (f"Generated from cdc/config/models.py by `{COMMAND}` (python -m cdc.config.reference): edit the "
             f"models, not this file.")
REPO = Path(__file__).resolve().parents[2]
SCHEMA_DIALECT = "https://json-schema.org/draft/2020-12/schema"
ENV_NOTE = ("A `${NAME}` in any string is replaced with the environment variable NAME before the file is "
            "validated (an unset one is an error); config provider references such as `${file:PATH:KEY}` or "
            "`${env:NAME}` are kept as written, for Kafka Connect.")
EXPANDED_NOTE = ("The JSON Schema describes the values after that expansion: a reference is valid as written "
                 "where a string goes.")
SECRETS_NOTE = ("Secrets never go in the file: `password: ${ENV_NAME}` reads the environment, "
                "`password_file: PATH` a file.")
# The minimal registration (validated against the schema by tests/unit/test_reference.py).
MINIMAL_REGISTRATION = """\
name: shop.orders
source:
  schema: shop
  table: orders
"""


@dataclass(frozen=True)
class Document:
    """One file cdc.config.reference writes."""

    model: type[BaseModel]
    title: str  # what the file describes: cdc.yaml, tables/<namespace>.<table>.yaml
    heading: str  # the reference's title
    reference: str  # the Markdown reference, relative to the repository
    schema: str  # the JSON Schema, relative to the repository
    intro: str  # Markdown after the model's docstring


DOCUMENTS = (
    Document(Settings, "cdc.yaml", "Configuration reference: `cdc.yaml`", "docs/reference/configuration.md",
             "docs/schema/cdc.schema.json",
             f"{SECRETS_NOTE} {ENV_NOTE}\n\n"
             f"JSON Schema: [docs/schema/cdc.schema.json](../schema/cdc.schema.json) (for an editor: "
             f"`# yaml-language-server: $schema=docs/schema/cdc.schema.json` as the first line of the repository's "
             f"cdc.yaml). {EXPANDED_NOTE}"),
    Document(TableRegistration, "tables/<namespace>.<table>.yaml",
             "Registration reference: `tables/<namespace>.<table>.yaml`", "docs/reference/registration.md",
             "docs/schema/table.schema.json",
             f"The smallest registration:\n\n```yaml\n{MINIMAL_REGISTRATION}```\n\n{ENV_NOTE}\n\n"
             f"JSON Schema: [docs/schema/table.schema.json](../schema/table.schema.json). {EXPANDED_NOTE} Unknown "
             f"keys are refused, with the file and the key named."),
)


def documents() -> dict[str, str]:
    """Every generated file's path (relative to the repository) and text."""
    out = {}
    for doc in DOCUMENTS:
        schema = json_schema(doc)
        out[doc.reference] = reference(doc, schema)
        out[doc.schema] = json.dumps(schema, indent=2, sort_keys=True, ensure_ascii=False) + "\n"
    return out


def json_schema(doc: Document) -> dict:
    """pydantic's validation schema of the model, under a title and the generated mark."""
    schema = doc.model.model_json_schema(mode="validation")
    schema.update({"$comment": GENERATED, "$schema": SCHEMA_DIALECT, "title": doc.title,
                   "description": f"{docstring(doc.model)}\n\n{ENV_NOTE} {EXPANDED_NOTE}"})
    return schema


# Markdown


def reference(doc: Document, schema: dict) -> str:
    lines = [f"<!-- {GENERATED} -->", f"# {doc.heading}", "", text(docstring(doc.model)), "", doc.intro, ""]
    for path, model, properties in sections(doc.model, schema):
        heading = f"`{path}`" if path else "Top level"
        lines += [f"## {heading}", ""]
        if path:
            lines += [text(docstring(model)), ""]
        lines += ["| key | type | default | description |", "|---|---|---|---|"]
        for name, field_name, prop in properties:
            key = f"{path}.{name}" if path else name
            field = model.model_fields[field_name]
            cells = [f"`{key}`", type_name(prop, schema["$defs"]), default(field), field.description or ""]
            lines.append("| " + " | ".join(cell(c) for c in cells) + " |")
        lines.append("")
    return "\n".join(lines)


def sections(model: type[BaseModel], schema: dict, path: str = ""):
    """(dotted path, model, [(key, field name, JSON Schema property)]) for `model` and every
    model below it, depth first in the order of the fields."""
    own = _own_schema(model, schema)
    rows, below = [], []
    for field_name in _field_order(model):
        field = model.model_fields[field_name]
        key = field.alias or field_name
        if key not in own["properties"]:
            continue  # not a key of the file (set by the loader)
        rows.append((key, field_name, own["properties"][key]))
        dotted = f"{path}.{key}" if path else key
        if _nested_model(field.annotation) is not None:
            below.append((dotted, _nested_model(field.annotation)))
        elif _mapped_model(field.annotation) is not None:
            below.append((f"{dotted}.<name>", _mapped_model(field.annotation)))
    yield path, model, rows
    for sub_path, sub in below:
        yield from sections(sub, schema, sub_path)


def _own_schema(model: type[BaseModel], schema: dict) -> dict:
    return schema["$defs"][model.__name__] if model.__name__ in schema.get("$defs", {}) else schema


def _field_order(model: type[BaseModel]) -> list[str]:
    """The model's own fields first, then those it inherits (a section's `url` before its auth)."""
    own = [f for f in model.__dict__.get("__annotations__", {}) if f in model.model_fields]
    return own + [f for f in model.model_fields if f not in own]


def _nested_model(annotation) -> type[BaseModel] | None:
    return annotation if inspect.isclass(annotation) and issubclass(annotation, BaseModel) else None


def _mapped_model(annotation) -> type[BaseModel] | None:
    args = getattr(annotation, "__args__", ())
    return _nested_model(args[1]) if getattr(annotation, "__origin__", None) is dict and len(args) == 2 else None


PLURALS = {"string": "strings", "integer": "integers", "number": "numbers", "boolean": "booleans", "path": "paths",
           "secret": "secrets", "section": "sections"}


def type_name(prop: dict, defs: dict, plural: bool = False) -> str:
    """A JSON Schema property as a reader says it: string, list of strings, one of A|B, secret."""
    if "anyOf" in prop:
        names = [type_name(p, defs, plural) for p in prop["anyOf"] if p.get("type") != "null"]
        return " or ".join(dict.fromkeys(names))
    if "$ref" in prop:
        return "sections" if plural else "section"
    if "enum" in prop:
        return "one of " + "|".join(json.dumps(v) if not isinstance(v, str) else v for v in prop["enum"])
    kind = prop.get("type")
    if isinstance(kind, list):
        names = [PLURALS[k] if plural else k for k in kind]
        return ", ".join(names[:-1]) + " or " + names[-1]
    if kind == "array":
        return "list of " + type_name(prop["items"], defs, plural=True)
    if kind == "object":
        return "mapping of names to " + type_name(prop.get("additionalProperties", {}), defs, plural=True)
    name = {"password": "secret", "path": "path"}.get(prop.get("format"), kind) if kind == "string" else kind
    name = PLURALS.get(name, name) if plural else name
    return name + _range(prop)


def _range(prop: dict) -> str:
    if "minimum" in prop and "maximum" in prop:
        return f", {prop['minimum']} to {prop['maximum']}"
    bounds = [f"{words} {prop[key]}" for key, words in (("minimum", "at least"), ("exclusiveMinimum", "above"),
                                                        ("maximum", "at most")) if key in prop]
    return "".join(", " + b for b in bounds)


def default(field) -> str:
    if field.is_required():
        return "required"
    value = field.default
    if value is None:
        return "unset"
    if isinstance(value, BaseModel):
        return ""
    if isinstance(value, bool):
        return f"`{str(value).lower()}`"
    if isinstance(value, (tuple, list)):
        return "`[]`" if not value else f"`{json.dumps(list(value))}`"
    if isinstance(value, dict):
        return "`{}`" if not value else f"`{json.dumps(value, sort_keys=True)}`"
    if isinstance(value, int) and value >= MIB and value % MIB == 0:
        return f"`{value}` ({value // MIB} MiB)"
    return f"`{value}`"


def docstring(model: type[BaseModel]) -> str:
    return inspect.cleandoc(model.__doc__ or "")


def text(s: str) -> str:
    """Markdown of plain text: `<...>` outside code spans is shown, not taken for HTML."""
    parts = s.split("`")
    return "`".join(p if i % 2 else p.replace("<", "&lt;").replace(">", "&gt;") for i, p in enumerate(parts))


def cell(s: str) -> str:
    """Text for a table cell: one line, pipes escaped (in code spans too, as GFM wants)."""
    return text(" ".join(s.split())).replace("|", "\\|")


def write(root: Path) -> list[str]:
    """Write every generated file under `root`; the paths that changed."""
    changed = []
    for rel, content in documents().items():
        path = root / rel
        if path.exists() and path.read_text(encoding="utf-8") == content:
            continue
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(content, encoding="utf-8")
        changed.append(rel)
    return changed


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    root = Path(args[0]) if args else REPO
    changed = write(root)
    for rel in changed:
        print(f"wrote {rel}")
    print(f"{len(documents())} files generated, {len(changed)} changed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
