"""The comparison's judge facet, by hand (issue 27):

- the teacher-forced argmax and margins at every position (:mod:`pytest_infercheck.metrics.
  forced`), full rows and top-k rows, numbers computed by hand;
- ``fail_on: decisive`` waives a near-tie only once the rest of the output was judged past it
  (teacher-forced on the baseline's continuation) and no later position is a decisive
  disagreement; without teacher forcing, no waiver, and the item says why;
- a comparison without logprobs (method ``text``) leaves the KL measures unmeasured: a
  written ``max_kl`` fails naming the gate and why, and so does the suite's
  ``max_mean_kl``; ``min_same_top`` on ``top-k-lower-bound`` is not measured and fails;
- the judge module does no I/O: it imports no cache, no backend, no generation cache.
"""

from __future__ import annotations

import ast
import dataclasses
import math
from pathlib import Path

import numpy as np
import pytest

from pytest_infercheck.checks.comparison.aggregate import aggregate, aggregate_violations
from pytest_infercheck.checks.comparison.judge import item_verdict, record_measures, waivers
from pytest_infercheck.checks.comparison.prompt import PromptComparison
from pytest_infercheck.checks.comparison.spec import DiffThresholds, Thresholds
from pytest_infercheck.metrics.forced import forced_full, forced_rows
from pytest_infercheck.verdict.measure import Reading, Unmeasured
from pytest_infercheck.verdict.waiver import apply_waivers

from .comparison_fakes import FakeBackend, compare, generation, rows_of
from .factories import prompt_comparison

LN = math.log


def _row(probs: dict[int, float]) -> list[float]:
    """A V = 4 logprob row: the given probabilities, the rest of the mass split evenly."""
    rest = (1.0 - sum(probs.values())) / (4 - len(probs))
    return [LN(probs.get(v, rest)) for v in range(4)]


# -- the teacher-forced argmax and margins ------------------------------------------------------
def test_forced_full_margins_by_hand() -> None:
    """Position 0: both prefer the baseline's token 1 (margins 0). Position 1: the baseline
    chose 2 (p 0.6, token 3 at 0.3); the test side prefers 3 (0.7 against 0.2 for 2):
    base margin ln(0.6/0.3) = 0.693147, test margin ln(0.7/0.2) = 1.252763."""
    base = np.array([_row({1: 0.7}), _row({2: 0.6, 3: 0.3})], dtype=np.float32)
    test = np.array([_row({1: 0.8}), _row({3: 0.7, 2: 0.2})], dtype=np.float32)
    forced = forced_full(base, test, [1, 2])
    assert forced.chosen == [1, 2] and forced.test_top == [1, 3]
    assert forced.base_margin[0] == 0.0 and forced.test_margin[0] == 0.0
    assert forced.base_margin[1] == pytest.approx(LN(0.6 / 0.3), abs=1e-6)
    assert forced.test_margin[1] == pytest.approx(LN(0.7 / 0.2), abs=1e-6)
    assert forced.disagreements() == [1] and forced.disagreements(2) == []
    assert forced.exact == [True, True]


def test_forced_rows_from_top_k_a_missing_token_is_a_lower_bound() -> None:
    """Top-k maps holding the chosen token: the test side's top is its map's; the baseline's
    map lacks the test's token 3, so its margin is the bound ln p(2) - min(map) =
    ln 0.6 - ln 0.35 = 0.538997 (not exact)."""
    base = [{2: LN(0.6), 0: LN(0.35)}]
    test = [{3: LN(0.5), 2: LN(0.4)}]
    forced = forced_rows(base, test, [2])
    assert forced.test_top == [3] and forced.exact == [False]
    assert forced.base_margin[0] == pytest.approx(LN(0.6 / 0.35))
    assert forced.test_margin[0] == pytest.approx(LN(0.5 / 0.4))


# -- the near-tie waiver judged past the divergence ----------------------------------------------
BASE_IDS = [1, 2, 3, 0]
"""The baseline's continuation (0 is its EOS); the test side parts from it at token 1."""
NEAR_TIE = {1: _row({2: 0.5004, 3: 0.4990})}
"""At position 1 the baseline's 2 and 3 are within ln(0.5004/0.4990) = 0.0028 nats."""
TEST_NEAR_TIE = {1: _row({3: 0.5004, 2: 0.4990})}


def _diverged(test_rows: dict[int, list[float]]) -> PromptComparison:
    """The baseline generates 1 2 3 <eos>; the test side 1 3 ... (a near-tie at token 1),
    both scored teacher-forced on the baseline's continuation (separately: full rows)."""
    base = FakeBackend(
        "bf16",
        generation("abc", BASE_IDS, chosen_logprobs=[-0.1, LN(0.5004), -0.1, -0.1]),
        rows_of(_row({1: 0.9}), {**NEAR_TIE, 2: _row({3: 0.9}), 3: _row({0: 0.9})}),
    )
    test = FakeBackend(
        "q4",
        generation("acb", [1, 3, 2, 0], chosen_logprobs=[-0.1, LN(0.5004), -0.1, -0.1]),
        rows_of(_row({1: 0.9}), {**TEST_NEAR_TIE, 3: _row({0: 0.9}), **test_rows}),
    )
    return compare(base, test)


LENIENT = DiffThresholds(fail_on="decisive")


def test_a_near_tie_judged_past_with_no_later_disagreement_is_waived() -> None:
    """Position 2 agrees (the test side's row prefers the baseline's 3, p 0.9): judged past the
    near-tie, nothing later disagrees: waived, and the waiver says so."""
    record = _diverged({2: _row({3: 0.9})})
    assert record.method == "teacher-forced" and record.first_divergence == 1
    assert record.divergence_label == "near-tie"
    assert record.judged_past is True and record.later_labels == {}
    assert item_verdict(record, DiffThresholds()) == [
        "outputs not identical: token ids differ from token 1 (expect: identical)"
    ]
    assert item_verdict(record, LENIENT) == []
    (waiver,) = waivers(record, LENIENT)
    assert waiver.judged_past
    assert "judged past it teacher-forced" in waiver.why


def test_a_decisive_disagreement_after_the_near_tie_fails_the_item() -> None:
    """Position 2: the baseline chose 3, the test side, fed the same prefix, prefers 0 with
    p 0.9 against p(3) = 0.1 / 3: test margin ln(0.9 / (0.1/3)) = 3.295837 nats, decisive.
    The near-tie at token 1 is not waived: the item fails, saying why."""
    record = _diverged({2: _row({0: 0.9})})
    assert record.divergence_label == "near-tie" and record.judged_past is True
    assert record.later_labels == {"decisive": 1}
    later = record.later_first
    assert later is not None
    assert (later.position, later.base_token, later.test_token, later.label) == (
        2,
        3,
        0,
        "decisive",
    )
    base_margin, test_margin = later.margins
    assert base_margin == pytest.approx(LN(0.9 / (0.1 / 3)), abs=1e-5)
    assert test_margin == pytest.approx(LN(0.9 / (0.1 / 3)), abs=1e-5)
    assert item_verdict(record, LENIENT) == [
        "outputs not identical: token ids differ from token 1 (expect: identical)"
    ]
    (waiver,) = waivers(record, LENIENT)
    assert not waiver.judged_past
    assert waiver.why.startswith("after the near-tie at token 1, token 2 is a decisive")
    _, notes = apply_waivers([], [waiver])
    assert notes == []  # nothing to waive without a violation it covers


def test_without_teacher_forcing_a_near_tie_is_not_waived_and_says_why() -> None:
    """A top-k comparison (no scoring) stops at the first divergence: nothing past it was
    judged, so the near-tie is not waived."""
    record = dataclasses.replace(
        _diverged({2: _row({3: 0.9})}), method="top-k-lower-bound", judged_past=False
    )
    assert item_verdict(record, LENIENT) == [
        "outputs not identical: token ids differ from token 1 (expect: identical)"
    ]
    (waiver,) = waivers(record, LENIENT)
    assert not waiver.judged_past
    assert "not waived: the output past it was not judged (method top-k-lower-bound" in (waiver.why)


# -- measures that are not there fail their gates ------------------------------------------------
TEXT = dataclasses.replace(
    prompt_comparison("t", []),
    method="text",
    method_note="the test side returned no top-k logprobs (backend 'x' has logprobs: false)",
    same_top=[],
    delta_p=[],
)


def test_a_text_comparison_fails_its_kl_gates_naming_them() -> None:
    """Two different outputs, no logprobs: before, max_kl and max_kl_position never applied
    and the item passed."""
    never = Thresholds.model_validate(
        {"max_kl": 0.01, "max_kl_position": 1.0, "flips": {"fail_item_on": "never"}}
    )
    why = "method text, the test side returned no top-k logprobs (backend 'x' has logprobs: false)"
    assert item_verdict(TEXT, never) == [
        f"max_kl: not measured: {why}",
        f"max_kl_position: not measured: {why}",
    ]
    measures = record_measures(TEXT)
    assert measures["kl_mean"] == Unmeasured(why)
    level = aggregate([TEXT], never)
    assert aggregate_violations(level, Thresholds(max_mean_kl=0.01)) == [
        "max_mean_kl: not measured: method text, 1 of 1 prompts compared by text only: no KL "
        "over the suite"
    ]


def test_a_lower_bound_is_said_and_min_same_top_on_top_k_is_not_measured() -> None:
    """top-k-lower-bound: KL 0.3 (a lower bound) gates as such; no teacher-forced argmax:
    min_same_top fails as not measured (before: never applied)."""
    topk = dataclasses.replace(
        prompt_comparison("k", [0.3]), method="top-k-lower-bound", same_top=[], delta_p=[]
    )
    assert record_measures(topk)["kl_mean"] == Reading(0.3, "lower bound")
    assert item_verdict(topk, Thresholds(max_kl=0.1)) == ["mean KL (lower bound) 0.3 > max_kl 0.1"]
    level = aggregate([topk], Thresholds())
    assert aggregate_violations(level, Thresholds(min_same_top=0.5)) == [
        "min_same_top: not measured: method top-k-lower-bound: 1 of 1 prompts have no "
        "teacher-forced argmax"
    ]


# -- no I/O in the judge -------------------------------------------------------------------------
PURE = ("judge.py", "summarize.py", "aggregate.py", "verdicts.py", "evidence.py", "turns.py")
IO_MODULES = ("backends", "generation_cache", "golden", "servers", "state", "collect")


@pytest.mark.parametrize("name", PURE)
def test_the_judging_modules_import_no_cache_and_no_backend(name: str) -> None:
    """Every import of the module (top level, type-only, inside functions), by ``ast``: none
    of the cache, a backend, the golden files or the servers; the judge facet itself not even
    for a type (evidence.py names the generation's type for it)."""
    path = Path(__file__).parents[2] / "pytest_infercheck" / "checks" / "comparison" / name
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module is not None:
            found.append(("." * node.level) + node.module)
    bad = [
        m
        for m in found
        if any(m.lstrip(".").split(".")[0] == io for io in IO_MODULES) and m.startswith("...")
    ]
    if name == "evidence.py":  # the generation's and a recording's types, annotations only
        bad = [m for m in bad if m not in ("...backends", "...golden.record")]
    assert bad == [], f"{name} imports {bad}"
