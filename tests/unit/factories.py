"""Hand-made records for unit tests."""

from __future__ import annotations

from pytest_infercheck.checks.comparison.prompt import PromptComparison
from pytest_infercheck.suites import Prompt


def prompt_comparison(
    pid: str,
    kl: list[float],
    same_top: list[bool] | None = None,
    delta_p: list[float] | None = None,
    flip: str = "unchanged",
    prompt_text: str = "2+2=",
) -> PromptComparison:
    """One teacher-forced comparison of "2+2=" answered 4 by the baseline and 5 by the test
    side, with the given per-position numbers (same-top all true and delta-p all 0 unless
    given)."""
    return PromptComparison(
        prompt_id=pid,
        prompt_text=prompt_text,
        baseline="bf16@local",
        test="q4@local",
        method="teacher-forced",
        base_text="4",
        test_text="5",
        base_ids=[52, 2],
        test_ids=[53, 2],
        base_finish="stop",
        test_finish="stop",
        first_divergence=0,
        similarity=0.0,
        severity="severe",
        kl_per_position=kl,
        same_top=[True] * len(kl) if same_top is None else same_top,
        delta_p=[0.0] * len(kl) if delta_p is None else delta_p,
        answer_kind="number",
        reference="4",
        base_answer="4",
        test_answer="5",
        flip=flip,
    )


def suite_prompt(pid: str, text: str, max_tokens: int = 8) -> Prompt:
    """A suite prompt with no reference answer, category or system prompt."""
    return Prompt(
        id=pid,
        text=text,
        category=None,
        max_tokens=max_tokens,
        answer=None,
        answer_kind=None,
        system=None,
        source="<test>",
    )
