"""In-process comparisons in lockstep: the baseline and its test sides stepped together
(:mod:`~pytest_infercheck.backends.mlx_lockstep`), their generations and per-position
statistics put in the generation cache, where :func:`.prompt.compare_prompt` finds them.

Which prompts: those whose sides are all in-process models that step (mlx-lm: a backend
with a ``stepper``), greedy, with one shared prompt (the same ids on both sides); the rest
are compared as before (generated and scored one side at a time). A sweep steps the
baseline and all its levels together.

Batching is licensed per target (:func:`licence`): the run's ``batching`` setting
(``--infercheck-no-batching``), the backend's ``batching:`` option, and a probe run once per
process: :data:`PROBE_PROMPTS` prompts of the suite generated alone and in one batch must
give identical tokens and bit-identical chosen logprobs (or within the ``logprob_tolerance``
of the matrix's batch invariance check of that target). A group of prompts is batched
only when every one of its targets is licensed; otherwise each prompt is stepped alone (the
same code at batch size 1), the comparison records carry why (:func:`batching_note`), and a
failed probe is a :class:`BatchingProbeWarning` in pytest's warnings summary.

A licensed group is stepped as one batch per CPU core at once (:func:`split_evenly`, each
batch on its own mlx stream); each record's ``base_batch``/``test_batch`` is its own batch's
size. One at a time, as many lone prompts step at once.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ...backends.capabilities import Stepping
from ...generation_cache import BatchingLicence

if TYPE_CHECKING:
    from ...backends import GenerationParams, PromptInput
    from ...backends.mlx_lockstep import Stepper
    from ...generation_cache import GenerationCache, ResolvedTarget
    from ...suites import Prompt


class BatchingProbeWarning(UserWarning):
    """A target's batching probe failed: its comparisons are generated one at a time (shown
    in pytest's warnings summary, besides each comparison's ``batching_note``)."""


PROBE_PROMPTS = 4
"""How many of the suite's prompts the batching probe generates alone and together."""
PROBE_TOKENS = 16
"""How many tokens each probe generation has at most."""


@dataclass(frozen=True)
class LockstepJob:
    """One prompt to step: the baseline's input, the ids, its params, and each test side's
    input (by the side's index in the group's targets)."""

    prompt: Prompt
    base_input: PromptInput
    ids: list[int]
    params: GenerationParams
    test_inputs: tuple[PromptInput, ...]


def stepper_of(target: ResolvedTarget) -> Stepper | None:
    """The target's model for lockstep stepping, if it is an in-process model that steps."""
    return target.backend.stepper() if isinstance(target.backend, Stepping) else None


def licence(
    cache: GenerationCache,
    target: ResolvedTarget,
    allowed: bool,
    why_not: str,
    tol: float,
    probe_ids: list[list[int]],
) -> BatchingLicence:
    """Whether ``target`` may be batched: not when ``allowed`` is false (``why_not`` says
    why); otherwise what the probe on ``probe_ids`` says (chosen logprobs within ``tol``),
    once per process and target."""
    if not allowed:
        return BatchingLicence(False, why_not)

    def decide() -> BatchingLicence:
        from ...backends.mlx_lockstep import cpu_parallelism, probe

        stepper = stepper_of(target)
        if stepper is None:
            return BatchingLicence(False, f"{target.label}: not an in-process model that steps")
        problem = probe(stepper, probe_ids[:PROBE_PROMPTS], PROBE_TOKENS, tol, cpu_parallelism())
        if problem:
            note = f"{target.label}: batching probe failed ({problem}); generated one at a time"
            warnings.warn(BatchingProbeWarning(note), stacklevel=1)
            return BatchingLicence(False, note)
        return BatchingLicence(True)

    return cache.licence(target, decide)


def run_lockstep(
    cache: GenerationCache,
    baseline: ResolvedTarget,
    tests: list[ResolvedTarget],
    jobs: list[LockstepJob],
    batched: bool,
) -> None:
    """Step ``jobs`` through ``baseline`` and ``tests`` and cache every generation (run 0)
    and statistics: when ``batched``, in as many batches as mlx has CPU streams to run them
    on at once (:func:`split_evenly`; one batch on a GPU), else one prompt at a time (as many
    prompts at once, each alone in its forward passes)."""
    from ...backends.mlx_lockstep import cpu_parallelism, lockstep_groups

    base_stepper = stepper_of(baseline)
    test_steppers = [stepper_of(t) for t in tests]
    assert base_stepper is not None and all(s is not None for s in test_steppers)
    steppers: list[Any] = test_steppers
    parallel = cpu_parallelism()
    groups = split_evenly(jobs, parallel) if batched else [[job] for job in jobs]
    results = lockstep_groups(
        base_stepper,
        steppers,
        [([job.ids for job in g], [job.params.max_tokens for job in g]) for g in groups],
        parallel,
    )
    for group, result in zip(groups, results, strict=True):
        for j, job in enumerate(group):
            base = result.baseline[j]
            cache.put_generation(baseline, job.base_input, job.params, base)
            for k, test in enumerate(tests):
                cache.put_generation(test, job.test_inputs[k], job.params, result.tests[k][j])
                continuation = base.token_ids or []
                cache.put_position_stats(baseline, test, job.ids, continuation, result.stats[k][j])


def split_evenly(jobs: list[LockstepJob], parts: int) -> list[list[LockstepJob]]:
    """``jobs`` in at most ``parts`` consecutive groups of about equal work, a job's work
    being its prompt plus its token budget (``len(ids) + max_tokens``): a group ends once
    its running total reaches the next ``k / parts`` of the whole."""
    total = sum(len(job.ids) + job.params.max_tokens for job in jobs)
    groups: list[list[LockstepJob]] = [[]]
    done = 0
    for job in jobs:
        if groups[-1] and done * parts >= total * len(groups) and len(groups) < parts:
            groups.append([])
        groups[-1].append(job)
        done += len(job.ids) + job.params.max_tokens
    return [g for g in groups if g]


def batching_note(licences: list[BatchingLicence]) -> str:
    """Why a group was stepped one prompt at a time (the notes of its unlicensed targets),
    or "" when it was batched."""
    return "; ".join(dict.fromkeys(lic.note for lic in licences if not lic.batched))
