"""A pytest plugin that appends every test phase's duration to a file as the phase ends, so a
long run that is stopped still leaves its per-file times (``--durations`` prints only at the
end). Tab-separated lines: time, node id, phase, seconds, outcome.

    CI=true DURLOG=/tmp/durations.tsv PYTHONPATH=.:bench \\
        .venv/bin/python -m pytest tests/integration -p durlog -p no:randomly -q
"""

from __future__ import annotations

import os
import time
from typing import Any

_PATH = os.environ.get("DURLOG", "durations.tsv")


def pytest_runtest_logreport(report: Any) -> None:
    with open(_PATH, "a", encoding="utf-8") as f:
        f.write(
            f"{time.time():.1f}\t{report.nodeid}\t{report.when}\t{report.duration:.3f}\t"
            f"{report.outcome}\n"
        )
