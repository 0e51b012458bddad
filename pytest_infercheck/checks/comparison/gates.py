"""What a comparison says about its gates beyond judging them (the gates themselves are
declared in :mod:`.spec` and judged by the framework): warnings and a side's verdict.

- ``ungated`` (:func:`.spec.is_ungated`): a check that writes no gate at all passes whatever
  its outputs are. Its gates are ``max_kl``, ``max_kl_position``, ``min_similarity``,
  ``max_mean_kl``, ``min_same_top`` and ``flips.max_rate``, and a diff's
  ``expect: identical``. ``flips.fail_item_on`` is not one: it judges only the prompts that
  have an answer kind, and only their extracted answers (its default, ``correct_to_wrong``,
  passes every prompt without a reference answer, and outputs that differ in everything but
  the answer), so a check holding only to it is ``ungated`` too. An ungated aggregate says
  so (terminal, HTML, JSON, JUnit ``infercheck_ungated``) and the run warns
  (:class:`UngatedCheckWarning`, naming the check's line);
- a diff side whose feature never engaged on the item (``unexercised``,
  :mod:`~pytest_infercheck.features`): a violation under ``require_engaged: true``
  (:mod:`.judge`), else an :class:`UnexercisedFeatureWarning` (:func:`warn_unexercised`);
- a test side's verdict in the report's verdict matrix (:func:`side_verdict`).
"""

from __future__ import annotations

import warnings
import weakref
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from .spec import requires_engaged, ungated_reason

if TYPE_CHECKING:
    from ...matrix import LoadedMatrix
    from .aggregate import ComparisonAggregateRecord, SuiteAggregate


class UngatedCheckWarning(pytest.PytestWarning):
    """A comparison check that writes no gate (see the module docstring): it passes whatever
    its outputs are. The message names the check entry's file and line."""


class UnexercisedFeatureWarning(pytest.PytestWarning):
    """A comparison item whose side's feature (speculative decoding, a quantized KV cache)
    never engaged: its verdict says nothing about the feature. ``require_engaged: true``
    makes it a failure."""


def warn_unexercised(item: str, unexercised: Sequence[str], thresholds: Any) -> None:
    """Warn that ``item``'s features never engaged (when that does not fail it)."""
    if unexercised and not requires_engaged(thresholds):
        message = f"{item}: unexercised: {'; '.join(unexercised)}"
        warnings.warn(UnexercisedFeatureWarning(message), stacklevel=2)


def shown(path: Path) -> str:
    """``path`` relative to the working directory when it is below it, else as it is."""
    try:
        return str(path.resolve().relative_to(Path.cwd().resolve()))
    except ValueError:
        return str(path)


_WARNED: weakref.WeakKeyDictionary[LoadedMatrix, set[int]] = weakref.WeakKeyDictionary()
"""By matrix: the indexes of the checks already warned about in this process."""


def warn_ungated(loaded: LoadedMatrix, index: int, kind: str, thresholds: Any) -> None:
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


def side_reasons(
    record: ComparisonAggregateRecord,
    level: SuiteAggregate | None,
    passed: bool,
    violations: Sequence[str] = (),
) -> list[str]:
    """Every reason one test side of an aggregate failed (``passed``: the aggregate's
    verdict), in this order: its own broken suite gates (its ``violations``), the items that
    errored (every side's: :attr:`~.aggregate.ComparisonAggregateRecord.errored`), its failed
    items; ``["no prompt of this side has a record"]`` when ``level`` is None; empty when it
    passed. A record written before sides carried their gates (``violations`` None) is judged
    by ``passed``, with the aggregate's ``violations``."""
    if level is None:
        return ["no prompt of this side has a record"]
    if level.violations is None:
        reasons = [] if passed else [*violations, "the aggregate failed"]
    else:
        reasons = [*level.violations, *record.errored]
    if level.n_failed:
        reasons.append(f"{level.n_failed}/{level.n_prompts} items failed")
    return reasons


def side_verdict(
    record: ComparisonAggregateRecord,
    level: SuiteAggregate | None,
    passed: bool,
    violations: Sequence[str] = (),
) -> tuple[bool, str]:
    """Whether one test side of an aggregate passed, and what decided it: the first of its
    :func:`side_reasons`, or its mean KL (identical outputs when no position was compared)
    when it passed."""
    reasons = side_reasons(record, level, passed, violations)
    if reasons or level is None:
        return False, reasons[0]
    if level.kl_n == 0:
        return True, f"identical outputs {level.n_identical}/{level.n_prompts}"
    return True, f"mean KL {level.kl_mean:.4g} ± {level.kl_se:.2g}"
