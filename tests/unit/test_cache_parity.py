"""cache-parity's pure parts: a scenario against its reference, hit accounting, the item's
violations and ``summarize`` over hand-built records."""

from __future__ import annotations

import math

from pytest_infercheck.backends import Generation
from pytest_infercheck.backends.base import Message
from pytest_infercheck.checks.cache_parity import (
    CacheParityContext,
    CacheParityPrompt,
    CacheParityThresholds,
    ScenarioResult,
    compare_scenario,
    earlier_turns,
    hit_of,
    prompt_violations,
    sibling_text,
    summarize,
)
from pytest_infercheck.checks.framework.items import summarize_items
from pytest_infercheck.checks.protocol import RecordedItem
from pytest_infercheck.checks.registry import kind_named

REF = Generation("46", [55, 57, 2], "stop", [-0.1, -0.2, -0.3])


def out(ids: list[int], text: str, lps: list[float], cached: int | None = 6) -> Generation:
    g = Generation(text, ids, "stop" if ids[-1:] == [2] else "length", lps)
    g.cached_tokens = cached
    return g


def test_hit_of_names_hits_misses_and_silence() -> None:
    assert [hit_of(5), hit_of(0), hit_of(None)] == ["hit", "no-hit", "unreported"]


def test_identical_scenario_matches_with_its_logprob_difference() -> None:
    r = compare_scenario(
        "exact-repeat", REF, out([55, 57, 2], "46", [-0.1, -0.25, -0.3]), tie_margin=0.01
    )
    assert r.match and r.hit == "hit" and r.cached_tokens == 6
    assert math.isclose(r.max_logprob_diff or 0, 0.05)
    assert prompt_violations(record([r]), CacheParityThresholds(logprob_tolerance=0.1)) == []
    [v] = prompt_violations(record([r]), CacheParityThresholds(logprob_tolerance=0.01))
    assert v == "exact-repeat: logprobs moved by 0.05 > logprob_tolerance 0.01"


def test_truncated_and_empty_outputs_are_named() -> None:
    cut = compare_scenario("exact-repeat", REF, out([55], "4", [-0.1]), tie_margin=0.01)
    assert cut.truncated and cut.first_divergence == 1
    [v] = prompt_violations(record([cut]), CacheParityThresholds())
    assert v.startswith("exact-repeat: truncated output, first at token 1: '46' vs '4'")
    empty = compare_scenario("shared-prefix", REF, out([2], "", [-0.5]), tie_margin=0.01)
    assert not empty.truncated  # an output that diverges is not a truncation
    texts = prompt_violations(record([empty]), CacheParityThresholds())
    assert texts[0].startswith("shared-prefix: empty generation: the shared-prefix output")


def test_a_divergence_is_labelled_and_near_ties_pass_under_fail_on_decisive() -> None:
    ref = Generation(
        "46",
        [55, 57, 2],
        "stop",
        [-0.1, -0.70, -0.3],
        [{55: -0.1}, {57: -0.70, 58: -0.705}, {2: -0.3}],
    )
    near = Generation(
        "45",
        [55, 58, 2],
        "stop",
        [-0.1, -0.69, -0.3],
        [{55: -0.1}, {58: -0.69, 57: -0.695}, {2: -0.3}],
    )
    r = compare_scenario("concurrent", ref, near, tie_margin=0.01)
    assert r.tie is not None and r.tie.divergence_label == "near-tie" and r.tie.token == 1
    assert prompt_violations(record([r]), CacheParityThresholds(fail_on="decisive")) == []
    [v] = prompt_violations(record([r]), CacheParityThresholds())
    assert v.startswith("concurrent: output differs from the reference, near-tie at token 1")


def test_no_hit_is_shown_and_fails_only_with_require_hits() -> None:
    r = compare_scenario(
        "exact-repeat", REF, out([55, 57, 2], "46", [-0.1, -0.2, -0.3], 0), tie_margin=0.01
    )
    assert r.hit == "no-hit" and r.match
    assert prompt_violations(record([r]), CacheParityThresholds()) == []
    assert prompt_violations(record([r]), CacheParityThresholds(require_hits=True)) == [
        "exact-repeat: no cache hit (0 cached tokens): the cache was not exercised"
    ]
    evicted = compare_scenario(
        "eviction", REF, out([55, 57, 2], "46", [-0.1, -0.2, -0.3], 0), tie_margin=0.01
    )
    assert prompt_violations(record([evicted]), CacheParityThresholds(require_hits=True)) == []


def test_a_nan_logprob_difference_fails_closed() -> None:
    r = compare_scenario(
        "exact-repeat", REF, out([55, 57, 2], "46", [-0.1, math.nan, -0.3]), tie_margin=0.01
    )
    texts = prompt_violations(record([r]), CacheParityThresholds(logprob_tolerance=1.0))
    assert any("non-finite logprob" in t for t in texts)
    assert any("(not finite): fails logprob_tolerance" in t for t in texts)


def test_summarize_counts_each_scenario_and_names_failing_prompts() -> None:
    same = compare_scenario(
        "exact-repeat", REF, out([55, 57, 2], "46", [-0.1, -0.2, -0.3]), tie_margin=0.01
    )
    miss = compare_scenario(
        "exact-repeat", REF, out([55, 57, 2], "46", [-0.1, -0.2, -0.3], 0), tie_margin=0.01
    )
    bad = compare_scenario(
        "exact-repeat", REF, out([55, 58, 2], "45", [-0.1, -0.2, -0.3]), tie_margin=0.01
    )
    skipped = ScenarioResult("eviction", False, "the cache's capacity is not known")
    items = [
        RecordedItem("prompt", "s01", record([same, skipped], "s01")),
        RecordedItem("prompt", "s02", record([miss, skipped], "s02")),
        RecordedItem("prompt", "s03", record([bad, skipped], "s03")),
        RecordedItem("prompt", "s04", None, "HTTP 500"),
    ]
    context = CacheParityContext("adder@llama", {})
    summary = summarize_items(kind_named("cache-parity"), items, CacheParityThresholds(), context)  # type: ignore[arg-type]
    data = summary.record
    assert (data.prompts, data.parity_prompts, data.reference_kind) == (3, 2, "uncached")
    repeat, eviction = data.scenarios["exact-repeat"], data.scenarios["eviction"]
    assert (repeat.compared, repeat.differ, repeat.no_hit, repeat.unreported) == (3, 1, 1, 0)
    assert (eviction.compared, eviction.not_exercised) == (0, 3)
    assert summary.violations == [
        "1 of 4 items errored: s04 (HTTP 500)",
        "1 of 3 prompts differ on a cache hit: s03 (exact-repeat)",
    ]
    assert data.divergence_labels == {"near-tie": 0, "decisive": 0, "unknown": 1}
    assert summarize(items, CacheParityThresholds(), context).record == data  # pure


def test_sibling_shares_three_quarters_of_the_text() -> None:
    assert sibling_text("12+34=") == "12+3=4"
    assert sibling_text("7+8=") == "7+8= again"  # "=" reversed is "="


def test_earlier_turns_stop_at_the_previous_user_turn() -> None:
    system, u1, a1, u2 = (
        Message("system", "S"),
        Message("user", "x=1?"),
        Message("assistant", "1"),
        Message("user", "x+1?"),
    )
    assert earlier_turns([system, u1, a1, u2]) == (system, u1)
    a2, u3 = Message("assistant", "2"), Message("user", "x+2?")
    assert earlier_turns([system, u1, a1, u2, a2, u3]) == (system, u1, a1, u2)
    assert earlier_turns([u1, a1, u2]) == (u1,)
    assert earlier_turns([system, u1]) is None  # one user turn: nothing earlier


def record(results: list[ScenarioResult], prompt_id: str = "s01") -> CacheParityPrompt:
    return CacheParityPrompt(prompt_id, "adder@llama", "uncached", "46", [55, 57, 2], 0, results)


def test_every_generation_a_scenario_reads_is_scanned_for_degenerate_output() -> None:
    """A cache hit that stutters (every other token doubled: the FP8-KV symptom) is a counted
    finding of its scenario, read by the one reading of every generation; a scenario with its
    own reference (multi-turn's composed conversation) reads that reference too."""
    stutter = [11, 11, 12, 12, 13, 13, 14, 14, 15, 15, 16, 16, 17, 17, 18, 18]
    loop = Generation("x" * 16, stutter, "length", [-0.1] * 16)
    r = compare_scenario("exact-repeat", REF, loop, tie_margin=0.01)
    assert r.degenerate.generations == 1
    [finding] = r.degenerate.found
    assert (finding.pattern, finding.start, finding.covered) == ("stutter", 0, 16)
    assert "exact-repeat output" in finding.where
    own = compare_scenario("multi-turn", REF, REF, tie_margin=0.01, own_reference=True)
    assert (own.degenerate.generations, own.degenerate.found) == (2, [])
    failed = compare_scenario("eviction", REF, RuntimeError("gone"), tie_margin=0.01)
    assert (failed.degenerate.generations, failed.degenerate.found) == (0, [])


def test_require_hits_on_an_engine_that_reports_none_fails_instead_of_passing() -> None:
    """``require_hits`` where the engine sends no cached-token count (vllm-mlx): a gate that
    cannot be judged fails its scenario; without the gate the scenario passes, unreported."""
    r = compare_scenario(
        "exact-repeat", REF, out([55, 57, 2], "46", [-0.1, -0.2, -0.3], None), tie_margin=0.01
    )
    assert r.hit == "unreported" and r.match
    assert prompt_violations(record([r]), CacheParityThresholds()) == []
    [v] = prompt_violations(record([r]), CacheParityThresholds(require_hits=True))
    assert v.startswith("exact-repeat: the engine reports no cached tokens, so require_hits")
