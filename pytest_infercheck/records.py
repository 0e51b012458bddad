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
    suite gates were deferred to the merge, ``pytest-infercheck report``; ``degenerate``
    its degenerate-output findings."""

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
    degenerate: dict[str, Any] | None = None
    """What the item's generations showed of degenerate output
    (:class:`~.metrics.degenerate.DegenerateScan`; an aggregate: its items' findings
    counted, :class:`~.metrics.degenerate.DegenerateTotal`), as plain types; absent for a
    kind that reads no generation."""

    def to_plain(self) -> dict[str, Any]:
        """The record as JSON types; ``gates_deferred_to`` only where gates were deferred,
        ``degenerate`` only where generations were read."""
        exclude = {k for k in ("gates_deferred_to", "degenerate") if getattr(self, k) is None}
        return self.model_dump(exclude=exclude or None)


OMIT_WHEN_EMPTY: dict[str, Any] = {"omit_when_empty": True}
"""Field metadata of a record field left out of the JSON when it is empty or None (a key
that is absent by design, e.g. a trial's ``error`` or an output's ``faults``):
``field(default_factory=list, metadata=OMIT_WHEN_EMPTY)``. Its default reads it back."""


OMIT_WHEN_NONE: dict[str, Any] = {"omit_when_none": True}
"""Field metadata of a record field left out of the JSON when it is None only (a number whose
0 is a finding, e.g. a largest difference that is 0: bit-equal); its default None reads it
back."""


def plain_data(data: Any) -> dict[str, Any]:
    """A kind's record (a dataclass, or already a mapping) as JSON types: every field, nested
    records too, but the fields marked :data:`OMIT_WHEN_EMPTY` that are empty; a record with
    a ``to_plain()`` of its own is made plain by it."""
    converted: dict[str, Any] = _plain_record(data)
    return converted


def _plain_record(value: Any) -> Any:
    to_plain = getattr(value, "to_plain", None)
    if callable(to_plain):
        return _plain_record(to_plain())
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {
            f.name: _plain_record(getattr(value, f.name))
            for f in dataclasses.fields(value)
            if not (f.metadata.get("omit_when_empty") and not getattr(value, f.name))
            and not (f.metadata.get("omit_when_none") and getattr(value, f.name) is None)
        }
    if isinstance(value, dict):
        return {str(k): _plain_record(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain_record(v) for v in value]
    return plain(value)


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
