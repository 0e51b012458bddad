"""Stress's inconsistent outputs labelled near-tie / decisive / unknown against a reference
that crossed processes as JSON (top-k id keys as strings): margins computed by hand."""

from __future__ import annotations

import json
import math
from typing import Any

import pytest

from pytest_infercheck.backends.base import Generation
from pytest_infercheck.checks.framework.items import RecordedItem
from pytest_infercheck.checks.framework.target import TargetContext
from pytest_infercheck.checks.stress import (
    STRESS,
    NearTie,
    Output,
    Reference,
    StressEvidence,
    StressLevel,
    StressThresholds,
    level_data,
    level_text,
    measure_level,
    reference_of,
)
from pytest_infercheck.config import CheckSpec
from pytest_infercheck.metrics.determinism import side_tokens
from pytest_infercheck.records import load_record, plain_data
from pytest_infercheck.suites import Prompt
from tests.unit.engine_verdicts import outcome, rescored, violations

PROMPTS = [Prompt("a", "a=", None, 5, None, None, None, "t:1")]


def gen(ids: list[int], lps: list[float], top: list[dict[Any, float]]) -> Generation:
    return Generation("".join(chr(97 + i) for i in ids), ids, "stop", lps, top)


# Reference: at position 1 it chose 5 (-0.40) over 6 (-0.408); NEAR: 6 (-0.401) over 5 (-0.404).
REF = gen([1, 5], [-0.01, -0.4], [{1: -0.01}, {5: -0.4, 6: -0.408}])
NEAR = gen([1, 6], [-0.0103, -0.401], [{1: -0.0103}, {6: -0.401, 5: -0.404}])
# FAR: 6 at -0.05, token 5 outside its top-2 (min -3.0): margin >= 2.95.
FAR = gen([1, 6], [-0.01, -0.05], [{1: -0.01}, {6: -0.05, 7: -3.0}])


def shared_reference() -> Reference:
    """The reference as another worker reads it: through JSON, its top-k keys strings."""
    crossed = json.loads(json.dumps(plain_data(reference_of(REF))))
    assert crossed["top_logprobs"][1] == {"5": -0.4, "6": -0.408}
    return load_record(Reference, crossed)


def output(g: Generation) -> Output:
    return Output(
        "a", 0.0, 1.0, g.text, g.token_ids, 2, finish_reason="stop", tokens=side_tokens(g)
    )


def level(tie_margin: float = 0.01) -> StressLevel:
    outputs = [output(NEAR), output(FAR), output(REF)]
    return level_data(3, "m@srv", outputs, {"a": shared_reference()}, PROMPTS, tie_margin)


def thresholds(**kw: object) -> StressThresholds:
    spec = CheckSpec.model_validate({"stress": "m", **kw}).kind_thresholds()
    assert isinstance(spec, StressThresholds)
    return spec


def test_margins_and_labels_against_the_shared_reference() -> None:
    data = level()
    near, far = (m.tie for m in data.mismatches)
    assert near is not None and far is not None and near.token == far.token == 1
    # reference: -0.400 - (-0.408) = 0.008; output: -0.401 - (-0.404) = 0.003; floor 0.0003.
    assert near.margins == pytest.approx([0.008, 0.003]) and near.margins_exact
    assert near.noise_floor == pytest.approx(0.0003) and near.divergence_label == "near-tie"
    assert far.margins == pytest.approx([0.008, 2.95]) and not far.margins_exact
    assert far.divergence_label == "decisive"
    assert data.divergence_labels == {"near-tie": 1, "decisive": 1, "unknown": 0}
    assert level(0.005).divergence_labels == {"near-tie": 0, "decisive": 2, "unknown": 0}
    text = level_text(data).splitlines()
    assert (
        "    near-tie at token 1 (margins: reference 0.008, output 0.003 nats; noise floor 0.0003)"
        in text
    )
    assert "  divergences 1 near-tie, 1 decisive" in text


def evidence(scored: bool) -> StressEvidence:
    """The level with its near-tie output (request 0) scored on the engine, or not."""
    outputs = [output(NEAR), output(FAR), output(REF)]
    data, near = measure_level(3, "m@srv", outputs, {"a": shared_reference()}, PROMPTS)
    assert near == [NearTie(0, "a", 1, 0)]
    if scored:
        near[0].output, near[0].reference = rescored([1, 6]), rescored([1, 5])
    return StressEvidence(data, near)


def test_fail_on_decisive_counts_near_ties_judged_past_as_consistent() -> None:
    strict = "consistency (1/3 outputs equal to their reference) 0.333333 < min_consistency 0.6"
    assert violations("stress", evidence(True), thresholds(min_consistency=0.6)) == [strict]
    decisive = thresholds(min_consistency=0.6, fail_on="decisive")
    judged = violations("stress", evidence(True), decisive, "level")
    assert judged == []
    # Not scored (an engine that cannot score): nothing is judged past the near-tie, the
    # gate's violation stands and the item says why.
    unjudged = evidence(False)
    found = outcome("stress", unjudged, decisive, "level")
    assert found.violations == [strict] and found.data.violations == [strict]
    assert found.text.splitlines()[-1] == (
        "fail_on: decisive not applied: counting the 0 of 1 near-tie outputs judged past "
        "their near-tie, consistency 0.333 is still < min_consistency 0.6; 1 not: a's "
        "reference not judged past the near-tie at token 1: not scored"
    )
    waived = outcome("stress", evidence(True), decisive, "level")
    assert waived.data.violations == [] and waived.text.splitlines()[-1].endswith(
        "(1 outputs that leave their reference at a near-tie were judged past it by teacher "
        "forcing and count as consistent: 2/3 = 0.667 >= min_consistency 0.6)"
    )
    # Scored, but even counting its near-tie output 2/3 < 1.0: the gate stands.
    assert violations("stress", evidence(True), thresholds(fail_on="decisive"), "level") == [
        "consistency (1/3 outputs equal to their reference) 0.333333 < min_consistency 1"
    ]


def test_the_aggregate_sums_the_levels_labels() -> None:
    plain = plain_data(level())
    assert plain["mismatches"][0]["tie"]["divergence_label"] == "near-tie"
    items = [RecordedItem("level", "c3", load_record(StressLevel, plain))]
    summary = STRESS.summarize(items, thresholds(), TargetContext("m@srv", {}))
    assert summary.record.divergence_labels == {"near-tie": 1, "decisive": 1, "unknown": 0}
    assert ("infercheck_divergences_decisive", 1) in summary.properties


def test_a_levels_evidence_crosses_processes_as_json_unchanged() -> None:
    """What a worker publishes of a level (its near-ties scored, a failure of its requests)
    is what another worker reads back: a NaN score stays NaN, the failure its words."""
    from pytest_infercheck.metrics.past_tie import Rescored, ScoredToken
    from pytest_infercheck.verdict.conduct import RequestFailure

    data = evidence(True)
    assert data.near_ties[0].output is not None
    data.near_ties[0].output = Rescored([ScoredToken(1, float("nan"), -0.5, 1)])
    data.failures.append(RequestFailure("m@srv", "every request (3 of 3) at c3", "boom", 500))
    back = load_record(StressEvidence, json.loads(json.dumps(plain_data(data))))
    assert back.level == data.level and back.failures == data.failures
    (tie,) = back.near_ties
    assert tie.reference == data.near_ties[0].reference and tie.output is not None
    assert tie.output.tokens is not None and math.isnan(tie.output.tokens[0].chosen)
    assert back.conduct.failures == data.failures
