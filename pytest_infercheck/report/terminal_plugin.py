"""The controller's end-of-run summary: collects the aggregates' records (from this process
or, under xdist, from the workers' reports) and prints one table per family of kinds."""

from __future__ import annotations

from typing import Any

import pytest


class TerminalSummary:
    """Registered on the controller only (see :mod:`..state`)."""

    def __init__(self) -> None:
        self.aggregates: list[tuple[str, bool, dict[str, Any]]] = []

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        record = getattr(report, "infercheck", None)
        if report.when == "call" and isinstance(record, dict) and record["role"] == "aggregate":
            self.aggregates.append((report.nodeid, report.passed, record))

    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        if not self.aggregates:
            return
        from .terminal import summary_lines  # the registry of kinds: pydantic and numpy

        terminalreporter.write_sep("=", "infercheck summary")
        for line in summary_lines(self.aggregates):
            terminalreporter.write_line(line)
