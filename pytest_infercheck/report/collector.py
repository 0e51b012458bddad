"""The controller's collector of infercheck item results, written as the JSON results file at
the end of the session (``--infercheck-results``; see :mod:`.results` for the format).

Reports arrive through ``pytest_runtest_logreport`` from this process or, under xdist, from the
workers: a call-phase report carries the item's record as ``report.infercheck``; a failed or
skipped phase of an infercheck item without a record carries ``report.infercheck_item`` (its
identity, empty data), so errors and skips are in the file too.

Run id (shards of one run share it, without coordination): ``--infercheck-run-id``, else the
``INFERCHECK_RUN_ID`` environment variable, else the CI run id (``GITHUB_RUN_ID`` with
``GITHUB_RUN_ATTEMPT``, ``CI_PIPELINE_ID``, ``BUILDKITE_BUILD_ID``, ``CIRCLE_WORKFLOW_ID``,
``BUILD_BUILDID``) joined to a fingerprint of the arguments, else the fingerprint alone. The
fingerprint is 12 hex digits of the SHA-256 of the rootdir and the command-line arguments
without the options that differ between shards (``--infercheck-shard``, ``--infercheck-results``,
``--infercheck-run-id``, ``--junitxml``, ``--html``). An unsharded run's id also carries its start
time, since it is never merged with another file.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import re
import socket
import time
from collections.abc import Mapping
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pytest

from .. import __version__
from ..nodeid import file_of
from ..sharding import configured_shard
from .results import SCHEMA, VERSION, item_sort_key, write_results

CI_RUN_IDS = (
    ("GITHUB_RUN_ID", "GITHUB_RUN_ATTEMPT"),
    ("CI_PIPELINE_ID", None),
    ("BUILDKITE_BUILD_ID", None),
    ("CIRCLE_WORKFLOW_ID", None),
    ("BUILD_BUILDID", None),
)
PER_SHARD_OPTIONS = (
    "--infercheck-shard",
    "--infercheck-results",
    "--infercheck-run-id",
    "--junitxml",
    "--junit-xml",
    "--html",
)
LONGREPR_CHARS = 4000
REDACTED = "<redacted>"
URL_CREDENTIALS = re.compile(r"([A-Za-z][A-Za-z0-9+.-]*://)[^/@\s]+@")


def short_longrepr(report: pytest.TestReport) -> str | None:
    """The failure or skip reason, at most ``LONGREPR_CHARS`` characters (see
    :func:`clip_longrepr`)."""
    if report.passed:
        return None
    longrepr = report.longrepr
    if isinstance(longrepr, tuple):  # a skip: (path, line, reason)
        return str(longrepr[2])
    return clip_longrepr(report.longreprtext)


HEAD_CHARS = 500
"""At most this much of a long failure's first line is kept before its tail."""


def clip_longrepr(text: str, limit: int = LONGREPR_CHARS) -> str:
    """``text`` when it fits in ``limit`` characters, else its first line (what failed: ``backend
    error: server 'x' died ...``, at most :data:`HEAD_CHARS` and half of ``limit``), ``…``,
    and as much of its end as fits (the last log lines, the assertion)."""
    if len(text) <= limit:
        return text
    head = text.split("\n", 1)[0][: min(HEAD_CHARS, limit // 2)]
    marker = "\n…\n"
    return head + marker + text[-(limit - len(head) - len(marker)) :]


def stable_argv(argv: list[str]) -> list[str]:
    """``argv`` without the options that differ between the shards of one run."""
    out: list[str] = []
    skip_next = False
    for arg in argv:
        if skip_next:
            skip_next = False
            continue
        name = arg.split("=", 1)[0]
        if name in PER_SHARD_OPTIONS:
            skip_next = "=" not in arg
            continue
        out.append(arg)
    return out


def make_run_id(
    explicit: str | None,
    rootpath: Path,
    argv: list[str],
    sharded: bool,
    started: datetime,
    env: Mapping[str, str],
) -> str:
    """The run id (see the module docstring for the rule)."""
    explicit = explicit or env.get("INFERCHECK_RUN_ID")
    if explicit:
        return explicit
    key = json.dumps([str(rootpath), stable_argv(argv)])
    fingerprint = hashlib.sha256(key.encode()).hexdigest()[:12]
    for name, attempt in CI_RUN_IDS:
        if env.get(name):
            ci = env[name] + (f".{env[attempt]}" if attempt and env.get(attempt) else "")
            return f"{ci}-{fingerprint}"
    return fingerprint if sharded else f"{fingerprint}-{started:%Y%m%dT%H%M%S}"


def load_matrices(rootpath: Path, items: list[dict[str, Any]]) -> dict[str, Any]:
    """The YAML data of every matrix file with items in ``items``, keyed by its path relative
    to the rootdir; the values of backends' ``env`` are redacted (they may hold secrets)."""
    import yaml

    matrices: dict[str, Any] = {}
    for rel in dict.fromkeys(file_of(i["nodeid"]) for i in items):
        try:
            data = yaml.safe_load((rootpath / rel).read_text(encoding="utf-8"))
        except (OSError, yaml.YAMLError) as exc:
            data = {"error": f"cannot read the matrix: {exc}"}
        matrices[rel] = redact(data)
    return matrices


def redact(matrix: Any) -> Any:
    """``matrix`` with the values of every backend's ``env`` replaced by ``<redacted>`` and
    credentials in URLs hidden (:func:`redact_urls`)."""
    backends = matrix.get("backends") if isinstance(matrix, dict) else None
    if not isinstance(backends, dict):
        return redact_urls(matrix)
    safe = {}
    for name, spec in backends.items():
        if isinstance(spec, dict) and isinstance(spec.get("env"), dict):
            spec = {**spec, "env": dict.fromkeys(spec["env"], REDACTED)}
        safe[name] = spec
    return redact_urls({**matrix, "backends": safe})


def redact_urls(value: Any) -> Any:
    """``value`` with ``scheme://user:password@host`` in any string made
    ``scheme://<redacted>@host`` (configuration and engine identities, never model output)."""
    if isinstance(value, str):
        return URL_CREDENTIALS.sub(rf"\1{REDACTED}@", value)
    if isinstance(value, dict):
        return {k: redact_urls(v) for k, v in value.items()}
    if isinstance(value, list):
        return [redact_urls(v) for v in value]
    return value


class ResultsCollector:
    """Gathers the records of infercheck items in the controller and writes the results file
    when the session ends."""

    def __init__(self, config: pytest.Config, path: Path) -> None:
        self.config = config
        self.path = path
        self.started = datetime.now(timezone.utc)
        self._t0 = time.monotonic()
        self.shard = configured_shard(config)
        self.items: dict[str, dict[str, Any]] = {}
        self.durations: dict[str, float] = {}

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        nodeid = report.nodeid
        self.durations[nodeid] = self.durations.get(nodeid, 0.0) + report.duration
        record = getattr(report, "infercheck", None) if report.when == "call" else None
        identity = record if record is not None else getattr(report, "infercheck_item", None)
        if not isinstance(identity, dict):
            return
        entry = self.items.get(nodeid)
        if entry is None:
            worker = getattr(report, "worker_id", None)
            entry = {"nodeid": nodeid, "outcome": "passed", "worker": worker, "longrepr": None}
            entry.update(identity)
            self.items[nodeid] = entry
        if record is not None:
            entry.update(record)
        if report.when == "call":
            entry["outcome"] = report.outcome
        elif report.failed:
            entry["outcome"] = "error"
        elif report.skipped:
            entry["outcome"] = "skipped"
        longrepr = short_longrepr(report)
        if longrepr is not None:
            entry["longrepr"] = longrepr

    def results(self, exitstatus: int) -> dict[str, Any]:
        """The whole results document of this run."""
        argv = list(self.config.invocation_params.args)
        items = sorted(
            (
                {**e, "duration_s": self.durations.get(e["nodeid"], 0.0)}
                for e in self.items.values()
            ),
            key=item_sort_key,
        )
        engines: dict[str, Any] = {}
        for item in items:
            if item["role"] == "aggregate":
                engines.update(item["data"].get("engines") or {})
        return {
            "schema": SCHEMA,
            "version": VERSION,
            "run": {
                "run_id": make_run_id(
                    self.config.getoption("infercheck_run_id", None),
                    self.config.rootpath,
                    argv,
                    self.shard is not None,
                    self.started,
                    os.environ,
                ),
                "started": self.started.isoformat(),
                "finished": datetime.now(timezone.utc).isoformat(),
                "duration_s": time.monotonic() - self._t0,
                "argv": argv,
                "shard": None if self.shard is None else self.shard.to_dict(),
                "plugin_version": __version__,
                "python": platform.python_version(),
                "platform": platform.platform(),
                "hostname": socket.gethostname(),
                "exitstatus": int(exitstatus),
            },
            "matrices": load_matrices(self.config.rootpath, items),
            "engines": redact_urls(engines),
            "items": items,
        }

    def pytest_sessionfinish(self, session: pytest.Session, exitstatus: int) -> None:
        write_results(self.path, self.results(exitstatus))

    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        terminalreporter.write_line(f"infercheck results: {self.path}")
