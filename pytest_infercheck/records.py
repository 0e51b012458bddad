"""The record of one infercheck item: what crosses from a check to every report.

A record travels on the item's test report as ``report.infercheck`` (plain JSON types, since
pytest-xdist ships report attributes from the workers to the controller), and becomes an
item of the JSON results file (:mod:`.report.results`), the terminal summary and the HTML
report. Its ``data`` is the kind's own record of what it measured: a dataclass of the
kind's module (:func:`plain_data` turns it into JSON types), documented field by field
there.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from typing import Annotated, Any, TypeVar

from pydantic import BaseModel, BeforeValidator, ConfigDict, TypeAdapter

from .plain_data import plain

R = TypeVar("R")


def _null_is_nan(value: Any) -> Any:
    return math.nan if value is None else value


Measured = Annotated[float, BeforeValidator(_null_is_nan)]
"""A measured float that may be NaN or infinite (nothing to measure, a zero probability): JSON
has no such numbers, so the record holds ``null`` there, read back as NaN."""


class ItemRecord(BaseModel):
    """What one item of a check x suite measured.

    ``check`` is the check's node-id name (``compare(bf16-vs-q4)``), ``kind`` its YAML key,
    ``suite`` the suite's name, ``role`` what the item is (``prompt``, ``level``,
    ``hostile``, ``self-check``, ``aggregate``, ``record`` under ``--infercheck-record``),
    ``name`` the item's name (``r017[q4]``), ``thresholds`` what the check holds it to,
    ``violations`` the thresholds it broke (empty: passed), ``data`` the kind's record,
    ``gates_deferred_to`` (an aggregate under ``--infercheck-shard`` only) the shard whose
    suite gates were deferred to the merge, ``pytest-infercheck report``."""

    model_config = ConfigDict(extra="allow")

    check: str
    kind: str
    suite: str
    role: str
    name: str
    thresholds: dict[str, Any]
    violations: list[str]
    data: dict[str, Any]
    gates_deferred_to: str | None = None

    def to_plain(self) -> dict[str, Any]:
        """The record as JSON types; ``gates_deferred_to`` only where gates were deferred."""
        exclude = {"gates_deferred_to"} if self.gates_deferred_to is None else None
        return self.model_dump(exclude=exclude)


def plain_data(data: Any) -> dict[str, Any]:
    """A kind's record (a dataclass, or already a mapping) as JSON types: the record's own
    ``to_plain()`` where it has one (to leave out keys that are absent by design), else all
    its fields."""
    to_plain = getattr(data, "to_plain", None)
    if callable(to_plain):
        data = to_plain()
    elif dataclasses.is_dataclass(data) and not isinstance(data, type):
        data = dataclasses.asdict(data)
    converted: dict[str, Any] = plain(data)
    return converted


_ADAPTERS: dict[type[Any], TypeAdapter[Any]] = {}


def load_record(record_type: type[R], data: Mapping[str, Any]) -> R:
    """A kind's record read back from its plain form (a results file, an xdist report):
    fields checked by type, unknown keys ignored. Raises ``pydantic.ValidationError`` (a
    ``ValueError``) when a field is missing or of the wrong type, e.g. in a file of an older
    version; reports then show the data as a plain table."""
    adapter = _ADAPTERS.get(record_type)
    if adapter is None:
        adapter = _ADAPTERS[record_type] = TypeAdapter(record_type)
    record: R = adapter.validate_python(dict(data))
    return record
