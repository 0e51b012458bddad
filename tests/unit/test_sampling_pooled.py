"""Draws known by their text only (vllm-mlx, mlx_lm.server): tokens that share a text are
one cell, in the expected distribution (:func:`pooled`, values by hand) and in the item's
judgement (:class:`PositionEvidence` with ``groups``)."""

from __future__ import annotations

import math

import pytest

from pytest_infercheck.checks.sampling.evidence import Analysis, PositionEvidence
from pytest_infercheck.metrics.sampling import Expected, pooled
from pytest_infercheck.verdict.measure import Finding


def test_a_group_is_one_cell_named_by_its_first_id() -> None:
    e = Expected({0: 0.5, 1: 0.3, 2: 0.2})
    assert pooled(e, [(1, 2)]) == Expected({0: 0.5, 1: 0.5})
    # a group of one id, or none, changes nothing
    assert pooled(e, [(2,)]) == e and pooled(e, []) == e


def test_boundary_and_excluded_members_mark_the_cell() -> None:
    # token 2 on a cut's boundary: the pooled cell's draws are left out of the test
    e = Expected({0: 0.6, 1: 0.4}, boundary=frozenset({2}), excluded=frozenset({3}))
    assert pooled(e, [(1, 2)]) == Expected(
        {0: 0.6, 1: 0.4}, boundary=frozenset({1}), excluded=frozenset({3})
    )
    # a cell of excluded tokens only stays excluded (a draw of it is outside the support)
    e = Expected({0: 1.0}, excluded=frozenset({3, 4}))
    assert pooled(e, [(3, 4)]) == Expected({0: 1.0}, excluded=frozenset({3}))
    # an excluded token pooled with a kept one is in the support with the kept one's mass
    e = Expected({0: 0.7, 1: 0.3}, excluded=frozenset({5}))
    assert pooled(e, [(1, 5)]) == Expected({0: 0.7, 1: 0.3})


def position(counts: dict[int, int], groups: list[tuple[int, ...]]) -> PositionEvidence:
    return PositionEvidence(
        prompt_id="sp001",
        target="adder@vllm",
        params={"temperature": 1.0},
        position=0,
        context=[],
        engine="vllm-mlx",
        reference="adder@ref",
        samples=sum(counts.values()),
        alpha=0.001,
        family=1,
        counts=counts,
        logprobs={0: math.log(0.5), 1: math.log(0.3), 2: math.log(0.2)},
        groups=groups,
    )


def test_an_item_of_pooled_draws_is_judged_on_the_pooled_cells() -> None:
    # tokens 1 and 2 share a text: their 500 draws are counted as token 1, and fit the
    # pooled 0.5 exactly; taken as token 1 alone (0.3 expected) they would fail.
    a = position({0: 500, 1: 500}, [(1, 2)]).analysis
    assert isinstance(a, Analysis) and a.expected.probs == pytest.approx({0: 0.5, 1: 0.5})
    assert position({0: 500, 1: 500}, [(1, 2)]).fit == Finding(True)
    alone = position({0: 500, 1: 500}, []).fit
    assert isinstance(alone, Finding) and not alone.ok
