"""The work a comparison makes ahead of its items (``checks/comparison/ahead.py``):

- :func:`~pytest_infercheck.checks.comparison.scoring.planned_scorings` names exactly the
  scorings an item's :func:`~pytest_infercheck.checks.comparison.scoring.distributions`
  then asks (fake sides of every scoring capability, counted);
- :meth:`~pytest_infercheck.generation_cache.GenerationCache.prefetch` sends those
  scorings in the same burst as the generations (in flight together), and the items' own
  ``score`` / ``score_top_k`` then ask nothing;
- mlx-lm's generation rows are its teacher-forced rows, bit for bit, on a float32 model, and
  are not offered for a bfloat16 one (its step rows are bfloat16 log-softmax).
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import numpy as np
import pytest

from pytest_infercheck.backends import BackendError, Generation, GenerationParams, PromptInput
from pytest_infercheck.backends.base import Capabilities, TopKRow
from pytest_infercheck.cache_keys import ScoreJob
from pytest_infercheck.checks.comparison.scoring import planned_scorings
from pytest_infercheck.generation_cache import GenerationCache, ResolvedTarget

from .comparison_fakes import SKEWED, UNIFORM, FakeBackend, compare, generation, rows_of

FULL = Capabilities(top_k_logprobs=4, token_ids=True, teacher_forcing=True)
TOP_K = Capabilities(top_k_logprobs=2, token_ids=True, teacher_forcing_top_k=2)
NONE = Capabilities(top_k_logprobs=2, token_ids=True)


class Counting(FakeBackend):
    """Scores full rows (``scored``) or its top 2 (``scored_top_k``), as its capabilities
    say; counts the requests in flight at once."""

    def __init__(self, name: str, caps: Capabilities, row: list[float], delay: float = 0.0):
        super().__init__(name, generation("ab", [1, 3]), rows_of(row), caps)
        self.scored_top_k: list[tuple[tuple[int, ...], tuple[int, ...]]] = []
        self.delay = delay
        self.in_flight = 0
        self.max_in_flight = 0

    async def _request(self) -> None:
        self.in_flight += 1
        self.max_in_flight = max(self.max_in_flight, self.in_flight)
        await asyncio.sleep(self.delay)
        self.in_flight -= 1

    async def generate(self, prompt: PromptInput, params: GenerationParams) -> Generation:
        await self._request()
        return self.generation

    async def score_top_k(
        self, prompt_ids: list[int], continuation_ids: list[int]
    ) -> list[TopKRow]:
        await self._request()
        self.scored_top_k.append((tuple(prompt_ids), tuple(continuation_ids)))
        rows = self.rows(tuple(prompt_ids), tuple(continuation_ids))
        out = []
        for row, c in zip(rows, continuation_ids, strict=True):
            top = [int(v) for v in np.argsort(-row, kind="stable")[:2]]
            out.append(TopKRow(float(row[c]), {v: float(row[v]) for v in top}))
        return out


def _asked(backend: Counting) -> list[bool]:
    """What ``backend`` was asked to score, as ``top_k`` flags in order (full first)."""
    return [False] * len(backend.scored) + [True] * len(backend.scored_top_k)


@pytest.mark.parametrize(
    ("caps_b", "caps_t", "expected"),
    [
        (FULL, FULL, [("baseline", False), ("test", False)]),
        (FULL, TOP_K, [("baseline", False), ("test", True)]),
        (TOP_K, FULL, [("baseline", True), ("test", False)]),
        (TOP_K, TOP_K, [("baseline", True), ("test", True)]),
        (FULL, NONE, []),  # the test side's own top-k: read from its output, not planned
        (NONE, NONE, []),
    ],
)
def test_planned_scorings_are_the_scorings_an_item_asks(
    caps_b: Capabilities, caps_t: Capabilities, expected: list[tuple[str, bool]]
) -> None:
    base, test = Counting("base", caps_b, UNIFORM), Counting("test", caps_t, SKEWED)
    planned = planned_scorings(
        ResolvedTarget("b", ("b",), base), ResolvedTarget("t", ("t",), test), True, base.generation
    )
    assert planned == expected
    compare(base, test)
    asked = [("baseline", k) for k in _asked(base)] + [("test", k) for k in _asked(test)]
    if expected:
        assert asked == expected
    else:  # a full baseline may still be scored for the test side's own top-k: not planned
        assert all(side == "baseline" for side, _ in asked)
    # no shared ids: nothing is forced
    unshared = planned_scorings(
        ResolvedTarget("b", ("b",), base), ResolvedTarget("t", ("t",), test), False, base.generation
    )
    assert unshared == []


def test_prefetch_sends_the_scorings_with_the_generations() -> None:
    test = Counting("test", TOP_K, SKEWED, delay=0.05)
    test.concurrency = 8
    target = ResolvedTarget("t", ("t",), test)
    cache = GenerationCache()
    prompts = [PromptInput(f"p{i}", (1, 2, i), templated=False) for i in range(3)]
    params = GenerationParams(max_tokens=2)
    jobs = [ScoreJob((1, 2, i), (1, 3), top_k=True) for i in range(3)]
    try:
        cache.prefetch(target, [(p, params) for p in prompts], scores=[*jobs, jobs[0]])
        # 3 generations and 3 scorings (the repeated job once) in flight together
        assert test.max_in_flight == 6
        assert len(test.scored_top_k) == 3
        rows = [cache.score_top_k(target, [1, 2, i], [1, 3]) for i in range(3)]
        assert len(test.scored_top_k) == 3  # the items ask nothing more
        assert rows[0][0].chosen == pytest.approx(SKEWED[1])
    finally:
        cache.close()


def test_shared_rows_are_kept_only_if_they_fit() -> None:
    cache = GenerationCache(score_cache_bytes=100)
    rows = np.zeros((2, 10), dtype=np.float32)  # 80 bytes
    assert cache.put_score((("t",), (1,), (2, 3)), rows, if_fits=True)
    # a second would evict the first (160 > 100): not kept, the first stays
    assert not cache.put_score((("t",), (1,), (2, 4)), rows, if_fits=True)
    assert cache.put_score((("t",), (1,), (2, 3)), rows, if_fits=True)  # already kept
    assert cache.put_score((("t",), (1,), (2, 5)), rows)  # an item's own: evicts the oldest
    cache.close()


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_mlx_generation_rows_are_its_teacher_forced_rows(
    tiny_models: dict[str, Path], dtype: str
) -> None:
    from pytest_infercheck.backends.mlx_lm import MlxLmBackend
    from pytest_infercheck.backends.mlx_load import MlxModelSpec

    backend = MlxLmBackend("m", MlxModelSpec(str(tiny_models["bf16"]), None, dtype))
    prompt = asyncio.run(backend.render("12+34=", None, False))
    params = GenerationParams(max_tokens=6)
    generation, rows = asyncio.run(backend.generate_with_rows(prompt, params))
    alone = backend.generate_sync(prompt, params)
    assert (generation.token_ids, generation.chosen_logprobs, generation.text) == (
        alone.token_ids,
        alone.chosen_logprobs,
        alone.text,
    )
    assert generation.full_logprobs is None  # the generation keeps no rows
    if dtype == "bfloat16":
        assert rows is None
        return
    assert rows is not None and generation.token_ids
    forced = backend.score_sync(list(prompt.token_ids or ()), generation.token_ids)
    assert rows.dtype == np.float32 and np.array_equal(rows, forced)
    penalised = GenerationParams(max_tokens=6, repetition_penalty=1.3)
    assert asyncio.run(backend.generate_with_rows(prompt, penalised))[1] is None


class Refusing(Counting):
    """Answers every request with an error the first time it is asked, then answers: an
    engine that refuses once has refused, whoever asked."""

    def __init__(self) -> None:
        super().__init__("test", TOP_K, SKEWED)
        self.concurrency = 4
        self.refused: set[str] = set()

    def _refuse_once(self, what: str) -> None:
        if what not in self.refused:
            self.refused.add(what)
            raise BackendError(f"HTTP 500 on {what}")

    async def score_top_k(
        self, prompt_ids: list[int], continuation_ids: list[int]
    ) -> list[TopKRow]:
        self._refuse_once("score")
        return await super().score_top_k(prompt_ids, continuation_ids)

    async def accepts_token_ids(self, prompt: PromptInput) -> bool:
        self._refuse_once("tokenize")
        return True


def test_a_request_that_failed_ahead_is_the_items_error_and_never_asked_again() -> None:
    test = Refusing()
    target = ResolvedTarget("t", ("t",), test)
    cache = GenerationCache()
    prompt = PromptInput("p", (1, 2), templated=False)
    try:
        cache.prefetch(target, [], scores=[ScoreJob((1, 2), (1, 3), top_k=True)])
        cache.accepts_ids_ahead(target, [prompt])
        for _ in range(2):
            with pytest.raises(BackendError, match="HTTP 500 on score"):
                cache.score_top_k(target, [1, 2], [1, 3])
            with pytest.raises(BackendError, match="HTTP 500 on tokenize"):
                cache.accepts_ids(target, prompt)
        assert test.scored_top_k == []  # the item did not ask again (it would be answered)
    finally:
        cache.close()
