"""The one fault type: a fault found in what an engine returned (or in a number measured of
it), a violation of its own whatever the thresholds.

Every kind's records carry :class:`Fault` (``faults``, and a comparison's ``problems``), and
every detector returns it: the non-finite and normalisation checks of :mod:`.finite`
(:func:`~.finite.check_values`, :func:`~.finite.check_logprob_rows`,
:func:`~.finite.check_topk_rows`), the empty-generation rule and the logprob checks of
:mod:`.consistency`. A fault is

* **said** one way, its :attr:`Fault.text` (``non-finite logprob in run 3 at positions 2, 5
  (NaN)``), built by the constructors here (:func:`non_finite`, :func:`not_normalised`,
  :func:`empty_generation_fault`) or by the detector that found it;
* **grouped** one way in an aggregate (:func:`aggregate_faults`): by what is wrong
  (:attr:`Fault.fault`, whose words start the text; for the comparison's quantities it names
  the side too: ``non-finite test logprobs``), one line per group naming the items and, for
  each, where in it (:meth:`Fault.detail`): ``non-finite KL in 2 of 60 prompts: r003
  (positions 2, 5), r007 (position 0)``, ``non-finite logprob in 2 of 20 prompts: r003
  (run 3 at positions 2, 5)``;
* **read back** one way from JSON (:func:`fault_from_plain`, and :data:`Faults` for a record
  field): its own plain form, and the forms written by earlier versions: a comparison's
  ``problems`` as ``{"type": "non-finite" | "not-normalised" | "empty-generation", ...}``
  objects, and a comparison's ``faults`` as bare texts.

Pure: plain values in, frozen dataclasses out.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Annotated, Any, Literal

from pydantic import BeforeValidator

__all__ = [
    "EMPTY_GENERATION",
    "FAULT_NAMES",
    "KIND_ORDER",
    "LOGPROB_ABOVE_ZERO",
    "LOGPROB_COUNT",
    "LOGPROB_MISMATCH",
    "NON_FINITE_LATENCY",
    "NON_FINITE_LOGPROB",
    "NON_FINITE_SIMILARITY",
    "TOPK_NOT_NORMALISED",
    "TOPK_NOT_SORTED",
    "Fault",
    "Faults",
    "Kind",
    "aggregate_faults",
    "empty_generation_fault",
    "fault_from_plain",
    "faults_from_plain",
    "non_finite",
    "not_normalised",
    "positions_text",
]

Kind = Literal["nan", "+inf", "-inf"]
"""A non-finite value."""
KIND_ORDER: tuple[Kind, ...] = ("nan", "+inf", "-inf")
_KIND_LABEL = {"nan": "NaN", "+inf": "+inf", "-inf": "-inf"}
_SHOWN = 10  # positions spelled out in a text before "... (N in all)"

NON_FINITE_LOGPROB = "non-finite logprob"
TOPK_NOT_NORMALISED = "top-k logprobs not normalised"
LOGPROB_MISMATCH = "logprob does not match its token"
LOGPROB_COUNT = "logprob count does not match the tokens"
TOPK_NOT_SORTED = "top-k logprobs not sorted"
LOGPROB_ABOVE_ZERO = "logprob above 0"
EMPTY_GENERATION = "empty generation"
NON_FINITE_LATENCY = "non-finite latency"
NON_FINITE_SIMILARITY = "non-finite similarity"
FAULT_NAMES = (
    NON_FINITE_LOGPROB,
    TOPK_NOT_NORMALISED,
    LOGPROB_MISMATCH,
    LOGPROB_COUNT,
    TOPK_NOT_SORTED,
    LOGPROB_ABOVE_ZERO,
    EMPTY_GENERATION,
    NON_FINITE_LATENCY,
    NON_FINITE_SIMILARITY,
)
"""The names of the faults the engine kinds find in one output (:mod:`.consistency`)."""


def positions_text(unit: str, positions: Sequence[int]) -> str:
    """``positions 2, 5`` (``position 3``; past ten: ``..., (N in all)``)."""
    shown = ", ".join(str(p) for p in positions[:_SHOWN])
    if len(positions) > _SHOWN:
        shown += f", ... ({len(positions)} in all)"
    return f"{unit}{'' if len(positions) == 1 else 's'} {shown}"


@dataclass(frozen=True)
class Fault:
    """A fault found in what an engine returned: a violation of its own, whatever the
    thresholds.

    Plain data (it crosses xdist and goes into the JSON results as it is); ``positions`` is
    stored as a tuple whatever sequence it is given."""

    fault: str
    """What is wrong, the group of an aggregate (``non-finite logprob``, ``non-finite KL``,
    ``test logprobs not normalised``, ``empty generation``, ``logprob does not match its
    token``...): the same words start :attr:`text`."""
    where: str
    """Which output or measurement, when :attr:`fault` does not say it (``run 3``, ``the
    streamed output``, ``c8``, the side that generated nothing); empty otherwise (a
    comparison's ``non-finite test logprobs``)."""
    text: str
    """The violation as reported: ``non-finite logprob in run 3 at positions 2, 5 (NaN)``."""
    positions: tuple[int, ...] = field(default=())
    """The offending indexes (token positions, rows, requests, runs: :attr:`unit`), in
    increasing order; empty when the fault has none."""
    unit: str = "position"
    """What :attr:`positions` count, singular (``position``, ``request``, ``run``)."""

    def __post_init__(self) -> None:
        if not isinstance(self.positions, tuple):
            object.__setattr__(self, "positions", tuple(int(p) for p in self.positions))

    def describe(self) -> str:
        """The violation's text (:attr:`text`)."""
        return self.text

    def detail(self) -> str:
        """Where, for an aggregate's list: ``run 3 at positions 2, 5``, ``positions 2, 5``
        (no :attr:`where`), ``run 3`` (no positions); empty when it has neither."""
        at = positions_text(self.unit, self.positions) if self.positions else ""
        if self.where and at:
            return f"{self.where} at {at}"
        return self.where or at

    def to_dict(self) -> dict[str, Any]:
        """The plain form (JSON types), read back by :func:`fault_from_plain`."""
        return {
            "fault": self.fault,
            "where": self.where,
            "text": self.text,
            "positions": list(self.positions),
            "unit": self.unit,
        }


# ------------------------------------------------------------------ constructors


def _in(where: str) -> str:
    return f" in {where}" if where else ""


def non_finite(
    what: str,
    positions: Sequence[int],
    kinds: Sequence[str],
    *,
    unit: str = "position",
    where: str = "",
) -> Fault:
    """Non-finite values in one quantity: ``non-finite KL at positions 2, 5 (NaN)``,
    ``non-finite logprob in run 3 at position 1 (NaN, +inf)``, ``non-finite similarity
    (NaN)`` (a scalar: no positions). ``kinds`` are shown in the order NaN, ``+inf``,
    ``-inf``. The fault is ``non-finite {what}``."""
    shown = ", ".join(_KIND_LABEL[k] for k in KIND_ORDER if k in kinds)
    at = f" at {positions_text(unit, positions)}" if positions else ""
    return Fault(
        f"non-finite {what}",
        where,
        f"non-finite {what}{_in(where)}{at} ({shown})",
        tuple(positions),
        unit,
    )


def not_normalised(
    what: str,
    positions: Sequence[int],
    logsumexp: Sequence[float],
    tol: float,
    *,
    unit: str = "position",
    where: str = "",
) -> Fault:
    """Logprob rows whose logsumexp is not within ``tol`` of 0: ``test logprobs do not
    normalise at position 3 (logsumexp +0.5; tolerance 0.0092)``. The fault is ``{what} not
    normalised``."""
    values = ", ".join(f"{v:+.3g}" for v in logsumexp[:_SHOWN])
    if len(logsumexp) > _SHOWN:
        values += ", ..."
    return Fault(
        f"{what} not normalised",
        where,
        f"{what}{_in(where)} do not normalise at {positions_text(unit, positions)} "
        f"(logsumexp {values}; tolerance {tol:.3g})",
        tuple(positions),
        unit,
    )


def empty_generation_fault(empty: str, other: str, other_count: int, unit: str = "tokens") -> Fault:
    """``empty generation: the test generated no tokens while the baseline generated 12``:
    one output generated nothing while the one it is compared with generated ``other_count``
    (> 0) ``unit`` (tokens, or characters). Its :attr:`~Fault.where` is the empty side."""
    return Fault(
        EMPTY_GENERATION,
        empty,
        f"{EMPTY_GENERATION}: {empty} generated no {unit} while {other} generated {other_count}",
    )


# ------------------------------------------------------------------ reading back


def _old_problem(doc: Mapping[str, Any]) -> Fault:
    """A comparison problem as earlier versions wrote it (``{"type": ...}``)."""
    kind = doc.get("type")
    unit = str(doc.get("unit", "position"))
    if kind == "non-finite":
        positions = [int(p) for p in doc["positions"]]
        return non_finite(str(doc["what"]), positions, list(doc["kinds"]), unit=unit)
    if kind == "not-normalised":
        # an all -inf row's logsumexp (-inf) was written as null
        lse = [-math.inf if v is None else float(v) for v in doc["logsumexp"]]
        positions = [int(p) for p in doc["positions"]]
        return not_normalised(str(doc["what"]), positions, lse, float(doc["tol"]), unit=unit)
    if kind == "empty-generation":
        return empty_generation_fault(
            str(doc["empty"]),
            str(doc["other"]),
            int(doc["other_count"]),
            str(doc.get("unit", "tokens")),
        )
    raise ValueError(f"unknown problem type {kind!r}")


def _name_of_text(text: str) -> str:
    """The fault a bare text (an earlier version's comparison ``faults``) says: a non-finite
    chosen or top-k logprob is ``non-finite logprob``, a top-k map that does not normalise
    ``top-k logprobs not normalised`` (as the engine kinds name them), else the longest of
    :data:`FAULT_NAMES` that starts it, else the text up to `` in `` or ``:``."""
    if re.match(r"non-finite (top-k )?logprobs? in ", text):
        return NON_FINITE_LOGPROB
    if re.match(r"top-k logprobs in .* do not normalise", text):
        return TOPK_NOT_NORMALISED
    starts = [n for n in FAULT_NAMES if text.startswith(n)]
    return max(starts, key=len) if starts else text.split(":")[0].split(" in ")[0]


def fault_from_plain(value: Any) -> Fault:
    """A :class:`Fault` read back from its plain form (:meth:`Fault.to_dict`, then JSON), or
    from a form an earlier version wrote: a comparison problem ``{"type": "non-finite",
    "what": "KL", "positions": [2, 5], "kinds": ["nan"]}`` (also ``not-normalised``,
    ``empty-generation``: the text as that version said it), or a bare text (a comparison's
    ``faults``: :func:`_name_of_text` names it). A :class:`Fault` is returned as it is.
    Raises ``ValueError``."""
    if isinstance(value, Fault):
        return value
    if isinstance(value, str):
        return Fault(_name_of_text(value), "", value)
    if not isinstance(value, Mapping):
        raise ValueError(f"not a fault: {value!r}")
    try:
        if "type" in value:
            return _old_problem(value)
        return Fault(
            str(value["fault"]),
            str(value.get("where", "")),
            str(value["text"]),
            tuple(int(p) for p in value.get("positions", ())),
            str(value.get("unit", "position")),
        )
    except (KeyError, TypeError, ValueError) as exc:
        raise ValueError(f"not a fault: {dict(value)!r} ({exc})") from exc


def faults_from_plain(value: Any) -> Any:
    """A list of faults read back (:func:`fault_from_plain`, each); anything else is left to
    the field's type check."""
    if not isinstance(value, list | tuple):
        return value
    return [fault_from_plain(v) for v in value]


Faults = Annotated[list[Fault], BeforeValidator(faults_from_plain)]
"""A record's list of faults: stored as :meth:`Fault.to_dict` objects, read back from that
or from an earlier version's forms (:func:`fault_from_plain`)."""


# ------------------------------------------------------------------ aggregate


def aggregate_faults(
    per_item: Sequence[tuple[str, Sequence[Fault]]],
    *,
    n_items: int | None = None,
    item_unit: str = "prompts",
    shown: int = 5,
) -> list[str]:
    """One line per kind of fault (:attr:`Fault.fault`) over the items, naming the first
    ``shown`` occurrences with where each is (:meth:`Fault.detail`), e.g. ``non-finite KL in
    2 of 20 prompts: r003 (positions 2, 5), r007 (position 0)`` or ``non-finite logprob in
    2 of 20 prompts: r003 (run 3 at positions 2, 5)``; ``... `` when there are more. The
    count is of distinct items. ``per_item`` is ``(item label, its faults)``; ``n_items``
    defaults to ``len(per_item)``. Empty when no item has a fault, so ``bool(result)`` is
    the gate."""
    total = len(per_item) if n_items is None else n_items
    groups: dict[str, list[tuple[str, Fault]]] = {}
    for label, faults in per_item:
        for fault in faults:
            groups.setdefault(fault.fault, []).append((label, fault))
    lines = []
    for name, members in groups.items():
        items = {label for label, _ in members}
        details = []
        for label, fault in members[:shown]:
            detail = fault.detail()
            details.append(f"{label} ({detail})" if detail else label)
        if len(members) > shown:
            details.append("...")
        lines.append(f"{name} in {len(items)} of {total} {item_unit}: {', '.join(details)}")
    return lines
