"""The ``determinism`` gather facet: every run of every prompt the process runs (all I/O).

HTTP backends get every selected prompt x run at once, bounded by their concurrency (so runs
of a prompt also overlap with each other, :meth:`~pytest_infercheck.generation_cache.
GenerationCache.prefetch`); in-process backends loop. A failed run is counted (an error is a
failed run, in every denominator); a prompt whose every run failed has nothing to judge, and
its failures are :class:`~pytest_infercheck.verdict.conduct.RequestFailure`\\ s (the item
fails with the server's message). Failed runs on a managed server that is dying are its
death (with its last log lines): every item errors.

Under ``fail_on: decisive``, each output that parts from the modal one at a near-tie is
scored on the target with the modal output (:mod:`..tie_scoring`), so the judge can judge
what follows the near-tie before it waives it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from ...backends import BackendError
from ...metrics.determinism import RunOutput, run_output, summarize_runs
from ...verdict.conduct import Conduct
from ..framework.failures import request_failure
from ..framework.target import TargetGatherer
from ..tie_scoring import ScoreJob, rescore
from .evidence import DeterminismEvidence
from .records import DeterminismContext
from .spec import DeterminismSpec

if TYPE_CHECKING:
    from ...backends import GenerationParams, PromptInput
    from ..framework.plan import ItemPlan


class DeterminismGather(TargetGatherer[DeterminismSpec]):
    """The runs of one check x suite in this process (see the module docstring)."""

    @property
    def runs(self) -> int:
        return self.spec.runs

    def gather(self, plans: Sequence[ItemPlan]) -> Mapping[str, Any]:
        run, target = self.run, self.target
        prompts = [run.prompt(plan.key) for plan in plans]
        run.cache.render_many(target, prompts, run.settings.thinking)  # at once, not in turn
        jobs = [(self.render(p), self.params(p)) for p in prompts]
        failures = run.cache.prefetch(target, jobs, runs=self.runs)
        if failures:
            run.cache.check_alive(target, after_failures=True)
        out: dict[str, Any] = {}
        for plan, prompt, (rendered, params) in zip(plans, prompts, jobs, strict=True):
            out[plan.full_name] = self._prompt(prompt.id, rendered, params, failures)
        return out

    def _prompt(
        self,
        prompt_id: str,
        rendered: PromptInput,
        params: GenerationParams,
        prefetched: Mapping[Any, BackendError],
    ) -> DeterminismEvidence:
        run, target = self.run, self.target
        outputs: list[RunOutput | None] = []
        messages: list[str] = []
        errors: list[BackendError] = []
        for n in range(self.runs):
            error = prefetched.get((rendered.key(), params.key(), n))
            if error is None:
                try:
                    generation = run.cache.generate(target, rendered, params, run=n)
                except BackendError as exc:
                    error = exc
            if error is not None:
                outputs.append(None)
                messages.append(f"run {n}: {error}")
                errors.append(error)
                continue
            outputs.append(run_output(generation, n))
        thresholds = run.thresholds
        summary = summarize_runs(outputs, thresholds.tie_margin)
        conduct = Conduct()
        if errors and len(errors) == len(outputs):  # nothing to judge: the runs failed
            what = f"every run ({len(errors)} of {len(outputs)}) of {prompt_id}"
            conduct.failures.append(request_failure(target.label, what, errors[0]))
        evidence = DeterminismEvidence(
            prompt_id,
            target.label,
            summary,
            messages,
            no_logprobs=target.backend.logprob_unavailable_reason(),
            bare_runs=[n for n, o in enumerate(outputs) if o is not None and o.logprobs is None],
            conduct=conduct,
        )
        if thresholds.fail_on == "decisive":
            self._rescore(evidence, rendered)
        return evidence

    def _rescore(self, evidence: DeterminismEvidence, rendered: PromptInput) -> None:
        """Score the modal output and every output that parts from it at a near-tie."""
        near = [
            n
            for n, o in enumerate(evidence.summary.outputs)
            if o.tie is not None and o.tie.divergence_label == "near-tie"
        ]
        if not near:
            return
        prompt_ids = None if rendered.token_ids is None else tuple(rendered.token_ids)
        jobs = {
            n: ScoreJob(
                prompt_ids,
                None if o.token_ids is None else tuple(o.token_ids),
                "the modal output" if n == 0 else f"output #{n + 1}",
            )
            for n, o in enumerate(evidence.summary.outputs)
            if n == 0 or n in near
        }
        scored, failures = rescore(self.run.cache, self.target, list(jobs.values()))
        evidence.rescored = {n: scored[job] for n, job in jobs.items()}
        evidence.conduct.failures.extend(failures)

    def context(self) -> DeterminismContext:
        target = self.target
        return DeterminismContext(
            target.label, self.runs, {target.label: target.backend.identity()}
        )
