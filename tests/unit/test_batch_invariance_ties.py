"""Batch-invariance's divergent trials labelled near-tie / decisive / unknown: margins of the
output alone and the batched output from their own top-k, computed by hand."""

from __future__ import annotations

from typing import Any

import pytest

from pytest_infercheck.backends.base import Generation
from pytest_infercheck.checks.batch_invariance import (
    AloneOutput,
    BatchInvariancePrompt,
    BatchInvarianceThresholds,
    Trial,
    compare_to_alone,
    describe,
    summarize,
    trial_labels,
)
from pytest_infercheck.checks.batch_invariance.evidence import BatchInvarianceEvidence
from pytest_infercheck.checks.framework.items import RecordedItem
from pytest_infercheck.checks.framework.target import TargetContext
from pytest_infercheck.config import CheckSpec
from pytest_infercheck.records import load_record, plain_data
from tests.unit.engine_verdicts import rescored, violations


def gen(ids: list[int], lps: list[float], top: list[dict[Any, float]]) -> Generation:
    return Generation("".join(chr(97 + i) for i in ids), ids, "stop", lps, top)


# Alone: at position 1 it chose 5 (-0.40) over 6 (-0.408); batched: 6 (-0.401) over 5 (-0.404).
ALONE = gen([1, 5], [-0.01, -0.4], [{1: -0.01}, {5: -0.4, 6: -0.408}])
NEAR = gen([1, 6], [-0.0103, -0.401], [{1: -0.0103}, {6: -0.401, 5: -0.404}])
# Batched, decisive: 6 at -0.05, token 5 outside its top-2 (min -3.0): margin >= 2.95.
FAR = gen([1, 6], [-0.01, -0.05], [{1: -0.01}, {6: -0.05, 7: -3.0}])


def thresholds(**kw: object) -> BatchInvarianceThresholds:
    spec = CheckSpec.model_validate({"batch-invariance": "m", **kw}).kind_thresholds()
    assert isinstance(spec, BatchInvarianceThresholds)
    return spec


def trial(batched: Generation, n: int = 0, tie_margin: float = 0.01) -> Trial:
    return compare_to_alone(
        ALONE, batched, trial=n, position=1, batch=["x", "p"], tie_margin=tie_margin
    )


def record(*trials: Trial) -> BatchInvariancePrompt:
    alone = AloneOutput(ALONE.text, ALONE.token_ids)
    return BatchInvariancePrompt(
        "p", "m@local", 0, alone, list(trials), "burst", trial_labels(trials)
    )


def test_margins_noise_floor_and_labels_of_a_divergent_trial() -> None:
    near = trial(NEAR)
    assert near.tie is not None and near.tie.token == 1
    # alone: -0.400 - (-0.408) = 0.008; batched: -0.401 - (-0.404) = 0.003; floor 0.0003.
    assert near.tie.margins == pytest.approx([0.008, 0.003]) and near.tie.margins_exact
    assert near.tie.noise_floor == pytest.approx(0.0003)
    assert near.tie.divergence_label == "near-tie"
    assert trial(NEAR, tie_margin=0.005).tie.divergence_label == "decisive"  # type: ignore[union-attr]
    far = trial(FAR, 1)
    assert far.tie is not None and not far.tie.margins_exact
    assert far.tie.margins == pytest.approx([0.008, 2.95])
    assert far.tie.divergence_label == "decisive"
    assert trial(ALONE).tie is None  # a match has none
    assert trial(RuntimeError("down")).tie is None


def test_fail_on_decisive_passes_only_the_near_tie_trial() -> None:
    near, far = trial(NEAR), trial(FAR, 1)
    differs = (
        "trial {n} (position 1 of 2): output differs from the prompt alone at 1: "
        "'bf' alone vs 'bg' batched"
    )
    tolerance = {"logprob_tolerance": 1.0}
    assert violations(
        "batch-invariance", BatchInvarianceEvidence(record(near)), thresholds(**tolerance)
    ) == [differs.format(n=0)]
    # the near-tie trial is waived once both outputs were judged past it (scored)
    scored = BatchInvarianceEvidence(record(near, far), rescored([1, 5]), {0: rescored([1, 6])})
    assert violations("batch-invariance", scored, thresholds(fail_on="decisive", **tolerance)) == [
        differs.format(n=1)
    ]


def test_the_record_text_and_aggregate_count_the_labels() -> None:
    rec = record(trial(NEAR), trial(FAR, 1), trial(ALONE, 2))
    assert rec.divergence_labels == {"near-tie": 1, "decisive": 1, "unknown": 0}
    assert (
        "    near-tie at token 1 (margins: alone 0.008, batched 0.003 nats; noise floor 0.0003)"
        in describe(rec).splitlines()
    )
    plain = plain_data(rec)
    assert "tie" not in plain["trials"][2] and plain["trials"][0]["tie"]["token"] == 1
    assert "divergence_labels" not in plain_data(record(trial(ALONE)))
    items = [RecordedItem("prompt", "p", load_record(BatchInvariancePrompt, plain))]
    summary = summarize(items, thresholds(), TargetContext("m@local", {}))
    assert summary.record.divergence_labels == {"near-tie": 1, "decisive": 1, "unknown": 0}
    assert ("infercheck_divergences_decisive", 1) in summary.properties
