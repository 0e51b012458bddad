"""A comparison's requests made ahead of its items, at once (:meth:`.gather.ComparisonGatherer.
prefetch`, unless batching is turned off): what each item would otherwise ask one request
after the other while it runs.

1. whether the test side takes the baseline's prompt ids, asked of an HTTP test side for
   every prompt at once (:meth:`~pytest_infercheck.generation_cache.GenerationCache.
   accepts_ids_ahead`), not one ``/tokenize`` round trip per item;
2. an in-process baseline's generations, each with its rows kept as its teacher-forced
   rows when they are those (:mod:`~pytest_infercheck.backends.mlx_rows`): the
   baseline's full-vocabulary pass is shared with its generation, not run again;
3. the teacher-forced scorings the items' :func:`.scoring.distributions` will read
   (:func:`.scoring.planned_scorings`), sent with the test side's generations so that the
   server batches them, where the items would wait for one request after another. Against
   an in-process baseline (:func:`overlapped`) the test side's generations go out first
   and the server works on them while the baseline generates, and each prompt's scorings
   go out as soon as its baseline continuation is known; against a concurrent baseline its
   generations come first, then its scorings, then the test side's generations and
   scorings in one burst (:func:`scorings_ahead`).

The items then find everything in the generation cache and compute what they computed
before from the same rows: the records are those of the one-at-a-time path (compared on a
real vLLM by ``tests/integration/test_vllm_speed.py``). A request that failed here (a
generation, a scoring, a ``/tokenize`` check) is kept as the item's error and never asked
again: an engine that refuses once has refused, whoever asked (the verdict harness injects
such faults on the first request of each kind).
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

from ...backends import BackendError
from ...backends.capabilities import SharedRows
from ...cache_keys import ScoreJob
from .scoring import planned_scorings

if TYPE_CHECKING:
    from collections.abc import Sequence

    from ...backends import GenerationParams, PromptInput
    from ...generation_cache import GenerationCache, ResolvedTarget
    from ...suites import Prompt
    from .inputs import SideInputs


def accept_ids_ahead(
    cache: GenerationCache,
    baseline: ResolvedTarget,
    test: ResolvedTarget,
    prompts: Sequence[Prompt],
    thinking: bool,
) -> None:
    """Step 1 of the module docstring, for the single-turn prompts the baseline renders."""
    rendered: list[PromptInput] = []
    for prompt in prompts:
        if prompt.messages is not None:
            continue
        try:
            rendered.append(cache.render(baseline, prompt, thinking))
        except BackendError:
            continue  # the item meets it
    cache.accepts_ids_ahead(test, rendered)


SEND_S = 0.02
"""How long the loop runs after the test side's generations are issued and before the
baseline's first (blocking, in-process) generation: long enough for them to be written."""


def overlapped(
    cache: GenerationCache,
    baseline: ResolvedTarget,
    test: ResolvedTarget,
    jobs: Sequence[tuple[SideInputs, GenerationParams]],
) -> bool:
    """Steps 2 and 3 of the module docstring at once, for an in-process baseline that offers
    its rows (:class:`~pytest_infercheck.backends.capabilities.SharedRows`) against a
    concurrent (HTTP) test side: the test side's generations issued first, the baseline's
    generations made (blocking this loop) while the server works on them, each prompt's
    scorings issued as soon as its baseline continuation is known; everything kept in the
    cache as :meth:`~pytest_infercheck.generation_cache.GenerationCache.prefetch` keeps it.
    False (nothing done) for other sides."""
    backend, server = baseline.backend, test.backend
    if backend.concurrency > 1 or server.concurrency <= 1 or not isinstance(backend, SharedRows):
        return False
    wanted = dict.fromkeys((i.test, q) for i, q in jobs)
    generations = [(p, q, 0) for p, q in wanted if not cache.has_generation(test, p, q)]

    async def work() -> tuple[list[Any], list[ScoreJob]]:
        tasks = [asyncio.ensure_future(server.generate(p, q)) for p, q, _ in generations]
        await asyncio.sleep(SEND_S)
        scorings: dict[ScoreJob, asyncio.Future[Any]] = {}
        for inputs, params in jobs:
            await _generate_baseline(cache, baseline, inputs, params)
            for job in _planned(cache, baseline, test, inputs, params)[1]:
                if job not in scorings and not cache.has_scored(test, job):
                    scorings[job] = asyncio.ensure_future(job.run(server))
            await asyncio.sleep(0)  # the scorings go out before the next generation blocks
        done = await asyncio.gather(*tasks, *scorings.values(), return_exceptions=True)
        return done, list(scorings)

    with cache.watching(test):
        results, scored = cache.run(work())
    for job, answer in zip(scored, results[len(generations) :], strict=True):
        cache.put_scored(test, job, answer)
    for generation, result in zip(generations, results[: len(generations)], strict=True):
        cache.put_result(test, generation, result)
    return True


async def _generate_baseline(
    cache: GenerationCache, baseline: ResolvedTarget, inputs: SideInputs, params: GenerationParams
) -> None:
    """The baseline's generation of one job, kept in the cache, with its rows kept as its
    teacher-forced rows when the job's ids are shared and they fit in the score cache beside
    what it holds (else the item scores as before)."""
    backend, rendered = baseline.backend, inputs.base
    assert isinstance(backend, SharedRows)
    if cache.has_generation(baseline, rendered, params):
        return
    ids = rendered.token_ids
    share = inputs.record.shared and ids is not None and backend.lockstep_ids(rendered) == list(ids)
    try:
        if share:
            generation, rows = await backend.generate_with_rows(rendered, params)
        else:
            generation, rows = await backend.generate(rendered, params), None
    except BackendError as exc:
        cache.put_result(baseline, (rendered, params, 0), exc)  # the item's error
        return
    cache.put_generation(baseline, rendered, params, generation)
    if rows is not None and ids is not None and generation.token_ids:
        key = (baseline.key, tuple(ids), tuple(generation.token_ids))
        cache.put_score(key, rows, if_fits=True)


def _planned(
    cache: GenerationCache,
    baseline: ResolvedTarget,
    test: ResolvedTarget,
    inputs: SideInputs,
    params: GenerationParams,
) -> tuple[list[ScoreJob], list[ScoreJob]]:
    """The scorings of one job whose baseline generation is in hand (baseline's, test
    side's): :func:`.scoring.planned_scorings` on the ids the item will score."""
    rendered = inputs.base
    if not cache.has_generation(baseline, rendered, params) or rendered.token_ids is None:
        return [], []
    base = cache.generate(baseline, rendered, params)
    ids, continuation = list(rendered.token_ids), base.token_ids or []
    if cache.position_stats(baseline, test, ids, continuation) is not None:
        return [], []  # a lockstep run's statistics stand for both scorings
    out: tuple[list[ScoreJob], list[ScoreJob]] = ([], [])
    for side, top_k in planned_scorings(baseline, test, inputs.record.shared, base):
        out[side != "baseline"].append(ScoreJob(tuple(ids), tuple(continuation), top_k))
    return out


def scorings_ahead(
    cache: GenerationCache,
    baseline: ResolvedTarget,
    test: ResolvedTarget,
    jobs: Sequence[tuple[SideInputs, GenerationParams]],
) -> tuple[list[ScoreJob], list[ScoreJob]]:
    """Step 3 of the module docstring: the scorings of ``jobs`` whose baseline generation is
    in hand, (baseline's, test side's); a side that runs in-process scores when its items
    run (nothing to batch)."""
    base_jobs: list[ScoreJob] = []
    test_jobs: list[ScoreJob] = []
    for inputs, params in jobs:
        base, other = _planned(cache, baseline, test, inputs, params)
        base_jobs += base
        test_jobs += other
    concurrent = [baseline.backend.concurrency > 1, test.backend.concurrency > 1]
    return (base_jobs if concurrent[0] else []), (test_jobs if concurrent[1] else [])
