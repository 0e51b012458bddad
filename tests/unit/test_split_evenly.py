"""How comparisons split their prompts into batches run at once on mlx CPU streams
(:func:`pytest_infercheck.checks.comparison.batched.split_evenly`): consecutive groups of
about equal work (prompt tokens + token budget), never an empty one, order kept."""

from __future__ import annotations

import pytest

from pytest_infercheck.backends import GenerationParams, PromptInput
from pytest_infercheck.checks.comparison.batched import LockstepJob, split_evenly

from .factories import suite_prompt


def job(n: int, prompt_tokens: int, max_tokens: int) -> LockstepJob:
    prompt = suite_prompt(f"p{n}", f"prompt {n}", max_tokens)
    ids = list(range(1, prompt_tokens + 1))
    rendered = PromptInput(prompt.text, tuple(ids), templated=False)
    return LockstepJob(prompt, rendered, ids, GenerationParams(max_tokens=max_tokens), ())


def sizes(groups: list[list[LockstepJob]]) -> list[int]:
    return [len(g) for g in groups]


def test_equal_jobs_split_into_equal_halves() -> None:
    jobs = [job(n, 4, 12) for n in range(50)]
    groups = split_evenly(jobs, 2)
    assert sizes(groups) == [25, 25]
    assert [j for g in groups for j in g] == jobs  # consecutive, order kept


def test_work_not_count_balances_the_groups() -> None:
    # work 100 + 4 x 25: the first job alone is half the whole
    jobs = [job(0, 36, 64), *(job(n, 5, 20) for n in range(1, 5))]
    assert sizes(split_evenly(jobs, 2)) == [1, 4]


@pytest.mark.parametrize(
    ("count", "parts", "expected"), [(1, 2, [1]), (3, 3, [1, 1, 1]), (7, 3, [3, 2, 2])]
)
def test_never_more_groups_than_jobs_and_none_empty(
    count: int, parts: int, expected: list[int]
) -> None:
    jobs = [job(n, 2, 8) for n in range(count)]
    assert sizes(split_evenly(jobs, parts)) == expected


def test_one_part_is_one_batch() -> None:
    jobs = [job(n, 2, 8) for n in range(5)]
    assert split_evenly(jobs, 1) == [jobs]
    assert split_evenly([], 2) == []
