"""The comparison methods of sides known by their top-k, through ``compare_prompt`` on fake
backends: ``teacher-forced-top-k`` (a side that scores only its top k, as vLLM's
``prompt_logprobs``), and free-running top-k of text-keyed sides, which never averages past
the first divergent token (issue 18, "A wrong verdict") and says why when it falls back to
text. Expected values are worked by hand in the comments."""

from __future__ import annotations

import math

import numpy as np
import pytest

from pytest_infercheck.backends import Generation
from pytest_infercheck.backends.base import Capabilities, TopKRow
from pytest_infercheck.checks.comparison.judge import item_verdict as item_violations
from pytest_infercheck.checks.comparison.prompt import (
    TEACHER_FORCED_TOP_K,
    TEXT_ONLY,
    TOP_K_LOWER_BOUND,
)
from pytest_infercheck.checks.comparison.verdicts import describe
from pytest_infercheck.specs import Thresholds

from .comparison_fakes import (
    KL_UNIFORM_SKEWED,
    PROMPT_IDS,
    SKEWED,
    UNIFORM,
    FakeBackend,
    compare,
    generation,
    rows_of,
)

ln = math.log
D = 1e-3
"""A float32 top-k side's mass tolerance (``metrics.kl.DEFAULT_MASS_TOL``)."""


class TopKFake(FakeBackend):
    """Scores only its top ``k`` (``score_top_k``), from the full rows it is given."""

    def __init__(self, name: str, gen: Generation, row: list[float], k: int = 1) -> None:
        caps = Capabilities(top_k_logprobs=k, token_ids=True, teacher_forcing_top_k=k)
        super().__init__(name, gen, rows_of(row), caps)
        self.k = k

    async def score_top_k(
        self, prompt_ids: list[int], continuation_ids: list[int]
    ) -> list[TopKRow]:
        rows = await self.score(prompt_ids, continuation_ids)
        out = []
        for row, c in zip(rows, continuation_ids, strict=True):
            top = [int(v) for v in np.argsort(-row, kind="stable")[: self.k]]
            out.append(TopKRow(float(row[c]), {v: float(row[v]) for v in top}))
        return out


def test_full_rows_against_a_top_k_scorer_are_teacher_forced_top_k() -> None:
    # Baseline p = 1/4 each (full rows); the test side knows its top-1 (id 0: 1/2) and the
    # given token (1/6). At every position K = {0, c}: P = 1/2, Q = 2/3 tail... by hand:
    #   .25 ln(.25/.5) + .25 ln(.25/(1/6)) + .5 ln(.5/(1/3)) = 0.130812 (= the full KL: the
    #   tail tokens all have the ratio 3/2, so bucketing loses nothing here); the test's
    #   tail is known only to D = 1e-3 (its row's mass within 1e-3 of 1): Q <= 1/3 + D,
    #   .5 ln(.5/(1/3 + D)) = 0.202718, 0.130797 in all
    gen = generation("ab", [1, 3])
    base = FakeBackend("base", gen)
    test = TopKFake("test", gen, SKEWED)
    result = compare(base, test)
    assert result.method == TEACHER_FORCED_TOP_K
    bound = 0.25 * ln(0.5) + 0.25 * ln(1.5) + 0.5 * ln(0.5 / (1 / 3 + D))
    assert KL_UNIFORM_SKEWED - bound == pytest.approx(1.5e-3, rel=3e-3)
    assert np.allclose(result.kl_per_position, [bound] * 2, atol=1e-7)
    assert result.same_top == [True, True]  # argmax of a uniform row: id 0; test top-1: 0
    assert np.allclose(result.delta_p, [1 / 6 - 1 / 4] * 2, atol=1e-7)
    assert test.scored == [(PROMPT_IDS, (1, 3))]
    assert "mean KL (lower bound)" in item_violations(result, Thresholds(max_kl=0.1))[0]
    assert "teacher-forced-top-k over 2 positions, KL a lower bound" in describe(result)


def test_two_top_k_scorers_are_teacher_forced_top_k_at_every_position() -> None:
    # B = {0: .25, c: .25}, T = {0: .5, c: 1/6}: 0.130812 as above with exact tails; known to
    # D = 1e-3: P in [.499, .501], Q <= 1/3 + D, (1/3 + D) / e below P's range:
    # .25 ln .5 + .25 ln 1.5 + .499 ln(.499 / (1/3 + D)) = 0.127913
    gen = generation("abc", [1, 2, 3])
    result = compare(TopKFake("base", gen, UNIFORM), TopKFake("test", gen, SKEWED))
    assert result.method == TEACHER_FORCED_TOP_K
    bound = 0.25 * ln(0.5) + 0.25 * ln(1.5) + (0.5 - D) * ln((0.5 - D) / (1 / 3 + D))
    assert bound == pytest.approx(0.127913, abs=1e-6)
    assert np.allclose(result.kl_per_position, [bound] * 3, atol=1e-7)
    assert np.allclose(result.delta_p, [1 / 6 - 1 / 4] * 3, atol=1e-7)


TEXT_SIDE = Capabilities(top_k_logprobs=2)


def _text_generation(tokens: list[str], tops: list[dict[str, float]], **kw: object) -> Generation:
    chosen = [top[t] for t, top in zip(tokens, tops, strict=True)]
    return Generation(
        text="".join(tokens),
        token_ids=None,
        finish_reason="length",
        chosen_logprobs=chosen,  # type: ignore[arg-type]
        top_logprobs=tops,  # type: ignore[arg-type]
        top_keys="text",
        **kw,  # type: ignore[arg-type]
    )


BASE_TOPS: list[dict[str, float]] = [
    {"x": ln(0.9), "q": ln(0.05)},
    {"y": ln(0.8), "w": ln(0.1)},
    {"z": ln(0.7)},
]
TEST_TOPS: list[dict[str, float]] = [
    {"x": ln(0.5), "q": ln(0.4)},
    {"w": ln(0.6), "y": ln(0.3)},
    {"v": ln(0.7)},
]


def test_text_keyed_top_k_stops_at_the_first_divergent_token() -> None:
    # "x y z" against "x w v": the tokens differ from token 1 (read from each top-k: the entry
    # whose logprob is the chosen one). Positions 0 and 1 only; position 2 (different
    # prefixes, disjoint top-k: a tail-bucket KL of exactly 0) was averaged in before.
    #   KL_0: S={x,q}: .9 ln(.9/.5) + .05 ln(.05/.4) + tail .05 ln(.05/.1) = 0.3903786
    #   KL_1: S={y,w}: .8 ln(.8/.3) + .1 ln(.1/.6) + tail .1 ln(.1/.1) = 0.6054875
    # with each tail known to D = 1e-3 (x = P - D nearest Q_hi / e, Q_hi = Q + D):
    #   KL_0 = ... + .049 ln(.049/.101) = 0.3895942
    #   KL_1 = ... + .099 ln(.099/.101) = 0.6035074
    base = FakeBackend("base", _text_generation(["x", "y", "z"], BASE_TOPS), capabilities=TEXT_SIDE)
    test = FakeBackend("test", _text_generation(["x", "w", "v"], TEST_TOPS), capabilities=TEXT_SIDE)
    result = compare(base, test)
    assert result.method == TOP_K_LOWER_BOUND
    kl_0 = 0.9 * ln(0.9 / 0.5) + 0.05 * ln(0.05 / 0.4) + (0.05 - D) * ln((0.05 - D) / (0.1 + D))
    kl_1 = 0.8 * ln(0.8 / 0.3) + 0.1 * ln(0.1 / 0.6) + (0.1 - D) * ln((0.1 - D) / (0.1 + D))
    assert [kl_0, kl_1] == pytest.approx([0.3895942, 0.6035074], abs=1e-7)
    assert np.allclose(result.kl_per_position, [kl_0, kl_1], atol=1e-9)
    assert "first differing token 1" in result.method_note
    assert result.kl_mean is not None and result.kl_mean > 0.001
    assert item_violations(result, Thresholds(max_kl=0.001))


def test_a_divergence_that_cannot_be_located_is_text_only_and_says_why() -> None:
    # No chosen logprobs: no token texts to read, no tokenizer: nothing is averaged.
    base_gen = _text_generation(["x", "y", "z"], BASE_TOPS)
    base_gen.chosen_logprobs = None
    base = FakeBackend("base", base_gen, capabilities=TEXT_SIDE)
    test = FakeBackend("test", _text_generation(["x", "w", "v"], TEST_TOPS), capabilities=TEXT_SIDE)
    result = compare(base, test)
    assert result.method == TEXT_ONLY
    assert result.kl_per_position == []
    assert "first differing token cannot be located" in result.method_note
    assert "first differing token cannot be located" in describe(result)
    assert "method_note" in result.to_plain()


def test_top_k_keyed_otherwise_is_text_only_and_says_why() -> None:
    ids_gen = generation("xyz", [1, 2, 3], top_logprobs=[{1: -0.1}] * 3, chosen_logprobs=[-0.1] * 3)
    base = FakeBackend("base", ids_gen, capabilities=Capabilities(top_k_logprobs=1, token_ids=True))
    test = FakeBackend("test", _text_generation(["x", "y", "z"], BASE_TOPS), capabilities=TEXT_SIDE)
    result = compare(base, test)
    assert result.method == TEXT_ONLY
    assert result.method_note == (
        "the baseline keys its top-k logprobs by token id, the test side by token text: the "
        "two are not compared"
    )


def test_a_side_without_logprobs_is_named() -> None:
    gen = _text_generation(["x"], [{"x": -0.1}])
    bare = Generation(text="x", token_ids=None, finish_reason="length")
    result = compare(
        FakeBackend("base", gen, capabilities=TEXT_SIDE),
        FakeBackend("test", bare, capabilities=Capabilities()),
    )
    assert result.method == TEXT_ONLY
    assert result.method_note == "the test side returned no top-k logprobs"
    assert (
        "method_note"
        not in compare(
            FakeBackend("b", generation("a", [1])), FakeBackend("t", generation("a", [1]))
        ).to_plain()
    )


def test_a_text_only_comparison_says_why_the_backend_gave_no_logprobs() -> None:
    """The backend's own reason (a server's logprob negotiation) is part of the note."""
    from pytest_infercheck.checks.comparison.scoring import text_only_reason as _text_only_reason

    with_top = Generation("a", None, "stop", [-0.1], [{"a": -0.1}], top_keys="text")
    without = Generation("a", None, "stop")
    why = "completions: logprobs: 5 -> HTTP 400 'logprobs must be of type bool'"
    assert _text_only_reason((with_top, None), (without, why), False) == (
        f"the test side returned no top-k logprobs ({why})"
    )
    assert _text_only_reason((without, None), (with_top, None), False) == (
        "the baseline returned no top-k logprobs"
    )
    assert _text_only_reason((with_top, None), (with_top, None), False) == ""


def test_the_noise_floor_leaves_out_positions_an_engine_did_not_report() -> None:
    """llama-server reports no entry for a token that ends inside a UTF-8 character: a NaN
    chosen logprob with an empty top-k map. Such a position is not a measured difference
    (the floor is of the others, here |-0.5 - -0.25| = 0.25 at position 1); a NaN with a
    non-empty map is a measured NaN and keeps the floor NaN (a violation)."""
    text_only = Capabilities(top_k_logprobs=2, token_ids=True)
    base = FakeBackend(
        "b", generation("ab", [1, 2, 3], chosen_logprobs=[-0.1, -0.5, -0.2]), rows_of(UNIFORM)
    )

    def test_side(chosen0: float, row0: dict[int, float]) -> FakeBackend:
        top = [row0, {2: -0.25, 1: -3.0}, {3: -0.2, 1: -4.0}]
        made = generation("ab", [1, 2, 3], chosen_logprobs=[chosen0, -0.25, -0.2], top_logprobs=top)
        return FakeBackend("t", made, capabilities=text_only)

    unreported = compare(base, test_side(math.nan, {}))
    assert unreported.noise_floor == pytest.approx(0.25)
    assert "noise floor" not in " ".join(item_violations(unreported, Thresholds()))
    measured_nan = compare(base, test_side(math.nan, {1: math.nan}))
    assert measured_nan.noise_floor is not None and math.isnan(measured_nan.noise_floor)
