"""Unit tests for pytest_infercheck.metrics.text."""

from __future__ import annotations

import pytest

from pytest_infercheck.metrics.text import Severity, first_divergence, severity, similarity


@pytest.mark.parametrize(
    ("a", "b", "expected"),
    [
        ([], [], None),
        ([1, 2, 3], [1, 2, 3], None),
        ([1, 2, 3], [1, 9, 3], 1),
        ([1, 2, 3], [7, 2, 3], 0),
        ([1, 2, 3], [1, 2, 4], 2),
        ([1, 2], [1, 2, 3, 4], 2),  # strict prefix: length of the shorter
        ([1, 2, 3, 4], [1, 2], 2),
        ([], [5], 0),
        ((1, 2, 3), [1, 2, 3], None),  # any sequence types
    ],
)
def test_first_divergence(a: list[int], b: list[int], expected: int | None) -> None:
    assert first_divergence(a, b) == expected


@pytest.mark.parametrize(
    ("a", "b", "expected"),
    [
        ("", "", 1.0),
        ("abc", "abc", 1.0),
        ("abc", "", 0.0),
        ("abcd", "abce", 2 * 3 / 8),  # 3 matched chars, 2M / (4 + 4) = 0.75
        ("ab", "ba", 2 * 1 / 4),  # longest match 1 char -> 0.5
        ("hello world", "hello there", 2 * 7 / 22),  # "hello " (6) + "r" (1): M = 7
    ],
)
def test_similarity_by_hand(a: str, b: str, expected: float) -> None:
    assert similarity(a, b) == pytest.approx(expected)
    assert similarity(b, a) == pytest.approx(expected)


def test_similarity_no_autojunk_on_long_text() -> None:
    # With autojunk a character that is > 1% of a 200+ char string is "popular" and ignored,
    # which makes long near-identical texts score very low. Without it: one char changed.
    a = "a" * 300
    b = "a" * 299 + "b"
    assert similarity(a, b) == pytest.approx(2 * 299 / 600)


@pytest.mark.parametrize(
    ("identical", "sim", "expected"),
    [
        (True, 0.0, Severity.IDENTICAL),
        (True, 1.0, Severity.IDENTICAL),
        (False, 1.0, Severity.MINOR),
        (False, 0.8, Severity.MINOR),  # boundary is inclusive
        (False, 0.7999999, Severity.MODERATE),
        (False, 0.5, Severity.MODERATE),  # boundary is inclusive
        (False, 0.4999999, Severity.SEVERE),
        (False, 0.0, Severity.SEVERE),
    ],
)
def test_severity_tiers(identical: bool, sim: float, expected: Severity) -> None:
    assert severity(identical, sim) is expected


def test_severity_is_str_enum() -> None:
    assert Severity.MINOR == "minor"
    assert str(Severity.SEVERE) == "severe"
    assert Severity("moderate") is Severity.MODERATE
