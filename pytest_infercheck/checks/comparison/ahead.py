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
   (:func:`.scoring.planned_scorings`), sent in the same burst as the test side's
   generations (and a concurrent baseline's in the same burst as its own), so that the
   server batches them, where the items would wait for one request after another.

The items then find everything in the generation cache and compute what they computed
before from the same rows: the records are those of the one-at-a-time path (compared on a
real vLLM by ``tests/integration/test_vllm_speed.py``). A failed request here is not kept:
the item that needs its answer asks again and meets the error as before.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

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


def generate_sharing_rows(
    cache: GenerationCache,
    baseline: ResolvedTarget,
    jobs: Sequence[tuple[SideInputs, GenerationParams]],
) -> None:
    """Step 2 of the module docstring: each job's generation on an in-process baseline that
    offers its rows (:class:`~pytest_infercheck.backends.capabilities.SharedRows`), the rows
    kept as its teacher-forced rows when the job's ids are shared and they fit in the score
    cache beside what it holds (else the item scores as before)."""
    backend = baseline.backend
    if backend.concurrency > 1 or not isinstance(backend, SharedRows):
        return
    for inputs, params in jobs:
        rendered = inputs.base
        if cache.has_generation(baseline, rendered, params) or not inputs.record.shared:
            continue
        ids = rendered.token_ids
        if ids is None or backend.lockstep_ids(rendered) != list(ids):
            continue
        try:
            generation, rows = cache.call(baseline, backend.generate_with_rows(rendered, params))
        except BackendError:
            continue  # the item generates again and meets it
        cache.put_generation(baseline, rendered, params, generation)
        if rows is not None and generation.token_ids:
            key = (baseline.key, tuple(ids), tuple(generation.token_ids))
            cache.put_score(key, rows, if_fits=True)


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
        rendered = inputs.base
        if not cache.has_generation(baseline, rendered, params) or rendered.token_ids is None:
            continue
        base = cache.generate(baseline, rendered, params)
        ids, continuation = list(rendered.token_ids), base.token_ids or []
        if cache.position_stats(baseline, test, ids, continuation) is not None:
            continue  # a lockstep run's statistics stand for both scorings
        plan = planned_scorings(baseline, test, inputs.record.shared, base)
        for side, top_k in plan:
            job = ScoreJob(tuple(ids), tuple(continuation), top_k)
            (base_jobs if side == "baseline" else test_jobs).append(job)
    concurrent = [baseline.backend.concurrency > 1, test.backend.concurrency > 1]
    return (base_jobs if concurrent[0] else []), (test_jobs if concurrent[1] else [])
