"""Stream- and endpoint-parity's token divergences labelled near-tie / decisive / unknown:
margins of the reference and the other side from their own top-k, computed by hand; and
``fail_on: decisive`` as a waiver that applies only once what follows the near-tie was
judged (the pure judge, through the framework's item rules)."""

from __future__ import annotations

from typing import Any

import pytest

from pytest_infercheck.backends.base import Generation
from pytest_infercheck.checks.framework.items import RecordedItem
from pytest_infercheck.checks.framework.plan import ItemPlan
from pytest_infercheck.checks.framework.run import item_outcome
from pytest_infercheck.checks.framework.target import TargetContext
from pytest_infercheck.checks.parity import (
    ENDPOINT_PARITY,
    STREAM_PARITY,
    EndpointParityThresholds,
    Forced,
    ParityEvidence,
    ParityPrompt,
    StreamParityThresholds,
    StreamSide,
    compare_generations,
)
from pytest_infercheck.config import CheckSpec
from pytest_infercheck.records import load_record, plain_data
from pytest_infercheck.suites import Prompt

PROMPT = Prompt("s01", "hi", None, 5, None, None, None, "x.jsonl:1")
PLAN = ItemPlan("s01", "prompt", "s01")
STREAM = ("non-streamed", "streamed")


def gen(ids: list[int], lps: list[float], top: list[dict[Any, float]]) -> Generation:
    return Generation("".join(chr(97 + i) for i in ids), ids, "stop", lps, top)


# Non-streamed: at position 1 it chose 5 (-0.40) over 6 (-0.408); streamed: 6 (-0.401) over 5.
REF = gen([1, 5], [-0.01, -0.4], [{1: -0.01}, {5: -0.4, 6: -0.408}])
NEAR = gen([1, 6], [-0.0103, -0.401], [{1: -0.0103}, {6: -0.401, 5: -0.404}])
# Streamed, decisive: 6 at -0.05, token 5 outside its top-2 (min -3.0): margin >= 2.95.
FAR = gen([1, 6], [-0.01, -0.05], [{1: -0.01}, {6: -0.05, 7: -3.0}])
# Three tokens: the same near-tie at position 1, then the reference goes on with 7 (-0.05,
# its runner-up 9 at -4.0): what follows the near-tie has to be judged.
REF3 = gen([1, 5, 7], [-0.01, -0.4, -0.05], [{1: -0.01}, {5: -0.4, 6: -0.408}, {7: -0.05, 9: -4.0}])
NEAR3 = gen([1, 6, 8], [-0.0103, -0.401, -0.2], [{1: -0.0103}, {6: -0.401, 5: -0.404}, {8: -0.2}])
# The streamed path continued from the reference's [1, 5]: reproduces 7, or picks 9 over 7.
SAME_TAIL = gen([7], [-0.05], [{7: -0.05, 9: -4.0}])
DECISIVE_TAIL = gen([9], [-0.01], [{9: -0.01, 7: -3.0}])


def thresholds(kind: str, **kw: object) -> Any:
    return CheckSpec.model_validate({kind: "m", **kw}).kind_thresholds()


def record(other: Generation, tie_margin: float = 0.01) -> ParityPrompt:
    c = compare_generations(PROMPT, REF, other, STREAM, tie_margin)
    sides = (StreamSide(REF.text, REF.token_ids, "stop", "non-streamed"),)
    return ParityPrompt(
        "s01", "m@llama", sides[0], StreamSide(other.text, other.token_ids, "stop", "streamed"),
        c.match, c.first_divergence, c.divergence_unit, c.similarity, c.answers, c.flip,
        c.logprob_drift, c.faults, c.tie,
    )  # fmt: skip


def evidence(
    ref: Generation,
    other: Generation,
    labels: tuple[str, str] = STREAM,
    forced: list[Forced] | None = None,
    unforced: str | None = None,
) -> ParityEvidence:
    return ParityEvidence(
        PROMPT, "m@llama", labels, ref, other, 0.01, forced=forced or [], unforced=unforced
    )


def stream_verdict(item: ParityEvidence, **kw: object) -> tuple[list[str], str]:
    """The item's violations and text, as the framework makes them."""
    t = thresholds("stream-parity", **kw)
    outcome = item_outcome(STREAM_PARITY, STREAM_PARITY.judge(PLAN, item, t), item, t)
    return outcome.violations, outcome.text


def endpoint_verdict(item: ParityEvidence, **kw: object) -> tuple[list[str], str]:
    t = thresholds("endpoint-parity", **kw)
    outcome = item_outcome(ENDPOINT_PARITY, ENDPOINT_PARITY.judge(PLAN, item, t), item, t)
    return outcome.violations, outcome.text


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


DIFFERS = "the streamed output differs from the non-streamed one (first divergence at token 1)"


def test_fail_on_decisive_waives_a_near_tie_with_nothing_after_it() -> None:
    assert isinstance(thresholds("stream-parity"), StreamParityThresholds)
    # the drift over the one shared token: |-0.01 - -0.0103| = 3e-4 > the default 1e-4
    drift = "logprob drift with identical tokens 0.0003 > logprob_tolerance 0.0001"
    assert stream_verdict(evidence(REF, NEAR))[0] == [DIFFERS, drift]
    violations, text = stream_verdict(evidence(REF, NEAR), fail_on="decisive")
    assert violations == [drift]  # the near-tie is waived: token 1 is REF's last
    assert (
        "fail_on: decisive waived: " + DIFFERS + " (the near-tie at token 1 is the non-streamed "
        "output's last token: nothing follows)"
    ) in text
    violations, _ = stream_verdict(evidence(REF, FAR), fail_on="decisive", logprob_tolerance=1)
    assert violations == [DIFFERS]  # a decisive divergence is never waived


def test_fail_on_decisive_waives_only_once_what_follows_was_judged() -> None:
    lenient = {"fail_on": "decisive", "logprob_tolerance": 1}
    # what follows the near-tie at 1 was not continued: no waiver, and the item says why
    violations, text = stream_verdict(evidence(REF3, NEAR3), **lenient)
    assert violations == [DIFFERS]
    assert (
        "fail_on: decisive not applied: what follows the near-tie at token 1 is not judged: no "
        "continuation of the streamed path from token 2 was had"
    ) in text
    # a path that cannot be continued from the reference's tokens says so
    unforced = evidence(REF3, NEAR3, unforced="its render gives no token ids")
    violations, text = stream_verdict(unforced, **lenient)
    assert violations == [DIFFERS] and "not judged: its render gives no token ids" in text
    # continued from [1, 5], the streamed path reproduces the reference's 7: waived
    judged = evidence(REF3, NEAR3, forced=[Forced(2, SAME_TAIL)])
    violations, text = stream_verdict(judged, **lenient)
    assert violations == []
    assert (
        "(the streamed path continued from the non-streamed tokens after the near-tie at token "
        "1 reproduces its remaining 1 tokens)"
    ) in text
    # ... or parts from it decisively at token 2: the reference's margin 7 over 9 is
    # -0.05 - -4.0 = 3.95; the continuation's 9 over 7 is -0.01 - -3.0 = 2.99: the item fails
    later = evidence(REF3, NEAR3, forced=[Forced(2, DECISIVE_TAIL)])
    violations, _ = stream_verdict(later, **lenient)
    assert violations == [
        DIFFERS,
        "the streamed path continued from the non-streamed tokens after the near-tie at token "
        "1 parts from them: decisive at token 2 (margins: non-streamed 3.95, streamed "
        "continued 2.99 nats; noise floor n/a)",
    ]
    # a continuation that does not start right after the near-tie is not taken as judging it
    misplaced = evidence(REF3, NEAR3, forced=[Forced(1, SAME_TAIL)])
    assert stream_verdict(misplaced, **lenient)[0] == [DIFFERS]


def test_endpoint_parity_waives_only_a_near_tie_with_nothing_after_it() -> None:
    endpoints = ("completions", "chat")
    strict = thresholds("endpoint-parity")
    assert isinstance(strict, EndpointParityThresholds)
    similarity = "chat vs completions: similarity 0.5 < min_similarity 1"
    assert endpoint_verdict(evidence(REF, NEAR, endpoints))[0] == [similarity]
    lenient = {"fail_on": "decisive", "tie_margin": 0.02}
    assert endpoint_verdict(evidence(REF, NEAR, endpoints), **lenient)[0] == []
    # an endpoint cannot be continued from the reference's tokens: what follows is not judged
    cannot = "the chat endpoints take messages"
    item = evidence(REF3, NEAR3, endpoints, unforced=cannot)
    violations, text = endpoint_verdict(item, **lenient)
    assert violations == ["chat vs completions: similarity 0.333333 < min_similarity 1"]
    assert (
        "fail_on: decisive not applied: what follows the near-tie at token 1 is not judged: "
        f"{cannot}" in text
    )
    # a written min_similarity is the framework's gate, waived alike
    written = endpoint_verdict(evidence(REF, NEAR, endpoints), min_similarity=0.9, **lenient)
    assert written[0] == []
    assert endpoint_verdict(evidence(REF, NEAR, endpoints), min_similarity=0.9)[0] == [
        "similarity 0.5 < min_similarity 0.9"
    ]


def test_the_item_text_record_and_aggregate_count_the_labels() -> None:
    near, far, same = record(NEAR), record(FAR), record(REF)
    plain = plain_data(near)
    assert plain["tie"]["margins"] == pytest.approx([0.008, 0.003])
    assert "tie" not in plain_data(same) and "after_tie" not in plain
    items = [
        RecordedItem("prompt", name, load_record(ParityPrompt, plain_data(r)))
        for name, r in (("a", near), ("b", far), ("c", same))
    ]
    summary = STREAM_PARITY.summarize(
        items, thresholds("stream-parity"), TargetContext("m@llama", {})
    )
    assert summary.record.divergence_labels == {"near-tie": 1, "decisive": 1, "unknown": 0}
    assert ("infercheck_divergences_near_tie", 1) in summary.properties
    assert summary.text.endswith("divergences 1 near-tie, 1 decisive")
