"""Answer flips: how a test engine's answer relates to the baseline's and to the reference
(:class:`FlipKind`, :func:`classify_flip`), which flips fail an item (:func:`fails_item`) and
the order reports list them in (:data:`FLIP_SEVERITY_ORDER`)."""

from __future__ import annotations

from enum import Enum
from typing import Literal, get_args

from .answer_kinds import Answer, answers_equal


class FlipKind(str, Enum):
    """How the test engine's answer relates to the baseline's (and to the reference).

    The one taxonomy of answer flips (see :func:`classify_flip`): what counts as a flip is
    :attr:`is_flip`, whether a flip fails an item is :func:`fails_item`, and the order in
    which reports list them is :data:`FLIP_SEVERITY_ORDER`.
    """

    UNCHANGED = "unchanged"
    CORRECT_TO_WRONG = "correct_to_wrong"
    WRONG_TO_CORRECT = "wrong_to_correct"
    WRONG_TO_WRONG = "wrong_to_wrong"
    CHANGED = "changed"

    def __str__(self) -> str:
        return self.value

    @property
    def is_flip(self) -> bool:
        """True for ``correct_to_wrong``, ``wrong_to_correct`` and ``changed``.

        ``wrong_to_wrong`` is not a flip: with a reference, both answers are wrong, so the
        change did not move correctness (it is counted separately, as its own kind).
        ``unchanged`` is not a flip either.
        """
        return self in (FlipKind.CORRECT_TO_WRONG, FlipKind.WRONG_TO_CORRECT, FlipKind.CHANGED)


FailItemOn = Literal["correct_to_wrong", "any", "never"]
"""The values of ``flips.fail_item_on``: which flip fails a prompt's item."""

FLIP_VALUES: tuple[str, ...] = tuple(kind.value for kind in FlipKind if kind.is_flip)
"""The values of the kinds that are flips (:attr:`FlipKind.is_flip`), for reports that hold
flips as plain strings: ``("correct_to_wrong", "wrong_to_correct", "changed")``."""

FLIP_SEVERITY_ORDER: tuple[FlipKind, ...] = (
    FlipKind.CORRECT_TO_WRONG,
    FlipKind.CHANGED,
    FlipKind.WRONG_TO_CORRECT,
    FlipKind.WRONG_TO_WRONG,
    FlipKind.UNCHANGED,
)
"""Every kind, most severe first: a regression, then a change of unknown direction (no
reference), then an improvement, then a change between two wrong answers, then none."""


def _as_flip(flip: FlipKind | str) -> FlipKind:
    if isinstance(flip, FlipKind):
        return flip
    try:
        return FlipKind(flip)
    except ValueError:
        choices = ", ".join(k.value for k in FlipKind)
        raise ValueError(f"unknown flip kind {flip!r}; expected one of: {choices}") from None


def flip_rank(flip: FlipKind | str | None) -> int:
    """Position of ``flip`` in :data:`FLIP_SEVERITY_ORDER` (0: most severe); None and
    unknown strings rank after every kind (``len(FLIP_SEVERITY_ORDER)``)."""
    if flip is None:
        return len(FLIP_SEVERITY_ORDER)
    try:
        return FLIP_SEVERITY_ORDER.index(_as_flip(flip))
    except ValueError:
        return len(FLIP_SEVERITY_ORDER)


def fails_item(flip: FlipKind | str | None, fail_item_on: FailItemOn) -> bool:
    """Whether ``flip`` fails an item under ``flips.fail_item_on`` (the one place that
    decides it).

    ``never``: no flip fails. ``correct_to_wrong``: only ``correct_to_wrong`` fails. ``any``:
    every flip (:attr:`FlipKind.is_flip`) fails: ``correct_to_wrong``, ``wrong_to_correct``
    and ``changed``, never ``wrong_to_wrong`` or ``unchanged``. None (the prompt has no
    answer kind, nothing was compared) never fails.

    Raises:
        ValueError: for an unknown flip kind or ``fail_item_on`` value.
    """
    if fail_item_on not in get_args(FailItemOn):
        choices = ", ".join(get_args(FailItemOn))
        raise ValueError(f"unknown fail_item_on {fail_item_on!r}; expected one of: {choices}")
    if flip is None:
        return False
    kind = _as_flip(flip)
    if fail_item_on == "never":
        return False
    if fail_item_on == "correct_to_wrong":
        return kind is FlipKind.CORRECT_TO_WRONG
    return kind.is_flip


def classify_flip(base: Answer | None, test: Answer | None, reference: Answer | None) -> FlipKind:
    """Classify the baseline -> test answer change.

    With a reference, "correct" means :func:`answers_equal` to it (no answer is wrong):
    correct/correct -> ``unchanged``; correct/wrong -> ``correct_to_wrong``; wrong/correct ->
    ``wrong_to_correct``; wrong/wrong -> ``unchanged`` if the two answers are equal, else
    ``wrong_to_wrong``. Without a reference (``None``): ``unchanged`` if equal, else
    ``changed``.
    """
    same = answers_equal(base, test)
    if reference is None:
        return FlipKind.UNCHANGED if same else FlipKind.CHANGED
    base_ok = base is not None and answers_equal(base, reference)
    test_ok = test is not None and answers_equal(test, reference)
    if base_ok and test_ok:
        return FlipKind.UNCHANGED
    if base_ok:
        return FlipKind.CORRECT_TO_WRONG
    if test_ok:
        return FlipKind.WRONG_TO_CORRECT
    return FlipKind.UNCHANGED if same else FlipKind.WRONG_TO_WRONG
