"""MkDocs hooks (``mkdocs.yml``: ``hooks:``): the per-kind reference tables, generated from
the matrix's JSON Schema (``pytest-infercheck schema``) when the site is built, so they cannot
drift from what the plugin accepts.

A page writes ``<!-- infercheck-schema: KIND -->`` where the tables of check kind ``KIND``
go: its options (the mapping under its key) and the thresholds its entry may hold (from the
registry of kinds: a threshold of another kind is an error at its line). An unknown kind
fails the build.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from typing import Any

MARKER = re.compile(r"<!-- infercheck-schema: ([a-z-]+) -->")


def on_page_markdown(markdown: str, **_: Any) -> str:
    """MkDocs' hook: every marker replaced by its kind's tables."""
    if not MARKER.search(markdown):
        return markdown
    from pytest_infercheck.config import threshold_users
    from pytest_infercheck.schema import matrix_schema

    schema = matrix_schema()
    users = threshold_users()
    return MARKER.sub(lambda m: kind_tables(m.group(1), schema, users), markdown)


def kind_tables(kind: str, schema: dict[str, Any], users: dict[str, list[str]]) -> str:
    """The markdown of ``kind``'s options and thresholds."""
    defs = schema["$defs"]
    check = defs["CheckSpec"]["properties"]
    if kind not in check:
        raise ValueError(f"infercheck-schema: unknown check kind {kind!r}")
    spec = _resolve(_not_null(check[kind]), defs)
    lines = [f"**Options** (`{kind}:`, generated from the schema): {_text(spec)}", ""]
    shorthand = None
    if "anyOf" in spec:  # a target kind: a string shorthand or the mapping
        shorthand = next(s for s in spec["anyOf"] if s.get("type") == "string")
        spec = next(s for s in spec["anyOf"] if s.get("type") == "object")
    required = set(spec.get("required", []))
    lines += _table(
        (
            f"`{key}`",
            _type(field, defs),
            "required" if key in required else _default(field),
            _text(field),
        )
        for key, field in spec.get("properties", {}).items()
    )
    if shorthand is not None:
        lines += ["", f"Shorthand: `{kind}: MODEL@BACKEND` ({_text(shorthand)})."]
    mine = [key for key, kinds in users.items() if kind in kinds]
    lines += ["", f"**Thresholds** (keys of the `{kind}` entry beside its options):", ""]
    if not mine:
        lines.append("none: its items fail on what they find, whatever is written.")
    else:
        rows = []
        for key in mine:
            field = check[key]
            target = _resolve(field, defs)
            if "properties" in target:  # flips: a mapping of its own
                rows += [
                    (
                        f"`{key}.{sub}`",
                        _type(sub_field, defs),
                        _default(sub_field),
                        _text(sub_field),
                    )
                    for sub, sub_field in target["properties"].items()
                ]
            else:
                rows.append((f"`{key}`", _type(field, defs), _default(field), _text(field)))
        lines += _table(rows)
    lines += [
        "",
        "Every entry may also hold `name` (replaces the id in brackets) and `suites` "
        "(per-check suites).",
    ]
    return "\n".join(lines)


def _table(rows: Iterable[tuple[str, str, str, str]]) -> list[str]:
    """A markdown table of (key, type, default, description) rows; the description column
    only when some row has one."""
    rows = list(rows)
    described = any(row[3] for row in rows)
    head = ["key", "type", "default", *(["description"] if described else [])]
    return [
        "| " + " | ".join(head) + " |",
        "|" + " --- |" * len(head),
        *("| " + " | ".join(row if described else row[:3]) + " |" for row in rows),
    ]


def _not_null(field: dict[str, Any]) -> dict[str, Any]:
    options = [s for s in field.get("anyOf", [field]) if s.get("type") != "null"]
    return options[0] if len(options) == 1 else field


def _resolve(field: dict[str, Any], defs: dict[str, Any]) -> dict[str, Any]:
    field = _not_null(field)
    while "$ref" in field:
        field = defs[field["$ref"].rsplit("/", 1)[1]]
    return field


def _type(field: dict[str, Any], defs: dict[str, Any]) -> str:
    if "$ref" in field:
        return _type(_resolve(field, defs), defs)
    if "anyOf" in field:
        kinds = [_type(s, defs) for s in field["anyOf"] if s.get("type") != "null"]
        return " or ".join(dict.fromkeys(kinds))
    if "enum" in field:
        return " / ".join(f"`{v}`" for v in field["enum"])
    if "const" in field:
        return f"`{field['const']}`"
    kind = field.get("type", "mapping" if "properties" in field else "any")
    if kind == "array":
        return f"list of {_type(field.get('items', {}), defs)}"
    bounds = [
        f"{op} {field[key]}"
        for key, op in (
            ("minimum", ">="),
            ("exclusiveMinimum", ">"),
            ("maximum", "<="),
            ("exclusiveMaximum", "<"),
        )
        if key in field
    ]
    return {"number": "number", "integer": "integer", "boolean": "boolean"}.get(kind, str(kind)) + (
        f" ({', '.join(bounds)})" if bounds else ""
    )


def _default(field: dict[str, Any]) -> str:
    if "default" not in field:
        return ""
    value = field["default"]
    return "none" if value is None else f"`{json.dumps(value)}`"


def _text(field: dict[str, Any]) -> str:
    text = " ".join(str(field.get("description", "")).split())
    return text.replace("``", "`").replace("|", "\\|")
