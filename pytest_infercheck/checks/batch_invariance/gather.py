"""The ``batch-invariance`` gather facet: each prompt alone, then its trials (all I/O).

The reference is the prompt generated alone, straight from the backend (never a cached
generation that may have been produced under concurrency), one prompt at a time: alone
means alone. Each trial draws, with a ``random.Random`` seeded by ``(seed, prompt id)``, the
needle's position and its ``batch_size - 1`` companions: other prompts of the suite (the
prompt itself when the suite has no other), each repeated 1-3 times so that the batch mixes
lengths even when the suite's prompts are alike. The batch goes through
``Backend.generate_batch``: mlx-lm's own ``BatchGenerator`` in-process, a burst of concurrent
requests on a server; trials follow one another (a trial's batch is what is tested).

A failed request alone errors the item (nothing to compare with); a failed batched request
is the trial's ``error`` and a :class:`~pytest_infercheck.verdict.conduct.RequestFailure`
(it fails the item with the server's message), and so is a companion's (the batch tested
was not the one drawn). Under ``fail_on: decisive`` the output alone
and each trial's batched output that parts from it at a near-tie are scored on the target
(:mod:`..tie_scoring`), so the judge can judge what follows the near-tie before it waives it.
"""

from __future__ import annotations

import dataclasses
import random
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from ...backends import BackendError
from ...metrics.consistency import read_generation
from ...verdict.conduct import RequestFailure
from ..framework.failures import request_failure
from ..framework.target import TargetGatherer
from ..tie_scoring import ScoreJob, rescore
from .evidence import BatchInvarianceEvidence
from .records import AloneOutput, BatchInvariancePrompt
from .spec import BatchInvarianceSpec
from .trials import batched_by, compare_to_alone, trial_labels, where

if TYPE_CHECKING:
    from ...backends import Generation, PromptInput
    from ...suites import Prompt
    from ..framework.plan import ItemPlan

MAX_REPEAT = 3
"""Companions are other prompts repeated 1..MAX_REPEAT times (mixed lengths)."""


def failure(side: str, what: str, error: BaseException) -> RequestFailure:
    """A failed request of a trial: a server's (its words) or an in-process engine's."""
    if isinstance(error, BackendError):
        return request_failure(side, what, error)
    return RequestFailure(side, what, f"{type(error).__name__}: {error}")


class BatchInvarianceGather(TargetGatherer[BatchInvarianceSpec]):
    """The trials of one check x suite in this process (see the module docstring)."""

    def gather(self, plans: Sequence[ItemPlan]) -> Mapping[str, Any]:
        out: dict[str, Any] = {}
        for plan in plans:
            try:
                out[plan.full_name] = self._prompt(self.run.prompt(plan.key))
            except BackendError as exc:  # the prompt alone failed: the item errors
                out[plan.full_name] = exc
        return out

    def _prompt(self, prompt: Prompt) -> BatchInvarianceEvidence:
        run, target = self.run, self.target
        spec, backend = self.spec, target.backend
        params = self.params(prompt)
        needle = self.render(prompt)
        alone = run.cache.call(target, backend.generate(needle, params))
        alone_read = read_generation("the output alone", alone)
        rng = random.Random(f"{spec.seed}:{prompt.id}")
        others = [p for p in run.suite.prompts if p.id != prompt.id] or [prompt]
        trials, failures = [], []
        outputs: dict[int, Generation] = {}
        for n in range(spec.trials):
            position = rng.randrange(spec.batch_size)
            companions = [self._companion(rng, others) for _ in range(spec.batch_size - 1)]
            inputs = [c for _, c in companions]
            inputs.insert(position, needle)
            names = [name for name, _ in companions]
            names.insert(position, prompt.id)
            try:
                results: list[Generation | BaseException] = run.cache.call(
                    target, backend.generate_batch(inputs, params)
                )
            except BackendError as exc:  # the whole batch failed
                results = [exc] * len(inputs)
            batched = results[position]
            trial = compare_to_alone(
                alone,
                batched,
                trial=n,
                position=position,
                batch=names,
                tie_margin=run.thresholds.tie_margin,
            )
            trials.append(trial)
            for i, result in enumerate(results):
                if isinstance(result, BaseException):  # the batch was not the one tested
                    what = (
                        "the batched request"
                        if i == position
                        else f"companion {names[i]} at position {i}"
                    )
                    failures.append(failure(where(trial), what, result))
            if not isinstance(batched, BaseException):
                outputs[n] = batched
        record = BatchInvariancePrompt(
            prompt_id=prompt.id,
            target=target.label,
            seed=spec.seed,
            alone=AloneOutput(
                alone.text, alone.token_ids, alone_read.faults, alone_read.degenerate
            ),
            trials=trials,
            batched_by=batched_by(backend),
            divergence_labels=trial_labels(trials),
        )
        bare = [] if alone.chosen_logprobs is not None else ["the output alone"]
        bare += [f"{where(t)}'s batched output" for t in trials if t.error is None and
                 outputs[t.trial].chosen_logprobs is None]  # fmt: skip
        evidence = BatchInvarianceEvidence(
            record, no_logprobs=backend.logprob_unavailable_reason(), bare=bare
        )
        evidence.conduct.failures.extend(failures)
        if run.thresholds.fail_on == "decisive":
            self._rescore(evidence, needle, alone, outputs)
        return evidence

    def _rescore(
        self,
        evidence: BatchInvarianceEvidence,
        needle: PromptInput,
        alone: Generation,
        outputs: Mapping[int, Generation],
    ) -> None:
        """Score the output alone and every batched output that parts from it at a
        near-tie."""
        near = [
            t
            for t in evidence.record.trials
            if t.tie is not None and t.tie.divergence_label == "near-tie"
        ]
        if not near:
            return
        prompt_ids = None if needle.token_ids is None else tuple(needle.token_ids)

        def ids(values: Sequence[int] | None) -> tuple[int, ...] | None:
            return None if values is None else tuple(values)

        alone_job = ScoreJob(prompt_ids, ids(alone.token_ids), "the output alone")
        jobs = {
            t.trial: ScoreJob(prompt_ids, ids(outputs[t.trial].token_ids), f"{where(t)}'s output")
            for t in near
        }
        scored, failures = rescore(self.run.cache, self.target, [alone_job, *jobs.values()])
        evidence.rescored_alone = scored[alone_job]
        evidence.rescored = {n: scored[job] for n, job in jobs.items()}
        evidence.conduct.failures.extend(failures)

    def _companion(self, rng: random.Random, others: list[Prompt]) -> tuple[str, PromptInput]:
        """A random other prompt repeated 1..MAX_REPEAT times (a conversation: once, as it
        is): its name and rendering."""
        other = rng.choice(others)
        repeat = rng.randint(1, MAX_REPEAT)
        if other.messages is not None:
            repeat = 1
        name = other.id if repeat == 1 else f"{other.id}*{repeat}"
        return name, self.render(dataclasses.replace(other, text=other.text * repeat))
