"""Shared data and helpers for the plugin tests."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from pathlib import Path

# Prompts of the tiny adder ("a+b=" -> "c"), with reference answers.
ADDITION = [
    ("s01", "12+34=", "46"),
    ("s02", "50+25=", "75"),
    ("s03", "7+8=", "15"),
    ("s04", "99+99=", "198"),
    ("s05", "45+55=", "100"),
    ("s06", "63+29=", "92"),
    ("s07", "18+77=", "95"),
    ("s08", "81+9=", "90"),
]


def suite_jsonl(rows: list[tuple[str, str, str]] = ADDITION) -> str:
    return "\n".join(
        f'{{"id": "{i}", "prompt": "{p}", "answer": "{a}", "answer_kind": "number", '
        f'"max_tokens": 5}}'
        for i, p, a in rows
    )


def matrix_yaml(models: dict[str, Path], checks: str, suites: str = "[addition.jsonl]") -> str:
    lines = ["models:"]
    lines += [f"  {name}: {{path: '{path}'}}" for name, path in models.items()]
    lines += [f"suites: {suites}", "checks:", checks]
    return "\n".join(lines) + "\n"


def junit_outcomes(path: Path, qualified: bool = False) -> dict[str, str]:
    """Item -> ``passed`` or its failure message, from a JUnit XML file; the item by its name
    (``sp001[t1-pos0]``), or with ``qualified`` by ``classname::name``."""
    out: dict[str, str] = {}
    for case in ET.parse(path).getroot().iter("testcase"):
        failure = case.find("failure")
        name = f"{case.get('classname')}::{case.get('name')}" if qualified else case.get("name")
        out[str(name)] = "passed" if failure is None else failure.get("message", "")
    return out


def junit_properties(path: Path) -> dict[str, dict[str, str]]:
    """Item name (last node-id part) -> {property name: value} from a JUnit XML file."""
    out: dict[str, dict[str, str]] = {}
    for case in ET.parse(path).getroot().iter("testcase"):
        props = {p.get("name", ""): p.get("value", "") for p in case.iter("property")}
        out[case.get("name", "").split("::")[-1]] = props
    return out
