"""The tokenization kind's pure facets on hand-made evidence: the judge (record, findings,
the item's text and its window of tokens), the summarize facet (counts overall and per other
target, the aggregate's text and properties) and the spec (side labels, planned items).
Every expected value is written out by hand from the inputs."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pytest_infercheck.checks.framework.items import RecordedItem
from pytest_infercheck.checks.framework.plan import ItemPlan
from pytest_infercheck.checks.framework.target import TargetContext
from pytest_infercheck.checks.tokenization.evidence import Measured, TokenEvidence
from pytest_infercheck.checks.tokenization.judge import (
    _cell,
    item_text,
    item_violations,
    judge,
    window,
)
from pytest_infercheck.checks.tokenization.records import (
    SideCounts,
    TokenizationIncomplete,
    TokenizationPrompt,
    TokenSideRecord,
    WindowRow,
)
from pytest_infercheck.checks.tokenization.spec import (
    TokenizationSpec,
    plan,
    reference_model,
    side_label,
)
from pytest_infercheck.checks.tokenization.summarize import (
    TokenItem,
    aggregate_summary,
    count_items,
    summarize,
)
from pytest_infercheck.metrics.tokenization import TokenSide
from pytest_infercheck.verdict.conduct import Conduct, RequestFailure, Unsupported
from tests.unit.factories import suite_prompt

PLAN = ItemPlan("p1", "prompt", "p1", param="b")
PROMPT = suite_prompt("p1", "ab")
LABELS = ("m@a", "m@b")


def measured(target: str, ids: list[int] | None, count: int | None) -> Measured:
    return Measured(TokenSideRecord(target, "render", "ab", ids, count), rendered_ids=True)


def evidence(
    ref: TokenSide, other: TokenSide, allow: frozenset[str] = frozenset(), **kw: Any
) -> TokenEvidence:
    return TokenEvidence(
        PROMPT,
        LABELS,
        measured(LABELS[0], list(ref.ids) if ref.ids else None, ref.size),
        measured(LABELS[1], list(other.ids) if other.ids else None, other.size),
        ref,
        other,
        allow,
        **kw,
    )


# -- judge -----------------------------------------------------------------------------------
def test_identical_ids_pass_with_no_window() -> None:
    side = TokenSide("ab", [1, 5, 6], special=frozenset({1}))
    judged = judge(PLAN, evidence(side, side), None)
    record = judged.record
    assert isinstance(record, TokenizationPrompt)
    assert judged.violations == []
    assert judged.role is None
    assert (record.status, record.cause, record.allowed) == ("identical", None, False)
    assert (record.first_difference, record.text_difference) == (None, None)
    assert record.window == []
    # One leading special token (id 1) on each side, counted into the records.
    assert record.reference == TokenSideRecord("m@a", "render", "ab", [1, 5, 6], 3, 1)
    assert record.other == TokenSideRecord("m@b", "render", "ab", [1, 5, 6], 3, 1)
    assert judged.text == (
        "prompt p1: ab\n  m@a: 3 tokens (render)\n  m@b: 3 tokens (render)\n  identical ids"
    )


def test_differing_ids_fail_naming_both_ids_and_show_the_window() -> None:
    ref = TokenSide("ab", [1, 5, 6, 7], pieces={1: "<s>", 2: "x", 3: "y"}, special=frozenset({1}))
    other = TokenSide("ab", [1, 5, 8], pieces={2: "z"}, special=frozenset({1}))
    judged = judge(PLAN, evidence(ref, other), None)
    record = judged.record
    explanation = "ids differ from position 2: m@a id 6 'x', m@b id 8 'z'"
    assert (record.status, record.cause, record.first_difference) == ("differs", "ids", 2)
    assert record.explanation == explanation
    assert [(v.text, v.source) for v in judged.violations] == [
        (f"m@b vs m@a: {explanation}", "tokenization-differs")
    ]
    # From position 2: both sides there, then only the reference (the other has ended).
    assert record.window == [WindowRow(2, 6, "x", 8, "z"), WindowRow(3, 7, "y", None, None)]
    assert judged.text == "\n".join(
        [
            "prompt p1: ab",
            "  m@a: 4 tokens (render)",
            "  m@b: 3 tokens (render)",
            f"  {explanation}",
            "    pos  m@a           m@b",
            "      2  6 'x'         8 'z'",
            "      3  7 'y'         -",
        ]
    )


def test_an_allowed_tokenizer_property_passes_and_still_says_it() -> None:
    text = "e\u0301"  # not NFC: the reference normalises it, the other does not
    ref = TokenSide(text, [1, 2])
    other = TokenSide(text, [3], nfc_ids=[1, 2])
    allowed = judge(PLAN, evidence(ref, other, frozenset({"normalization"})), None)
    assert allowed.record.cause == "normalization"
    assert allowed.record.allowed is True
    assert allowed.violations == []
    assert allowed.text is not None
    assert allowed.text.splitlines()[3].endswith(" (allowed tokenizer property)")
    # Allowing another property does not allow this one.
    other_allowed = judge(PLAN, evidence(ref, other, frozenset({"control-tokens"})), None)
    assert other_allowed.record.allowed is False
    assert [v.source for v in other_allowed.violations] == ["tokenization-differs"]
    assert "allowed" not in (other_allowed.text or "")


def test_a_cause_that_is_no_tokenizer_property_cannot_be_allowed() -> None:
    ref = TokenSide("ab", [1, 2])
    other = TokenSide("ab", [1, 3])
    judged = judge(PLAN, evidence(ref, other, frozenset({"normalization", "ids"})), None)
    assert (judged.record.cause, judged.record.allowed) == ("ids", False)
    assert len(judged.violations) == 1


def test_equal_counts_only_pass_as_count_only() -> None:
    ref = TokenSide("ab", None, count=3)
    other = TokenSide("ab", [1, 2, 3])
    judged = judge(PLAN, evidence(ref, other), None)
    assert (judged.record.status, judged.record.cause) == ("count-only", None)
    assert judged.violations == []
    assert judged.record.window == []


def test_a_failed_side_compares_nothing_and_keeps_the_servers_words() -> None:
    failure = RequestFailure("m@b", "render", "bad template", 500)
    for missing in ("reference", "other", "reference_tokens", "other_tokens"):
        ev = evidence(TokenSide("ab", [1]), TokenSide("ab", [1]), conduct=Conduct([failure]))
        setattr(ev, missing, None)
        assert not ev.complete()
        judged = judge(PLAN, ev, None)
        assert judged.role == "incomplete"
        assert judged.text == "prompt p1: nothing compared"
        assert judged.violations == []  # the failure itself fails it (the framework's rule)
        assert judged.record == TokenizationIncomplete(
            "p1", "m@a", "m@b", ["m@b: render failed: HTTP 500: bad template"]
        )
    assert evidence(TokenSide("ab", [1]), TokenSide("ab", [1])).complete()


def test_what_a_probe_found_lacking_is_on_the_record() -> None:
    lacking = Unsupported("tokenize", "the ids of m@b", probed=True, evidence="404")
    judged = judge(
        PLAN,
        evidence(
            TokenSide("ab", [1]), TokenSide("ab", [1]), conduct=Conduct(unsupported=[lacking])
        ),
        None,
    )
    assert judged.record.unsupported == ["the ids of m@b: unsupported (tokenize not offered: 404)"]


def test_the_window_holds_eight_positions_from_the_first_difference() -> None:
    ref = TokenSide(None, list(range(20)), pieces={3: "c"})
    other = TokenSide(None, [*range(3), 99, *range(4, 9)])
    rows = window(ref, other, 3)
    # Positions 3..10: the other side has 9 ids (0..8), so None from position 9 on.
    assert [r.position for r in rows] == list(range(3, 11))
    assert rows[0] == WindowRow(3, 3, "c", 99, None)
    assert rows[5] == WindowRow(8, 8, None, 8, None)
    assert rows[6] == WindowRow(9, 9, None, None, None)
    # The window stops where both sides have ended.
    short = window(TokenSide(None, [1, 2]), TokenSide(None, [1, 3, 4]), 1)
    assert short == [WindowRow(1, 2, None, 3, None), WindowRow(2, None, None, 4, None)]
    # No window without a start or without ids.
    assert window(ref, other, None) == []
    assert window(TokenSide(None, None, 3), other, 0) == []
    assert window(ref, TokenSide(None, None, 3), 0) == []
    assert window(ref, other, 0)[0] == WindowRow(0, 0, None, 0, None)


def test_a_cell_is_its_id_and_its_piece() -> None:
    assert _cell(None, "x") == "-"
    assert _cell(7, None) == "7 ?"
    assert _cell(7, "a\nb") == "7 'a\\nb'"  # repr escapes the newline


def test_the_text_widens_its_columns_for_a_long_reference_label() -> None:
    long = "a-rather-long-model@llama"
    record = TokenizationPrompt(
        "p1",
        TokenSideRecord(long, "render", None, [1], 1),
        TokenSideRecord("x@b", "usage", None, None, 2),
        "differs",
        "count",
        False,
        None,
        None,
        "counts differ",
        window=[WindowRow(0, 1, None, None, None)],
    )
    width = len(long)
    assert item_text(PROMPT, record) == "\n".join(
        [
            "prompt p1: ab",
            f"  {long}: 1 tokens (render)",
            "  x@b: 2 tokens (usage)",
            "  counts differ",
            f"    pos  {long:<{width}}  x@b",
            f"      0  {'1 ?':<{width}}  -",
        ]
    )


def test_only_a_difference_that_is_not_allowed_is_a_violation() -> None:
    side = TokenSideRecord("m@a", "render", None, [1], 1)
    other = TokenSideRecord("m@b", "render", None, [2], 1)

    def record(status: str, allowed: bool) -> TokenizationPrompt:
        return TokenizationPrompt("p", side, other, status, None, allowed, 0, None, "why")

    assert [v.text for v in item_violations(record("differs", False))] == ["m@b vs m@a: why"]
    assert item_violations(record("differs", True)) == []
    assert item_violations(record("identical", False)) == []
    assert item_violations(record("count-only", False)) == []


# -- summarize -------------------------------------------------------------------------------
def prompt_record(pid: str, status: str, cause: str | None = None, allowed: bool = False) -> Any:
    side = TokenSideRecord("m@a", "render", None, [1], 1)
    return TokenizationPrompt(pid, side, side, status, cause, allowed, None, None, status)


ITEMS: dict[str, TokenItem | str] = {
    "p1[b]": TokenItem(prompt_record("p1", "identical")),
    "p2[b]": TokenItem(prompt_record("p2", "differs", "ids"), ["m@b vs m@a: ids"]),
    "p3[b]": TokenItem(prompt_record("p3", "differs", "normalization", allowed=True)),
    "p1[c]": TokenItem(prompt_record("p1", "count-only")),
    "p2[c]": "BackendError: refused",
    "p3[c]": TokenItem(TokenizationIncomplete("p3", "m@a", "m@c"), ["m@c: render failed: x"]),
    "p4[c]": TokenItem(prompt_record("p4", "differs", "bos"), ["m@c vs m@a: bos"]),
    "p5[c]": TokenItem(prompt_record("p5", "differs", "bos"), ["m@c vs m@a: bos"]),
}


def test_items_are_counted_overall_by_cause_and_per_other_target() -> None:
    agg = count_items("m@a", {"m@a": {"v": 1}}, ITEMS)
    assert agg.target == "m@a"
    assert agg.engines == {"m@a": {"v": 1}}
    assert agg.items == 8
    assert (agg.identical, agg.count_only, agg.differing) == (1, 1, 4)
    assert agg.allowed == 1
    assert list(agg.by_cause.items()) == [("bos", 2), ("ids", 1), ("normalization", 1)]
    assert (agg.n_errors, agg.errors) == (1, {"p2[c]": "BackendError: refused"})
    assert agg.incomplete == 1
    assert agg.failed == ["p2[b]", "p2[c]", "p3[c]", "p4[c]", "p5[c]"]
    assert agg.sides == {
        "b": SideCounts(items=3, identical=1, count_only=0, differing=2, errors=0, incomplete=0),
        "c": SideCounts(items=5, identical=0, count_only=1, differing=2, errors=1, incomplete=1),
    }


def test_the_aggregate_text_and_properties_say_the_counts() -> None:
    summary = aggregate_summary(count_items("m@a", {}, ITEMS))
    assert summary.text == (
        "m@a: 1/8 identical, 1 count-only, 4 differing (bos 2, ids 1, normalization 1), "
        "1 allowed, 1 not compared, 1 errors"
    )
    assert summary.properties == [
        ("infercheck_items", 8),
        ("infercheck_identical", 1),
        ("infercheck_count_only", 1),
        ("infercheck_differing", 4),
        ("infercheck_incomplete", 1),
        ("infercheck_errors", 1),
    ]
    assert summary.violations == []
    plain = aggregate_summary(count_items("m@a", {}, {"p1[b]": ITEMS["p1[b]"]}))
    assert plain.text == "m@a: 1/1 identical, 0 count-only, 0 differing, 0 errors"


def test_summarize_counts_recorded_items_and_names_errors() -> None:
    rec = prompt_record("p1", "identical")
    items = [
        RecordedItem("prompt", "p2[b]", None, None),
        RecordedItem("prompt", "p1[b]", rec, violations=()),
        RecordedItem("prompt", "p3[b]", None, "BackendError: down"),
    ]
    context = TargetContext(target="m@a", engines={})
    summary = summarize(items, None, context)  # type: ignore[arg-type]
    data = summary.record
    assert data.errors == {"p2[b]": "error", "p3[b]": "BackendError: down"}
    assert data.failed == ["p2[b]", "p3[b]"]
    assert (data.items, data.identical, data.n_errors) == (3, 1, 2)
    assert summary.text == "m@a: 1/3 identical, 0 count-only, 0 differing, 2 errors"


# -- spec ------------------------------------------------------------------------------------
def test_an_other_sides_label_is_what_tells_it_from_the_reference() -> None:
    assert side_label("m@llama", "m@mlx") == "llama"  # same model: its backend
    assert side_label("q4@mlx", "m@mlx") == "q4"  # same backend: its model
    assert side_label("q4", "m@mlx") == "q4"  # no backend: its model
    assert side_label("q4@llama", "m@mlx") == "q4.llama"  # neither: both
    assert side_label("m", "m@mlx") == "m"


def test_one_item_per_prompt_and_other_target() -> None:
    spec = TokenizationSpec.model_validate({"targets": ["m@a", "m@b", "q@a"]})
    sides = spec.test_sides(("checks", 0))
    assert [(s.label, s.ref, s.loc) for s in sides] == [
        ("b", "m@b", ("checks", 0, "targets", 1)),
        ("q", "q@a", ("checks", 0, "targets", 2)),
    ]
    base = spec.baseline_side(("checks", 0))
    assert (base.label, base.ref, base.loc) == (None, "m@a", ("checks", 0, "targets", 0))

    @dataclass
    class Check:
        spec: TokenizationSpec

    @dataclass
    class Suite:
        prompts: list[Any]

    plans = plan(Check(spec), Suite([suite_prompt("x", "1"), suite_prompt("y", "2")]))  # type: ignore[arg-type]
    assert [p.full_name for p in plans] == ["x[b]", "x[q]", "y[b]", "y[q]"]
    assert {(p.role, p.key) for p in plans[:2]} == {("prompt", "x")}


def test_the_label_is_the_reference_targets_model() -> None:
    seen = []

    @dataclass
    class Side:
        ref: str
        loc: tuple[Any, ...]

    @dataclass
    class Target:
        model: str

    class Loaded:
        def target(self, ref: str, loc: tuple[Any, ...]) -> Target:
            seen.append((ref, loc))
            return Target("adder")

    class Check:
        def baseline_side(self, index: int) -> Side:
            return Side(f"adder@llama#{index}", ("checks", index))

    assert reference_model(Loaded(), Check(), 3) == "adder"  # type: ignore[arg-type]
    assert seen == [("adder@llama#3", ("checks", 3))]


def test_summarize_fails_the_items_with_violations_by_the_last_parameter_of_each_name() -> None:
    """Found by the mutation run: an item's violations make it failed (its record alone
    does not), rows go by the name's last ``[...]``, and the engines are kept."""
    items = [
        RecordedItem("prompt", "p1[q4][b]", prompt_record("p1", "identical"), violations=()),
        RecordedItem("prompt", "p2[q4][b]", prompt_record("p2", "identical"), violations=("x",)),
    ]
    context = TargetContext(target="m@a", engines={"m@a": {"v": 1}})
    data = summarize(items, None, context).record  # type: ignore[arg-type]
    assert data.failed == ["p2[q4][b]"]
    assert list(data.sides) == ["b"] and data.sides["b"].items == 2
    assert data.engines == {"m@a": {"v": 1}}
    assert (
        judge(PLAN, evidence(TokenSide("ab", [1]), TokenSide("ab", [1])), None).record.prompt_id
        == "p1"
    )
