"""The gates of a comparison (:mod:`pytest_infercheck.checks.comparison.gates`): a diff's
``expect:`` (identical outputs by default), ``ungated`` checks (no gate written) and their
warning, and ``expect:`` refused beside a compare or a sweep."""

from __future__ import annotations

import dataclasses
import warnings
from pathlib import Path
from typing import Any

import pytest

from pytest_infercheck.checks.comparison.aggregate import aggregate
from pytest_infercheck.checks.comparison.gates import UngatedCheckWarning, warn_ungated
from pytest_infercheck.checks.comparison.judge import item_verdict
from pytest_infercheck.checks.comparison.prompt import IDENTICAL
from pytest_infercheck.checks.comparison.spec import DiffThresholds, Thresholds, is_ungated
from pytest_infercheck.checks.comparison.summarize import ComparisonContext, summarize
from pytest_infercheck.checks.framework.items import RecordedItem, summarize_items
from pytest_infercheck.checks.registry import kind_named
from pytest_infercheck.config import load_matrix
from pytest_infercheck.metrics.sameness import compare_outputs
from pytest_infercheck.yamlpos import SourceError

from .factories import prompt_comparison

SAME = dataclasses.replace(
    prompt_comparison("same", [0.0]),
    test_text="4",
    test_ids=[52, 2],
    first_divergence=None,
    severity="identical",
    test_answer="4",
    sameness=IDENTICAL,
)
DIFFERS = dataclasses.replace(
    prompt_comparison("differs", [0.1]),
    reference=None,
    answer_kind=None,
    base_answer=None,
    test_answer=None,
    sameness="token ids differ from token 0",
)
"""Outputs "4" and "5" of a prompt without a reference answer: no flip can fail it."""
NOT_IDENTICAL = "outputs not identical: token ids differ from token 0 (expect: identical)"


def test_the_identical_verdict_is_the_sameness_of_the_outputs() -> None:
    """``IDENTICAL`` is what the one sameness rule says of outputs that are the same."""
    assert compare_outputs("4", [52, 2], "4", [52, 2]).describe() == IDENTICAL
    assert compare_outputs("4", [52], "5", [53]).describe() != IDENTICAL
    assert SAME.identical and not DIFFERS.identical
    # a record without a verdict (an older file) is not identical: an expecting diff fails
    assert not dataclasses.replace(SAME, sameness="").identical


def test_a_diff_expects_identical_outputs_by_default() -> None:
    assert DiffThresholds().expect == "identical"
    assert item_verdict(DIFFERS, DiffThresholds()) == [NOT_IDENTICAL]
    assert item_verdict(SAME, DiffThresholds()) == []
    # besides any threshold written: a loose max_kl does not excuse a changed token
    assert item_verdict(DIFFERS, DiffThresholds(max_kl=10.0)) == [NOT_IDENTICAL]
    assert item_verdict(DIFFERS, DiffThresholds(expect="identical", max_kl=0.01)) == [
        "mean KL 0.1 > max_kl 0.01",
        NOT_IDENTICAL,
    ]
    unjudged = dataclasses.replace(DIFFERS, sameness="")
    assert item_verdict(unjudged, DiffThresholds()) == [
        "outputs not identical: not compared (expect: identical)"
    ]


def test_a_diff_on_a_budget_applies_only_the_thresholds_written() -> None:
    assert item_verdict(DIFFERS, DiffThresholds(expect="budget")) == []
    assert item_verdict(DIFFERS, DiffThresholds(expect="budget", max_kl=1.0)) == []
    assert item_verdict(DIFFERS, DiffThresholds(expect="budget", max_kl=0.01)) == [
        "mean KL 0.1 > max_kl 0.01"
    ]
    # a compare or a sweep has no such rule
    assert item_verdict(DIFFERS, Thresholds()) == []


def test_the_aggregate_counts_identical_outputs_and_the_items_expect_fails() -> None:
    level = aggregate([SAME, DIFFERS, DIFFERS], DiffThresholds())
    assert (level.n_identical, level.n_prompts, level.n_failed) == (1, 3, 2)
    budget = aggregate([SAME, DIFFERS, DIFFERS], DiffThresholds(expect="budget"))
    assert (budget.n_identical, budget.n_failed) == (1, 0)


@pytest.mark.parametrize(
    ("thresholds", "ungated"),
    [
        (Thresholds(), True),
        # answer flips judge the answers of prompts with a reference only: not a gate
        (Thresholds.model_validate({"flips": {"fail_item_on": "any"}}), True),
        (Thresholds(max_kl=1.0), False),
        (Thresholds(max_kl_position=1.0), False),
        (Thresholds(min_similarity=0.5), False),
        (Thresholds(max_mean_kl=1.0), False),
        (Thresholds(min_same_top=0.5), False),
        (Thresholds.model_validate({"flips": {"max_rate": 0.5}}), False),
        (DiffThresholds(), False),  # expect: identical is a gate
        (DiffThresholds(expect="budget"), True),
        (DiffThresholds(expect="budget", max_kl=1.0), False),
    ],
)
def test_ungated_means_no_gate_written(thresholds: Thresholds, ungated: bool) -> None:
    assert is_ungated(thresholds) is ungated


CONTEXT = ComparisonContext(
    check="compare", suite="addition", tests=["q4@local"], engines={"q4@local": {}}
)


def _items(*records: Any) -> list[RecordedItem]:
    return [RecordedItem("prompt", r.prompt_id, r) for r in records]


def test_an_ungated_aggregate_passes_but_says_so() -> None:
    """The issue: a compare with no thresholds on outputs that all differ passed, silently."""
    summary = summarize(_items(DIFFERS, DIFFERS), Thresholds(), CONTEXT)
    assert summary.violations == [] and summary.record.ungated
    assert ("infercheck_ungated", True) in summary.properties
    assert summary.text.splitlines()[-1] == (
        "UNGATED: no gate written (none of max_kl, max_kl_position, min_similarity, "
        "max_mean_kl, min_same_top, flips.max_rate): it passes whatever the outputs "
        "(identical outputs: q4@local 0/2)"
    )
    gated = summarize(_items(DIFFERS, DIFFERS), Thresholds(max_kl=1.0), CONTEXT)
    assert not gated.record.ungated and "UNGATED" not in gated.text
    assert ("infercheck_ungated", False) in gated.properties


def test_a_side_without_records_and_errored_items_fail_the_aggregate() -> None:
    errored = RecordedItem("prompt", "e01", None, "BackendError: down")
    summary = summarize_items(kind_named("compare"), [errored], Thresholds(max_kl=1.0), CONTEXT)  # type: ignore[arg-type]
    assert summary.violations == [
        "1 of 1 items errored: e01 (BackendError: down)",
        "q4@local: no prompt of this side has a record",
    ]
    assert summary.record.levels == []


class _Source:
    def line_of(self, loc: tuple[str | int, ...]) -> int:
        assert loc == ("checks", 2)
        return 14


class _Loaded:
    """What :func:`warn_ungated` reads of a loaded matrix."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.source = _Source()


def test_the_warning_names_the_check_entrys_line_once_per_check(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    loaded: Any = _Loaded(tmp_path / "infercheck.yaml")
    with pytest.warns(UngatedCheckWarning) as caught:
        warn_ungated(loaded, 2, "compare", Thresholds())
    (warning,) = caught
    assert str(warning.message) == (
        "infercheck.yaml:14: checks[2] (compare) is ungated: no gate written (none of "
        "max_kl, max_kl_position, min_similarity, max_mean_kl, min_same_top, "
        "flips.max_rate): it passes whatever the outputs; write a threshold to check something"
    )
    assert issubclass(UngatedCheckWarning, pytest.PytestWarning)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        warn_ungated(loaded, 2, "compare", Thresholds())  # once per check: no second warning
    with pytest.warns(UngatedCheckWarning, match=r"checks\[2\] \(diff\).*\(expect: budget\)"):
        warn_ungated(_Loaded(tmp_path / "infercheck.yaml"), 2, "diff", DiffThresholds())


# -- expect: beside a diff only --------------------------------------------------------------
MATRIX = """\
models:
  m: {path: ./m}
backends:
  a: {kind: mlx-lm}
  b: {kind: mlx-lm, dtype: float32}
suites: [s.jsonl]
checks:
"""


def _load(tmp_path: Path, check: str) -> Any:
    (tmp_path / "infercheck.yaml").write_text(MATRIX + check)
    return load_matrix(tmp_path / "infercheck.yaml")


def test_a_diff_takes_expect_beside_its_thresholds(tmp_path: Path) -> None:
    loaded = _load(tmp_path, "  - diff: {model: m, backends: [a, b]}\n    expect: budget\n")
    (check,) = loaded.matrix.checks
    thresholds = check.kind_thresholds()
    assert isinstance(thresholds, DiffThresholds) and thresholds.expect == "budget"
    default = _load(tmp_path, "  - diff: {model: m, backends: [a, b]}\n").matrix.checks[0]
    assert default.kind_thresholds().expect == "identical"
    assert default.thresholds()["expect"] == "identical"  # in every record's thresholds
    with pytest.raises(
        SourceError,
        match=r"infercheck.yaml:9: checks\[0\]\.expect: expected 'identical' or 'budget', "
        r"got 'same'",
    ):
        _load(tmp_path, "  - diff: {model: m, backends: [a, b]}\n    expect: same\n")


@pytest.mark.parametrize(
    "check",
    [
        "  - compare: {baseline: m@a, test: m@b}\n    expect: identical\n",
        "  - sweep: {baseline: m@a, models: [m@b]}\n    expect: budget\n",
    ],
)
def test_expect_beside_a_compare_or_a_sweep_is_an_error_naming_diff(
    tmp_path: Path, check: str
) -> None:
    kind = check.split(":")[0].strip(" -")
    with pytest.raises(SourceError, match=rf":9: .*{kind} does not use expect \(diff do(es)?\)"):
        _load(tmp_path, check)
