"""An output judged past a near-tie (:mod:`pytest_infercheck.metrics.past_tie`): margins of
teacher-forced rows computed by hand, and the waiver each kind offers applied only to what
was judged."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest

from pytest_infercheck.backends.base import Generation, TopKRow
from pytest_infercheck.checks.batch_invariance import AloneOutput, BatchInvariancePrompt
from pytest_infercheck.checks.batch_invariance import compare_to_alone as trial_of
from pytest_infercheck.checks.batch_invariance.evidence import BatchInvarianceEvidence
from pytest_infercheck.checks.determinism.evidence import DeterminismEvidence
from pytest_infercheck.metrics.determinism import run_output, summarize_runs
from pytest_infercheck.metrics.past_tie import (
    Rescored,
    ScoredToken,
    judge_after_tie,
    rescored_full,
    rescored_top_k,
)
from tests.unit.engine_verdicts import outcome, rescored, thresholds, violations


def test_full_rows_give_the_margin_of_each_token_below_the_rows_best() -> None:
    rows = np.log(np.array([[0.7, 0.2, 0.1], [0.25, 0.5, 0.25]], dtype=np.float64))
    got = rescored_full(rows, [0, 2])
    assert got.tokens is not None
    (a, b) = got.tokens
    assert (a.token, a.best_token, b.token, b.best_token) == (0, 0, 2, 1)
    assert a.best - a.chosen == 0.0
    assert b.best - b.chosen == pytest.approx(math.log(0.5 / 0.25))  # 0.6931


def test_top_k_rows_take_the_given_tokens_own_logprob() -> None:
    rows = [TopKRow(-0.1, {4: -0.1, 5: -2.4}), TopKRow(-3.0, {6: -0.2, 7: -1.9})]
    got = rescored_top_k(rows, [4, 8])
    assert got.tokens is not None
    assert [(t.token, t.best_token, t.best - t.chosen) for t in got.tokens] == [
        (4, 4, 0.0),
        (8, 6, pytest.approx(2.8)),
    ]
    assert rescored_top_k(rows[:1], [4, 8]).unscored == "the engine scored 1 of 2 tokens"


def scored(*margins: float) -> Rescored:
    return Rescored(
        [ScoredToken(i, -1.0 - m, -1.0, i if m == 0 else 9) for i, m in enumerate(margins)]
    )


def test_judged_past_the_tie_only_after_it_and_on_both_sides() -> None:
    # Position 1 is the near-tie itself (not judged here: the tie's own margins are);
    # positions 2.. after it: 0.004 <= 0.01 passes, 0.5 is decisive.
    clean = judge_after_tie([("a", scored(0, 3.0, 0.004)), ("b", scored(0, 3.0, 0.0))], 1, 0.01)
    assert clean.judged and clean.clean and clean.decisive_at is None
    assert clean.why == (
        "judged past the near-tie at token 1 by teacher forcing: 2 later tokens, each within "
        "tie_margin 0.01 of its engine's own choice"
    )
    bad = judge_after_tie([("a", scored(0, 0, 0.004)), ("b", scored(0, 0, 0, 0.5))], 1, 0.01)
    assert bad.judged and not bad.clean
    assert (bad.decisive_at, bad.side, bad.token, bad.engine_token) == (3, "b", 3, 9)
    assert bad.margin == pytest.approx(0.5)
    assert bad.why == (
        "after the near-tie at token 1, b disagrees decisively with its engine at token 3: "
        "its token is 0.5 nats below the engine's own choice there (teacher-forced; "
        "tie_margin 0.01)"
    )
    unscored = judge_after_tie([("a", scored(0, 0)), ("b", Rescored(unscored="no"))], 0, 0.01)
    assert not unscored.judged and unscored.why == "b not judged past the near-tie at token 0: no"
    missing = judge_after_tie([("a", None), ("b", scored(0))], 0, 0.01)
    assert missing.why == "a not judged past the near-tie at token 0: not scored"
    nan = Rescored([ScoredToken(0, 0.0, 0.0, 0), ScoredToken(1, math.nan, -1.0, 1)])
    found = judge_after_tie([("a", nan), ("b", scored(0, 0))], 0, 0.01)
    assert not found.judged and found.why.startswith("a's teacher-forced score at token 1 is not")


def gen(ids: list[int], lps: list[float], top: list[dict[Any, float]]) -> Generation:
    return Generation("".join(chr(97 + i) for i in ids), ids, "stop", lps, top)


# Modal: 1 2 3 5; near: 1 2 4 6, parting at token 2 by 0.002 nats on both sides.
MODAL = gen(
    [1, 2, 3, 5],
    [-0.1, -0.2, -0.692, -0.1],
    [{1: -0.1}, {2: -0.2}, {3: -0.692, 4: -0.694}, {5: -0.1}],
)
NEAR = gen(
    [1, 2, 4, 6],
    [-0.1, -0.2, -0.692, -0.1],
    [{1: -0.1}, {2: -0.2}, {4: -0.692, 3: -0.694}, {6: -0.1}],
)


def test_determinism_waives_near_ties_only_past_what_was_judged() -> None:
    s = summarize_runs([run_output(MODAL, 0), run_output(NEAR, 1), run_output(MODAL, 2)])
    assert s.divergence_labels == ["near-tie"]
    decisive = thresholds("determinism", fail_on="decisive")
    distinct = "2 distinct outputs in 3 runs (modal share 0.6667)"

    def verdict(scores: dict[int, Rescored]) -> list[str]:
        return violations("determinism", DeterminismEvidence("p", "m@x", s, [], scores), decisive)

    assert verdict({0: rescored([1, 2, 3, 5]), 1: rescored([1, 2, 4, 6])}) == []
    # not scored: no waiver, and the item says why
    found = outcome("determinism", DeterminismEvidence("p", "m@x", s, []), decisive)
    assert found.violations == [distinct]
    assert found.text.splitlines()[-1] == (
        "fail_on: decisive not applied: output #2: the modal output not judged past the "
        "near-tie at token 2: not scored"
    )
    # token 3 of the near output is 1.5 nats below the engine's choice: decisive after the tie
    late = verdict({0: rescored([1, 2, 3, 5]), 1: rescored([1, 2, 4, 6], [0, 0, 0, 1.5])})
    assert late == [
        "output #2 against the modal output: after the near-tie at token 2, output #2 "
        "disagrees decisively with its engine at token 3: its token is 1.5 nats below the "
        "engine's own choice there (teacher-forced; tie_margin 0.01)",
        distinct,
    ]
    # fail_on: any never waives
    any_ = thresholds("determinism")
    evidence = DeterminismEvidence("p", "m@x", s, [], {0: rescored([1, 2, 3, 5])})
    assert violations("determinism", evidence, any_) == [distinct]


def test_batch_invariance_waives_a_near_tie_trial_only_past_what_was_judged() -> None:
    trial = trial_of(MODAL, NEAR, trial=0, position=1, batch=["x", "p"])
    assert trial.tie is not None and trial.tie.divergence_label == "near-tie"
    record = BatchInvariancePrompt("p", "m@x", 0, AloneOutput("bcdf", [1, 2, 3, 5]), [trial], "b")
    decisive = thresholds("batch-invariance", fail_on="decisive")
    differs = (
        "trial 0 (position 1 of 2): output differs from the prompt alone at 2: 'bcdf' alone "
        "vs 'bceg' batched"
    )
    judged = BatchInvarianceEvidence(record, rescored([1, 2, 3, 5]), {0: rescored([1, 2, 4, 6])})
    assert violations("batch-invariance", judged, decisive) == []
    assert outcome("batch-invariance", judged, decisive).data.trials[0].after_tie.clean
    assert violations("batch-invariance", BatchInvarianceEvidence(record), decisive) == [differs]
    late = BatchInvarianceEvidence(
        record, rescored([1, 2, 3, 5], [0, 0, 0, 0.02]), {0: rescored([1, 2, 4, 6])}
    )
    assert violations("batch-invariance", late, decisive) == [
        "trial 0 (position 1 of 2): after the near-tie at token 2, the output alone disagrees "
        "decisively with its engine at token 3: its token is 0.02 nats below the engine's own "
        "choice there (teacher-forced; tie_margin 0.01)",
        differs,
    ]
