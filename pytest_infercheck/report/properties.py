"""JUnit XML properties of infercheck items are scalars: CI systems read ``name=value`` pairs,
so a list or mapping would arrive as its Python repr."""

from __future__ import annotations

from typing import Any


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
