"""How a matrix refers to a golden: the ``golden:NAME`` reference, the names allowed, the one
place a golden may stand in a check, and the file a name stands for."""

from __future__ import annotations

import re
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ..matrix import LoadedMatrix

GOLDEN_PREFIX = "golden:"
GOLDEN_NAME = re.compile(r"[A-Za-z0-9_.+-]+")
GOLDEN_PLACE = (
    "a golden is the baseline of a compare check: "
    "compare: {baseline: golden:NAME, test: model@backend}"
)


def golden_path(loaded: LoadedMatrix, name: str, *, writing: bool = False) -> Path:
    """Where golden ``name`` lives: ``<golden_dir>/<name>.json`` (``.json.gz`` with
    ``golden_gzip``) next to the matrix; to replay, whichever of the two exists."""
    folder = loaded.golden_dir
    plain, packed = folder / f"{name}.json", folder / f"{name}.json.gz"
    preferred = packed if loaded.matrix.settings.golden_gzip else plain
    if writing or preferred.exists():
        return preferred
    other = plain if loaded.matrix.settings.golden_gzip else packed
    return other if other.exists() else preferred
