"""Edges of the verdict rules and of an outcome's report that the rule tests leave open
(found by the mutation run, tests/unit/MUTATION.md): how a cold reference is said, where a
cached-token count starts to make it warm, every list a merged conduct keeps, a yes/no gate's
violation and refusal, a failed item's report and a shard's deferred aggregate."""

from __future__ import annotations

import pytest

from pytest_infercheck.checks.framework.outcome import DEFERRED, Outcome, defer_gates
from pytest_infercheck.metrics.degenerate import DegenerateScan
from pytest_infercheck.verdict.conduct import (
    ColdReference,
    Conduct,
    NotExercised,
    RequestFailure,
    Unsupported,
    conduct_violations,
)
from pytest_infercheck.verdict.gate import Gate
from pytest_infercheck.verdict.measure import Finding


# -- a cold reference ------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("cold", "said"),
    [
        (
            ColdReference("the reference", "uncached-request"),
            "the reference cold by an uncached request",
        ),
        (
            ColdReference("the reference", "uncached-request", cached_tokens=0, sent_first=False),
            "the reference cold by an uncached request",
        ),
        (
            ColdReference("the reference", "sent-first"),
            "the reference sent first, no cached-token count reported",
        ),
        (
            ColdReference("the reference", "reported-zero", cached_tokens=0, sent_first=False),
            "the reference sent after other requests, 0 cached tokens reported",
        ),
        (
            ColdReference("run 0", "reported-zero", cached_tokens=7),
            "run 0 sent first, 7 cached tokens reported",
        ),
    ],
)
def test_how_a_cold_reference_was_ensured_is_said(cold: ColdReference, said: str) -> None:
    assert cold.describe() == said


def test_one_cached_token_makes_a_reference_warm() -> None:
    cold = ColdReference("the reference", "reported-zero", cached_tokens=1)
    assert cold.violation() == (
        "the reference is not cold: the engine reports 1 cached prompt tokens on it"
    )


def test_an_uncached_request_needs_no_order_and_no_count() -> None:
    """The engine's own uncached request is cold wherever it was sent, count or none."""
    cold = ColdReference("the reference", "uncached-request", cached_tokens=None, sent_first=False)
    assert cold.violation() is None
    assert conduct_violations(Conduct(cold=[cold])) == []


def test_a_merged_conduct_keeps_every_list_of_both_in_order() -> None:
    a = Conduct(
        [RequestFailure("a", "x", "m")],
        [Unsupported("tokenize", "ids of a", probed=True)],
        [NotExercised("eviction", "size unknown", True)],
        [ColdReference("a", "uncached-request")],
    )
    b = Conduct(
        [RequestFailure("b", "y", "n")],
        [Unsupported("messages", "messages of b", probed=False)],
        [NotExercised("multi-turn", "late", False)],
        [ColdReference("b", "sent-first")],
    )
    merged = a.merged(b)
    assert merged.failures == [*a.failures, *b.failures]
    assert merged.unsupported == [*a.unsupported, *b.unsupported]
    assert merged.not_exercised == [*a.not_exercised, *b.not_exercised]
    assert merged.cold == [*a.cold, *b.cold]
    # The unprobed unsupported and the late not-exercised of b fail the merged conduct.
    assert [v.source for v in conduct_violations(merged)] == [
        "request-failed",
        "request-failed",
        "unsupported-unprobed",
        "not-exercised-late",
    ]


# -- a yes/no gate ---------------------------------------------------------------------------
class Written:
    identical = True


IDENTICAL = Gate("identical", "same", "true", "outputs identical")


def test_a_failed_finding_is_a_violation_of_its_gate() -> None:
    violation = IDENTICAL.judge(Written(), {"same": Finding(False, "differ at token 3")})
    assert violation is not None
    assert violation.text == "outputs identical: differ at token 3 (identical: True)"
    assert violation.source == "identical"
    bare = IDENTICAL.judge(Written(), {"same": False})
    assert bare is not None and (bare.text, bare.source) == (
        "outputs identical (identical: True)",
        "identical",
    )


def test_a_yes_no_gate_refuses_a_number_naming_itself() -> None:
    with pytest.raises(TypeError, match=r"^gate identical reads a yes/no finding, got 0\.5$"):
        IDENTICAL.judge(Written(), {"same": 0.5})


# -- an outcome's report ---------------------------------------------------------------------
def test_a_failure_report_is_the_first_violation_the_text_and_every_violation() -> None:
    two = Outcome(["mean KL 0.2 > max_kl 0.1", "fault"], "q4 vs bf16")
    assert two.failure_report() == (
        "mean KL 0.2 > max_kl 0.1 (+1 more)\n\nq4 vs bf16\nviolations:\n"
        "  - mean KL 0.2 > max_kl 0.1\n  - fault"
    )
    one = Outcome(["fault"], "")
    assert one.failure_report() == "fault\n\nviolations:\n  - fault"
    none = Outcome([], "")
    assert none.failure_report() == "failed\n\nviolations:\n"


def test_a_deferred_aggregate_keeps_its_degenerate_count_and_says_the_deferral() -> None:
    scan = DegenerateScan(2, [])
    outcome = Outcome(["gate"], "", {"n": 1}, [], degenerate=scan)
    deferred = defer_gates(outcome, "2/3")
    assert deferred.text == DEFERRED.format(shard="2/3")
    assert deferred.degenerate is scan
    assert deferred.violations == []
    assert deferred.properties == [("infercheck_gates_deferred", "2/3")]
