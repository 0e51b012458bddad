"""Any measured value as plain JSON types (what crosses xdist and goes into results files)."""

from __future__ import annotations

import math
from typing import Any


def plain(value: Any) -> Any:
    """``value`` as JSON types: mappings with string keys, lists, finite floats (non-finite ->
    None); numpy scalars and arrays through ``item``/``tolist``; anything else as ``str``."""
    if value is None or isinstance(value, bool | int | str):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {str(k): plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple | set | frozenset):
        return [plain(v) for v in value]
    for convert in ("tolist", "item"):
        if hasattr(value, convert):
            return plain(getattr(value, convert)())
    return str(value)
