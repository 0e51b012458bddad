"""The JSON results file (schema ``pytest-infercheck-results``, version 2): schema, atomic
writer and validating loader.

```
{"schema": "pytest-infercheck-results", "version": 2,
 "run": {"run_id", "started", "finished", "duration_s", "argv", "shard": {"index", "count"} | null,
         "plugin_version", "python", "platform", "hostname", "exitstatus"},
 "matrices": {"<matrix path relative to rootdir>": <its YAML data>},
 "engines": {"<target label>": {identity}},
 "items": [{"nodeid", "outcome", "duration_s", "worker", "longrepr",
            "check", "kind", "suite", "role", "name", "thresholds", "violations", "data"}]}
```
Plain JSON only: non-finite floats (a mean over no positions) are written as ``null``, so any
JSON reader can load the file. Model output is stored verbatim (JSON escapes it).
"""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from ..nodeid import suite_id_of
from ..plain_data import plain
from ..records import ItemRecord

SCHEMA = "pytest-infercheck-results"
VERSION = 2
"""The version this plugin writes. Version 2 added record fields (a comparison's
``sameness``, the ``divergence_unit`` of batch-invariance trials and cache-pollution
changes) and nothing else; version 1 files are read as they are (their items lack those
fields, which reports show as ``-``)."""
READABLE_VERSIONS = (1, 2)
MAX_ERRORS_SHOWN = 3


class ResultsError(Exception):
    """A results file that cannot be used; the message names the file."""

    def __init__(self, path: str | Path, reason: str) -> None:
        super().__init__(f"{path}: {reason}")
        self.path = str(path)
        self.reason = reason


class _Model(BaseModel):
    model_config = ConfigDict(extra="allow")


class ShardModel(_Model):
    index: int = Field(ge=1)
    count: int = Field(ge=1)


class RunModel(_Model):
    run_id: str
    started: str
    finished: str
    duration_s: float
    argv: list[str]
    shard: ShardModel | None
    plugin_version: str
    python: str
    platform: str
    hostname: str
    exitstatus: int


class ItemModel(ItemRecord):
    """An item's record (:class:`~..records.ItemRecord`) with its node id and its outcome in
    this run."""

    nodeid: str
    outcome: Literal["passed", "failed", "skipped", "error"]
    duration_s: float
    worker: str | None
    longrepr: str | None

    @property
    def suite_id(self) -> str:
        """The node id of its check x suite."""
        return suite_id_of(self.nodeid)


class ResultsModel(_Model):
    schema_: Literal["pytest-infercheck-results"] = Field(alias="schema")
    version: Literal[1, 2]
    run: RunModel
    matrices: dict[str, Any]
    engines: dict[str, Any]
    items: list[ItemModel]


def item_sort_key(item: dict[str, Any]) -> tuple[str, bool, str]:
    """Items grouped by check x suite, the aggregate last: the same order for a serial run,
    an xdist run and merged shards."""
    nodeid: str = item["nodeid"]
    return suite_id_of(nodeid), item["role"] == "aggregate", nodeid


def dumps(results: dict[str, Any]) -> str:
    """The compact JSON text of ``results`` (made plain, strict JSON)."""
    text = json.dumps(plain(results), ensure_ascii=False, allow_nan=False, separators=(",", ":"))
    return text + "\n"


def write_atomic(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` so readers see the old file or the whole new one, never a
    part: a temporary file in the same folder, flushed to disk, then ``os.replace``."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def write_results(path: Path, results: dict[str, Any]) -> None:
    """Write a results file atomically (see :func:`write_atomic`)."""
    write_atomic(path, dumps(results))


def validate(data: Any, path: str | Path = "<results>") -> dict[str, Any]:
    """``data`` checked against the schema, as a plain dict; :class:`ResultsError` otherwise."""
    if not isinstance(data, dict) or data.get("schema") != SCHEMA:
        raise ResultsError(path, f"not a pytest-infercheck results file (no 'schema': {SCHEMA!r})")
    if data.get("version") not in READABLE_VERSIONS:
        readable = " and ".join(map(str, READABLE_VERSIONS))
        raise ResultsError(
            path,
            f"results format version {data.get('version')!r}; this pytest-infercheck reads "
            f"versions {readable}",
        )
    try:
        model = ResultsModel.model_validate(data)
    except ValidationError as exc:
        problems = [
            f"{'.'.join(str(p) for p in err['loc'])}: {err['msg']}"
            for err in exc.errors()[:MAX_ERRORS_SHOWN]
        ]
        more = exc.error_count() - len(problems)
        tail = f" (and {more} more)" if more > 0 else ""
        raise ResultsError(path, "invalid results: " + "; ".join(problems) + tail) from None
    validated: dict[str, Any] = model.model_dump(mode="json", by_alias=True)
    return validated


def load_results(path: str | Path) -> dict[str, Any]:
    """Read and validate one results file; :class:`ResultsError` names the file and the
    problem (missing, not JSON, another format or version, a field of the wrong type)."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ResultsError(path, "no such file") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ResultsError(path, f"cannot read: {exc}") from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ResultsError(
            path, f"not valid JSON (line {exc.lineno}, column {exc.colno}: {exc.msg})"
        ) from None
    return validate(data, path)
