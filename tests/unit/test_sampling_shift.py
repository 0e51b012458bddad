"""Penalties and ``logit_bias`` in the ``sampling`` judge, on hand-made evidence (values
computed by hand): the row shifted by the engine's formula given the tokens so far, the
ban and the forcing bias failing at once, the repetition penalty refused without raw
logits, and a failure naming the parameter whose absence the draws fit."""

from __future__ import annotations

import math
from typing import Any

import pytest

from pytest_infercheck.checks.sampling.evidence import Analysis, PositionEvidence
from pytest_infercheck.checks.sampling.shift import penalized, shifted_row
from pytest_infercheck.metrics.sampling import Penalties, penalized_logprobs
from pytest_infercheck.verdict.measure import Finding, Unmeasured

P = {0: 0.5, 1: 0.3, 2: 0.2}
LOGPROBS = {t: math.log(p) for t, p in P.items()}


def position(
    counts: dict[int, int],
    history: list[int],
    logits: dict[int, float] | None = None,
    tail: float = 0.0,
    **params: Any,
) -> PositionEvidence:
    return PositionEvidence(
        prompt_id="sp012",
        target="adder@local",
        params={"temperature": 1.0, **params},
        position=0,
        context=[],
        engine="mlx-lm",
        reference="adder@local",
        samples=sum(counts.values()),
        alpha=0.001,
        family=1,
        counts=counts,
        logprobs=dict(LOGPROBS),
        tail=tail,
        pieces={0: "a", 1: "b", 2: "c"},
        history=history,
        logits=logits,
    )


def expected_of(e: PositionEvidence) -> dict[int, float]:
    a = e.analysis
    assert isinstance(a, Analysis), a
    return a.expected.probs


def test_presence_and_frequency_shift_the_repeated_tokens_from_log_probabilities() -> None:
    # history 1, 1, 2: presence 1 takes 1 off tokens 1 and 2; frequency 0.5 takes 0.5 per
    # occurrence: 1.0 off token 1, 0.5 off token 2.
    w = {0: 0.5, 1: 0.3 * math.exp(-1), 2: 0.2 * math.exp(-1)}
    z = sum(w.values())
    e = position({0: 1}, [7, 1, 1, 2], presence_penalty=1.0)
    assert expected_of(e) == pytest.approx({t: v / z for t, v in w.items()})
    w = {0: 0.5, 1: 0.3 * math.exp(-1.0), 2: 0.2 * math.exp(-0.5)}
    z = sum(w.values())
    e = position({0: 1}, [1, 1, 2], frequency_penalty=0.5)
    assert expected_of(e) == pytest.approx({t: v / z for t, v in w.items()})
    # mlx-lm's window is the last 20 tokens: a token 21 back is not penalised, and a
    # penalty on tokens outside the row changes nothing to test.
    e = position({0: 1}, [1] + [9] * 19 + [2], presence_penalty=1.0)
    w = {0: 0.5, 1: 0.3, 2: 0.2 * math.exp(-1)}
    z = sum(w.values())
    assert expected_of(e) == pytest.approx({t: v / z for t, v in w.items()})
    e = position({0: 1}, [1] + [9] * 20, presence_penalty=1.0)
    assert isinstance(e.fit, Unmeasured)
    assert "presence_penalty changes nothing at this position on mlx-lm" in e.fit.reason


def test_the_constant_of_log_probabilities_cancels_for_presence_not_for_repetition() -> None:
    logits = {0: 3.0, 1: 2.0, 2: -1.0}
    c = math.log(sum(math.exp(v) for v in logits.values()))
    logprobs = {t: v - c for t, v in logits.items()}
    shift = Penalties(presence_penalty=0.7, logit_bias=((0, 0.4),))
    a = penalized_logprobs(logits, shift, "mlx-lm", prompt=[1, 2])
    b = penalized_logprobs(logprobs, shift, "mlx-lm", prompt=[1, 2])
    assert a == pytest.approx(b)
    rep = Penalties(repetition_penalty=2.0)
    a = penalized_logprobs(logits, rep, "mlx-lm", prompt=[1, 2])
    b = penalized_logprobs(logprobs, rep, "mlx-lm", prompt=[1, 2])
    assert a[1] != pytest.approx(b[1], abs=1e-3)


def test_the_repetition_penalty_uses_the_raw_logits_and_is_refused_without_them() -> None:
    # logits 2, 1, -1; history 1, 2; theta 2: token 1 (positive) 1 / 2 = 0.5, token 2
    # (negative) -1 * 2 = -2, token 0 unrepeated stays 2.
    logits = {0: 2.0, 1: 1.0, 2: -1.0}
    w = {0: math.exp(2.0), 1: math.exp(0.5), 2: math.exp(-2.0)}
    z = sum(w.values())
    e = position({0: 1}, [1, 2], logits, repetition_penalty=2.0)
    assert expected_of(e) == pytest.approx({t: v / z for t, v in w.items()})
    e = position({0: 1}, [1, 2], None, repetition_penalty=2.0)
    assert isinstance(e.fit, Unmeasured)
    assert "repetition_penalty needs the raw logits" in e.fit.reason
    # repetition_penalty 1 is no penalty: the log-probabilities do.
    assert penalized({"temperature": 1.0, "repetition_penalty": 1.0}) == []
    assert position({0: 50, 1: 30, 2: 20}, [1], None, repetition_penalty=1.0).fit == Finding(True)


def test_a_top_k_reference_is_refused_under_penalties() -> None:
    row = {0: math.log(0.5), 1: math.log(0.3)}
    with pytest.raises(ValueError, match="top-k reference"):
        shifted_row(row, None, 0.2, {"presence_penalty": 1.0}, "mlx-lm", [1])
    with pytest.raises(ValueError, match="no documented semantics"):
        shifted_row(LOGPROBS, None, 0.0, {"presence_penalty": 1.0}, "sglang", [1])


def test_a_banned_token_drawn_fails_at_once_naming_the_bias() -> None:
    e = position({0: 3, 1: 60, 2: 37}, [], logit_bias={0: -100.0})
    assert expected_of(e) == pytest.approx({1: 0.6, 2: 0.4})
    assert e.fit == Finding(
        False,
        "temperature 1, logit_bias {0: -100.0} at position 0: logit_bias -100 on token "
        "0 'a' (a ban): drawn 3 of 100",
    )
    assert position({1: 60, 2: 40}, [], logit_bias={0: -100.0}).fit == Finding(True)


def test_a_forcing_bias_fails_on_any_other_draw() -> None:
    # +100 on token 2: the others hold exp(-100) * 0.8 / 0.2 of its mass, under 1e-12; the
    # G-test pools them into one cell and sees nothing, the forcing check sees the draw.
    e = position({2: 99, 0: 1}, [], logit_bias={2: 100.0})
    assert isinstance(e.fit, Finding) and not e.fit.ok
    assert "logit_bias +100 forces token 2 'c': 1 of 100 draws were others (token 0 'a' x1)" in (
        e.fit.detail
    )
    assert position({2: 100}, [], logit_bias={2: 100.0}).fit == Finding(True)


def test_draws_that_fit_the_set_without_a_penalty_name_it() -> None:
    # presence 2 on token 0 (history 0): expected 0.5 e^-2 / (0.5 e^-2 + 0.5) = 0.1192...
    # for token 0; the draws are the unpenalised 500 / 300 / 200.
    e = position({0: 500, 1: 300, 2: 200}, [0], presence_penalty=2.0)
    assert isinstance(e.fit, Finding) and not e.fit.ok
    assert "sampled distribution differs from the expected" in e.fit.detail
    assert "the draws fit the distribution without presence_penalty (p 1): not applied?" in (
        e.fit.detail
    )
    # draws as penalised pass, and say nothing of a dropped penalty.
    w = {0: 0.5 * math.exp(-2), 1: 0.3, 2: 0.2}
    z = sum(w.values())
    fair = {t: round(1000 * v / z) for t, v in w.items()}
    assert position(fair, [0], presence_penalty=2.0).fit == Finding(True)


def test_a_penalty_that_changes_nothing_here_is_not_measured() -> None:
    # vLLM counts presence over the output only; the tokens so far are all sent as the
    # prompt, so the row is unchanged: a dropped penalty would draw the same.
    e = position({0: 50, 1: 30, 2: 20}, [1, 1, 2], presence_penalty=1.0)
    e.engine = "vllm"
    assert isinstance(e.fit, Unmeasured)
    assert "presence_penalty changes nothing at this position on vllm: it counts the output" in (
        e.fit.reason
    )
    # its repetition penalty counts the prompt too: measured.
    e = position({0: 1}, [1], {0: 2.0, 1: 1.0, 2: -1.0}, repetition_penalty=2.0)
    e.engine = "vllm"
    assert isinstance(e.analysis, Analysis)


def test_draws_that_fit_temperature_one_name_the_temperature() -> None:
    # temperature 2 on 0.5 / 0.3 / 0.2: q proportional to sqrt(p), 0.7071 / 0.5477 / 0.4472
    # over 1.7020: 0.4155 / 0.3218 / 0.2628; the draws are the untempered 500 / 300 / 200
    # (G on 2 dof far beyond alpha), which fit temperature 1 exactly.
    e = position({0: 500, 1: 300, 2: 200}, [], temperature=2.0)
    assert expected_of(e) == pytest.approx({0: 0.4155, 1: 0.3218, 2: 0.2628}, abs=1e-4)
    assert isinstance(e.fit, Finding) and not e.fit.ok
    assert "the draws fit the distribution without temperature 2 (at 1; p 1): not applied?" in (
        e.fit.detail
    )
    # draws at temperature 2 pass and name nothing.
    assert position({0: 416, 1: 322, 2: 262}, [], temperature=2.0).fit == Finding(True)
