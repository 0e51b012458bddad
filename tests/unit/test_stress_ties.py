"""Stress's inconsistent outputs labelled near-tie / decisive / unknown against a reference
that crossed processes as JSON (top-k id keys as strings): margins computed by hand."""

from __future__ import annotations

import json
from typing import Any

import pytest

from pytest_infercheck.backends.base import Generation
from pytest_infercheck.checks.protocol import RecordedItem, TargetContext
from pytest_infercheck.checks.stress import (
    STRESS,
    Output,
    Reference,
    StressLevel,
    StressThresholds,
    level_data,
    level_text,
    level_violations,
    reference_of,
)
from pytest_infercheck.config import CheckSpec
from pytest_infercheck.metrics.determinism import side_tokens
from pytest_infercheck.records import load_record, plain_data
from pytest_infercheck.suites import Prompt

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
    assert "  divergences {'near-tie': 1, 'decisive': 1, 'unknown': 0}" in text


def test_fail_on_decisive_counts_near_ties_as_consistent() -> None:
    data = level()
    strict = "consistency 0.333 (1/3 outputs equal to their reference) < min_consistency 0.6"
    assert level_violations(data, thresholds(min_consistency=0.6)) == [strict]
    assert level_violations(data, thresholds(min_consistency=0.6, fail_on="decisive")) == []
    assert level_violations(data, thresholds(fail_on="decisive")) == [
        "consistency 0.333 (1/3 outputs equal to their reference, 1 more at a near-tie) "
        "< min_consistency 1.0"
    ]


def test_the_aggregate_sums_the_levels_labels() -> None:
    plain = plain_data(level())
    assert plain["mismatches"][0]["tie"]["divergence_label"] == "near-tie"
    items = [RecordedItem("level", "c3", load_record(StressLevel, plain))]
    summary = STRESS.summarize(items, thresholds(), TargetContext("m@srv", {}))
    assert summary.record.divergence_labels == {"near-tie": 1, "decisive": 1, "unknown": 0}
    assert ("infercheck_divergences_decisive", 1) in summary.properties
