"""The comparison family's typed records (compare, sweep, diff): each round-trips through its
plain JSON form, keeps the JSON keys of the results files, derives its derived numbers, and
the views, the terminal table and the shard merge read them back (or fall back)."""

from __future__ import annotations

import copy
import dataclasses
import math
from typing import Any

import pytest

from pytest_infercheck.checks.comparison import COMPARE, DIFF, SWEEP
from pytest_infercheck.checks.comparison.aggregate import (
    ComparisonAggregateRecord,
    SuiteAggregate,
    SweepAggregateRecord,
    aggregate,
    aggregate_violations,
    self_check_level,
    sweep_cliff,
)
from pytest_infercheck.checks.comparison.judge import item_verdict
from pytest_infercheck.checks.comparison.present import (
    FLIP_BARS,
    KL_DISTRIBUTION,
    MEASURES,
    level_charts,
    side_columns,
)
from pytest_infercheck.checks.comparison.prompt import PromptComparison, SelfCheckRecord
from pytest_infercheck.checks.comparison.summarize import SweepContext, summarize_sweep
from pytest_infercheck.checks.comparison.terminal import cliff_lines, summary_lines, summary_rows
from pytest_infercheck.checks.framework.items import RecordedItem, summarize_items
from pytest_infercheck.checks.registry import kind_named
from pytest_infercheck.golden.record import GoldenRecording, PromptRecording, SuiteRecording
from pytest_infercheck.records import load_record, plain_data
from pytest_infercheck.report.merge import summarized
from pytest_infercheck.report.views import item_detail
from pytest_infercheck.specs import Thresholds
from tests.htmldom import parse

from .factories import prompt_comparison

FLIPPED = prompt_comparison("a", [0.1, 0.3], [True, False], [-0.2, 0.0], "correct_to_wrong")
UNCHANGED = prompt_comparison("b", [0.2], [True], [0.1])
TEXT_ONLY = dataclasses.replace(
    prompt_comparison("c", [], [], []),
    method="text",
    base_ids=None,
    test_ids=None,
    first_divergence=None,
    answer_kind=None,
    reference=None,
    base_answer=None,
    test_answer=None,
)
LEVEL = aggregate([FLIPPED, UNCHANGED], Thresholds(max_kl_position=0.5))
ENGINES = {"bf16@local": {"kind": "mlx-lm", "model": "/m/bf16"}, "q4@local": {"kind": "mlx-lm"}}
COMPARE_AGGREGATE = ComparisonAggregateRecord(
    "compare", "addition", [LEVEL], ENGINES, tests=["q4@local"]
)
CLIFF, STEPS = sweep_cliff(
    self_check_level([], 2),
    [LEVEL],
    [
        frozenset(
            r.prompt_id
            for r in (FLIPPED, UNCHANGED)
            if item_verdict(r, Thresholds(max_mean_kl=0.1))
        )
    ],
    Thresholds(max_mean_kl=0.1),
)
SWEEP_AGGREGATE = SweepAggregateRecord(
    "sweep",
    "addition",
    [LEVEL],
    ENGINES,
    CLIFF,
    cliff_alpha=0.05,
    cliff_steps=STEPS,
    tests=["q4@local"],
    self_check=True,
)
PROMPT_RECORDING = PromptRecording(
    golden="adder-v1",
    file="goldens/adder-v1.json",
    target="adder@local",
    engines={"adder@local": {"kind": "mlx-lm"}},
    prompt_id="s01",
    text="46",
    token_ids=[52, 54, 2],
    finish_reason="stop",
    positions=3,
)
SUITE_RECORDING = SuiteRecording(
    golden="adder-v1",
    file="goldens/adder-v1.json",
    target="adder@local",
    engines={"adder@local": {"kind": "mlx-lm"}},
    prompts=4,
)

RECORDS: list[Any] = [
    FLIPPED,
    UNCHANGED,
    TEXT_ONLY,
    LEVEL,
    COMPARE_AGGREGATE,
    SWEEP_AGGREGATE,
    SelfCheckRecord([], []),
    SelfCheckRecord(["s01: token ids differ from token 3"], ["s01"]),
    dataclasses.replace(COMPARE_AGGREGATE, ungated=True, replay=["golden:x recorded from ..."]),
    PROMPT_RECORDING,
    SUITE_RECORDING,
]

# The JSON keys of each record as the results files of version 2 have them (before the
# records were typed): changing one is a change of the results format.
PROMPT_KEYS = [
    "prompt_id",
    "prompt_text",
    "baseline",
    "test",
    "method",
    "base_text",
    "test_text",
    "base_ids",
    "test_ids",
    "base_finish",
    "test_finish",
    "first_divergence",
    "similarity",
    "severity",
    "kl_per_position",
    "same_top",
    "delta_p",
    "answer_kind",
    "reference",
    "base_answer",
    "test_answer",
    "flip",
    "base_correct",
    "sameness",
    "templated",
    "base_reasoning_chars",
    "test_reasoning_chars",
    "problems",
    "degenerate",
    "divergence_origin",
    "origin_detail",
    "prompt_inputs",
    "base_batch",
    "test_batch",
    "scoring",
    "margins",
    "margins_exact",
    "noise_floor",
    "divergence_label",
    "judged_past",
    "kl_mean",
    "kl_max",
    "same_top_rate",
    "is_flip",
]
LEVEL_KEYS = [
    "baseline",
    "test",
    "n_prompts",
    "n_failed",
    "n_identical",
    "kl_n",
    "kl_mean",
    "kl_se",
    "kl_median",
    "kl_p90",
    "kl_p99",
    "kl_max",
    "same_top_rate",
    "delta_p_mean",
    "delta_p_rms",
    "n_answered",
    "flips",
    "n_flips",
    "flip_rate",
    "flip_rate_low",
    "flip_rate_high",
    "mcnemar_p",
    "severities",
    "methods",
    "divergence_labels",
    "noise_floor",
    "problems",
    "answer_matrix",
    "violations",
]


def record_of(kind: str, role: str, data: dict[str, Any]) -> dict[str, Any]:
    return {
        "check": f"{kind}(bf16)",
        "kind": kind,
        "suite": "addition",
        "role": role,
        "name": role,
        "thresholds": {},
        "violations": [],
        "data": data,
    }


# -- round trips and the JSON keys ---------------------------------------------------------------
@pytest.mark.parametrize("record", RECORDS, ids=lambda r: type(r).__name__)
def test_every_record_round_trips_through_its_plain_form(record: Any) -> None:
    plain = plain_data(record)
    assert load_record(type(record), plain) == record
    assert plain_data(load_record(type(record), plain)) == plain


def test_nan_statistics_are_null_in_json_and_nan_again_when_read() -> None:
    level = aggregate([TEXT_ONLY], Thresholds())  # no positions: the KL statistics are NaN
    assert math.isnan(level.kl_mean) and level.kl_n == 0
    plain = plain_data(level)
    assert plain["kl_mean"] is None and plain["kl_p99"] is None
    back = load_record(SuiteAggregate, plain)
    assert math.isnan(back.kl_mean) and math.isnan(back.kl_max)
    assert plain_data(back) == plain
    record = dataclasses.replace(FLIPPED, kl_per_position=[0.1, math.inf])
    assert plain_data(record)["kl_per_position"] == [0.1, None]
    assert math.isnan(load_record(PromptComparison, plain_data(record)).kl_per_position[1])


def test_json_keys_are_those_of_the_results_format() -> None:
    assert list(plain_data(FLIPPED)) == PROMPT_KEYS
    assert list(plain_data(LEVEL)) == LEVEL_KEYS
    common = ["check", "suite", "levels", "engines", "tests", "ungated"]
    assert list(plain_data(COMPARE_AGGREGATE)) == common
    assert list(plain_data(SWEEP_AGGREGATE)) == [
        *common,
        *["cliff", "cliff_alpha", "cliff_steps", "self_check"],
    ]
    # a golden baseline's replay line only where there is one
    golden = dataclasses.replace(COMPARE_AGGREGATE, replay=["golden:x recorded from ..."])
    assert list(plain_data(golden)) == [*common, "replay"]
    assert plain_data(SelfCheckRecord(["s01: x"], ["s01"])) == {
        "problems": ["s01: x"],
        "failed": ["s01"],
    }
    common = ["golden", "file", "target", "engines"]
    assert list(plain_data(PROMPT_RECORDING)) == [
        *common,
        *["prompt_id", "text", "token_ids", "finish_reason", "positions"],
    ]
    assert list(plain_data(SUITE_RECORDING)) == [*common, "prompts"]


def test_derived_numbers_are_made_with_the_record_and_again_when_it_is_read() -> None:
    assert FLIPPED.kl_mean == pytest.approx(0.2) and FLIPPED.kl_max == pytest.approx(0.3)
    assert FLIPPED.same_top_rate == 0.5 and FLIPPED.is_flip
    assert TEXT_ONLY.kl_mean is None and TEXT_ONLY.same_top_rate is None
    assert not UNCHANGED.is_flip
    stale = {**plain_data(FLIPPED), "kl_mean": 99.0, "is_flip": False}
    read = load_record(PromptComparison, stale)
    assert read.kl_mean == pytest.approx(0.2) and read.is_flip
    with pytest.raises(dataclasses.FrozenInstanceError):
        FLIPPED.flip = "unchanged"  # type: ignore[misc]


def test_recordings_read_as_the_common_golden_recording() -> None:
    for recording in (PROMPT_RECORDING, SUITE_RECORDING):
        common = load_record(GoldenRecording, plain_data(recording))
        assert common.golden == "adder-v1" and common.target == "adder@local"


def test_the_kinds_register_their_records_by_role() -> None:
    assert COMPARE.spec.records == {
        "prompt": PromptComparison,
        "aggregate": ComparisonAggregateRecord,
        "record": GoldenRecording,
    }
    assert DIFF.spec.records == {
        "prompt": PromptComparison,
        "aggregate": ComparisonAggregateRecord,
    }
    assert SWEEP.spec.records == {
        "prompt": PromptComparison,
        "aggregate": SweepAggregateRecord,
        "self-check": SelfCheckRecord,
    }


def test_summary_keys_are_fields_of_the_records() -> None:
    """The HTML summary reads an aggregate's levels and the prompt records by key."""
    level_fields = {f.name for f in dataclasses.fields(SuiteAggregate)}
    # side_columns adds the aggregate's ``ungated`` to each level's numbers
    assert {key for _, keys, _ in MEASURES for key in keys} <= level_fields | {"ungated"}
    assert {FLIP_BARS.value, FLIP_BARS.low, FLIP_BARS.high} <= level_fields
    prompt_fields = {f.name for f in dataclasses.fields(PromptComparison)}
    assert {KL_DISTRIBUTION.value, KL_DISTRIBUTION.group} <= prompt_fields


# -- readers ---------------------------------------------------------------------------------------
def test_terminal_rows_and_the_cliff_of_sweeps_only() -> None:
    aggregates = [
        ("m.yaml::compare(bf16-vs-q4)::addition::aggregate", True, plain_data(COMPARE_AGGREGATE)),
        ("m.yaml::sweep(bf16)::addition::aggregate", True, plain_data(SWEEP_AGGREGATE)),
    ]
    rows = summary_rows(aggregates)
    assert [row[:4] for row in rows] == [
        ["compare(bf16-vs-q4)", "addition", "q4@local", "1/2"],
        ["sweep(bf16)", "addition", "q4@local", "1/2"],
    ]
    (line,) = cliff_lines(aggregates)
    assert line.startswith(
        "sweep(bf16) addition: degradation cliff: q4@local: failed items 0 -> 1 of 2 (1 newly "
        "failed, 0 recovered; exact McNemar p = 1 >= alpha 0.05); mean KL 0 ± 0 -> 0.2 ± "
    )
    assert line.endswith(" crosses max_mean_kl")
    # a record without the evidence (an older results file): the cliff alone
    bare = dataclasses.replace(SWEEP_AGGREGATE, cliff_steps=[])
    node = "m.yaml::sweep(bf16)::addition::aggregate"
    assert cliff_lines([(node, True, plain_data(bare))]) == [
        "sweep(bf16) addition: degradation cliff: q4@local"
    ]


def test_html_views_of_the_records() -> None:
    prompt = parse(item_detail(record_of("compare", "prompt", plain_data(FLIPPED))))
    assert "(ValidationError" not in prompt.text()
    assert [m.text() for m in prompt.all("mark", "ic-div")] == ["4", "5"]
    sweep = parse(item_detail(record_of("sweep", "aggregate", plain_data(SWEEP_AGGREGATE))))
    assert "degradation cliff: q4@local" in sweep.text()
    compare = parse(item_detail(record_of("compare", "aggregate", plain_data(COMPARE_AGGREGATE))))
    assert "degradation cliff" not in compare.text() and "/m/bf16" in compare.text()
    failed = {"problems": ["s01: differ"], "failed": ["s01"]}
    check = parse(item_detail(record_of("sweep", "self-check", failed)))
    assert check.one("ul").text() == "s01: differ"
    ((title, numbers),) = side_columns(plain_data(COMPARE_AGGREGATE))
    assert title == "q4@local" and numbers == {**plain_data(LEVEL), "ungated": False}
    assert len(level_charts("sweep(bf16) · addition", plain_data(SWEEP_AGGREGATE))) == 2


def test_an_ungated_aggregate_says_so_in_the_terminal_and_the_html() -> None:
    ungated = dataclasses.replace(COMPARE_AGGREGATE, ungated=True)
    node = "m.yaml::compare(bf16-vs-q4)::addition::aggregate"
    passing = dataclasses.replace(ungated, levels=[dataclasses.replace(LEVEL, n_failed=0)])
    (passed,) = summary_rows([(node, True, plain_data(passing))])
    assert passed[-1] == "UNGATED"  # passed, but nothing was checked
    (failed,) = summary_rows([(node, False, plain_data(ungated))])
    assert failed[-1] == "FAIL"
    (gated,) = summary_rows([(node, True, plain_data(COMPARE_AGGREGATE))])
    assert gated[-1] == "FAIL"  # an item failed
    html = parse(item_detail(record_of("compare", "aggregate", plain_data(ungated))))
    assert html.one("p", "ic-ungated").text().startswith("ungated: this check writes no gate")
    plain = parse(item_detail(record_of("compare", "aggregate", plain_data(COMPARE_AGGREGATE))))
    assert not list(plain.iter("p", "ic-ungated"))
    ((_, numbers),) = side_columns(plain_data(ungated))
    gates = dict((title, show) for title, _, show in MEASURES)["gates"]
    assert gates(numbers["ungated"]) == "<b>ungated</b>" and gates(False) == "written"


def test_a_side_whose_items_all_errored_is_a_failed_row_of_dashes() -> None:
    node = "m.yaml::sweep(bf16)::addition::aggregate"
    errored = dataclasses.replace(SWEEP_AGGREGATE, tests=["q8@local", "q4@local"])
    q8, q4 = summary_rows([(node, False, plain_data(errored))])
    assert q8 == ["sweep(bf16)", "addition", "q8@local", *["-"] * 6, "FAIL"]
    assert q4[2] == "q4@local" and len(q4) == len(q8)
    assert summary_lines([]) == []
    nothing = dataclasses.replace(COMPARE_AGGREGATE, levels=[], tests=[])
    assert summary_lines([(node.replace("sweep", "compare"), False, plain_data(nothing))]) == []


def _without(data: dict[str, Any], key: str) -> dict[str, Any]:
    return {k: v for k, v in data.items() if k != key}


@pytest.mark.parametrize(
    ("kind", "role", "data"),
    [
        ("compare", "prompt", _without(plain_data(FLIPPED), "base_finish")),
        ("compare", "prompt", {**plain_data(FLIPPED), "kl_per_position": "x"}),
        ("compare", "aggregate", _without(plain_data(COMPARE_AGGREGATE), "engines")),
        ("sweep", "aggregate", {**plain_data(SWEEP_AGGREGATE), "cliff": None}),
        ("sweep", "aggregate", {**plain_data(SWEEP_AGGREGATE), "levels": [{"test": "q4"}]}),
        ("sweep", "self-check", {"problem": []}),
    ],
)
def test_a_record_missing_a_field_falls_back_to_a_table(
    kind: str, role: str, data: dict[str, Any]
) -> None:
    root = parse(item_detail(record_of(kind, role, data)))
    assert "(ValidationError in the detail view)" in root.text()
    assert root.all("table", "ic-kv")  # the data, key by key


def test_summary_columns_of_an_unreadable_aggregate_are_empty() -> None:
    broken = _without(plain_data(COMPARE_AGGREGATE), "engines")
    assert side_columns(broken) == [] and side_columns({}) == []
    assert len(level_charts("x", {})) == 2  # empty charts, as before


# -- shards --------------------------------------------------------------------------------------
SWEEP_SUITE = "m.yaml::sweep(bf16)::addition"


def _item(
    name: str,
    role: str,
    data: dict[str, Any],
    outcome: str = "passed",
    max_mean_kl: float | None = None,
    violations: tuple[str, ...] = (),
) -> dict[str, Any]:
    extra = {} if max_mean_kl is None else {"max_mean_kl": max_mean_kl}
    return {
        **record_of("sweep", role, data),
        "violations": list(violations),
        "nodeid": f"{SWEEP_SUITE}::{name}",
        "name": name,
        "outcome": "failed" if violations and outcome == "passed" else outcome,
        "duration_s": 1.0,
        "worker": None,
        "longrepr": None,
        "thresholds": {"max_kl_position": 0.5, **extra},
    }


def _recorded(name: str, role: str, record: Any) -> RecordedItem:
    """An item as its run recorded it: its record and its violations (a prompt's judged by
    :func:`~pytest_infercheck.checks.comparison.judge.item_verdict` under
    :data:`MEAN_KL_GATE`, a self-check's its problems)."""
    if isinstance(record, SelfCheckRecord):
        return RecordedItem(role, name, record, violations=tuple(record.problems))
    return RecordedItem(role, name, record, violations=tuple(item_verdict(record, MEAN_KL_GATE)))


CONTEXT = SweepContext(
    check="sweep",
    suite="addition",
    tests=["q4@local"],
    engines=ENGINES,
    cliff_alpha=0.05,
    self_check=True,
)
MEAN_KL_GATE = Thresholds(max_kl_position=0.5, max_mean_kl=0.1)


def _merged(
    shards: list[list[RecordedItem]], thresholds: Thresholds = MEAN_KL_GATE
) -> dict[str, Any] | None:
    """The merge of shards holding ``shards`` (each a list of items): every shard's
    aggregate summarized from its own items, then ``pytest-infercheck report``'s merge."""
    extra = {} if thresholds.max_mean_kl is None else {"max_mean_kl": thresholds.max_mean_kl}
    aggregates = [
        (
            i + 1,
            _item(
                "aggregate",
                "aggregate",
                plain_data(summarize_sweep(items, thresholds, CONTEXT).record),
                **extra,
            ),
        )
        for i, items in enumerate(shards)
    ]
    prompts = [
        _item(r.name, r.role, plain_data(r.record), violations=r.violations)
        for items in shards
        for r in items
    ]
    return summarized(SWEEP_KIND, f"{SWEEP_SUITE}::aggregate", aggregates, prompts)


SWEEP_KIND = kind_named("sweep")
assert SWEEP_KIND is not None


def test_a_sweep_merges_into_one_aggregate_with_its_cliff_again() -> None:
    assert SWEEP_AGGREGATE.cliff == "q4@local"  # mean KL 0.2 crosses max_mean_kl 0.1
    clean = _recorded("self-check", "self-check", SelfCheckRecord([], []))
    a, b = (_recorded(r.prompt_id, "prompt", r) for r in (FLIPPED, UNCHANGED))
    whole = summarize_items(SWEEP_KIND, [clean, a, b], MEAN_KL_GATE, CONTEXT)  # type: ignore[arg-type]
    # the mean-KL gate, q4's own (its level records it without the side's label); a's
    # flip (correct_to_wrong) fails its item, and with it the aggregate
    gated = dataclasses.replace(
        LEVEL, n_failed=1, violations=aggregate_violations(LEVEL, MEAN_KL_GATE)
    )
    assert whole.record == dataclasses.replace(
        SWEEP_AGGREGATE,
        levels=[gated],
        cliff_steps=[
            STEPS[0],
            dataclasses.replace(STEPS[1], failed=["a"], newly_failed=1, p_value=1.0),
        ],
    )
    assert whole.violations == [
        "1 of 3 items failed: a (answer flip correct_to_wrong (fail_item_on: correct_to_wrong))",
        *(f"q4@local: {v}" for v in gated.violations or []),
    ]
    # the self-check with a, b alone: each shard's aggregate covers its own items
    merged = _merged([[clean, a], [b]])
    assert merged is not None and merged["outcome"] == "failed"
    assert merged["violations"] == whole.violations
    assert merged["data"] == plain_data(whole.record)
    assert list(merged["data"]) == [
        *["check", "suite", "levels", "engines", "tests", "ungated"],
        *["cliff", "cliff_alpha", "cliff_steps", "self_check"],
    ]


def test_a_merged_sweep_starts_from_the_self_check_items_record() -> None:
    """The baseline did not reproduce prompt b (the self-check item, in shard 2 only): the
    merged self-check has b failed and no mean KL, so q4's KL cannot cross from it, and
    q4's one failed prompt (a) against the self-check's one (b) is b = c = 1, p = 1: no
    cliff; exactly what the unsharded aggregate says."""
    dirty = _recorded("self-check", "self-check", SelfCheckRecord(["b: differs"], ["b"]))
    a, b = (_recorded(r.prompt_id, "prompt", r) for r in (FLIPPED, UNCHANGED))
    merged = _merged([[a], [dirty, b]])
    assert merged is not None
    whole = summarize_items(SWEEP_KIND, [dirty, a, b], MEAN_KL_GATE, CONTEXT)  # type: ignore[arg-type]
    assert merged["data"] == plain_data(whole.record)
    record = load_record(SweepAggregateRecord, merged["data"])
    first, q4 = record.cliff_steps
    assert first.level == "self-check" and first.failed == ["b"]
    assert math.isnan(first.kl_mean) and first.kl_within is None
    assert (q4.failed, q4.newly_failed, q4.recovered, q4.p_value) == (["a"], 1, 1, 1.0)
    assert q4.kl_within is False and not q4.kl_crosses
    assert record.cliff == "none"


def test_a_self_check_that_errored_leaves_the_first_level_unmeasured() -> None:
    a, b = (_recorded(r.prompt_id, "prompt", r) for r in (FLIPPED, UNCHANGED))
    errored = RecordedItem("self-check", "self-check", None, "engine down")
    summary = summarize_items(SWEEP_KIND, [errored, a, b], MEAN_KL_GATE, CONTEXT)  # type: ignore[arg-type]
    assert summary.violations[0] == "1 of 3 items errored: self-check (engine down)"
    first = summary.record.cliff_steps[0]
    assert (first.level, first.failed, first.kl_within) == ("self-check", [], None)
    # no self-check: a clean baseline, KL 0
    off = dataclasses.replace(CONTEXT, self_check=False)
    assert summarize_sweep([a, b], MEAN_KL_GATE, off).record.cliff_steps[0].level == "baseline"


def test_shards_whose_aggregate_or_prompts_cannot_be_read_are_not_merged() -> None:
    good = _item("aggregate", "aggregate", plain_data(SWEEP_AGGREGATE))
    errored = _item("aggregate", "aggregate", {}, outcome="error")
    items = [_item("a", "prompt", plain_data(FLIPPED))]
    both = summarized(SWEEP_KIND, f"{SWEEP_SUITE}::aggregate", [(1, good), (2, errored)], items)
    assert both is not None and both["outcome"] == "error"  # a shard's aggregate errored
    old = copy.deepcopy(items)
    del old[0]["data"]["test_finish"]
    assert summarized(SWEEP_KIND, f"{SWEEP_SUITE}::aggregate", [(1, good)], old) is None
    # an aggregate of an older file, without its test sides: not recomputed
    older = _item("aggregate", "aggregate", _without(plain_data(SWEEP_AGGREGATE), "tests"))
    assert summarized(SWEEP_KIND, f"{SWEEP_SUITE}::aggregate", [(1, older)], items) is None
