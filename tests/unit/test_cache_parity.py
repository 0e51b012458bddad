"""cache-parity's pure parts: a scenario against its reference, the measures its gates read,
the judge and the framework's rules on an item's evidence (failed requests, cold references,
gates, waivers), and ``summarize`` over hand-built records. Numbers are worked by hand."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from pytest_infercheck.backends import Generation
from pytest_infercheck.backends.base import Message
from pytest_infercheck.checks.cache_parity.compare import compare_scenario
from pytest_infercheck.checks.cache_parity.evidence import PromptEvidence, ScenarioEvidence
from pytest_infercheck.checks.cache_parity.gather import earlier_turns, sibling_text
from pytest_infercheck.checks.cache_parity.judge import judge
from pytest_infercheck.checks.cache_parity.records import (
    CacheParityContext,
    CacheParityPrompt,
    ScenarioResult,
    hit_of,
)
from pytest_infercheck.checks.cache_parity.spec import CacheParityThresholds, unmeasurable
from pytest_infercheck.checks.cache_parity.summarize import summarize
from pytest_infercheck.checks.framework.items import RecordedItem, summarize_items
from pytest_infercheck.checks.framework.outcome import Outcome
from pytest_infercheck.checks.framework.plan import ItemPlan
from pytest_infercheck.checks.framework.run import item_outcome
from pytest_infercheck.checks.registry import kind_named
from pytest_infercheck.config import check_measurable, load_matrix
from pytest_infercheck.verdict.conduct import (
    ColdReference,
    Conduct,
    RequestFailure,
    not_exercised_before_requests,
)
from pytest_infercheck.verdict.measure import Finding, Reading, Unmeasured
from pytest_infercheck.yamlpos import SourceError

KIND = kind_named("cache-parity")
assert KIND is not None
REF = Generation("46", [55, 57, 2], "stop", [-0.1, -0.2, -0.3])
UNCACHED = ColdReference("the reference", "uncached-request", 0)


def out(ids: list[int], text: str, lps: list[float] | None, cached: int | None = 6) -> Generation:
    g = Generation(text, ids, "stop" if ids[-1:] == [2] else "length", lps)
    g.cached_tokens = cached
    return g


SAME = out([55, 57, 2], "46", [-0.1, -0.2, -0.3])


def evidence(
    *scenarios: ScenarioEvidence,
    reference: Generation | None = REF,
    cold: ColdReference | None = UNCACHED,
    failures: list[RequestFailure] | None = None,
    kind: str = "uncached",
) -> PromptEvidence:
    conduct = Conduct(failures=list(failures or []), cold=[cold] if cold is not None else [])
    conduct.not_exercised = [
        not_exercised_before_requests(s.scenario, s.note or "")
        for s in scenarios
        if not s.exercised
    ]
    return PromptEvidence("s01", "adder@llama", kind, reference, list(scenarios), conduct)


def outcome(ev: PromptEvidence, **thresholds: object) -> Outcome:
    """The item as the framework makes it: the judge, then conduct, gates and waivers."""
    t = CacheParityThresholds(**thresholds)  # type: ignore[arg-type]
    plan = ItemPlan("s01", "prompt", "s01")
    return item_outcome(KIND, judge(plan, ev, t), ev, t)  # type: ignore[arg-type]


def test_hit_of_names_hits_misses_and_silence() -> None:
    assert [hit_of(5), hit_of(0), hit_of(None)] == ["hit", "no-hit", "unreported"]


def test_identical_scenario_matches_and_its_logprob_difference_is_gated() -> None:
    r = compare_scenario(
        "exact-repeat", REF, out([55, 57, 2], "46", [-0.1, -0.25, -0.3]), tie_margin=0.01
    )
    assert r.match and r.hit == "hit" and r.cached_tokens == 6
    assert math.isclose(r.max_logprob_diff or 0, 0.05)
    ev = evidence(
        ScenarioEvidence("exact-repeat", output=out([55, 57, 2], "46", [-0.1, -0.25, -0.3]))
    )
    diff = ev.measures["max_logprob_diff"]
    assert isinstance(diff, Reading) and diff.qualifier == "exact-repeat"
    assert math.isclose(diff.value, 0.05)
    assert outcome(ev, logprob_tolerance=0.1).violations == []
    # |-0.2 - -0.25| = 0.05 > 0.01, written: the framework's gate, naming the scenario.
    assert outcome(ev, logprob_tolerance=0.01).violations == [
        "logprob difference from the reference where the tokens agree (exact-repeat) 0.05 > "
        "logprob_tolerance 0.01"
    ]
    # The default (1e-4) judges it too, where measured.
    assert outcome(ev).violations == [
        "logprob difference from the reference where the tokens agree (exact-repeat) 0.05 > "
        "logprob_tolerance 0.0001"
    ]


def test_without_logprobs_a_written_tolerance_fails_and_the_default_says_so() -> None:
    """mlx_lm.server with ``logprobs: false``, vllm-mlx: nothing to compare the tolerance
    with. Written, the gate is not measured and fails; at its default, the item says its
    logprobs were not compared."""
    ref = Generation("46", None, "stop", None)
    same = out([55, 57, 2], "46", None)
    same.token_ids = None
    ev = evidence(ScenarioEvidence("exact-repeat", output=same), reference=ref)
    said = "the engine returned no logprobs on the reference, the exact-repeat output"
    assert ev.measures["max_logprob_diff"] == Unmeasured(said)
    assert outcome(ev, logprob_tolerance=0.0).violations == [
        f"logprob_tolerance: not measured: {said}"
    ]
    passed = outcome(ev)
    assert passed.violations == []
    assert f"logprobs not compared: {said}" in passed.text


def test_one_output_without_logprobs_leaves_a_written_tolerance_unmeasured() -> None:
    """The exact repeat has logprobs (difference 0), the shared-prefix output none: the
    largest difference is not known, so a written tolerance fails naming the output."""
    bare = out([55, 57, 2], "46", None)
    ev = evidence(
        ScenarioEvidence("shared-prefix", output=bare),
        ScenarioEvidence("exact-repeat", output=SAME),
    )
    assert outcome(ev, logprob_tolerance=0.0).violations == [
        "logprob_tolerance: not measured: the engine returned no logprobs on the shared-prefix "
        "output"
    ]


def test_truncated_and_empty_outputs_are_named() -> None:
    cut = compare_scenario("exact-repeat", REF, out([55], "4", [-0.1]), tie_margin=0.01)
    assert cut.truncated and cut.first_divergence == 1
    [v] = outcome(
        evidence(ScenarioEvidence("exact-repeat", output=out([55], "4", [-0.1])))
    ).violations
    assert v.startswith("exact-repeat: truncated output, first at token 1: '46' vs '4'")
    empty = compare_scenario("shared-prefix", REF, out([2], "", [-0.5]), tie_margin=0.01)
    assert not empty.truncated  # an output that diverges is not a truncation
    texts = outcome(
        evidence(ScenarioEvidence("shared-prefix", output=out([2], "", [-0.5])))
    ).violations
    assert texts[0].startswith("shared-prefix: empty generation: the shared-prefix output")


NEAR_REF = Generation(
    "46", [55, 57, 2], "stop", [-0.1, -0.70, -0.3], [{55: -0.1}, {57: -0.70, 58: -0.705}, {2: -0.3}]
)
NEAR = Generation(
    "45", [55, 58, 2], "stop", [-0.1, -0.69, -0.3], [{55: -0.1}, {58: -0.69, 57: -0.695}, {2: -0.3}]
)


def test_a_near_tie_is_labelled_and_fail_on_decisive_is_not_applied_to_what_was_not_judged() -> (
    None
):
    """Margins at token 1: 0.005 each side (<= tie_margin 0.01): a near-tie. ``fail_on:
    decisive`` would waive it only once the output after it is judged, which cache-parity
    cannot do: the item fails and says why."""
    r = compare_scenario("concurrent", NEAR_REF, NEAR, tie_margin=0.01)
    assert r.tie is not None and r.tie.divergence_label == "near-tie" and r.tie.token == 1
    assert [round(m or 0, 6) for m in r.tie.margins] == [0.005, 0.005]
    ev = evidence(ScenarioEvidence("concurrent", output=NEAR), reference=NEAR_REF)
    strict = outcome(ev)
    assert strict.violations[0].startswith(
        "concurrent: output differs from the reference, near-tie at token 1"
    )
    waived = outcome(ev, fail_on="decisive")
    assert waived.violations[0] == strict.violations[0]
    assert "fail_on: decisive not applied: concurrent parts from the reference at a near-tie " in (
        waived.text
    )


def test_no_hit_is_shown_and_fails_only_with_require_hits() -> None:
    miss = out([55, 57, 2], "46", [-0.1, -0.2, -0.3], 0)
    ev = evidence(
        ScenarioEvidence("exact-repeat", output=miss),
        ScenarioEvidence("eviction", output=out([55, 57, 2], "46", [-0.1, -0.2, -0.3], 0)),
    )
    assert ev.measures["cache_hits"] == Finding(
        False, "exact-repeat: no cache hit (0 cached tokens)"
    )
    shown = outcome(ev)
    assert shown.violations == []
    assert "no cache hit: exact-repeat did not exercise the cache" in shown.text
    assert outcome(ev, require_hits=True).violations == [
        "a cache hit on every compared scenario that expects one: exact-repeat: no cache hit "
        "(0 cached tokens) (require_hits: True)"
    ]
    evicted = evidence(
        ScenarioEvidence("eviction", output=miss), ScenarioEvidence("exact-repeat", output=SAME)
    )
    assert outcome(evicted, require_hits=True).violations == []


def test_require_hits_on_an_engine_that_reports_none_fails_instead_of_passing() -> None:
    """``require_hits`` where the engine sends no cached-token count (vllm-mlx): the gate is
    not measured and fails; without the gate the scenario passes, unreported."""
    silent = out([55, 57, 2], "46", [-0.1, -0.2, -0.3], None)
    ev = evidence(ScenarioEvidence("exact-repeat", output=silent))
    assert outcome(ev).violations == []
    assert outcome(ev, require_hits=True).violations == [
        "require_hits: not measured: the engine reports no cached tokens (exact-repeat)"
    ]


def test_a_nan_logprob_difference_fails_closed() -> None:
    nan = out([55, 57, 2], "46", [-0.1, math.nan, -0.3])
    texts = outcome(
        evidence(ScenarioEvidence("exact-repeat", output=nan)), logprob_tolerance=1.0
    ).violations
    assert any("non-finite logprob" in t for t in texts)
    assert (
        "logprob_tolerance: logprob difference from the reference where the tokens agree "
        "(exact-repeat) is not finite (nan): fails" in texts
    )


# -- failed requests: never "not exercised" ------------------------------------------------
HTTP_500 = RequestFailure(
    "multi-turn", "the first turn", "backend 'srv': POST /completion -> HTTP 500: boom", 500
)


def test_a_failed_request_of_a_scenario_fails_the_item_with_the_servers_message() -> None:
    """The bug this replaces: a 500 while setting up multi-turn became "not exercised" and
    the item passed, even under ``require_hits``. Now the scenario is failed (not compared,
    not "not exercised") and the item fails naming the server's answer."""
    failed = ScenarioEvidence("multi-turn", error=HTTP_500.text())
    ev = evidence(ScenarioEvidence("exact-repeat", output=SAME), failed, failures=[HTTP_500])
    result = outcome(ev, require_hits=True)
    assert result.violations == [
        "multi-turn: the first turn failed: HTTP 500: backend 'srv': POST /completion -> "
        "HTTP 500: boom"
    ]
    [multi] = [r for r in result.data.scenarios if r.scenario == "multi-turn"]
    assert multi.exercised and multi.match is False and multi.error == HTTP_500.text()
    assert "multi-turn: the first turn failed: HTTP 500" in result.text


def test_a_failed_reference_fails_the_item_and_compares_nothing() -> None:
    failure = RequestFailure("the reference", "its request", "HTTP 503: busy", 503)
    ev = evidence(
        ScenarioEvidence("exact-repeat"),
        reference=None,
        cold=None,
        failures=[failure],
    )
    ev.reference_error = failure.text()
    result = outcome(ev, logprob_tolerance=0.0)
    assert result.violations == [
        "the reference: its request failed: HTTP 503: HTTP 503: busy",
        "logprob_tolerance: not measured: the reference request failed",
    ]
    assert result.data.scenarios[0].error == "not compared: the reference request failed"


def test_a_scenario_left_out_before_any_request_passes_and_says_why() -> None:
    ev = evidence(
        ScenarioEvidence("exact-repeat", output=SAME),
        ScenarioEvidence(
            "concurrent", exercised=False, note="the backend takes one request at a time"
        ),
    )
    result = outcome(ev)
    assert result.violations == []
    assert "concurrent: not exercised (the backend takes one request at a time)" in result.text


# -- cold references -----------------------------------------------------------------------
def test_a_reference_the_engine_reports_warm_fails() -> None:
    """An engine without an uncached request (mlx_lm.server): the reference was sent first,
    and the engine reports 5 of its prompt tokens served from the cache: not cold."""
    warm = ColdReference("the reference", "reported-zero", 5, sent_first=True)
    result = outcome(
        evidence(ScenarioEvidence("exact-repeat", output=SAME), cold=warm, kind="first-request")
    )
    assert result.violations == [
        "the reference is not cold: the engine reports 5 cached prompt tokens on it"
    ]


def test_a_reference_sent_first_that_reuses_less_than_its_prompt_served_whole_is_cold() -> None:
    """Sent first on an engine without an uncached request: 24 cached tokens on the reference,
    112 on its prompt served whole (mlx_lm.server's counts for mt001-like chat prompts): only
    the prefix it shares with prompts sent before it. 112 of 112: a prompt the engine held."""
    part = ColdReference("the reference", "reported-zero", 24, sent_first=True, whole=112)
    result = outcome(evidence(ScenarioEvidence("exact-repeat", output=SAME), cold=part))
    assert result.violations == []
    assert result.data.reference_cold == (
        "the reference sent first, 24 cached tokens reported, fewer than the 112 on its prompt "
        "served whole: only a prefix it shares with prompts sent before it (the engine has no "
        "uncached request)"
    )
    held = ColdReference("the reference", "reported-zero", 112, sent_first=True, whole=112)
    assert outcome(
        evidence(ScenarioEvidence("exact-repeat", output=SAME), cold=held)
    ).violations == [
        "the reference is not cold: the engine reports 112 cached prompt tokens on it, as many "
        "as on its prompt served whole (112)"
    ]
    late = ColdReference("the reference", "reported-zero", 24, sent_first=False, whole=112)
    assert outcome(
        evidence(ScenarioEvidence("exact-repeat", output=SAME), cold=late)
    ).violations == [
        "the reference is not cold: the engine reports 24 cached prompt tokens on it, as many "
        "as on its prompt served whole (112)"
    ]


def test_how_a_cold_reference_was_ensured_is_said() -> None:
    cold = ColdReference("the reference", "reported-zero", 0, sent_first=True)
    result = outcome(
        evidence(ScenarioEvidence("exact-repeat", output=SAME), cold=cold, kind="first-request")
    )
    assert result.violations == []
    assert result.data.reference_cold == "the reference sent first, 0 cached tokens reported"
    assert "the reference sent first, 0 cached tokens reported" in result.text
    unreported = ColdReference("the reference", "sent-first", None, sent_first=True)
    text = outcome(evidence(ScenarioEvidence("exact-repeat", output=SAME), cold=unreported)).text
    assert "the reference sent first, no cached-token count reported" in text
    late = ColdReference("the reference", "sent-first", None, sent_first=False)
    assert outcome(
        evidence(ScenarioEvidence("exact-repeat", output=SAME), cold=late)
    ).violations == [
        "the reference is not shown cold: it was sent after requests that could warm the "
        "cache, and the engine reports no cached-token count"
    ]
    assert "the reference cold by an uncached request" in outcome(evidence()).text


# -- the aggregate -------------------------------------------------------------------------
def record(results: list[ScenarioResult], prompt_id: str = "s01") -> CacheParityPrompt:
    return CacheParityPrompt(prompt_id, "adder@llama", "uncached", "46", [55, 57, 2], 0, results)


def test_summarize_counts_each_scenario_and_leaves_failed_items_to_the_framework() -> None:
    same = compare_scenario("exact-repeat", REF, SAME, tie_margin=0.01)
    miss = compare_scenario(
        "exact-repeat", REF, out([55, 57, 2], "46", [-0.1, -0.2, -0.3], 0), tie_margin=0.01
    )
    bad = compare_scenario(
        "exact-repeat", REF, out([55, 58, 2], "45", [-0.1, -0.2, -0.3]), tie_margin=0.01
    )
    skipped = ScenarioResult("eviction", False, "the cache's capacity is not known")
    failed = ScenarioResult("multi-turn", True, match=False, error=HTTP_500.text())
    items = [
        RecordedItem("prompt", "s01", record([same, skipped], "s01")),
        RecordedItem("prompt", "s02", record([miss, skipped], "s02")),
        RecordedItem(
            "prompt", "s03", record([bad, skipped], "s03"), violations=("exact-repeat: x",)
        ),
        RecordedItem("prompt", "s05", record([same, failed], "s05"), violations=(HTTP_500.text(),)),
        RecordedItem("prompt", "s04", None, "HTTP 500"),
    ]
    context = CacheParityContext("adder@llama", {})
    summary = summarize_items(KIND, items, CacheParityThresholds(), context)  # type: ignore[arg-type]
    data = summary.record
    assert (data.prompts, data.parity_prompts, data.reference_kind) == (4, 2, "uncached")
    repeat, eviction = data.scenarios["exact-repeat"], data.scenarios["eviction"]
    assert (repeat.compared, repeat.differ, repeat.no_hit, repeat.unreported) == (4, 1, 1, 0)
    assert (eviction.compared, eviction.not_exercised) == (0, 3)
    multi = data.scenarios["multi-turn"]
    assert (multi.compared, multi.failed, multi.not_exercised) == (0, 1, 0)
    assert summary.violations == [
        "1 of 5 items errored: s04 (HTTP 500)",
        "2 of 5 items failed: s03 (exact-repeat: x), s05 (" + HTTP_500.text() + ")",
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


def test_every_generation_a_scenario_reads_is_scanned_for_degenerate_output() -> None:
    """A cache hit that stutters (every other token doubled: the FP8-KV symptom) is a counted
    finding of its scenario, read by the one reading of every generation; a scenario with its
    own reference (multi-turn's composed conversation) reads that reference too, faults
    included."""
    stutter = [11, 11, 12, 12, 13, 13, 14, 14, 15, 15, 16, 16, 17, 17, 18, 18]
    loop = Generation("x" * 16, stutter, "length", [-0.1] * 16)
    r = compare_scenario("exact-repeat", REF, loop, tie_margin=0.01)
    assert r.degenerate.generations == 1
    [finding] = r.degenerate.found
    assert (finding.pattern, finding.start, finding.covered) == ("stutter", 0, 16)
    assert "exact-repeat output" in finding.where
    own = compare_scenario("multi-turn", REF, REF, tie_margin=0.01, own_reference=True)
    assert (own.degenerate.generations, own.degenerate.found) == (2, [])
    broken = Generation("46", [55, 57, 2], "stop", [-0.1, math.nan, -0.3])
    own = compare_scenario("multi-turn", broken, broken, tie_margin=0.01, own_reference=True)
    assert [f.where for f in own.faults] == ["the scenario's reference", "the multi-turn output"]


# -- written gates the matrix makes unmeasurable ---------------------------------------------
MATRIX = """\
models: {{adder: {{path: ./adder}}}}
backends: {{srv: {{kind: {kind}, url: 'http://127.0.0.1:9'{options}}}}}
suites: [addition]
checks:
  - cache-parity: adder@srv
    logprob_tolerance: 0.001
    require_hits: true
"""


@pytest.mark.parametrize(
    ("kind", "options", "expected"),
    [
        (
            "vllm-mlx",
            "",
            {
                "logprob_tolerance": "backend 'srv' (vllm-mlx) returns no logprobs",
                "require_hits": "backend 'srv' (vllm-mlx) reports no cached tokens",
            },
        ),
        ("openai", ", logprobs: false", {"logprob_tolerance": "backend 'srv' has logprobs: false"}),
        ("openai", "", {}),
    ],
)
def test_a_written_gate_the_matrix_makes_unmeasurable_is_an_error_at_its_line(
    tmp_path: Path, kind: str, options: str, expected: dict[str, str]
) -> None:
    path = tmp_path / "infercheck.yaml"
    path.write_text(MATRIX.format(kind=kind, options=options))
    loaded = load_matrix(path)
    check = loaded.matrix.checks[0]
    found = unmeasurable(loaded, check, 0)
    assert found == {k: f"not measured on any item: {why}" for k, why in expected.items()}
    if not expected:
        check_measurable(loaded, check, 0)
        return
    with pytest.raises(SourceError) as error:
        check_measurable(loaded, check, 0)
    lines = {"logprob_tolerance": 6, "require_hits": 7}
    for key, why in expected.items():
        assert f"infercheck.yaml:{lines[key]}" in str(error.value)
        assert why in str(error.value)


def test_a_first_turn_the_cache_changes_fails_the_composed_multi_turn() -> None:
    """A single-turn prompt's multi-turn: the answer written into the conversation is the
    first turn uncached; the first turn through the cache must equal it (a cache that
    changed it would otherwise feed both the conversation's reference and the later turn
    alike, unseen). Its logprobs count toward logprob_tolerance too."""
    cold = Generation("46", [55, 57, 2], "stop", [-0.1, -0.2, -0.3])
    changed = out([55, 58, 2], "45", [-0.1, -0.2, -0.3])
    own = Generation("7", [60, 2], "stop", [-0.5, -0.1])
    composed = ScenarioEvidence(
        "multi-turn", output=own, reference=own, companion="p2", first_turn=(cold, changed)
    )
    result = outcome(evidence(composed))
    assert result.violations[0] == (
        "multi-turn: the first turn through the cache differs from it uncached: '46' vs '45'"
    )
    [multi] = result.data.scenarios
    assert (multi.first_turn, multi.first_turn_cached, multi.first_turn_match) == (
        "46",
        "45",
        False,
    )
    drifted = out([55, 57, 2], "46", [-0.1, -0.25, -0.3])
    same = ScenarioEvidence("multi-turn", output=own, reference=own, first_turn=(cold, drifted))
    # |-0.2 - -0.25| = 0.05 on the first turn: the largest difference of the item
    assert outcome(evidence(same), logprob_tolerance=0.01).violations == [
        "logprob difference from the reference where the tokens agree (multi-turn's first "
        "turn) 0.05 > logprob_tolerance 0.01"
    ]
