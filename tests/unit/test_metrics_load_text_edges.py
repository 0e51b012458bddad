"""Edges of the load and text metrics that the mutation run (mutmut) found unguarded:
spans shorter than a second, overlaps after a gap, and long texts (difflib's autojunk
heuristic only starts at 200 characters). Expected values are worked by hand."""

from __future__ import annotations

from pytest_infercheck.metrics.load import max_in_flight, mean_in_flight, tokens_per_second
from pytest_infercheck.metrics.text import similarity


def test_sub_second_spans_are_rates_not_nan() -> None:
    # two requests over the same 0.5 s: 1.0 s of requests / 0.5 s span = 2 in flight
    assert mean_in_flight([(0.0, 0.5), (0.0, 0.5)]) == 2.0
    assert tokens_per_second(10, [(0.0, 0.5)]) == 20.0


def test_an_end_lowers_the_count_by_one() -> None:
    # (0, 1) and (2, 3) never overlap; (4, 6) and (5, 7) do: 2 at t = 5.5
    assert max_in_flight([(0.0, 1.0), (2.0, 3.0), (4.0, 6.0), (5.0, 7.0)]) == 2


def test_long_texts_are_compared_without_autojunk() -> None:
    # 600 characters; the first 298 match, then "ab" vs "ba" share one: M = 299,
    # ratio 2 * 299 / 600 (autojunk would drop "a" and "b" as popular and find less)
    assert similarity("ab" * 150, "ab" * 149 + "ba") == 2 * 299 / 600
