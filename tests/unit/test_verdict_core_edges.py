"""Edges of the verdict core that the rule tests left open, found by the mutation run
(tests/unit/MUTATION.md): which rule a violation names (a waiver reads it), the words of the
conduct rules, a gate's refusal of a non-number and a limit a check leaves out, waivers after
one that covers nothing, an aggregate's degenerate count, errored items in name order, a
near-tie margin exactly at the limit, a comparison side's verdict and the warnings of
:mod:`~pytest_infercheck.checks.comparison.gates`. Every expected value is worked out by
hand from the inputs."""

from __future__ import annotations

import warnings
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from pytest_infercheck.backends.base import TopKRow
from pytest_infercheck.checks.comparison.gates import (
    UnexercisedFeatureWarning,
    UngatedCheckWarning,
    shown,
    side_verdict,
    warn_unexercised,
    warn_ungated,
)
from pytest_infercheck.checks.comparison.spec import DiffThresholds, Thresholds
from pytest_infercheck.checks.framework.items import (
    RecordedItem,
    errored_items,
    failed_items,
    summarize_items,
)
from pytest_infercheck.checks.framework.kind import Judged
from pytest_infercheck.checks.framework.outcome import Outcome, with_degenerate
from pytest_infercheck.checks.framework.run import item_outcome
from pytest_infercheck.metrics.degenerate import Degenerate, DegenerateScan
from pytest_infercheck.metrics.past_tie import (
    Rescored,
    ScoredToken,
    judge_after_tie,
    rescored_top_k,
)
from pytest_infercheck.verdict.conduct import (
    ColdReference,
    Conduct,
    NotExercised,
    Unsupported,
    conduct_violations,
    not_exercised_before_requests,
)
from pytest_infercheck.verdict.gate import Gate, Violation
from pytest_infercheck.verdict.waiver import Waiver, apply_waivers
from tests.unit.test_framework_rules import KIND, Evidence, Limits, Record


# -- gates: the rule a violation names -------------------------------------------------------
class KL:
    max_kl = 0.05


MAX_KL = Gate("max_kl", "kl_mean", "max", "mean KL")


def test_every_gate_violation_names_its_gate_as_its_source() -> None:
    """A waiver covers violations by their source: each kind of gate violation is named by
    the gate's key."""
    missing = MAX_KL.judge(KL(), {})
    assert missing == Violation("max_kl: not measured: no mean KL was recorded (kl_mean)", "max_kl")
    nan = MAX_KL.judge(KL(), {"kl_mean": float("nan")})
    assert nan == Violation("max_kl: mean KL is not finite (nan): fails", "max_kl")
    over = MAX_KL.judge(KL(), {"kl_mean": 0.25})
    assert over == Violation("mean KL 0.25 > max_kl 0.05", "max_kl")


def test_a_number_gate_refuses_a_yes_no_measure_naming_itself_and_the_measure() -> None:
    with pytest.raises(TypeError, match=r"^gate max_kl reads a number, kl_mean is True$"):
        MAX_KL.judge(KL(), {"kl_mean": True})


def test_a_gate_under_a_part_the_thresholds_lack_is_not_written() -> None:
    """``flips.max_rate`` on thresholds with no ``flips`` at all: no limit, judged nothing."""
    flips = Gate("flips.max_rate", "flip_rate", "max", "flip rate")
    assert flips.limit(KL()) is None
    assert flips.is_written(KL()) is False
    assert flips.judge(KL(), {"flip_rate": 1.0}) is None


# -- conduct: the words of its rules ---------------------------------------------------------
def test_the_conduct_rules_say_why_in_full_and_name_the_rule() -> None:
    conduct = Conduct(
        unsupported=[Unsupported("messages-endpoint", "messages of q4", probed=False)],
        not_exercised=[NotExercised("eviction", "capacity unknown", False)],
        cold=[ColdReference("the reference", "reported-zero", cached_tokens=3)],
    )
    assert conduct_violations(conduct) == [
        Violation(
            "messages of q4: recorded unsupported without a probe of 'messages-endpoint': a "
            "refusal or an error of a path the target was not shown to lack fails",
            "unsupported-unprobed",
        ),
        Violation(
            "eviction: recorded not exercised after a request (capacity unknown): only "
            "reasons known before any request may leave a scenario out",
            "not-exercised-late",
        ),
        Violation(
            "the reference is not cold: the engine reports 3 cached prompt tokens on it",
            "reference-not-cold",
        ),
    ]


# -- waivers ---------------------------------------------------------------------------------
def test_a_waiver_covering_nothing_leaves_the_next_waiver_its_turn() -> None:
    differ = Violation("outputs differ at token 2", "outputs-differ")
    similar = Violation("similarity 0.5 < min_similarity 0.9", "min_similarity")
    kl = Violation("mean KL 0.2 > max_kl 0.1", "max_kl")
    idle = Waiver("other", frozenset({"fault"}), True, "nothing of it here")
    near_tie = Waiver(
        "fail_on: decisive", frozenset({"outputs-differ", "min_similarity"}), True, "judged"
    )
    kept, notes = apply_waivers([differ, kl, similar], [idle, near_tie])
    assert kept == [kl]
    assert notes == [
        "fail_on: decisive waived: outputs differ at token 2; similarity 0.5 < min_similarity "
        "0.9 (judged)"
    ]


# -- an aggregate of items -------------------------------------------------------------------
def _loop(where: str) -> Degenerate:
    return Degenerate("loop", where, 1, 4, 6, 10, "token", " the", f"loop in {where}")


def test_an_aggregate_counts_its_items_degenerate_findings_after_its_text() -> None:
    items = [
        RecordedItem("prompt", "p1", Record(0.0), degenerate=DegenerateScan(2, [_loop("run 1")])),
        RecordedItem("prompt", "p2", Record(0.0)),
        RecordedItem("prompt", "p3", Record(0.0), degenerate=DegenerateScan(3, [])),
    ]
    summary = summarize_items(KIND, items, Limits(), None)
    # 2 + 3 generations scanned, one loop found (in p1).
    assert summary.degenerate is not None
    assert (summary.degenerate.generations, summary.degenerate.found) == (5, 1)
    assert summary.degenerate.items == ["p1: loop in run 1"]
    # The toy kind's summary has no text: the count is the whole text.
    assert summary.text == "degenerate: 1 of 5 generations (loop 1): p1: loop in run 1"
    assert summary.properties == [("infercheck_degenerate", 1)]


def test_an_aggregate_with_a_text_adds_the_degenerate_count_on_its_own_line() -> None:
    def said(items: Any, thresholds: Any, context: Any) -> Any:
        summary = KIND.summarize(items, thresholds, context)
        summary.text = "2 prompts"
        return summary

    kind = SimpleNamespace(summarize=said, spec=KIND.spec)
    items = [RecordedItem("prompt", "p1", Record(0.0), degenerate=DegenerateScan(4, []))]
    summary = summarize_items(kind, items, Limits(), None)  # type: ignore[arg-type]
    assert summary.text == "2 prompts\ndegenerate: 0 of 4 generations"
    assert summary.properties == [("infercheck_degenerate", 0)]


def test_no_scan_no_degenerate_count() -> None:
    summary = summarize_items(KIND, [RecordedItem("prompt", "p1", Record(0.0))], Limits(), None)
    assert summary.degenerate is None and summary.text == "" and summary.properties == []


def test_errored_items_are_named_in_name_order() -> None:
    items = [
        RecordedItem("prompt", "p9", None, "HTTP 500"),
        RecordedItem("prompt", "p1", None, "timeout"),
        RecordedItem("prompt", "p5", Record(0.0)),
    ]
    assert errored_items(items) == ["2 of 3 items errored: p1 (timeout), p9 (HTTP 500)"]


def test_exactly_five_failed_items_are_all_named_with_no_more() -> None:
    five = [RecordedItem("prompt", f"p{n}", Record(1.0), violations=("v",)) for n in range(5)]
    assert failed_items(five) == ["5 of 5 items failed: p0 (v), p1 (v), p2 (v), p3 (v), p4 (v)"]


# -- past a near-tie -------------------------------------------------------------------------
def _scored(margins: list[float]) -> Rescored:
    """Tokens whose best log-probability is -1.0 and whose own is ``margin`` below it (values
    exact in binary)."""
    return Rescored([ScoredToken(7, -1.0 - m, -1.0, 3 if m else 7) for m in margins])


def test_a_margin_exactly_at_tie_margin_is_not_decisive() -> None:
    """tie_margin 0.5, the token after the tie 0.5 nats below its engine's choice: within it."""
    after = judge_after_tie(
        [("the reference", _scored([0.0, 0.0])), ("run 2", _scored([0.0, 0.5]))], 0, 0.5
    )
    assert after.judged is True and after.decisive_at is None
    assert after.why == (
        "judged past the near-tie at token 0 by teacher forcing: 2 later tokens, each within "
        "tie_margin 0.5 of its engine's own choice"
    )
    over = judge_after_tie([("run 2", _scored([0.0, 0.75]))], 0, 0.5)
    assert (over.judged, over.decisive_at, over.margin, over.token, over.engine_token) == (
        True,
        1,
        0.75,
        7,
        3,
    )


def test_a_score_that_is_not_finite_judges_nothing() -> None:
    rows = Rescored([ScoredToken(7, -1.0, -1.0, 7), ScoredToken(7, float("-inf"), -1.0, 3)])
    after = judge_after_tie([("run 2", rows)], 0, 0.5)
    assert after.judged is False
    assert after.clean is False
    assert after.why == (
        "run 2's teacher-forced score at token 1 is not finite (chosen -inf, best -1.0): "
        "nothing judged past the near-tie at token 0"
    )


def test_a_top_k_row_that_leaves_out_the_given_token_counts_it_among_the_best() -> None:
    """The given token (9, log-probability -0.1) above every listed one: it is the best."""
    got = rescored_top_k([TopKRow(-0.1, {4: -0.5, 5: -2.0})], [9])
    assert got.tokens == [ScoredToken(9, -0.1, -0.1, 9)]


# -- a comparison side's verdict -------------------------------------------------------------
def _level(**kw: Any) -> Any:
    fields: dict[str, Any] = {
        "n_prompts": 5,
        "n_failed": 0,
        "n_identical": 2,
        "kl_n": 0,
        "kl_mean": float("nan"),
        "kl_se": float("nan"),
        "violations": [],
    }
    return SimpleNamespace(**(fields | kw))


CLEAN_RECORD: Any = SimpleNamespace(errored=[])


def test_a_side_with_no_record_fails_saying_so() -> None:
    assert side_verdict(CLEAN_RECORD, None, True) == (False, "no prompt of this side has a record")


def test_an_old_record_side_is_judged_by_the_aggregate() -> None:
    old = _level(violations=None)
    assert side_verdict(CLEAN_RECORD, old, False) == (False, "the aggregate failed")
    assert side_verdict(CLEAN_RECORD, old, False, ["mean KL 0.2 > max_mean_kl 0.1"]) == (
        False,
        "mean KL 0.2 > max_mean_kl 0.1",
    )


def test_a_side_with_failed_items_fails_counting_them() -> None:
    assert side_verdict(CLEAN_RECORD, _level(n_failed=2), True) == (False, "2/5 items failed")
    errored: Any = SimpleNamespace(errored=["1 of 5 items errored: p3 (down)"])
    assert side_verdict(errored, _level(n_failed=2), True) == (
        False,
        "1 of 5 items errored: p3 (down)",
    )


def test_a_passing_side_shows_its_mean_kl_or_its_identical_outputs() -> None:
    assert side_verdict(CLEAN_RECORD, _level(), True) == (True, "identical outputs 2/5")
    one = _level(kl_n=1, kl_mean=0.0123, kl_se=0.004)
    assert side_verdict(CLEAN_RECORD, one, True) == (True, "mean KL 0.0123 ± 0.004")


# -- the comparison's warnings ---------------------------------------------------------------
def test_a_path_outside_the_working_directory_is_shown_whole(tmp_path: Path) -> None:
    outside = Path("/nonexistent-infercheck-dir/infercheck.yaml")
    assert shown(outside) == "/nonexistent-infercheck-dir/infercheck.yaml"


def _from_caller(filename: str) -> bool:
    """Whether a warning is attributed to the code that called the warning function
    (``stacklevel=2``): this test, or, in a mutation run, mutmut's trampoline, which calls
    the function in between."""
    return filename == __file__ or filename.endswith("mutmut/mutation/trampoline.py")


class _NoLines:
    def line_of(self, loc: tuple[str | int, ...]) -> None:
        return None


class _Loaded:
    """What :func:`warn_ungated` reads of a loaded matrix (weakly referenced)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.source = _NoLines()


def test_an_ungated_warning_without_a_line_names_the_file_and_points_at_its_caller(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    loaded: Any = _Loaded(tmp_path / "m.yaml")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        warn_ungated(loaded, 0, "compare", Thresholds())
    (warning,) = caught
    assert issubclass(warning.category, UngatedCheckWarning)
    assert str(warning.message).startswith("m.yaml: checks[0] (compare) is ungated: ")
    # stacklevel 2: the warning is attributed to the code that asked for it.
    assert _from_caller(warning.filename), warning.filename


def test_an_unexercised_feature_warns_unless_it_fails_the_item() -> None:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        warn_unexercised("r01[q4]", ["spec decoding: 0 drafts", "kv q8: off"], Thresholds())
    (warning,) = caught
    assert issubclass(warning.category, UnexercisedFeatureWarning)
    assert str(warning.message) == "r01[q4]: unexercised: spec decoding: 0 drafts; kv q8: off"
    assert _from_caller(warning.filename), warning.filename
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        warn_unexercised("r01[q4]", [], Thresholds())
        warn_unexercised("r01[q4]", ["kv q8: off"], DiffThresholds(require_engaged=True))
    assert issubclass(UnexercisedFeatureWarning, pytest.PytestWarning)


# -- an item's outcome -------------------------------------------------------------------------
def test_an_item_the_gates_are_not_about_is_not_held_to_them() -> None:
    """A sweep's self-check, a golden recording (``gated=False``): their evidence has none
    of the gates' measures, which would otherwise fail as not measured."""
    limits = Limits(max_drift=0.1)
    ungated = item_outcome(KIND, Judged(Record(None), gated=False), Evidence({}), limits)
    assert ungated.violations == []
    gated = item_outcome(KIND, Judged(Record(None)), Evidence({}), limits)
    assert gated.violations == ["max_drift: not measured: no logprob drift was recorded (drift)"]


def test_an_outcome_keeps_the_judges_words_entries_and_scan() -> None:
    scan = DegenerateScan(2, [])
    judged = Judged(
        Record(None), text="the judge's own words", golden_entries=[{"id": "p1"}], degenerate=scan
    )
    out = item_outcome(KIND, judged, Evidence({}), Limits())
    assert out.text == "the judge's own words"
    assert (out.golden_entries, out.degenerate) == ([{"id": "p1"}], scan)
    # Empty words and a note: the note alone.
    skipped = not_exercised_before_requests("eviction", "capacity unknown")
    quiet = Judged(Record(None), text="")
    noted = item_outcome(
        KIND, quiet, Evidence({}, Conduct(not_exercised=[skipped, skipped])), Limits()
    )
    assert (
        noted.text
        == "eviction: not exercised (capacity unknown)\neviction: not exercised (capacity unknown)"
    )


# -- degenerate output on an item --------------------------------------------------------------
def test_degenerate_findings_fail_an_item_only_under_fail_on_degenerate() -> None:
    """Two loops found in three generations: said in the text and counted in a property;
    each a violation under ``fail_on_degenerate: true`` only."""
    scan = DegenerateScan(3, [_loop("run 1"), _loop("run 2")])
    said = ["degenerate output: loop in run 1", "degenerate output: loop in run 2"]
    failing = with_degenerate(Outcome(["x"], "words", None, [], degenerate=scan), True)
    assert failing.violations == ["x", *said]
    assert failing.text == "\n".join(["words", *said])
    assert failing.properties == [("infercheck_degenerate", 2)]
    shown = with_degenerate(Outcome([], "", None, [], degenerate=scan), False)
    assert shown.violations == [] and shown.text == "\n".join(said)
    clean = with_degenerate(Outcome([], "words", None, [], degenerate=DegenerateScan(3, [])), True)
    assert (clean.violations, clean.text, clean.properties) == (
        [],
        "words",
        [("infercheck_degenerate", 0)],
    )
