"""The framework's rules around a kind (checks/framework): an item's outcome from its judge
and its evidence (conduct, item gates, waivers), and an aggregate from its items (errored and
failed items, suite gates), on a minimal kind built here."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel

from pytest_infercheck.checks.framework.items import (
    RecordedItem,
    Summary,
    errored_items,
    failed_items,
    records_of,
    summarize_items,
)
from pytest_infercheck.checks.framework.kind import (
    CheckKind,
    Judged,
    PresentFacet,
    SpecFacet,
)
from pytest_infercheck.checks.framework.plan import ItemPlan
from pytest_infercheck.checks.framework.run import item_outcome
from pytest_infercheck.checks.framework.target import TargetContext, target_label
from pytest_infercheck.verdict.conduct import Conduct, RequestFailure, not_exercised_before_requests
from pytest_infercheck.verdict.gate import Gate, Violation
from pytest_infercheck.verdict.measure import Unmeasured
from pytest_infercheck.verdict.waiver import Waiver


class Limits(BaseModel):
    max_drift: float | None = None
    min_score: float | None = None


@dataclass
class Record:
    drift: float | None


@dataclass
class Evidence:
    measures: dict[str, Any]
    conduct: Conduct = field(default_factory=Conduct)


def judge(plan: ItemPlan, evidence: Evidence, thresholds: Limits) -> Judged:
    differ = Violation("outputs differ at token 2", "outputs-differ")
    near_tie = Waiver("fail_on: decisive", frozenset({"outputs-differ"}), plan.key == "waived", "x")
    found = [differ] if plan.key in {"waived", "differs"} else []
    drift = evidence.measures.get("drift")
    return Judged(Record(drift if isinstance(drift, float) else None), found, [near_tie])


def summarize(items: Sequence[RecordedItem], thresholds: Limits, context: Any) -> Summary:
    scores = [1.0 if not r.drift else 0.5 for r in records_of(items, "prompt")]
    score = sum(scores) / len(scores) if scores else Unmeasured("no prompt has a record")
    return Summary(
        Record(None),
        ["the kind's own finding"] if len(scores) > 3 else [],
        measures={"score": score},
    )


KIND = CheckKind(
    "toy",
    SpecFacet(
        options=BaseModel,
        thresholds=Limits,  # type: ignore[arg-type]
        gates=(
            Gate("max_drift", "drift", "max", "logprob drift"),
            Gate("min_score", "score", "min", "score", scope="suite"),
        ),
        label=target_label,
        context=TargetContext,
        records={"prompt": Record, "aggregate": Record},
    ),
    gather=object,  # type: ignore[arg-type]
    judge=judge,
    summarize=summarize,
    present=PresentFacet("toy", describe=lambda r: f"drift {r.drift}"),
)


def outcome(key: str, evidence: Evidence, limits: Limits) -> Any:
    plan = ItemPlan(key, "prompt", key)
    return item_outcome(KIND, KIND.judge(plan, evidence, limits), evidence, limits)


def test_an_item_fails_for_its_conduct_then_its_findings_then_its_gates() -> None:
    evidence = Evidence(
        {"drift": 0.5},
        Conduct(failures=[RequestFailure("the reference", "run 1", "engine died", 500)]),
    )
    got = outcome("differs", evidence, Limits(max_drift=0.1))
    assert got.violations == [
        "the reference: run 1 failed: HTTP 500: engine died",
        "outputs differ at token 2",
        "logprob drift 0.5 > max_drift 0.1",
    ]
    assert got.text == "drift 0.5\nfail_on: decisive not applied: x" and got.data == Record(0.5)


def test_an_item_passes_clean_and_says_what_it_left_out() -> None:
    skipped = not_exercised_before_requests("eviction", "capacity unknown")
    got = outcome("clean", Evidence({"drift": 0.0}, Conduct(not_exercised=[skipped])), Limits())
    assert got.violations == []
    assert got.text == "drift 0.0\neviction: not exercised (capacity unknown)"


def test_an_unmeasured_written_gate_fails_the_item() -> None:
    got = outcome("clean", Evidence({"drift": Unmeasured("no logprobs")}), Limits(max_drift=1.0))
    assert got.violations == ["max_drift: not measured: no logprobs"]


def test_a_waiver_that_judged_past_removes_only_what_it_covers() -> None:
    got = outcome("waived", Evidence({"drift": 0.5}), Limits(max_drift=0.1))
    assert got.violations == ["logprob drift 0.5 > max_drift 0.1"]
    assert "fail_on: decisive waived: outputs differ at token 2 (x)" in got.text
    kept = outcome("differs", Evidence({"drift": 0.0}), Limits())
    assert kept.violations == ["outputs differ at token 2"]
    assert "fail_on: decisive not applied: x" in kept.text


def _items() -> list[RecordedItem]:
    return [
        RecordedItem("prompt", "p3", Record(0.5), violations=("drift 0.5 > max_drift 0.1", "x")),
        RecordedItem("prompt", "p1", Record(0.0)),
        RecordedItem("prompt", "p2", None, "HTTP 500"),
        RecordedItem("prompt", "p0", Record(0.2), violations=("drift 0.2 > max_drift 0.1",)),
    ]


def test_errored_and_failed_items_are_named_by_name_with_their_first_violation() -> None:
    items = _items()
    assert errored_items(items) == ["1 of 4 items errored: p2 (HTTP 500)"]
    assert failed_items(items) == [
        "2 of 4 items failed: p0 (drift 0.2 > max_drift 0.1), p3 (drift 0.5 > max_drift 0.1)"
    ]
    assert failed_items(items[::-1]) == failed_items(items)
    many = [RecordedItem("prompt", f"p{n}", Record(1.0), violations=("v",)) for n in range(7)]
    assert failed_items(many) == [
        "7 of 7 items failed: p0 (v), p1 (v), p2 (v), p3 (v), p4 (v), and 2 more"
    ]
    assert failed_items([]) == [] and errored_items([]) == []


def test_an_aggregate_fails_for_its_items_then_its_findings_then_its_suite_gates() -> None:
    summary = summarize_items(KIND, _items(), Limits(min_score=0.9), None)
    # scores 0.5, 1.0, 0.5 over the three records: 2/3
    assert summary.violations == [
        "1 of 4 items errored: p2 (HTTP 500)",
        "2 of 4 items failed: p0 (drift 0.2 > max_drift 0.1), p3 (drift 0.5 > max_drift 0.1)",
        "score 0.666667 < min_score 0.9",
    ]
    clean = [RecordedItem("prompt", "p1", Record(0.0))]
    assert summarize_items(KIND, clean, Limits(min_score=0.9), None).violations == []


def test_a_suite_gate_whose_measure_is_unmeasured_fails_the_aggregate() -> None:
    errored = [RecordedItem("prompt", "p2", None, "HTTP 500")]
    assert summarize_items(KIND, errored, Limits(min_score=0.9), None).violations == [
        "1 of 1 items errored: p2 (HTTP 500)",
        "min_score: not measured: no prompt has a record",
    ]
