"""Stress metrics against hand-computed values: concurrency achieved from request intervals,
throughput, latency percentiles, consistency, flips, errors and the per-level gates."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from pydantic import ValidationError

from pytest_infercheck.backends.http import HttpError
from pytest_infercheck.backends.openai_compat import parse_choice
from pytest_infercheck.checks.framework.items import RecordedItem, summarize_items
from pytest_infercheck.checks.framework.target import TargetContext
from pytest_infercheck.checks.registry import kind_named
from pytest_infercheck.checks.stress import (
    Mismatch,
    Output,
    Reference,
    StressEvidence,
    StressLevel,
    StressThresholds,
    batches,
    error_kind,
    jobs_for,
    level_data,
    token_count,
)
from pytest_infercheck.config import check_model
from pytest_infercheck.metrics.load import max_in_flight, mean_in_flight, span, tokens_per_second
from pytest_infercheck.records import load_record, plain_data
from pytest_infercheck.shared_work import SharedWork
from pytest_infercheck.suites import Prompt
from pytest_infercheck.xdist_scheduling import scope_of
from tests.unit.engine_verdicts import violations


def prompt(pid: str, answer: str | None = None, kind: str | None = "number") -> Prompt:
    return Prompt(pid, f"{pid}=", None, 5, answer, kind, None, "t:1")


# -- load metrics ------------------------------------------------------------------------------
def test_concurrency_from_intervals() -> None:
    # [0,2] [1,3] [1,2] [3,4]: busy time 2+2+1+1 = 6 over a span of 4 -> 1.5 in flight on
    # average; at t in (1,2) three overlap; [1,3] and [3,4] only touch.
    intervals = [(0.0, 2.0), (1.0, 3.0), (1.0, 2.0), (3.0, 4.0)]
    assert span(intervals) == 4.0
    assert mean_in_flight(intervals) == 1.5
    assert max_in_flight(intervals) == 3
    assert tokens_per_second(20, intervals) == 5.0


def test_concurrency_edge_cases() -> None:
    assert max_in_flight([(0.0, 1.0), (1.0, 2.0)]) == 1  # touching is not overlapping
    assert mean_in_flight([(0.0, 1.0), (1.0, 2.0)]) == 1.0
    assert max_in_flight([]) == 0 and span([]) == 0.0
    assert math.isnan(mean_in_flight([])) and math.isnan(tokens_per_second(3, [(1.0, 1.0)]))
    # a real batch of 4: every request spans the same call
    assert mean_in_flight([(5.0, 7.0)] * 4) == 4.0 and max_in_flight([(5.0, 7.0)] * 4) == 4


# -- one level ---------------------------------------------------------------------------------
REFS = {"a": Reference("46", [10, 11, 2]), "b": Reference("75", [12, 13, 2])}
PROMPTS = [prompt("a", "46"), prompt("b", "75")]


def test_level_data_by_hand() -> None:
    outputs = [
        Output("a", 0.0, 1.0, "46", [10, 11, 2], 3),  # consistent
        Output("a", 0.0, 2.0, "47", [10, 14, 2], 3),  # token 1 differs: a correct->wrong flip
        Output("b", 1.0, 4.0, "75", [12, 13, 2], 3),  # consistent
        Output("b", 2.0, 2.5, error="http_503"),  # an error: in every denominator
    ]
    data = level_data(4, "m@srv", outputs, REFS, PROMPTS)
    assert data.requests == 4
    assert data.errors == {"http_503": 1} and data.error_rate == 0.25
    assert data.consistent == 2 and data.consistency == 0.5
    assert data.flips == 1 and data.flip_rate == 0.25
    # successful latencies 1, 2, 3: p50 = 2; p95: h = 2 * 0.95 = 1.9 -> 2 + 0.9 * (3 - 2)
    assert data.latency_p50_s == 2.0
    assert data.latency_p95_s == pytest.approx(2.9)
    # 9 tokens of successful requests over the level's span [0, 4]
    assert data.tokens_per_s == 2.25
    # busy 1 + 2 + 3 + 0.5 = 6.5 over 4; never more than two at once ([0,1] ends as [1,4]
    # starts, [0,2] as [2,2.5] starts)
    assert data.achieved_concurrency == 1.625 and data.max_in_flight == 2
    assert data.mismatches == [
        Mismatch(prompt_id="a", first_divergence=1, unit="token", reference="46", output="47")
    ]


def test_text_only_engine_diverges_by_character_and_has_no_token_rate() -> None:
    refs = {"a": Reference("46", None)}
    outputs = [Output("a", 0.0, 1.0, "46"), Output("a", 0.0, 1.0, "4")]
    data = level_data(2, "m@vllm", outputs, refs, [prompt("a", "46")])
    assert data.consistency == 0.5
    assert data.mismatches[0].first_divergence == 1
    assert data.mismatches[0].unit == "char"
    assert data.tokens_per_s is None


def test_sameness_needs_ids_and_text() -> None:
    """Same text with other ids, and same ids with other text: neither is consistent (the
    one sameness rule: equal text, and equal ids where both sides have them)."""
    outputs = [
        Output("a", 0.0, 1.0, "46", [10, 11, 2], 3),  # consistent
        Output("a", 0.0, 1.0, "46", [10, 99, 2], 3),  # same text, other ids: token 1
        Output("a", 0.0, 1.0, "4 6", [10, 11, 2], 3),  # same ids, other text: character 1
    ]
    data = level_data(3, "m@srv", outputs, {"a": Reference("46", [10, 11, 2])}, PROMPTS)
    assert data.consistent == 1
    assert [(m.first_divergence, m.unit) for m in data.mismatches] == [(1, "token"), (1, "char")]


def test_all_errors() -> None:
    outputs = [Output("a", 0.0, 0.1, error="ConnectError")] * 2
    data = level_data(2, "m@srv", outputs, REFS, PROMPTS)
    assert data.error_rate == 1.0 and data.consistency == 0.0
    assert data.latency_p50_s is None and data.tokens_per_s is None


def check(**thresholds: object) -> StressThresholds:
    """The thresholds of a stress check entry with ``thresholds`` written beside its key."""
    entry = check_model(frozenset({"stress"})).model_validate({"stress": "m", **thresholds})
    typed = entry.kind_thresholds()
    assert isinstance(typed, StressThresholds)
    return typed


def level_violations(data: StressLevel, thresholds: StressThresholds) -> list[str]:
    """The level's violations, as the framework judges its evidence."""
    evidence = StressEvidence(data, confidence=thresholds.flips.confidence)
    return violations("stress", evidence, thresholds, "level")


def test_gates() -> None:
    data = StressLevel(
        target="m@srv",
        level=4,
        requests=20,
        errors={"http_503": 2},
        error_rate=0.1,
        consistent=17,
        consistency=0.85,
        flips=1,
        flip_rate=0.05,
        latency_p50_s=None,
        latency_p95_s=None,
        tokens_per_s=None,
        achieved_concurrency=None,
        max_in_flight=4,
        mismatches=[],
    )
    found = level_violations(data, check())
    assert found == [
        "error rate (2/20: http_503 x2) 0.1 > max_error_rate 0",
        "consistency (17/20 outputs equal to their reference) 0.85 < min_consistency 1",
    ]
    assert level_violations(data, check(max_error_rate=0.1, min_consistency=0.85)) == []
    # flip gate: the Wilson upper bound of 1/20 at 95% (z = 1.96) is
    # (0.05 + z^2/40 + z sqrt(0.05 * 0.95 / 20 + z^2/1600)) / (1 + z^2/20) = 0.236131
    upper = check(max_error_rate=0.1, min_consistency=0.8, flips={"max_rate": 0.2})
    (flip,) = level_violations(data, upper)
    assert flip == "flip rate (1/20; Wilson upper bound at 0.95) 0.236131 > flips.max_rate 0.2"
    wider = check(max_error_rate=0.1, min_consistency=0.8, flips={"max_rate": 0.24})
    assert level_violations(data, wider) == []
    point = check(
        max_error_rate=0.1, min_consistency=0.8, flips={"max_rate": 0.05, "gate": "point"}
    )
    assert level_violations(data, point) == []


def test_jobs_and_batches() -> None:
    a, b = prompt("a"), prompt("b")
    assert [p.id for p in jobs_for([a, b], 1, 2)] == ["a", "a", "b", "b"]
    # level 8 over 2 prompts: 4 copies of each, so 8 requests can be in flight
    assert [p.id for p in jobs_for([a, b], 8, 2)] == ["a"] * 4 + ["b"] * 4
    p5, p9 = object(), object()
    jobs = [(a, "ra", p5), (a, "ra", p5), (b, "rb", p5), (b, "rb", p9)]
    sizes = [[j[1] for j in batch] for batch in batches(jobs, 2)]  # type: ignore[arg-type]
    assert sizes == [["ra", "ra"], ["rb"], ["rb"]]  # cut at 2 and where params change


def test_error_kinds() -> None:
    assert error_kind(HttpError("busy", 503)) == "http_503"
    try:
        try:
            raise TimeoutError("slow")
        except TimeoutError as exc:
            raise HttpError("failed after 1 attempt") from exc
    except HttpError as err:
        assert error_kind(err) == "TimeoutError"
    assert error_kind(ValueError("x")) == "ValueError"


# -- sharing and scheduling --------------------------------------------------------------------
def test_shared_work_computes_once(tmp_path: Path) -> None:
    calls: list[int] = []

    def compute() -> dict[str, object]:
        calls.append(1)
        return {"level": 2, "pair": (1, 2)}

    first = SharedWork(tmp_path).once("x-c2", compute)
    other_process = SharedWork(tmp_path)  # a worker that comes later reads the published value
    assert other_process.once("x-c2", compute) == first == {"level": 2, "pair": [1, 2]}
    assert calls == [1]
    in_memory = SharedWork(None)
    assert in_memory.once("y", compute) == first and in_memory.once("y", compute) == first
    assert calls == [1, 1]


def test_stress_items_spread_over_workers() -> None:
    assert scope_of("m.yaml::stress(q4)::addition::c8") == "m.yaml::stress(q4)::addition::c8"
    assert scope_of("m.yaml::stress(q4)::addition::aggregate").endswith("::aggregate")
    assert scope_of("m.yaml::determinism(q4)::addition::e1") == "m.yaml::determinism(q4)::addition"


def test_token_count_falls_back_to_the_servers_usage() -> None:
    """vllm-mlx gives no ids nor logprobs, only ``usage``: tokens/s still has a numerator."""
    answer = {
        "choices": [{"text": "46", "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 7, "completion_tokens": 3},
    }
    assert token_count(parse_choice(answer, chat=False)) == 3
    assert token_count(parse_choice({"choices": [{"text": "46"}]}, chat=False)) is None


# -- failing closed ------------------------------------------------------------------------------
def test_a_non_finite_latency_is_a_violation_whatever_the_thresholds() -> None:
    # Request 1's clock gave NaN, request 2's end is +inf. The percentiles of [1.0, nan] used to
    # come out None, as if nothing had succeeded, and no gate looked at them.
    refs = {"a": Reference("46", None)}
    outputs = [
        Output("a", 0.0, 1.0, "46"),
        Output("a", 0.0, math.nan, "46"),
        Output("a", 0.5, math.inf, error="ReadTimeout"),
    ]
    data = level_data(2, "m@srv", outputs, refs, [prompt("a", "46")])
    loose = check(max_error_rate=1.0, min_consistency=0.0)
    assert level_violations(data, loose) == ["non-finite latency at requests 1, 2 (NaN, +inf)"]
    assert [f.text for f in data.faults] == ["non-finite latency at requests 1, 2 (NaN, +inf)"]
    assert data.latency_p50_s is None and data.tokens_per_s is None


def test_an_empty_output_is_named_even_when_consistency_allows_it() -> None:
    # Text-only engine: request 1 came back empty against the reference "46" (2 characters).
    refs = {"a": Reference("46", None)}
    outputs = [Output("a", 0.0, 1.0, "46"), Output("a", 0.0, 1.0, ""), Output("a", 0.0, 1.0, "46")]
    data = level_data(2, "m@srv", outputs, refs, [prompt("a", "46")])
    expected = (
        "empty generation in 1 of 3 requests: request 1 (a) generated no characters while "
        "its reference generated 2"
    )
    assert level_violations(data, check(min_consistency=0.5)) == [expected]
    assert [f.text for f in data.faults] == [expected]
    assert data.consistent == 2
    assert data.mismatches[0].fault == (
        "empty generation: request 1 (a) generated no characters while its reference generated 2"
    )


def test_empty_by_token_ids_and_the_stop_token() -> None:
    refs = {"a": Reference("46", [10, 11, 2], "stop")}
    outputs = [
        Output("a", 0.0, 1.0, "", [2], 1, finish_reason="stop"),  # stopped at once: empty
        Output("a", 0.0, 1.0, "", [], 0, finish_reason="length"),  # nothing at all: empty
        Output("a", 0.0, 1.0, "46", [10, 11, 2], 3, finish_reason="stop"),
    ]
    data = level_data(2, "m@srv", outputs, refs, [prompt("a", "46")])
    (fault,) = data.faults
    assert fault.positions == (0, 1) and fault.unit == "request"
    assert fault.text == (
        "empty generation in 2 of 3 requests: request 0 (a) generated no tokens while its "
        "reference generated 2; request 1 (a) generated no tokens while its reference "
        "generated 2"
    )


def test_faults_are_in_the_json_only_when_there_are_some() -> None:
    refs = {"a": Reference("46", None)}
    clean = level_data(1, "m@srv", [Output("a", 0.0, 1.0, "46")], refs, [prompt("a", "46")])
    plain = plain_data(clean)
    assert "faults" not in plain and "fault" not in json.dumps(plain)
    broken = level_data(1, "m@srv", [Output("a", 0.0, 1.0, "")], refs, [prompt("a", "46")])
    plain = plain_data(broken)
    assert plain["faults"][0]["fault"] == "empty generation"
    assert plain["mismatches"][0]["fault"].startswith("empty generation: request 0 (a)")
    assert load_record(StressLevel, json.loads(json.dumps(plain))) == broken


# -- the aggregate: a summary of the levels' records -----------------------------------------
def level_item(data: StressLevel) -> RecordedItem:
    """A level as the aggregate reads it: its record through plain data and back."""
    return RecordedItem("level", f"c{data.level}", load_record(StressLevel, plain_data(data)))


CONTEXT = TargetContext("m@srv", {"m@srv": {"kind": "llama-server"}})


def judged_item(data: StressLevel, thresholds: StressThresholds) -> RecordedItem:
    """A level as the aggregate reads it: its record through plain data and back, with the
    violations its item was judged to have."""
    found = level_violations(data, thresholds)
    record = load_record(StressLevel, plain_data(data))
    return RecordedItem("level", f"c{data.level}", record, violations=tuple(found))


def test_the_aggregate_is_every_level_in_level_order_with_its_items_verdict() -> None:
    clean = level_data(1, "m@srv", [Output("a", 0.0, 1.0, "46", [10, 11, 2], 3)], REFS, PROMPTS)
    changed = level_data(4, "m@srv", [Output("a", 0.0, 1.0, "47", [10, 14, 2], 3)], REFS, PROMPTS)
    assert clean.violations == changed.violations == []  # as measured: never judged
    items = [judged_item(changed, check()), judged_item(clean, check())]
    stress = kind_named("stress")
    assert stress is not None
    summary = summarize_items(stress, items, check(), CONTEXT)
    gate = "consistency (0/1 outputs equal to their reference) 0 < min_consistency 1"
    assert summary.violations == [f"1 of 2 items failed: c4 ({gate})"]
    assert [d.level for d in summary.record.levels] == [1, 4]
    assert summary.record.levels[0].violations == []
    assert summary.record.levels[1].violations == [gate]
    assert summary.properties[0] == ("infercheck_levels_failed", 1)
    loose = [judged_item(d, check(min_consistency=0.0)) for d in (changed, clean)]
    assert summarize_items(stress, loose, check(min_consistency=0.0), CONTEXT).violations == []
    assert summarize_items(stress, items[::-1], check(), CONTEXT) == summary


@pytest.mark.parametrize(
    ("outputs", "words"),
    [
        ([Output("a", 0.0, math.nan, "46")], "non-finite latency at request 0 (NaN)"),
        ([Output("a", 0.0, 1.0, "")], "empty generation in 1 of 1 requests"),
    ],
    ids=["nan-latency", "empty"],
)
def test_a_fault_of_a_level_fails_it_and_the_aggregate_whatever_the_thresholds(
    outputs: list[Output], words: str
) -> None:
    data = level_data(2, "m@srv", outputs, {"a": Reference("46", None)}, [prompt("a", "46")])
    loose = check(max_error_rate=1.0, min_consistency=0.0)
    item = judged_item(data, loose)
    assert len(item.violations) == 1 and item.violations[0].startswith(words), item.violations
    stress = kind_named("stress")
    assert stress is not None
    (line,) = summarize_items(stress, [item], loose, CONTEXT).violations
    assert line.startswith(f"1 of 1 items failed: c2 ({words}"), line


def test_a_level_whose_every_request_failed_fails_whatever_the_thresholds() -> None:
    """Before: error rate 1.0 within max_error_rate 1.0 and consistency 0 within
    min_consistency 0 passed a level of nothing but errors. A level with nothing to judge
    fails with the server's message (the gather's RequestFailure)."""
    from pytest_infercheck.verdict.conduct import RequestFailure

    outputs = [Output("a", 0.0, 0.1, error="http_500", message="boom", status=500)] * 2
    data = level_data(2, "m@srv", outputs, REFS, PROMPTS)
    loose = check(max_error_rate=1.0, min_consistency=0.0)
    assert level_violations(data, loose) == []  # the gates alone pass it
    failure = RequestFailure("m@srv", "every request (2 of 2) at c2", "boom", 500)
    evidence = StressEvidence(data, failures=[failure])
    assert violations("stress", evidence, loose, "level") == [
        "m@srv: every request (2 of 2) at c2 failed: HTTP 500: boom"
    ]


def test_a_level_that_errored_is_named_by_the_aggregate() -> None:
    clean = level_data(1, "m@srv", [Output("a", 0.0, 1.0, "46", [10, 11, 2], 3)], REFS, PROMPTS)
    items = [level_item(clean), RecordedItem("level", "c2", None, "server gone")]
    summary = summarize_items(kind_named("stress"), items, check(), CONTEXT)  # type: ignore[arg-type]
    assert summary.violations == ["1 of 2 items errored: c2 (server gone)"]
    assert [d.level for d in summary.record.levels] == [1]


def test_stress_refuses_a_flip_rule_per_item_it_does_not_apply() -> None:
    with pytest.raises(ValidationError, match=r"stress does not use flips\.fail_item_on"):
        check(flips={"fail_item_on": "any"})
    assert check(flips={"fail_item_on": "correct_to_wrong", "max_rate": 0.5}).flips.max_rate == 0.5
