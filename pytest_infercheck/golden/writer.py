"""Writes the golden files of a ``--infercheck-record`` run, once, on the controller.

A recording item puts its entries on its test report (``report.infercheck_golden``: plain
types, so xdist ships them to the controller like ``report.infercheck``). The controller (or
the only process, without xdist) gathers them and, at the end of the session, writes each
golden atomically with :func:`.file.write_golden`. Workers never write, so they cannot
clobber each other, and the file is the same whether it was recorded with ``-n 2`` or not.
A golden holds exactly the prompts recorded in this run.
"""

from __future__ import annotations

from collections.abc import Generator
from pathlib import Path
from typing import Any

import pytest

from ..options import is_worker
from .file import GoldenError, shown, write_golden


def merge_payloads(payloads: list[dict[str, Any]]) -> dict[Path, tuple[dict[str, Any], list[Any]]]:
    """Group payloads ``{"file", "header", "entry"}`` by file; every payload of one file must
    carry the same header (one target, engine and tokenizer), else :class:`GoldenError`."""
    files: dict[Path, tuple[dict[str, Any], list[Any]]] = {}
    for payload in payloads:
        path = Path(payload["file"])
        header, entries = files.setdefault(path, (payload["header"], []))
        if payload["header"] != header:
            raise GoldenError(
                f"golden {shown(path)} recorded from different targets or engines in one run "
                f"({header.get('target')} and {payload['header'].get('target')}): not written"
            )
        entries.append(payload["entry"])
    return files


class GoldenWriter:
    """The pytest plugin registered under ``--infercheck-record``."""

    def __init__(self, config: pytest.Config) -> None:
        self.config = config
        self.payloads: list[dict[str, Any]] = []
        self.lines: list[str] = []

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_makereport(
        self, item: pytest.Item, call: pytest.CallInfo[None]
    ) -> Generator[None, pytest.TestReport, pytest.TestReport]:
        report = yield
        payloads = getattr(item, "infercheck_golden", None)
        if call.when == "call" and payloads:
            report.infercheck_golden = payloads  # type: ignore[attr-defined]
        return report

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        payloads = getattr(report, "infercheck_golden", None)
        if report.when == "call" and payloads and not is_worker(self.config):
            self.payloads.extend(payloads)

    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        if is_worker(self.config) or not self.payloads:
            return
        try:
            files = merge_payloads(self.payloads)
        except GoldenError as exc:
            self.lines.append(f"NOT WRITTEN: {exc}")
            session.exitstatus = pytest.ExitCode.TESTS_FAILED
            return
        for path, (header, entries) in sorted(files.items()):
            write_golden(path, header, entries)
            prompts = len({(e["suite"], e["prompt_id"]) for e in entries})
            self.lines.append(f"recorded {shown(path)}: {prompts} prompts from {header['target']}")

    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        if self.lines:
            terminalreporter.write_sep("=", "infercheck goldens")
            for line in self.lines:
                terminalreporter.write_line(line)
