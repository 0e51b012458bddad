"""Determinism's divergences labelled near-tie / decisive / unknown: margins of the modal run
and the divergent run from their own top-k or full rows, computed by hand."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest

from pytest_infercheck.backends.base import Generation
from pytest_infercheck.checks.determinism import (
    DeterminismContext,
    DeterminismPrompt,
    DeterminismThresholds,
    describe,
    summarize,
)
from pytest_infercheck.checks.determinism.evidence import DeterminismEvidence
from pytest_infercheck.checks.framework.items import RecordedItem
from pytest_infercheck.config import CheckSpec
from pytest_infercheck.metrics.determinism import (
    DeterminismSummary,
    RunOutput,
    run_output,
    summarize_runs,
)
from pytest_infercheck.metrics.past_tie import Rescored
from pytest_infercheck.records import load_record, plain_data
from tests.unit.engine_verdicts import rescored, violations


def gen(ids: list[int], lps: list[float], top: list[dict[Any, float]], **kw: Any) -> RunOutput:
    text = "".join(chr(97 + i) for i in ids)
    g = Generation(text, ids, "stop", chosen_logprobs=lps, top_logprobs=top, **kw)
    return run_output(g, 0)


# Modal (x2): tokens 1 2 3; at position 2 it chose 3 (-0.700) over 4 (-0.705).
MODAL = gen([1, 2, 3], [-0.1, -0.2, -0.7], [{1: -0.1}, {2: -0.2}, {3: -0.7, 4: -0.705}])
# Divergent: 1 2 4; at 2 it chose 4 (-0.702) over 3 (-0.704); drifted 0.0005 at position 1.
NEAR = gen([1, 2, 4], [-0.1, -0.2005, -0.702], [{1: -0.1}, {2: -0.2005}, {4: -0.702, 3: -0.704}])


def check(**thresholds: object) -> DeterminismThresholds:
    spec = CheckSpec.model_validate({"determinism": "m", **thresholds}).kind_thresholds()
    assert isinstance(spec, DeterminismThresholds)
    return spec


def test_a_near_tie_has_both_margins_exact_and_the_noise_floor_of_the_agreeing_tokens() -> None:
    s = summarize_runs([MODAL, NEAR, MODAL])
    tie = s.outputs[1].tie
    assert s.outputs[0].tie is None  # the modal output has none
    assert tie is not None and tie.token == 2
    # modal: -0.700 - (-0.705) = 0.005; run: -0.702 - (-0.704) = 0.002; floor |-0.2+0.2005|.
    assert tie.margins == pytest.approx([0.005, 0.002])
    assert tie.margins_exact
    assert tie.noise_floor == pytest.approx(0.0005)
    assert tie.divergence_label == "near-tie"
    assert s.divergence_labels == ["near-tie"]
    # At tie_margin 0.004 the modal margin 0.005 exceeds it: decisive.
    assert summarize_runs([MODAL, NEAR], 0.004).divergence_labels == ["decisive"]


def test_a_lower_bound_above_the_margin_is_decisive_and_no_logprobs_is_unknown() -> None:
    # The run's top-k lacks token 3: margin >= -0.1 - min(-0.1, -2.5) = 2.4, a lower bound.
    far = gen([1, 2, 4], [-0.1, -0.2, -0.1], [{1: -0.1}, {2: -0.2}, {4: -0.1, 9: -2.5}])
    tie = summarize_runs([MODAL, MODAL, far]).outputs[1].tie
    assert tie is not None
    assert tie.margins == pytest.approx([0.005, 2.4]) and not tie.margins_exact
    assert tie.divergence_label == "decisive"
    bare = run_output(Generation("abe", [1, 2, 4], "stop"), 0)
    tie = summarize_runs([MODAL, MODAL, bare]).outputs[1].tie
    assert (
        tie is not None
        and tie.margins[1] is None
        and tie.margins[0] == pytest.approx(0.005)
        and tie.noise_floor is None
    )
    assert tie.divergence_label == "unknown"


def test_full_rows_give_exact_margins_and_text_keyed_top_k_is_read_by_token_text() -> None:
    rows_a = np.log(np.array([[0.5, 0.3, 0.2]], dtype=np.float64))
    rows_b = np.log(np.array([[0.3, 0.5, 0.2]], dtype=np.float64))
    a = run_output(Generation("a", [0], "stop", full_logprobs=rows_a), 0)
    b = run_output(Generation("b", [1], "stop", full_logprobs=rows_b), 1)
    tie = summarize_runs([a, a, b]).outputs[1].tie
    assert tie is not None and tie.token == 0
    assert tie.margins == pytest.approx([math.log(0.5 / 0.3)] * 2)  # 0.5108: decisive
    assert tie.divergence_label == "decisive" and tie.noise_floor is None
    # A server without ids: token texts key the top-k; margins -1.0 - -1.004, -1.002 - -1.003.
    x = run_output(
        Generation(
            "ab",
            None,
            "stop",
            [-0.5, -1.0],
            [{"a": -0.5}, {"b": -1.0, "c": -1.004}],
            top_keys="text",
            token_texts=["a", "b"],
        ),
        0,
    )
    y = run_output(
        Generation(
            "ac",
            None,
            "stop",
            [-0.5, -1.002],
            [{"a": -0.5}, {"c": -1.002, "b": -1.003}],
            top_keys="text",
            token_texts=["a", "c"],
        ),
        0,
    )
    tie = summarize_runs([x, x, y]).outputs[1].tie
    assert tie is not None and tie.token == 1
    assert tie.margins == pytest.approx([0.004, 0.001]) and tie.noise_floor == 0.0
    assert tie.divergence_label == "near-tie"


def item_violations(
    summary: DeterminismSummary,
    thresholds: DeterminismThresholds,
    scored: dict[int, Rescored] | None = None,
) -> list[str]:
    evidence = DeterminismEvidence("p", "m@local", summary, [], scored or {})
    return violations("determinism", evidence, thresholds)


# Both outputs scored on the engine: every token its engine's own choice.
SCORED = {0: rescored([1, 2, 3]), 1: rescored([1, 2, 4])}


def test_fail_on_decisive_passes_only_distinct_outputs_that_all_part_at_a_near_tie() -> None:
    near = summarize_runs([MODAL, NEAR, MODAL])
    distinct = "2 distinct outputs in 3 runs (modal share 0.6667)"
    assert item_violations(near, check()) == [distinct]
    assert item_violations(near, check(fail_on="decisive"), SCORED) == []
    assert item_violations(
        summarize_runs([MODAL, NEAR, MODAL], 0.004), check(fail_on="decisive"), SCORED
    ) == [distinct]
    bare = run_output(Generation("abe", [1, 2, 4], "stop"), 0)
    mixed = summarize_runs([MODAL, NEAR, MODAL, bare])
    assert mixed.divergence_labels == ["near-tie", "unknown"]
    assert item_violations(mixed, check(fail_on="decisive"), SCORED) == [
        "3 distinct outputs in 4 runs (modal share 0.5000)"
    ]


def prompt_record(s: DeterminismSummary) -> DeterminismPrompt:
    return DeterminismPrompt(
        "p", "m@local", s.runs, s.modal_share, s.distinct, s.errors, [],
        s.first_divergences, s.max_logprob_drift, s.outputs,
    )  # fmt: skip


def test_the_item_text_record_and_aggregate_count_the_labels() -> None:
    s = summarize_runs([MODAL, NEAR, MODAL])
    assert (
        "    near-tie at token 2 (margins: modal 0.005, this 0.002 nats; noise floor 0.0005)"
        in describe(prompt_record(s)).splitlines()
    )
    record = DeterminismPrompt(
        "p",
        "m@local",
        s.runs,
        s.modal_share,
        s.distinct,
        s.errors,
        [],
        s.first_divergences,
        s.max_logprob_drift,
        s.outputs,
        divergence_labels={"near-tie": 1, "decisive": 0, "unknown": 0},
    )
    plain = plain_data(record)
    assert "tie" not in plain["outputs"][0] and plain["outputs"][1]["tie"]["token"] == 2
    assert "divergence_labels" not in plain_data(
        DeterminismPrompt("q", "m@local", 2, 1.0, 1, 0, [], [None, None], 0.0, s.outputs[:1])
    )
    back = load_record(DeterminismPrompt, plain)
    far = summarize_runs([MODAL, gen([1, 2, 4], [-0.1, -0.2, -0.1], [{}, {}, {4: -0.1, 9: -2.5}])])
    other = DeterminismPrompt(
        "r", "m@local", 2, 0.5, 2, 0, [], far.first_divergences, None, far.outputs
    )
    items = [RecordedItem("prompt", "p", back), RecordedItem("prompt", "r", other)]
    summary = summarize(items, check(), DeterminismContext("m@local", 3, {}))
    assert summary.record.divergence_labels == {"near-tie": 1, "decisive": 1, "unknown": 0}
    assert "divergences 1 near-tie, 1 decisive" in summary.text
    assert ("infercheck_divergences_near_tie", 1) in summary.properties
