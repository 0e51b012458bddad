"""cache-parity's judge facet called directly (found by the mutation run,
tests/unit/MUTATION.md): the reference's and each scenario's faults, a scenario that parts
from the reference at a near-tie (the rule it names and the waiver that is not applied),
what the record keeps of the reference and how it was cold, the degenerate scan."""

from __future__ import annotations

import dataclasses

from pytest_infercheck.backends.base import Generation
from pytest_infercheck.checks.cache_parity.evidence import ScenarioEvidence
from pytest_infercheck.checks.cache_parity.judge import DECISIVE, judge
from pytest_infercheck.checks.cache_parity.records import CacheParityContext
from pytest_infercheck.checks.cache_parity.spec import CacheParityThresholds
from pytest_infercheck.checks.cache_parity.summarize import summarize
from pytest_infercheck.checks.framework.items import RecordedItem
from pytest_infercheck.checks.framework.plan import ItemPlan
from pytest_infercheck.metrics.degenerate import DegenerateScan
from pytest_infercheck.verdict.conduct import ColdReference
from pytest_infercheck.verdict.gate import Violation
from pytest_infercheck.verdict.waiver import Waiver
from tests.unit.test_cache_parity import NEAR, SAME, evidence, out

PLAN = ItemPlan("s01", "prompt", "s01")
HOT = Generation(
    "46",
    [55, 57, 2],
    "stop",
    [0.5, -0.70, -0.3],
    [{55: 0.5}, {57: -0.70, 58: -0.705}, {2: -0.3}],
)
"""NEAR_REF of test_cache_parity.py with a logprob above 0 at token 0: a fault."""


def test_every_finding_names_its_rule_and_the_near_tie_waiver_is_not_applied() -> None:
    """The reference and the exact-repeat output carry a fault each; the concurrent output
    parts from the reference at a near-tie at token 1 (margins 0.005 and 0.005)."""
    e = evidence(
        ScenarioEvidence("exact-repeat", output=HOT),
        ScenarioEvidence("concurrent", output=NEAR),
        reference=HOT,
    )
    e.conduct.cold.append(ColdReference("run 0", "reported-zero", 0))
    judged = judge(PLAN, e, CacheParityThresholds(fail_on="decisive", logprob_tolerance=1.0))
    assert judged.violations == [
        Violation(
            "reference: logprob above 0 in the reference at position 0 (position 0: 0.5)",
            "fault",
        ),
        Violation(
            "exact-repeat: logprob above 0 in the exact-repeat output at position 0 "
            "(position 0: 0.5)",
            "fault",
        ),
        Violation(
            "concurrent: output differs from the reference, near-tie at token 1 (margins: "
            "reference 0.005, concurrent 0.005 nats; noise floor 0.6): '46' vs '45'",
            "outputs-differ:concurrent",
        ),
    ]
    assert judged.waivers == [
        Waiver(
            DECISIVE,
            frozenset({"outputs-differ:concurrent"}),
            False,
            "concurrent parts from the reference at a near-tie (token 1), and nothing after it "
            "was judged: cache-parity has no teacher-forced pass of the cached state over the "
            "reference's continuation",
        )
    ]
    record = judged.record
    assert (record.reference_text, record.reference_token_ids) == ("46", [55, 57, 2])
    assert [f.text for f in record.reference_faults] == [
        "logprob above 0 in the reference at position 0 (position 0: 0.5)"
    ]
    assert record.reference_cold == (
        "the reference cold by an uncached request; run 0 sent first, 0 cached tokens reported"
    )
    # The reference and both scenarios' outputs scanned.
    assert judged.degenerate == DegenerateScan(3, [])


def test_without_a_reference_the_record_says_why_and_scans_nothing_of_it() -> None:
    e = evidence(ScenarioEvidence("concurrent", output=NEAR), reference=None)
    e.reference_error = "HTTP 500: engine died"
    judged = judge(PLAN, e, CacheParityThresholds(logprob_tolerance=1.0))
    record = judged.record
    assert (record.reference_text, record.reference_token_ids) == ("", None)
    assert record.reference_faults == [] and record.reference_error == "HTTP 500: engine died"
    assert judged.degenerate == DegenerateScan(0, [])


# -- the aggregate -----------------------------------------------------------------------------
def test_the_aggregate_counts_each_scenario_by_hand() -> None:
    """s01: the item above (its reference and exact-repeat output with a fault, concurrent
    parting at a near-tie; no cached-token counts); s02: exact-repeat unreported, shared-prefix
    no hit (0 cached tokens), multi-turn a hit, eviction not exercised, concurrent failed;
    s03 errored."""
    t = CacheParityThresholds(logprob_tolerance=1.0)
    s01 = judge(
        PLAN,
        evidence(
            ScenarioEvidence("exact-repeat", output=HOT),
            ScenarioEvidence("concurrent", output=NEAR),
            reference=HOT,
        ),
        t,
    )
    s02 = judge(
        PLAN,
        evidence(
            ScenarioEvidence(
                "exact-repeat", output=out([55, 57, 2], "46", [-0.1, -0.2, -0.3], None)
            ),
            ScenarioEvidence("shared-prefix", output=out([55, 57, 2], "46", [-0.1, -0.2, -0.3], 0)),
            ScenarioEvidence("eviction", exercised=False, note="capacity unknown"),
            ScenarioEvidence("concurrent", error="HTTP 500: x"),
            ScenarioEvidence("multi-turn", output=SAME),
        ),
        t,
    )
    items = [
        RecordedItem("prompt", "s01", s01.record, violations=tuple(v.text for v in s01.violations)),
        RecordedItem("prompt", "s02", s02.record),
        RecordedItem("prompt", "s03", None, "down"),
    ]
    summary = summarize(items, t, CacheParityContext("adder@llama", {"adder@llama": {}}))
    assert summary.violations == [
        "logprob above 0 in 1 of 2 prompts: s01 (the reference at position 0), s01 (the "
        "exact-repeat output at position 0)"
    ]
    assert summary.text.splitlines() == [
        "adder@llama: 1/2 prompts identical on every cache scenario (reference: uncached)",
        "  shared-prefix: 1 compared, 0 differ, 1 no hit, 0 hits unreported, 0 not exercised, "
        "0 failed",
        "  exact-repeat: 2 compared, 1 differ, 0 no hit, 2 hits unreported, 0 not exercised, "
        "0 failed",
        "  multi-turn: 1 compared, 0 differ, 0 no hit, 0 hits unreported, 0 not exercised, "
        "0 failed",
        "  eviction: 0 compared, 0 differ, 0 no hit, 0 hits unreported, 1 not exercised, 0 failed",
        "  concurrent: 1 compared, 1 differ, 0 no hit, 1 hits unreported, 0 not exercised, "
        "1 failed",
    ]
    assert summary.properties == [
        ("infercheck_parity_prompts", 1),
        ("infercheck_prompts", 2),
        ("infercheck_no_hit_shared_prefix", 1),
        ("infercheck_no_hit_exact_repeat", 0),
        ("infercheck_no_hit_multi_turn", 0),
        ("infercheck_no_hit_eviction", 0),
        ("infercheck_no_hit_concurrent", 0),
    ]
    data = summary.record
    assert (data.target, data.engines, data.reference_kind) == (
        "adder@llama",
        {"adder@llama": {}},
        "uncached",
    )
    assert data.divergence_labels == {"near-tie": 1, "decisive": 0, "unknown": 0}
    # References of two kinds: none is named.
    other = dataclasses.replace(s02.record, reference_kind="sent-first")
    mixed = [RecordedItem("prompt", "s01", s01.record), RecordedItem("prompt", "s02", other)]
    assert summarize(mixed, t, CacheParityContext("adder@llama", {})).record.reference_kind is None


def test_only_a_near_tie_under_fail_on_decisive_is_offered_a_waiver() -> None:
    """The concurrent output's margins are 0.005: decisive at tie_margin 0.001, where
    fail_on: decisive offers nothing; a near-tie at 0.01 under fail_on any neither."""
    e = evidence(ScenarioEvidence("concurrent", output=NEAR))
    decisive = CacheParityThresholds(fail_on="decisive", tie_margin=0.001, logprob_tolerance=1.0)
    assert judge(PLAN, e, decisive).waivers == []
    assert judge(PLAN, e, CacheParityThresholds(logprob_tolerance=1.0)).waivers == []


def test_the_aggregate_counts_every_failure_and_a_reference_fault_alone() -> None:
    """s01: only its reference has a fault; s02 and s03: the concurrent scenario failed.
    No item recorded a violation: 3 prompts at parity; no tie anywhere: no labels."""
    t = CacheParityThresholds(logprob_tolerance=1.0)
    s01 = judge(PLAN, evidence(ScenarioEvidence("exact-repeat", output=SAME), reference=HOT), t)
    failed = judge(PLAN, evidence(ScenarioEvidence("concurrent", error="HTTP 500: x")), t)
    items = [
        RecordedItem("prompt", "s01", s01.record),
        RecordedItem("prompt", "s02", dataclasses.replace(failed.record, prompt_id="s02")),
        RecordedItem("prompt", "s03", dataclasses.replace(failed.record, prompt_id="s03")),
    ]
    summary = summarize(items, t, CacheParityContext("adder@llama", {}))
    assert summary.violations == [
        "logprob above 0 in 1 of 3 prompts: s01 (the reference at position 0)"
    ]
    data = summary.record
    assert (data.parity_prompts, data.divergence_labels) == (3, {})
    assert data.scenarios["concurrent"].failed == 2
