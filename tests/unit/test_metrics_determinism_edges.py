"""Edges of the determinism metrics that the mutation run (mutmut) found unguarded: runs
without token ids or logprobs, logprob lists of different lengths, and a non-default
confidence. Expected values are worked by hand."""

from __future__ import annotations

import pytest

from pytest_infercheck.backends.base import Generation
from pytest_infercheck.metrics.determinism import (
    RunOutput,
    determinism_score,
    logprob_diff,
    run_output,
    summarize_runs,
)
from pytest_infercheck.metrics.stats import wilson_interval


def test_a_run_without_ids_or_logprobs_keeps_them_none() -> None:
    out = run_output(Generation("46", None, "stop"), 0)
    assert (out.text, out.token_ids, out.logprobs, out.finish_reason) == ("46", None, None, "stop")


@pytest.mark.parametrize(("a", "b"), [([-0.5], [-0.5, -0.25]), ([-0.5, -0.25], [-0.5])])
def test_logprob_diff_stops_at_the_shorter_side(a: list[float], b: list[float]) -> None:
    assert logprob_diff(a, b, upto=2) == 0.0


def test_determinism_score_uses_its_confidence() -> None:
    same, other = RunOutput("4", (4,)), RunOutput("5", (5,))
    summary = summarize_runs([same, same, same, other])  # modal 3 of 4
    score, low, high = determinism_score([summary], confidence=0.5)
    assert score == 0.75
    assert (low, high) == wilson_interval(3, 4, 0.5)
    assert (low, high) != wilson_interval(3, 4, 0.95)
