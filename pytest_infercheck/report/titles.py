"""The title of a run's reports (the HTML report's, the GitHub job summary's heading):
``--infercheck-title``, else the ``settings: title:`` of the matrices the items came from,
else ``infercheck:`` and their file names."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest
import yaml

from ..render.markup import mapping


def matrix_title(paths: Iterable[Path]) -> str | None:
    """The ``settings: title:`` of the matrices (read as plain YAML: under xdist the
    controller collects none; several joined with `` · ``), None when none writes one."""
    titles: list[str] = []
    for path in paths:
        try:
            data = yaml.safe_load(path.read_text(encoding="utf-8"))
        except (OSError, yaml.YAMLError):
            continue
        title = mapping(mapping(data).get("settings")).get("title")
        if isinstance(title, str) and title.strip() and title.strip() not in titles:
            titles.append(title.strip())
    return " · ".join(titles) or None


def run_title(config: pytest.Config, items: Sequence[Mapping[str, Any]]) -> str:
    """The title of a run whose infercheck items are ``items`` (their ``nodeid`` starts with
    the matrix's path from the rootdir)."""
    given = config.getoption("infercheck_title", None)
    if given:
        return str(given)
    files = [f for f in dict.fromkeys(str(i.get("nodeid", "")).split("::")[0] for i in items) if f]
    written = matrix_title(config.rootpath / f for f in files)
    return written or "infercheck: " + (", ".join(files) or "no matrix")
