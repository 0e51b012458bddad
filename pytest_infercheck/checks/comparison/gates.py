"""The gates of a comparison, in one place: what fails an item, the flip-rate gate (judged on
a suite, and refused at collection when it cannot pass), and whether a check has any gate.

- an item: every fail-closed problem and per-item threshold of
  :func:`~.verdicts.item_violations`, and, for a ``diff`` that expects identical outputs
  (``expect: identical``, its default), outputs that are not the same
  (:func:`item_verdict`), unless the check has ``fail_on: decisive`` and the divergence is
  a ``near-tie`` (:func:`~.verdicts.near_tie_passes`);
- the flip rate: ``flips.max_rate`` against the upper bound of the rate's Wilson interval
  (``gate: upper``) or its point estimate (``gate: point``): :func:`flip_rate_violation` on
  a suite, :func:`flip_rate_gates` at collection;
- ``ungated`` (:func:`is_ungated`): a check that writes no gate at all passes whatever its
  outputs are. Its gates are ``max_kl``, ``max_kl_position``, ``min_similarity``,
  ``max_mean_kl``, ``min_same_top`` and ``flips.max_rate``, and a diff's
  ``expect: identical``. ``flips.fail_item_on`` is not one: it judges only the prompts that
  have an answer kind, and only their extracted answers (its default, ``correct_to_wrong``,
  passes every prompt without a reference answer, and outputs that differ in everything but
  the answer), so a check holding only to it is ``ungated`` too. An ungated aggregate says
  so (terminal, HTML, JSON, JUnit ``infercheck_ungated``) and the run warns
  (:class:`UngatedCheckWarning`, naming the check's line).
"""

from __future__ import annotations

import warnings
import weakref
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from ..protocol import RateGate
from .options import DiffThresholds, Thresholds
from .verdicts import item_violations, near_tie_passes

if TYPE_CHECKING:
    from ...config import CheckSpec, LoadedMatrix
    from ...suites import Suite
    from .aggregate import ComparisonAggregateRecord, SuiteAggregate
    from .prompt import PromptComparison

GATES = "max_kl, max_kl_position, min_similarity, max_mean_kl, min_same_top, flips.max_rate"
"""The thresholds that gate a comparison (besides a diff's ``expect: identical``)."""


class UngatedCheckWarning(pytest.PytestWarning):
    """A comparison check that writes no gate (see the module docstring): it passes whatever
    its outputs are. The message names the check entry's file and line."""


def expects_identical(thresholds: Thresholds) -> bool:
    """Whether an item fails when its outputs are not the same: a diff's ``expect:
    identical``."""
    return isinstance(thresholds, DiffThresholds) and thresholds.expect == "identical"


def item_verdict(result: PromptComparison, thresholds: Thresholds) -> list[str]:
    """Why one prompt's comparison fails: :func:`~.verdicts.item_violations`, then, when the
    check expects identical outputs, that they are not (the record's sameness verdict,
    :attr:`~.prompt.PromptComparison.identical`). The suite aggregate counts failed items
    with it too. Under ``fail_on: decisive`` a near-tie divergence is not a violation
    (:func:`~.verdicts.near_tie_passes`). Of a conversation, a generated turn before the
    final one whose outputs differ fails an ``expect: identical`` item as the final turn
    does (the budget gates judge the final turn only)."""
    out = item_violations(result, thresholds)
    if expects_identical(thresholds):
        out.extend(
            f"turn {turn.index} not identical: {turn.sameness} (expect: identical)"
            for turn in result.turns
            if turn.kind == "generated" and turn.same is False
        )
    tolerated = near_tie_passes(result, thresholds)
    if expects_identical(thresholds) and not result.identical and not tolerated:
        out.append(
            f"outputs not identical: {result.sameness or 'not compared'} (expect: identical)"
        )
    return out


def is_ungated(thresholds: Thresholds) -> bool:
    """Whether the check has no gate at all (see the module docstring)."""
    if expects_identical(thresholds):
        return False
    written = (
        thresholds.max_kl,
        thresholds.max_kl_position,
        thresholds.min_similarity,
        thresholds.max_mean_kl,
        thresholds.min_same_top,
        thresholds.flips.max_rate,
    )
    return all(value is None for value in written)


def ungated_reason(thresholds: Thresholds) -> str:
    """Why a check is ungated, in a sentence."""
    budget = ""
    if isinstance(thresholds, DiffThresholds):
        budget = " and it does not expect identical outputs (expect: budget)"
    return f"no gate written (none of {GATES}){budget}: it passes whatever the outputs"


def shown(path: Path) -> str:
    """``path`` relative to the working directory when it is below it, else as it is."""
    try:
        return str(path.resolve().relative_to(Path.cwd().resolve()))
    except ValueError:
        return str(path)


_WARNED: weakref.WeakKeyDictionary[LoadedMatrix, set[int]] = weakref.WeakKeyDictionary()
"""By matrix: the indexes of the checks already warned about in this process."""


def warn_ungated(loaded: LoadedMatrix, index: int, kind: str, thresholds: Thresholds) -> None:
    """Warn (once per check and process) that check ``index`` of ``loaded`` is ungated:
    ``infercheck.yaml:14: checks[2] (compare) is ungated: no gate written ...``."""
    warned = _WARNED.setdefault(loaded, set())
    if index in warned:
        return
    warned.add(index)
    line = loaded.source.line_of(("checks", index))
    where = shown(loaded.path) + (f":{line}" if line is not None else "")
    message = (
        f"{where}: checks[{index}] ({kind}) is ungated: {ungated_reason(thresholds)}; "
        "write a threshold to check something"
    )
    warnings.warn(UngatedCheckWarning(message), stacklevel=2)


def flip_rate_violation(agg: SuiteAggregate, thresholds: Thresholds) -> str | None:
    """The suite's flip rate against ``flips.max_rate``: the upper bound of its Wilson
    interval (``gate: upper``) or its point estimate (``gate: point``); None when within,
    when no limit is written or when no prompt was answered."""
    flips = thresholds.flips
    if flips.max_rate is None or agg.flip_rate is None:
        return None
    measured = agg.flip_rate_high if flips.gate == "upper" else agg.flip_rate
    if measured <= flips.max_rate:
        return None
    what = (
        f"upper {flips.confidence:.0%} Wilson bound {agg.flip_rate_high:.4f}"
        if flips.gate == "upper"
        else f"{agg.flip_rate:.4f}"
    )
    return f"flip rate {agg.n_flips}/{agg.n_answered}: {what} > max_rate {flips.max_rate:g}"


def flip_rate_gates(check: CheckSpec, suite: Suite) -> list[RateGate]:
    """``flips.max_rate`` on the upper Wilson bound, counted over the suite's prompts with an
    answer kind (the same for every test side): what collection refuses when it cannot pass
    (:func:`~pytest_infercheck.config.check_rate_gates`)."""
    thresholds = check.kind_thresholds()
    assert isinstance(thresholds, Thresholds)
    flips = thresholds.flips
    if flips.max_rate is None or flips.gate != "upper":
        return []
    n = sum(1 for prompt in suite.prompts if prompt.answer_kind is not None)
    return [
        RateGate(
            field=("flips", "max_rate"),
            max_rate=flips.max_rate,
            confidence=flips.confidence,
            n=n,
            trials=f"{n} answered prompts",
            unit="answered prompts",
        )
    ]


def side_verdict(
    record: ComparisonAggregateRecord,
    level: SuiteAggregate | None,
    passed: bool,
    violations: Sequence[str] = (),
) -> tuple[bool, str]:
    """Whether one test side of an aggregate passed (``passed``: the aggregate's verdict),
    and what decided it. A side fails for its own broken suite gates (its ``violations``),
    for the items that errored (every side's: :attr:`~.aggregate.ComparisonAggregateRecord.
    errored`), for its failed items, or when none of its items has a record (``level``
    None); it shows the first of these, or its mean KL when it passed. A record written
    before sides carried their gates (``violations`` None) is judged by ``passed``, and
    shows the aggregate's first violation (of ``violations``)."""
    if level is None:
        return False, "no prompt of this side has a record"
    failed_items = f"{level.n_failed}/{level.n_prompts} items failed"
    if level.violations is None:
        reasons = [] if passed else [*violations, "the aggregate failed"]
    else:
        reasons = [*level.violations, *record.errored]
    if level.n_failed:
        reasons.append(failed_items)
    if reasons:
        return False, reasons[0]
    if level.kl_n == 0:
        return True, f"identical outputs {level.n_identical}/{level.n_prompts}"
    return True, f"mean KL {level.kl_mean:.4g} ± {level.kl_se:.2g}"
