"""Where the GitHub job summary goes (read without importing the report's layers)."""

from __future__ import annotations

import os
from pathlib import Path

STEP_SUMMARY = "GITHUB_STEP_SUMMARY"


def step_summary_path() -> Path | None:
    """The file named by ``GITHUB_STEP_SUMMARY`` (GitHub Actions sets it in every step),
    None when it is unset or empty."""
    value = os.environ.get(STEP_SUMMARY, "")
    return Path(value) if value else None
