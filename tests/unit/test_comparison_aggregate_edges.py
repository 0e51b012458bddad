"""Edges of a comparison's aggregate (:mod:`pytest_infercheck.checks.comparison.aggregate`)
that its by-hand tests left open, found by the mutation run (tests/unit/MUTATION.md): what
each suite gate reads and why it is unmeasured, an empty suite, McNemar's p on flips, a
sweep's cliff at the edges of alpha and max_mean_kl, and the cliff's and the aggregate's
texts, and a sweep's aggregate. Every expected value is worked out by hand from the
inputs."""

from __future__ import annotations

import dataclasses
import math

import pytest

from pytest_infercheck.checks.comparison.aggregate import (
    CliffLevel,
    CliffStep,
    SuiteAggregate,
    aggregate,
    cliff_evidence,
    cliff_table,
    comparison_level,
    degradation_cliff,
    format_aggregate,
    level_measures,
    self_check_level,
    sweep_cliff,
)
from pytest_infercheck.checks.comparison.prompt import SELF_CHECK, SelfCheckRecord
from pytest_infercheck.checks.comparison.spec import Thresholds
from pytest_infercheck.checks.comparison.summarize import SweepContext, summarize_sweep
from pytest_infercheck.checks.framework.items import RecordedItem
from pytest_infercheck.specs import FlipThresholds
from pytest_infercheck.verdict.measure import Reading, Unmeasured

from .factories import prompt_comparison


def _agg(**kw: object) -> SuiteAggregate:
    """Two teacher-forced prompts, KL [0.1, 0.3] and [0.2]: mean 0.2 over 3 positions."""
    base = aggregate(
        [prompt_comparison("a", [0.1, 0.3]), prompt_comparison("b", [0.2])], Thresholds()
    )
    return dataclasses.replace(base, **kw)  # type: ignore[arg-type]


# -- what the suite gates read ---------------------------------------------------------------
def test_no_position_compared_leaves_the_mean_kl_and_same_top_unmeasured() -> None:
    got = level_measures(_agg(kl_n=0, same_top_rate=None), Thresholds())
    assert got["kl_mean"] == Unmeasured("no position was compared")
    assert got["same_top_rate"] == Unmeasured("no position was compared")


def test_one_position_is_a_mean_kl() -> None:
    got = level_measures(_agg(kl_n=1, kl_mean=0.25), Thresholds())
    assert got["kl_mean"] == Reading(0.25, "")


def test_a_lower_bound_method_makes_the_mean_kl_a_lower_bound() -> None:
    bound = _agg(kl_mean=0.25, methods={"teacher-forced": 1, "teacher-forced-top-k": 1})
    assert level_measures(bound, Thresholds())["kl_mean"] == Reading(0.25, "lower bound")
    # A method counted zero times says nothing.
    exact = _agg(kl_mean=0.25, methods={"teacher-forced": 2, "teacher-forced-top-k": 0})
    assert level_measures(exact, Thresholds())["kl_mean"] == Reading(0.25, "")


def test_every_method_without_an_argmax_is_named_in_order() -> None:
    got = level_measures(
        _agg(n_prompts=4, methods={"top-k-lower-bound": 2, "text": 1, "teacher-forced": 1}),
        Thresholds(),
    )
    assert got["same_top_rate"] == Unmeasured(
        "method text, top-k-lower-bound: 3 of 4 prompts have no teacher-forced argmax"
    )
    assert got["kl_mean"] == Unmeasured(
        "method text, 1 of 4 prompts compared by text only: no KL over the suite"
    )


def test_no_answered_prompt_leaves_both_flip_measures_unmeasured() -> None:
    got = level_measures(_agg(flip_rate=None, n_answered=0, n_flips=0), Thresholds())
    why = Unmeasured("no prompt of the suite has an answer kind: no flip rate")
    assert got["flip_rate"] == why and got["flip_rate_high"] == why


def test_the_flip_measures_say_what_they_count_and_at_which_confidence() -> None:
    """1 flip of 2 answered at confidence 0.8: z = 1.2816, centre (0.5 + z^2/4) / (1 +
    z^2/2) = 0.5, half z / (1 + z^2/2) * sqrt(0.25/2 + z^2/16) = 0.33575: upper 0.83575
    (at the default 0.95 it would be 0.90547)."""
    thresholds = Thresholds(flips=FlipThresholds(confidence=0.8))
    results = [
        prompt_comparison("a", [0.0], flip="correct_to_wrong"),
        prompt_comparison("b", [0.0], flip="unchanged"),
    ]
    agg = aggregate(results, thresholds)
    assert agg.flip_rate_high == pytest.approx(0.83575, abs=1e-5)
    got = level_measures(agg, thresholds)
    assert got["flip_rate"] == Reading(0.5, "1/2 answered")
    high = got["flip_rate_high"]
    assert isinstance(high, Reading) and high.value == agg.flip_rate_high
    assert high.qualifier == "upper 80% Wilson bound, 1/2 answered"


# -- the aggregate ---------------------------------------------------------------------------
def test_an_empty_suite_is_refused() -> None:
    with pytest.raises(ValueError, match=r"^cannot aggregate an empty suite$"):
        aggregate([], Thresholds())


def test_mcnemar_counts_correct_to_wrong_against_wrong_to_correct() -> None:
    """b = 3 correct->wrong, c = 0: p = min(1, 2 * C(3, 0) / 2^3) = 0.25."""
    results = [prompt_comparison(p, [0.0], flip="correct_to_wrong") for p in "abc"]
    assert aggregate(results, Thresholds()).mcnemar_p == 0.25
    back = [prompt_comparison(p, [0.0], flip="wrong_to_correct") for p in "abc"]
    assert aggregate(back, Thresholds()).mcnemar_p == 0.25


def test_no_position_no_delta_p_and_no_noise_floor() -> None:
    agg = aggregate([prompt_comparison("a", [])], Thresholds())
    assert agg.kl_n == 0 and math.isnan(agg.kl_mean)
    assert (agg.same_top_rate, agg.delta_p_mean, agg.delta_p_rms) == (None, None, None)
    assert agg.noise_floor is None


# -- a sweep's cliff -------------------------------------------------------------------------
def _level(label: str, failed: str, kl: float = 0.0, measured: bool = True) -> CliffLevel:
    return CliffLevel(label, frozenset(failed), 8, kl, 0.0, measured)


@pytest.mark.parametrize("alpha", [0.0, 1.0, 1.5])
def test_alpha_outside_the_open_unit_interval_is_refused(alpha: float) -> None:
    with pytest.raises(ValueError, match=rf"^alpha must be in \(0, 1\), got {alpha}$"):
        degradation_cliff([_level("self-check", "")], alpha=alpha)


def test_a_mean_kl_exactly_at_max_mean_kl_is_within() -> None:
    _, steps = degradation_cliff(
        [_level("self-check", ""), _level("q8", "", 0.5), _level("q4", "", 0.75)],
        max_mean_kl=0.5,
    )
    assert [s.kl_within for s in steps] == [True, True, False]
    assert [s.kl_crosses for s in steps] == [False, False, True]


def test_failures_rise_only_below_alpha() -> None:
    """6 newly failed, none recovered: p = 2 / 2^6 = 0.03125; at alpha 0.03125 that is not
    below alpha, just above it it is."""
    levels = [_level("self-check", ""), _level("q4", "abcdef")]
    cliff, steps = degradation_cliff(levels, alpha=0.03125)
    assert steps[1].p_value == 0.03125
    assert cliff is None and steps[1].failures_rise is False
    cliff, steps = degradation_cliff(levels, alpha=0.0313)
    assert cliff == "q4" and steps[1].failures_rise is True


def test_a_sweep_level_has_a_mean_kl_from_one_position() -> None:
    assert comparison_level(_agg(kl_n=1), frozenset()).kl_measured is True
    assert comparison_level(_agg(kl_n=0), frozenset()).kl_measured is False


def test_a_sweeps_cliff_is_judged_at_its_own_alpha_and_needs_a_failed_set_per_level() -> None:
    """6 of 8 prompts newly failed at q4: p = 0.03125, a cliff at alpha 0.05 (the default),
    none at alpha 0.01."""
    q4 = _agg(test="q4@local", n_prompts=8)
    first = self_check_level([], 8)
    failed = [frozenset("abcdef")]
    assert sweep_cliff(first, [q4], failed, Thresholds())[0] == "q4@local"
    assert sweep_cliff(first, [q4], failed, Thresholds(), alpha=0.01)[0] == "none"
    with pytest.raises(ValueError):
        sweep_cliff(first, [q4, q4], failed, Thresholds())


# -- the cliff's texts -----------------------------------------------------------------------
def _step(level: str, p: float = 1.0, **kw: object) -> CliffStep:
    fields: dict[str, object] = {
        "level": level,
        "n_prompts": 8,
        "failed": [],
        "kl_mean": 0.0,
        "kl_se": 0.0,
        "kl_within": None,
        "newly_failed": 0,
        "recovered": 0,
        "p_value": p,
        "failures_rise": False,
        "kl_crosses": False,
    }
    return CliffStep(**(fields | kw))  # type: ignore[arg-type]


def test_no_cliff_says_what_no_level_showed() -> None:
    steps = [_step("self-check"), _step("q4")]
    said = (
        "none (no level's failed items rise significantly at alpha 0.05, and no level's mean "
        "KL crosses max_mean_kl)"
    )
    assert cliff_evidence("none", steps, 0.05) == said
    # The first level is compared with nothing: it is never the cliff.
    assert cliff_evidence("self-check", steps, 0.05) == said


def test_a_cliff_at_exactly_alpha_says_p_is_not_below_it() -> None:
    steps = [_step("self-check"), _step("q4", 0.05, failed=list("ab"), newly_failed=2)]
    assert cliff_evidence("q4", steps, 0.05) == (
        "q4: failed items 0 -> 2 of 8 (2 newly failed, 0 recovered; exact McNemar p = 0.05 "
        ">= alpha 0.05); mean KL 0 ± 0 -> 0 ± 0"
    )


def test_a_mean_kl_not_measured_is_said_nan() -> None:
    steps = [
        _step("self-check", kl_mean=math.nan, kl_se=math.nan),
        _step("q4", kl_mean=0.0125, kl_se=math.nan, kl_within=True),
        _step("q2", kl_mean=0.5, kl_se=0.25, kl_within=False),
    ]
    assert cliff_table("q4", steps, 0.05) == [
        "cliff evidence (alpha 0.05):",
        "  self-check: 0/8 failed; mean KL NaN",
        "  q4: 0/8 failed, vs previous +0 -0 (McNemar p = 1); mean KL 0.0125 ± NaN, within "
        "max_mean_kl  <- cliff",
        "  q2: 0/8 failed, vs previous +0 -0 (McNemar p = 1); mean KL 0.5 ± 0.25, above "
        "max_mean_kl",
    ]
    # The first level is never marked the cliff.
    assert not cliff_table("self-check", steps, 0.05)[1].endswith("<- cliff")


# -- the aggregate's text --------------------------------------------------------------------
def test_the_text_says_divergences_without_a_noise_floor_and_no_flip_rate() -> None:
    agg = _agg(
        divergence_labels={"near-tie": 1, "decisive": 0, "unknown": 0},
        noise_floor=None,
        flip_rate=None,
        n_answered=0,
        n_flips=0,
        flips={},
    )
    lines = format_aggregate(agg).splitlines()
    assert "flips 0/0 = n/a (CI " in lines[3]
    assert lines[5] == ("divergences 1 near-tie; noise floor n/a nats")
    floor = format_aggregate(_agg(noise_floor=0.03125)).splitlines()
    assert floor[5].endswith("; noise floor 0.03125 nats")


# -- a sweep's aggregate ---------------------------------------------------------------------
def _sweep_items(
    q4_kl: float = 0.25, self_check: bool = True, sides: tuple[str, ...] = ("q8@local", "q4@local")
) -> list[RecordedItem]:
    """Six prompts: every q8@local item passes (KL 0), every q4@local item failed (KL
    ``q4_kl``, its violation as the run recorded it); the self-check reproduced."""
    items = (
        [RecordedItem(SELF_CHECK, "self-check", SelfCheckRecord([], [], ""))] if self_check else []
    )
    for n in range(6):
        for side, kl, failed in (("q8@local", 0.0, ()), ("q4@local", q4_kl, ("x",))):
            if side in sides:
                record = dataclasses.replace(
                    prompt_comparison(f"r{n}", [kl]), test=side, flip="unchanged"
                )
                items.append(RecordedItem("prompt", f"r{n}[{side}]", record, violations=failed))
    return items


def sweep_context(
    alpha: float = 0.05, self_check: bool = True, tests: list[str] | None = None
) -> SweepContext:
    return SweepContext(
        "sweep",
        "s",
        tests or ["q8@local", "q4@local"],
        {"bf16@local": {"v": 1}},
        cliff_alpha=alpha,
        self_check=self_check,
    )


def test_a_sweeps_aggregate_finds_its_cliff_and_says_why_by_hand() -> None:
    """6 of 6 prompts newly failed at q4: McNemar p = 2 / 2^6 = 0.03125 < alpha 0.05."""
    summary = summarize_sweep(_sweep_items(), Thresholds(), sweep_context())
    record = summary.record
    assert (record.cliff, record.cliff_alpha, record.self_check) == ("q4@local", 0.05, True)
    assert [s.level for s in record.cliff_steps] == ["self-check", "q8@local", "q4@local"]
    assert [level.n_failed for level in record.levels] == [0, 6]  # the items' own verdicts
    assert summary.text.split("\n\n")[-1].splitlines() == [
        "degradation cliff: q4@local: failed items 0 -> 6 of 6 (6 newly failed, 0 recovered; "
        "exact McNemar p = 0.0312 < alpha 0.05); mean KL 0 ± 0 -> 0.25 ± 0",
        "cliff evidence (alpha 0.05):",
        "  self-check: 0/6 failed; mean KL 0 ± 0",
        "  q8@local: 0/6 failed, vs previous +0 -0 (McNemar p = 1); mean KL 0 ± 0",
        "  q4@local: 6/6 failed, vs previous +6 -0 (McNemar p = 0.0312); mean KL 0.25 ± 0  "
        "<- cliff",
    ]
    assert (
        "UNGATED: no gate written (none of max_kl, max_kl_position, min_similarity, "
        "max_mean_kl, min_same_top, flips.max_rate): it passes whatever the outputs "
        "(identical outputs: q8@local 0/6, q4@local 0/6)"
    ) in summary.text.split("\n\n")
    properties = dict(summary.properties)
    assert summary.properties[-1] == ("infercheck_cliff", "q4@local")
    assert properties["infercheck_q4@local_n_failed"] == 6
    assert properties["infercheck_engines"] == '{"bf16@local": {"v": 1}}'
    assert properties["infercheck_ungated"] is True
    # At alpha 0.01 the same rise is no cliff.
    assert summarize_sweep(_sweep_items(), Thresholds(), sweep_context(0.01)).record.cliff == "none"


def test_a_sweeps_first_level_without_a_self_check_or_its_record() -> None:
    off = summarize_sweep(
        _sweep_items(self_check=False), Thresholds(), sweep_context(self_check=False)
    )
    first = off.record.cliff_steps[0]
    assert (first.level, first.n_prompts, first.kl_mean) == ("baseline", 6, 0.0)
    assert off.record.self_check is False
    missing = summarize_sweep(_sweep_items(self_check=False), Thresholds(), sweep_context())
    unknown = missing.record.cliff_steps[0]
    assert (unknown.level, unknown.n_prompts, unknown.kl_within) == ("self-check", 6, None)
    assert math.isnan(unknown.kl_mean) and math.isnan(unknown.kl_se)


def test_a_side_without_records_does_not_stop_the_others_or_their_problems() -> None:
    """q2@local has no record; q4@local's KL is NaN on every prompt: a problem of its own."""
    items = _sweep_items(q4_kl=math.nan, sides=("q4@local",))
    summary = summarize_sweep(items, Thresholds(), sweep_context(tests=["q2@local", "q4@local"]))
    assert summary.violations[0] == "q2@local: no prompt of this side has a record"
    assert summary.violations[1].startswith("q4@local: non-finite KL in 6 of 6 prompts")
    assert [level.test for level in summary.record.levels] == ["q4@local"]
    # One side: its properties carry no side in their names.
    assert dict(summary.properties)["infercheck_n_failed"] == 6


def test_a_sweeps_record_keeps_its_alpha_replay_errors_and_engines_in_order() -> None:
    """alpha 0.01, a golden baseline's replay line, an errored item, engines given out of
    order (their JUnit property is sorted by key)."""
    items = [*_sweep_items(), RecordedItem("prompt", "r9[q4@local]", None, "HTTP 500")]
    context = SweepContext(
        "sweep",
        "s",
        ["q8@local", "q4@local"],
        {"q4@local": {"v": 2}, "bf16@local": {"v": 1}},
        replay=["golden recorded on bf16@local"],
        cliff_alpha=0.01,
        self_check=True,
    )
    summary = summarize_sweep(items, Thresholds(max_mean_kl=1.0), context)
    record = summary.record
    assert (record.cliff_alpha, record.replay, record.ungated) == (
        0.01,
        ["golden recorded on bf16@local"],
        False,
    )
    # The self-check, 12 prompt items and the errored one: 14 items.
    assert record.errored == ["1 of 14 items errored: r9[q4@local] (HTTP 500)"]
    properties = dict(summary.properties)
    assert properties["infercheck_engines"] == '{"bf16@local": {"v": 1}, "q4@local": {"v": 2}}'
    assert properties["infercheck_q4@local_divergences_near_tie"] == 0
    assert "golden recorded on bf16@local" in summary.text.split("\n\n")
