"""The verdict discipline's pure rules (pytest_infercheck/verdict): gates on measures, the
conduct of a gathering, waivers; each case computed by hand."""

from __future__ import annotations

import math

import pytest
from pydantic import BaseModel

from pytest_infercheck.verdict.conduct import (
    Abilities,
    ColdReference,
    Conduct,
    NotExercised,
    RequestFailure,
    Unsupported,
    conduct_notes,
    conduct_violations,
    not_exercised_before_requests,
)
from pytest_infercheck.verdict.gate import Gate, Violation, judge_gates, written_gates
from pytest_infercheck.verdict.measure import (
    Finding,
    Reading,
    Unmeasured,
    is_finite,
    measured_or,
    number,
    qualifier,
)
from pytest_infercheck.verdict.waiver import Waiver, apply_waivers


class Flips(BaseModel):
    max_rate: float | None = None
    gate: str = "upper"


class Limits(BaseModel):
    max_kl: float | None = None
    min_similarity: float | None = None
    expect: str = "budget"
    flips: Flips = Flips()


MAX_KL = Gate("max_kl", "kl_mean", "max", "mean KL")
MIN_SIM = Gate("min_similarity", "similarity", "min", "text similarity")
IDENTICAL = Gate(
    "expect",
    "identical",
    "true",
    "outputs not identical",
    written=lambda t: t.expect == "identical",
)
FLIP_RATE = Gate(
    "flips.max_rate",
    lambda t: "flip_rate_high" if t.flips.gate == "upper" else "flip_rate",
    "max",
    "flip rate",
    scope="suite",
)
GATES = (MAX_KL, MIN_SIM, IDENTICAL, FLIP_RATE)


# -- measures ----------------------------------------------------------------------------------
def test_a_measure_is_a_number_or_not() -> None:
    assert number(0.25) == 0.25 and number(Reading(0.5, "lower bound")) == 0.5
    assert number(True) is None and number(Finding(False, "x")) is None
    assert number(Unmeasured("no logprobs")) is None
    assert qualifier(Reading(0.5, "lower bound")) == " (lower bound)"
    assert qualifier(Reading(0.5)) == "" and qualifier(0.5) == ""
    assert measured_or(None, "why") == Unmeasured("why") and measured_or(0.0, "why") == 0.0
    assert is_finite(1.0) and not is_finite(math.nan) and not is_finite(Reading(math.inf))
    assert is_finite(Unmeasured("x")) and is_finite(True)


# -- gates -------------------------------------------------------------------------------------
def test_a_gate_not_written_judges_nothing_even_unmeasured() -> None:
    measures = {"kl_mean": Unmeasured("method text"), "similarity": math.nan}
    assert judge_gates(GATES, Limits(), measures, "item") == []
    assert written_gates(GATES, Limits()) == []


def test_a_written_gate_whose_measure_is_unmeasured_fails_naming_gate_and_why() -> None:
    limits = Limits(max_kl=0.05)
    measures = {"kl_mean": Unmeasured("method text, backend 'x' has logprobs: false")}
    assert judge_gates(GATES, limits, measures, "item") == [
        Violation("max_kl: not measured: method text, backend 'x' has logprobs: false", "max_kl")
    ]


def test_a_written_gate_whose_measure_was_never_recorded_fails() -> None:
    (violation,) = judge_gates(GATES, Limits(min_similarity=0.9), {}, "item")
    assert (
        violation.text
        == "min_similarity: not measured: no text similarity was recorded (similarity)"
    )


@pytest.mark.parametrize(
    ("value", "said"),
    [(math.nan, "nan"), (math.inf, "inf"), (-math.inf, "-inf")],
)
def test_a_measure_that_is_not_finite_fails_whatever_the_limit(value: float, said: str) -> None:
    limits = Limits(max_kl=1e9, min_similarity=0.0)
    got = judge_gates(GATES, limits, {"kl_mean": value, "similarity": value}, "item")
    assert [v.text for v in got] == [
        f"max_kl: mean KL is not finite ({said}): fails",
        f"min_similarity: text similarity is not finite ({said}): fails",
    ]


def test_max_and_min_compare_with_the_limit_inclusive() -> None:
    limits = Limits(max_kl=0.05, min_similarity=0.8)
    assert judge_gates(GATES, limits, {"kl_mean": 0.05, "similarity": 0.8}, "item") == []
    got = judge_gates(GATES, limits, {"kl_mean": 0.0501, "similarity": 0.7999}, "item")
    assert [v.text for v in got] == [
        "mean KL 0.0501 > max_kl 0.05",
        "text similarity 0.7999 < min_similarity 0.8",
    ]


def test_a_lower_bound_is_said_as_one() -> None:
    (violation,) = judge_gates(
        GATES, Limits(max_kl=0.01), {"kl_mean": Reading(0.25, "lower bound")}, "item"
    )
    assert violation.text == "mean KL (lower bound) 0.25 > max_kl 0.01"


def test_a_yes_no_gate_passes_on_true_and_names_what_was_found_on_false() -> None:
    limits = Limits(expect="identical")
    assert judge_gates(GATES, limits, {"identical": True}, "item") == []
    assert judge_gates(GATES, limits, {"identical": Finding(True)}, "item") == []
    got = judge_gates(
        GATES, limits, {"identical": Finding(False, "token ids differ from token 3")}, "item"
    )
    assert [v.text for v in got] == [
        "outputs not identical: token ids differ from token 3 (expect: identical)"
    ]
    assert [v.text for v in judge_gates(GATES, limits, {"identical": False}, "item")] == [
        "outputs not identical (expect: identical)"
    ]
    with pytest.raises(TypeError):
        judge_gates(GATES, limits, {"identical": 1.0}, "item")


def test_a_suite_gate_reads_the_measure_its_mode_names_and_only_in_its_scope() -> None:
    measures = {"flip_rate_high": 0.12, "flip_rate": 0.05}
    upper = Limits(flips=Flips(max_rate=0.1))
    assert judge_gates(GATES, upper, measures, "item") == []
    assert [v.text for v in judge_gates(GATES, upper, measures, "suite")] == [
        "flip rate 0.12 > flips.max_rate 0.1"
    ]
    point = Limits(flips=Flips(max_rate=0.1, gate="point"))
    assert judge_gates(GATES, point, measures, "suite") == []


def test_a_numeric_gate_given_a_finding_is_a_programming_error() -> None:
    with pytest.raises(TypeError):
        judge_gates(GATES, Limits(max_kl=1.0), {"kl_mean": True}, "item")


# -- conduct -----------------------------------------------------------------------------------
def test_every_failed_request_fails_with_the_servers_message() -> None:
    conduct = Conduct(
        failures=[
            RequestFailure("the reference q4@llama", "chat-stream", "tool parser error", 400),
            RequestFailure("test q4@vllm", "run 3", "connection reset"),
        ]
    )
    assert [v.text for v in conduct_violations(conduct)] == [
        "the reference q4@llama: chat-stream failed: HTTP 400: tool parser error",
        "test q4@vllm: run 3 failed: connection reset",
    ]


def test_unsupported_only_from_a_probe() -> None:
    abilities = Abilities(frozenset({"chat"}), {"messages": "POST /v1/messages: 404"})
    assert abilities.offers("chat") and not abilities.offers("messages")
    assert abilities.unsupported("chat", "the chat path") is None  # offered: make and judge it
    assert abilities.unsupported("n2", "n: 2") is None  # not probed: make and judge it
    probed = abilities.unsupported("messages", "the messages path")
    assert probed == Unsupported("messages", "the messages path", True, "POST /v1/messages: 404")
    assert conduct_violations(Conduct(unsupported=[probed])) == []
    assert conduct_notes(Conduct(unsupported=[probed])) == [
        "the messages path: unsupported (messages not offered: POST /v1/messages: 404)"
    ]
    guessed = Unsupported("messages", "the messages path", probed=False)
    (violation,) = conduct_violations(Conduct(unsupported=[guessed]))
    assert violation.source == "unsupported-unprobed"
    assert violation.text.startswith("the messages path: recorded unsupported without a probe")


def test_not_exercised_only_before_requests() -> None:
    early = not_exercised_before_requests("eviction", "the cache's capacity is not known")
    assert conduct_violations(Conduct(not_exercised=[early])) == []
    assert conduct_notes(Conduct(not_exercised=[early])) == [
        "eviction: not exercised (the cache's capacity is not known)"
    ]
    late = NotExercised("multi-turn", "HTTP 500 on turn 2", decided_before_requests=False)
    (violation,) = conduct_violations(Conduct(not_exercised=[late]))
    assert violation.source == "not-exercised-late" and "HTTP 500 on turn 2" in violation.text


@pytest.mark.parametrize(
    ("cold", "violation"),
    [
        (ColdReference("the reference", "uncached-request"), None),
        (ColdReference("the reference", "reported-zero", cached_tokens=0), None),
        (ColdReference("the reference", "sent-first", cached_tokens=None, sent_first=True), None),
        (
            ColdReference("the reference", "reported-zero", cached_tokens=12),
            "the reference is not cold: the engine reports 12 cached prompt tokens on it",
        ),
        (
            ColdReference("the reference", "uncached-request", cached_tokens=3),
            "the reference is not cold: the engine reports 3 cached prompt tokens on it",
        ),
        (
            ColdReference("the reference", "sent-first", cached_tokens=None, sent_first=False),
            "the reference is not shown cold: it was sent after requests that could warm the "
            "cache, and the engine reports no cached-token count",
        ),
        (ColdReference("the reference", "sent-first", cached_tokens=0, sent_first=False), None),
    ],
)
def test_a_cold_reference_is_shown_cold(cold: ColdReference, violation: str | None) -> None:
    got = [v.text for v in conduct_violations(Conduct(cold=[cold]))]
    assert got == ([] if violation is None else [violation])
    assert conduct_notes(Conduct(cold=[cold])) == [cold.describe()]


def test_conduct_merges_in_order() -> None:
    a = Conduct(failures=[RequestFailure("a", "x", "m")])
    b = Conduct(
        failures=[RequestFailure("b", "y", "n")], cold=[ColdReference("r", "uncached-request")]
    )
    merged = a.merged(b)
    assert [f.side for f in merged.failures] == ["a", "b"] and len(merged.cold) == 1


# -- waivers -----------------------------------------------------------------------------------
def test_a_waiver_applies_only_past_what_was_judged() -> None:
    differ = Violation("outputs not identical (expect: identical)", "expect")
    kl = Violation("mean KL 0.3 > max_kl 0.1", "max_kl")
    judged = Waiver(
        "fail_on: decisive",
        frozenset({"expect"}),
        True,
        "near-tie at token 3; teacher-forced past it, no later decisive disagreement",
    )
    kept, notes = apply_waivers([differ, kl], [judged])
    assert kept == [kl]
    assert notes == [
        "fail_on: decisive waived: outputs not identical (expect: identical) (near-tie at token "
        "3; teacher-forced past it, no later decisive disagreement)"
    ]
    unjudged = Waiver(
        "fail_on: decisive",
        frozenset({"expect"}),
        False,
        "method text: nothing after the near-tie was judged",
    )
    kept, notes = apply_waivers([differ, kl], [unjudged])
    assert kept == [differ, kl]
    assert notes == [
        "fail_on: decisive not applied: method text: nothing after the near-tie was judged"
    ]
    assert apply_waivers([kl], [judged]) == ([kl], [])  # nothing it covers: no note
