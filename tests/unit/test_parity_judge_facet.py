"""stream- and endpoint-parity's judge facets called directly on two answered outputs (found
by the mutation run, tests/unit/MUTATION.md): the rule each finding names, an answer flip,
what the record keeps (each side under its own label, the divergence, the flip, the tie and
what followed it) and the item's text, by hand. The outputs: 46 and 47 to "12+34=" (answer
46), parting at token 1 at a near-tie (margins 0.008 and 0.003, noise floor 0.0003)."""

from __future__ import annotations

import dataclasses

from pytest_infercheck.backends.base import Generation
from pytest_infercheck.checks.framework.items import RecordedItem
from pytest_infercheck.checks.parity import ENDPOINT_PARITY, STREAM_PARITY, ParityEvidence
from pytest_infercheck.checks.parity.records import (
    EndpointCounts,
    EndpointParityContext,
    ParityIncomplete,
)
from pytest_infercheck.checks.parity.summarize import summarize_endpoints
from pytest_infercheck.metrics.degenerate import DegenerateScan
from pytest_infercheck.suites import Prompt
from pytest_infercheck.verdict.gate import Violation
from tests.unit.test_parity_ties import PLAN, STREAM, thresholds

ADD = Prompt("s01", "12+34=", None, 5, "46", "number", None, "x.jsonl:1")
RIGHT = Generation("46", [1, 5], "stop", [-0.01, -0.4], [{1: -0.01}, {5: -0.4, 6: -0.408}])
WRONG = Generation("47", [1, 6], "stop", [-0.0103, -0.401], [{1: -0.0103}, {6: -0.401, 5: -0.404}])
LAST = "the near-tie at token 1 is the {} output's last token: nothing follows"


def test_an_endpoint_item_keeps_each_side_the_flip_and_what_followed_the_near_tie() -> None:
    e = ParityEvidence(ADD, "m@llama", ("completions", "chat"), RIGHT, WRONG, 0.01)
    judged = ENDPOINT_PARITY.judge(
        PLAN, e, thresholds("endpoint-parity", fail_on="decisive", tie_margin=0.02)
    )
    assert judged.violations == [
        Violation("chat vs completions: similarity 0.5 < min_similarity 1", "min_similarity"),
        Violation(
            "answer flip correct_to_wrong (fail_item_on: correct_to_wrong)", "flips.fail_item_on"
        ),
    ]
    record = judged.record
    assert (record.reference.endpoint, record.reference.text, record.reference.token_ids) == (
        "completions",
        "46",
        [1, 5],
    )
    assert (record.other.endpoint, record.other.text) == ("chat", "47")
    assert (record.first_divergence, record.divergence_unit, record.flip) == (
        1,
        "token",
        "correct_to_wrong",
    )
    assert record.tie is not None and record.tie.divergence_label == "near-tie"
    assert record.after_tie == LAST.format("completions")
    assert judged.text == "\n".join(
        [
            "prompt s01: 12+34=",
            "  completions: 4⟦6",
            "  chat       : 4⟦7",
            "  first divergence: 1 (token), similarity 0.5000, answers ['46', '47']",
            "  near-tie at token 1 (margins: completions 0.008, chat 0.003 nats; noise floor "
            "0.0003)",
            "  after the near-tie: " + LAST.format("completions"),
        ]
    )
    assert judged.degenerate == DegenerateScan(2, [])


def test_a_stream_item_says_its_drift_and_keeps_what_followed_the_near_tie() -> None:
    e = ParityEvidence(ADD, "m@llama", STREAM, RIGHT, WRONG, 0.01)
    judged = STREAM_PARITY.judge(PLAN, e, thresholds("stream-parity", fail_on="decisive"))
    assert [v.source for v in judged.violations] == ["outputs-differ", "logprob_tolerance"]
    record = judged.record
    assert (record.reference.mode, record.other.mode) == ("non-streamed", "streamed")
    assert record.after_tie == LAST.format("non-streamed")
    assert judged.text is not None
    assert judged.text.splitlines()[-2:] == [
        "  after the near-tie: " + LAST.format("non-streamed"),
        "  logprob drift over the shared tokens: 0.0003",
    ]
    assert judged.degenerate == DegenerateScan(2, [])


# -- the endpoint aggregate --------------------------------------------------------------------
def test_the_endpoint_aggregate_counts_by_the_last_parameter_of_each_name() -> None:
    """s01 (its chat answer flipped, failed), s02 messages unsupported, s03 errored with no
    message: 0 of 3 identical, 1 flip, 1 error, 1 unsupported; rows by the name's last
    ``[...]``."""
    e = ParityEvidence(ADD, "m@llama", ("completions", "chat"), RIGHT, WRONG, 0.01)
    judged = ENDPOINT_PARITY.judge(PLAN, e, thresholds("endpoint-parity"))
    lacking = ParityIncomplete(
        "s02", "m@llama", "completions", "messages", unsupported=["messages not offered"]
    )
    items = [
        RecordedItem("prompt", "s01[q4][chat]", judged.record, violations=("x",)),
        RecordedItem("incomplete", "s02[q4][messages]", lacking),
        RecordedItem("prompt", "s03[q4][chat]", None),
    ]
    context = EndpointParityContext("m@llama", "completions", {"m@llama": {"v": 1}})
    summary = summarize_endpoints(items, thresholds("endpoint-parity"), context)
    assert summary.text == (
        "m@llama: 0/3 identical, 1 answer flips, 1 errors, 1 unsupported; divergences 1 near-tie"
    )
    assert summary.properties == [
        ("infercheck_items", 3),
        ("infercheck_match", 0),
        ("infercheck_failed", 2),
        ("infercheck_flips", 1),
        ("infercheck_errors", 1),
        ("infercheck_unsupported", 1),
        ("infercheck_divergences_near_tie", 1),
        ("infercheck_divergences_decisive", 0),
        ("infercheck_divergences_unknown", 0),
    ]
    record = summary.record
    assert record.endpoints == {
        "chat": EndpointCounts(items=2, match=0, failed=2, unsupported=0),
        "messages": EndpointCounts(items=1, match=0, failed=0, unsupported=1),
    }
    assert (record.target, record.engines, record.errors) == (
        "m@llama",
        {"m@llama": {"v": 1}},
        {"s03[q4][chat]": "error"},
    )


# A logprob above 0 at token 0 of the reference: a fault of its own.
HOT = dataclasses.replace(
    RIGHT,
    chosen_logprobs=[0.5, -0.4],
    top_logprobs=[{1: 0.5}, {5: -0.4, 6: -0.408}],
    prompt_text="12+34=",
)
FAULT = "logprob above 0 in the {} output at position 0 (position 0: 0.5)"


def test_a_sides_fault_is_a_fault_in_either_kind_and_the_record_keeps_it() -> None:
    e = ParityEvidence(ADD, "m@llama", ("completions", "chat"), HOT, WRONG, 0.01)
    judged = ENDPOINT_PARITY.judge(PLAN, e, thresholds("endpoint-parity", min_similarity=0.0))
    assert judged.violations[0] == Violation(FAULT.format("completions"), "fault")
    assert [f.text for f in judged.record.faults] == [FAULT.format("completions")]
    assert judged.record.reference.prompt_text == "12+34="
    s = ParityEvidence(ADD, "m@llama", STREAM, HOT, WRONG, 0.01)
    streamed = STREAM_PARITY.judge(PLAN, s, thresholds("stream-parity", logprob_tolerance=1.0))
    assert streamed.violations[0] == Violation(FAULT.format("non-streamed"), "fault")
    assert streamed.record.reference.token_ids == [1, 5]


def test_a_side_without_output_is_an_incomplete_item_saying_which() -> None:
    e = ParityEvidence(ADD, "m@llama", ("completions", "chat"), RIGHT, None, 0.01)
    judged = ENDPOINT_PARITY.judge(PLAN, e, thresholds("endpoint-parity"))
    assert judged.role == "incomplete"
    assert (judged.record.reference, judged.record.other) == ("completions", "chat")
    assert judged.text == "prompt s01: no chat output to compare"
