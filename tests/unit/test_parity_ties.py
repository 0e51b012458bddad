"""Stream- and endpoint-parity's token divergences labelled near-tie / decisive / unknown:
margins of the reference and the other side from their own top-k, computed by hand."""

from __future__ import annotations

from typing import Any

import pytest

from pytest_infercheck.backends.base import Generation
from pytest_infercheck.checks.parity import (
    STREAM_PARITY,
    EndpointParityThresholds,
    ParityPrompt,
    StreamParityThresholds,
    StreamSide,
    compare_generations,
    endpoint_violations,
    stream_violations,
)
from pytest_infercheck.checks.protocol import RecordedItem, TargetContext
from pytest_infercheck.config import CheckSpec
from pytest_infercheck.records import load_record, plain_data
from pytest_infercheck.suites import Prompt

PROMPT = Prompt("s01", "hi", None, 5, None, None, None, "x.jsonl:1")


def gen(ids: list[int], lps: list[float], top: list[dict[Any, float]]) -> Generation:
    return Generation("".join(chr(97 + i) for i in ids), ids, "stop", lps, top)


# Non-streamed: at position 1 it chose 5 (-0.40) over 6 (-0.408); streamed: 6 (-0.401) over 5.
REF = gen([1, 5], [-0.01, -0.4], [{1: -0.01}, {5: -0.4, 6: -0.408}])
NEAR = gen([1, 6], [-0.0103, -0.401], [{1: -0.0103}, {6: -0.401, 5: -0.404}])
# Streamed, decisive: 6 at -0.05, token 5 outside its top-2 (min -3.0): margin >= 2.95.
FAR = gen([1, 6], [-0.01, -0.05], [{1: -0.01}, {6: -0.05, 7: -3.0}])


def thresholds(kind: str, **kw: object) -> Any:
    return CheckSpec.model_validate({kind: "m", **kw}).kind_thresholds()


def record(other: Generation, tie_margin: float = 0.01) -> ParityPrompt:
    labels = ("non-streamed", "streamed")
    c = compare_generations(PROMPT, REF, other, labels, tie_margin)
    sides = (StreamSide(REF.text, REF.token_ids, "stop", "non-streamed"),)
    return ParityPrompt(
        "s01", "m@llama", sides[0], StreamSide(other.text, other.token_ids, "stop", "streamed"),
        c.match, c.first_divergence, c.divergence_unit, c.similarity, c.answers, c.flip,
        c.logprob_drift, c.faults, c.tie,
    )  # fmt: skip


def test_margins_noise_floor_and_labels_of_a_divergent_item() -> None:
    near = record(NEAR).tie
    assert near is not None and near.token == 1
    # reference: -0.400 - (-0.408) = 0.008; streamed: -0.401 - (-0.404) = 0.003; floor 0.0003.
    assert near.margins == pytest.approx([0.008, 0.003]) and near.margins_exact
    assert near.noise_floor == pytest.approx(0.0003)
    assert near.divergence_label == "near-tie"
    assert record(NEAR, 0.005).tie.divergence_label == "decisive"  # type: ignore[union-attr]
    far = record(FAR).tie
    assert far is not None and not far.margins_exact
    assert far.margins == pytest.approx([0.008, 2.95]) and far.divergence_label == "decisive"
    assert record(REF).tie is None  # a match has none
    text_only = compare_generations(
        PROMPT, Generation("ab", None, "stop"), Generation("ac", None, "stop")
    )
    assert text_only.tie is None  # a divergence in characters has no label


def test_fail_on_decisive_passes_only_the_near_tie_item() -> None:
    assert isinstance(thresholds("stream-parity"), StreamParityThresholds)
    differs = "the streamed output differs from the non-streamed one (first divergence at token 1)"
    strict, lenient = thresholds("stream-parity"), thresholds("stream-parity", fail_on="decisive")
    assert stream_violations(record(NEAR), strict) == [differs]
    assert stream_violations(record(NEAR), lenient) == []
    assert stream_violations(record(FAR), lenient) == [differs]
    endpoint = thresholds("endpoint-parity", fail_on="decisive", tie_margin=0.02)
    assert isinstance(endpoint, EndpointParityThresholds)
    assert endpoint_violations(record(NEAR), endpoint) == []
    assert endpoint_violations(record(NEAR), thresholds("endpoint-parity")) == [
        "streamed vs non-streamed: similarity 0.5000 < min_similarity 1.0 "
        "(first divergence at token 1)"
    ]


def test_the_item_text_record_and_aggregate_count_the_labels() -> None:
    near, far, same = record(NEAR), record(FAR), record(REF)
    plain = plain_data(near)
    assert plain["tie"]["margins"] == pytest.approx([0.008, 0.003])
    assert "tie" not in plain_data(same)
    items = [
        RecordedItem("prompt", name, load_record(ParityPrompt, plain_data(r)))
        for name, r in (("a", near), ("b", far), ("c", same))
    ]
    summary = STREAM_PARITY.summarize(
        items, thresholds("stream-parity"), TargetContext("m@llama", {})
    )
    assert summary.record.divergence_labels == {"near-tie": 1, "decisive": 1, "unknown": 0}
    assert ("infercheck_divergences_near_tie", 1) in summary.properties
    assert summary.text.endswith("divergences {'near-tie': 1, 'decisive': 1, 'unknown': 0}")
