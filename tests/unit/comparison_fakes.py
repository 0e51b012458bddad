"""A fake backend that records what it is asked to score, and a driver for
:func:`~pytest_infercheck.checks.comparison.prompt.compare_prompt` on two of them."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np

from pytest_infercheck.backends import Generation, GenerationParams, PromptInput
from pytest_infercheck.backends.base import Backend, Capabilities
from pytest_infercheck.checks.comparison.gather_prompt import compare_prompt
from pytest_infercheck.checks.comparison.prompt import PromptComparison
from pytest_infercheck.generation_cache import GenerationCache, ResolvedTarget
from pytest_infercheck.suites import Prompt

PROMPT_IDS = (1, 2, 3)
"""What every fake renders any prompt to (both sides share a tokenizer fingerprint)."""
V = 4
UNIFORM = [math.log(0.25)] * V
"""The baseline's row at every position: p = 1/4 each."""
SKEWED = [math.log(0.5)] + [math.log(1 / 6)] * (V - 1)
"""The test side's row: p = (1/2, 1/6, 1/6, 1/6)."""
KL_UNIFORM_SKEWED = 0.25 * math.log(0.25 / 0.5) + 0.75 * math.log(0.25 / (1 / 6))
"""KL(uniform || skewed) by hand: 0.25 ln(1/2) + 0.75 ln(3/2) = -0.173287 + 0.304099
= 0.130812 nats."""

Rows = Callable[[tuple[int, ...], tuple[int, ...]], np.ndarray]
TEACHER_FORCED = Capabilities.token_level(0, chat_template=False)


def rows_of(row: list[float], overrides: dict[int, list[float]] | None = None) -> Rows:
    """Scores: ``row`` at every position of the continuation, ``overrides[t]`` at ``t``."""

    def rows(prompt_ids: tuple[int, ...], continuation: tuple[int, ...]) -> np.ndarray:
        out = np.array([row] * len(continuation), dtype=np.float32).reshape(-1, V)
        for t, values in (overrides or {}).items():
            if t < len(continuation):
                out[t] = values
        return out

    return rows


class FakeBackend(Backend):
    """Generates ``generation`` for any prompt; scores with ``rows`` and records every
    ``(prompt ids, continuation ids)`` it is asked to score in ``scored``."""

    kind = "fake"

    def __init__(
        self,
        name: str,
        generation: Generation,
        rows: Rows | None = None,
        capabilities: Capabilities = TEACHER_FORCED,
    ) -> None:
        super().__init__(name)
        self.capabilities = capabilities
        self.generation = generation
        self.rows = rows or rows_of(UNIFORM)
        self.scored: list[tuple[tuple[int, ...], tuple[int, ...]]] = []

    async def render(self, user_text: str, system: str | None, thinking: bool) -> PromptInput:
        return PromptInput(user_text, PROMPT_IDS, templated=False, tokenizer_fingerprint="fp")

    def tokenizer_fingerprint(self) -> str | None:
        return "fp"

    async def generate(self, prompt: PromptInput, params: GenerationParams) -> Generation:
        return self.generation

    async def score(self, prompt_ids: list[int], continuation_ids: list[int]) -> np.ndarray:
        key = (tuple(prompt_ids), tuple(continuation_ids))
        self.scored.append(key)
        return self.rows(*key)


def generation(text: str, ids: list[int] | None, **kwargs: Any) -> Generation:
    """A generation that stopped (on its last id, the EOS, when it has ids)."""
    return Generation(text=text, token_ids=ids, finish_reason="stop", **kwargs)


def compare(base: FakeBackend, test: FakeBackend, text: str = "12+34=") -> PromptComparison:
    """One comparison item of ``test`` against ``base``, through a fresh generation cache."""
    cache = GenerationCache()
    try:
        prompt = Prompt(
            id="p1",
            text=text,
            category=None,
            max_tokens=8,
            answer=None,
            answer_kind=None,
            system=None,
            source="<test>",
        )
        return compare_prompt(
            cache,
            ResolvedTarget("bf16@local", ("bf16",), base),
            ResolvedTarget("q4@local", ("q4",), test),
            prompt,
            GenerationParams(max_tokens=8),
        )
    finally:
        cache.close()
