"""What an infercheck item hands its test report: its record, and scalar JUnit properties.

JUnit XML properties are scalars: CI systems read ``name=value`` pairs, so a list or mapping
would arrive as its Python repr.
"""

from __future__ import annotations

from typing import Any

import pytest


def attach_record(item: pytest.Item, call: pytest.CallInfo[None], report: Any) -> Any:
    """Attach what an infercheck item measured to its report as ``report.infercheck`` (plain
    types: xdist ships report attributes to the controller, where reports are written); an
    item that errored or was skipped gets its identity as ``report.infercheck_item``, for the
    JSON results. Other items' reports are returned as they are."""
    stub = getattr(item, "infercheck_stub", None)
    if stub is None:
        return report
    report.user_properties = scalar_properties(report.user_properties)
    record = getattr(item, "infercheck_record", None)
    if call.when == "call" and record is not None:
        report.infercheck = record
    elif not report.passed:
        report.infercheck_item = stub()
    return report


def scalar_properties(properties: list[tuple[str, Any]]) -> list[tuple[str, Any]]:
    """``properties`` with every list or mapping value spread into scalar properties:
    ``("x", [a, b])`` -> ``("x_0", a), ("x_1", b)``; ``("x", {"k": v})`` -> ``("x_k", v)``
    (recursively). Scalars (str, int, float, bool, None) are kept as they are."""
    out: list[tuple[str, Any]] = []
    for name, value in properties:
        if isinstance(value, dict):
            out += scalar_properties([(f"{name}_{k}", v) for k, v in value.items()])
        elif isinstance(value, list | tuple):
            out += scalar_properties([(f"{name}_{i}", v) for i, v in enumerate(value)])
        else:
            out.append((name, value))
    return out
