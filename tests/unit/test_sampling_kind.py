"""The ``sampling`` kind's pure parts: an item's ``fit`` and ``seed`` measures, the Holm
aggregate, the YAML's validation and plan (values computed by hand here)."""

from __future__ import annotations

import math
from typing import Any

import pytest
from pydantic import ValidationError

from pytest_infercheck.checks.framework.items import RecordedItem
from pytest_infercheck.checks.framework.target import TargetContext
from pytest_infercheck.checks.sampling.evidence import PositionEvidence, SeedEvidence
from pytest_infercheck.checks.sampling.judge import position_record
from pytest_infercheck.checks.sampling.records import SamplingPosition
from pytest_infercheck.checks.sampling.spec import SamplingThresholds, plan
from pytest_infercheck.checks.sampling.summarize import summarize
from pytest_infercheck.verdict.measure import Finding, Unmeasured

LOGPROBS = {0: math.log(0.5), 1: math.log(0.3), 2: math.log(0.2)}


def position(counts: dict[int, int], **params: Any) -> PositionEvidence:
    return PositionEvidence(
        prompt_id="sp001",
        target="adder@local",
        params={"temperature": 1.0, **params},
        position=0,
        context=[],
        engine="llama-server",
        reference="adder@local",
        samples=sum(counts.values()),
        alpha=0.001,
        family=1,
        counts=counts,
        logprobs=dict(LOGPROBS),
        pieces={0: "a", 1: "b", 2: "c"},
    )


def test_a_token_outside_the_support_fails_naming_it_and_the_truncation() -> None:
    # top_k 2 keeps tokens 0 and 1; token 2 (p 0.2) drawn 3 times is outside.
    fit = position({0: 60, 1: 37, 2: 3}, top_k=2).fit
    assert isinstance(fit, Finding) and not fit.ok
    assert fit.detail == (
        "temperature 1, top_k 2 at position 0: sampled outside the support: "
        "token 2 'c' x3 (excluded by top_k 2)"
    )
    # top_p 0.7: C_0 = 0 < 0.7 keeps 0, C_1 = 0.5 < 0.7 keeps 1, C_2 = 0.8 excludes 2.
    fit = position({0: 60, 1: 37, 2: 3}, top_p=0.7, top_k=3).fit
    assert isinstance(fit, Finding) and "token 2 'c' x3 (excluded by top_p 0.7)" in fit.detail


def test_counts_as_expected_pass_and_counts_far_off_fail_by_the_g_test() -> None:
    assert position({0: 50, 1: 30, 2: 20}).fit == Finding(True)
    # top_k 2: expected 0.625 / 0.375 of 100; drawn 80 / 20.
    e = position({0: 80, 1: 20}, top_k=2)
    g = 2 * (80 * math.log(80 / 62.5) + 20 * math.log(20 / 37.5))
    g /= 1 + 3 / 600  # Williams: q = 1 + (k + 1) / (6 n), k = 2 cells, n = 100
    assert math.erfc(math.sqrt(g / 2)) < 0.004  # chi2(1) survival: near the level, so

    # the p-value is the Monte Carlo one (metrics/sampling/exact.py): its exact value is the
    # binomial mass of the counts whose G reaches 80 / 20's: 1.845e-4, above the
    # chi-square's 1.57e-4
    def g_of(x: int) -> float:
        return 2 * sum(o * math.log(o / e) for o, e in ((x, 62.5), (100 - x, 37.5)) if o)

    p_exact = sum(
        math.comb(100, x) * 0.625**x * 0.375 ** (100 - x)
        for x in range(101)
        if g_of(x) >= g_of(80) - 1e-9
    )
    assert p_exact == pytest.approx(1.845e-4, rel=1e-3)
    record = position_record(e)
    assert record.statistic == pytest.approx(g, rel=1e-9)
    # eps (alpha / 20) plus Besag-Clifford's p: h / l, 20 simulated G at or beyond it
    assert record.p_value == pytest.approx(5e-5 + p_exact, rel=0.5)
    p = record.p_value
    fit = e.fit
    assert isinstance(fit, Finding) and not fit.ok
    assert fit.detail == (
        f"temperature 1, top_k 2 at position 0: sampled distribution differs from the expected "
        f"(llama-server semantics): G {g:.4g} on 1 dof, p {p:.3g} < alpha/m = 0.001/1; "
        "most over-sampled: token 0 'a' 80 vs 62.5 expected"
    )
    # The same counts in a family of 100 items: level 1e-5 < p, the item passes alone.
    e.family = 100
    del e.analysis
    assert e.fit == Finding(True)


def test_nothing_to_compare_is_unmeasured_with_why() -> None:
    e = position({})
    assert e.fit == Unmeasured("no tokens were drawn at position 0")
    e = position({0: 1})
    e.why_not = "the greedy continuation ended (end of sequence) after 1 tokens"
    assert e.fit == Unmeasured(e.why_not)
    e = position({0: 1})
    e.logprobs = {0: float("nan"), 1: 0.0}
    fit = e.fit
    assert isinstance(fit, Unmeasured) and fit.reason.startswith(
        "the expected distribution cannot be made"
    )
    assert e.measures["seed"] is True  # the seed gate is the seed items'


def seed(**kw: Any) -> SeedEvidence:
    e = SeedEvidence("sp001", "adder@llama", {"temperature": 1.5}, 1234, p_max=0.3)
    e.alone = [[1, 2], [1, 2]]
    e.together = [[1, 2], [1, 2]]
    e.seeds = {1235 + k: [k % 3, 0] for k in range(16)}
    for k, v in kw.items():
        setattr(e, k, v)
    return e


def test_seed_findings() -> None:
    assert seed().seed_finding == Finding(True)
    assert seed(alone=[[1, 2], [1, 3]]).seed_finding == Finding(
        False, "seed 1234 gave 2 distinct outputs over 2 requests one after another"
    )
    assert seed(together=[[1, 2], [2, 2]]).seed_finding == Finding(
        False, "seed 1234 gave 2 distinct outputs with 2 requests at once (alone: 1)"
    )
    same = {1235 + k: [1, 2] for k in range(16)}
    finding = seed(seeds=same).seed_finding
    # 16 seeds all alike: chance at most 0.3 ** 15 = 1.4e-8.
    assert finding == Finding(
        False,
        "16 distinct seeds all gave one output (chance at most 1.4e-08 under temperature "
        "1.5): the seed is ignored",
    )
    # A certain first token (p_max 0.99): identical outputs prove nothing; unmeasured.
    assert isinstance(seed(seeds=same, p_max=0.99).seed_finding, Unmeasured)
    assert seed().measures["fit"] is True


def item(name: str, p: float, failed: bool) -> RecordedItem:
    record = SamplingPosition(
        "sp001", "t", "t", "mlx-lm", {"temperature": 1.0}, 0, [], 100, 0.001, 3, p_value=p
    )
    return RecordedItem("position", name, record, violations=("x",) if failed else ())


def test_holm_fails_the_aggregate_for_items_it_rejects_beyond_bonferroni() -> None:
    # m = 3, alpha 0.001: Bonferroni level 3.3e-4 fails a alone; Holm rejects a (2e-4 <
    # 0.001/3) and then b (4e-4 < 0.001/2), stops at c.
    items = [item("a", 2e-4, True), item("b", 4e-4, False), item("c", 0.5, False)]
    t = SamplingThresholds(params=[{"temperature": 1.0}])
    summary = summarize(items, t, TargetContext("t", {}))
    assert summary.record.holm_rejected == ["a", "b"]
    assert summary.violations == [
        "Holm's step-down at alpha 0.001 over 3 positions rejects 1 more: b (p 0.0004)"
    ]
    summary = summarize([item("c", 0.5, False)], t, TargetContext("t", {}))
    assert summary.violations == [] and summary.record.holm_rejected == []


def test_thresholds_refuse_greedy_and_unchecked_parameters() -> None:
    with pytest.raises(ValidationError, match=r"params\[0\]: temperature > 0 is required"):
        SamplingThresholds(params=[{"top_k": 3}])
    with pytest.raises(ValidationError, match="stop not checked by sampling"):
        SamplingThresholds(params=[{"temperature": 1.0, "stop": "x"}])
    t = SamplingThresholds(params=[{"temperature": 1.0, "presence_penalty": 1.0}])
    assert t.params[0].presence_penalty == 1.0
    with pytest.raises(ValidationError, match="listed twice: t1"):
        SamplingThresholds(params=[{"temperature": 1.0}, {"temperature": 1.0}])


def test_plan_names_each_prompt_parameter_set_and_position() -> None:
    class Check:
        def kind_thresholds(self) -> SamplingThresholds:
            return SamplingThresholds(
                params=[{"temperature": 1.0}, {"temperature": 1.0, "top_p": 0.9}],
                positions=2,
                seed=True,
            )

    class Prompt:
        id = "sp001"

    class Suite:
        prompts = (Prompt(),)

    names = [(p.full_name, p.role) for p in plan(Check(), Suite())]  # type: ignore[arg-type]
    assert names == [
        ("sp001[t1-pos0]", "position"),
        ("sp001[t1-pos1]", "position"),
        ("sp001[t1-p0.9-pos0]", "position"),
        ("sp001[t1-p0.9-pos1]", "position"),
        ("sp001[seed]", "seed"),
    ]


def test_reported_post_sampling_probabilities_are_held_to_the_expected() -> None:
    # top_k 2: expected 0.625 / 0.375; counts as expected.
    e = position({0: 625, 1: 375}, top_k=2)
    e.processed = {0: 0.62505, 1: 0.37495}  # within 1e-4: float32 noise
    assert e.fit == Finding(True)
    e = position({0: 625, 1: 375}, top_k=2)
    e.processed = {0: 0.5, 1: 0.3, 2: 0.2}  # the engine reports it did not truncate
    assert e.fit == Finding(
        False,
        "temperature 1, top_k 2 at position 0: the engine's post-sampling probabilities "
        "differ from the expected (llama-server semantics): token 2 'c' 0.2 vs 0 expected, "
        "token 0 'a' 0.5 vs 0.625 expected, token 1 'b' 0.3 vs 0.375 expected",
    )
