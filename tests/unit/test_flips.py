"""Unit tests for the one flip taxonomy in pytest_infercheck.metrics.answers: which kinds are
flips, which flips fail an item under each ``flips.fail_item_on``, and the report order."""

from __future__ import annotations

import pytest

from pytest_infercheck.metrics.answers import (
    FLIP_SEVERITY_ORDER,
    FLIP_VALUES,
    FailItemOn,
    FlipKind,
    fails_item,
    flip_rank,
)

C2W, W2C, W2W, CHANGED, UNCHANGED = (
    "correct_to_wrong",
    "wrong_to_correct",
    "wrong_to_wrong",
    "changed",
    "unchanged",
)

# Written by hand, one row per (flip, fail_item_on): does the flip fail the item?
FAILS: list[tuple[str | None, FailItemOn, bool]] = [
    (C2W, "correct_to_wrong", True),
    (C2W, "any", True),
    (C2W, "never", False),
    (W2C, "correct_to_wrong", False),
    (W2C, "any", True),
    (W2C, "never", False),
    (W2W, "correct_to_wrong", False),
    (W2W, "any", False),  # both answers wrong: not a flip
    (W2W, "never", False),
    (CHANGED, "correct_to_wrong", False),
    (CHANGED, "any", True),
    (CHANGED, "never", False),
    (UNCHANGED, "correct_to_wrong", False),
    (UNCHANGED, "any", False),
    (UNCHANGED, "never", False),
    (None, "correct_to_wrong", False),  # no answer kind: nothing compared
    (None, "any", False),
    (None, "never", False),
]


def test_the_table_covers_every_pair() -> None:
    pairs = {(flip, on) for flip, on, _ in FAILS}
    expected: set[tuple[str | None, str]] = {
        (k.value, on) for k in FlipKind for on in ("correct_to_wrong", "any", "never")
    }
    expected |= {(None, on) for on in ("correct_to_wrong", "any", "never")}
    assert pairs == expected
    assert len(FAILS) == len(expected)


@pytest.mark.parametrize(("flip", "fail_item_on", "expected"), FAILS)
def test_fails_item(flip: str | None, fail_item_on: FailItemOn, expected: bool) -> None:
    assert fails_item(flip, fail_item_on) is expected
    if flip is not None:  # the enum member and its value decide alike
        assert fails_item(FlipKind(flip), fail_item_on) is expected


def test_fails_item_rejects_unknown_values() -> None:
    with pytest.raises(ValueError, match="unknown flip kind 'flipped'"):
        fails_item("flipped", "any")
    with pytest.raises(ValueError, match="unknown fail_item_on 'all'"):
        fails_item(C2W, "all")  # type: ignore[arg-type]


def test_flip_values() -> None:
    assert FLIP_VALUES == (C2W, W2C, CHANGED)
    assert all(type(v) is str for v in FLIP_VALUES)


def test_severity_order() -> None:
    assert [k.value for k in FLIP_SEVERITY_ORDER] == [C2W, CHANGED, W2C, W2W, UNCHANGED]
    assert [flip_rank(v) for v in (C2W, CHANGED, W2C, W2W, UNCHANGED)] == [0, 1, 2, 3, 4]
    assert flip_rank(FlipKind.WRONG_TO_CORRECT) == 2
    assert flip_rank(None) == 5
    assert flip_rank("something else") == 5
