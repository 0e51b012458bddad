"""The ``stress`` gather facet: the references, then each level's requests (all I/O).

Reference: each prompt generated alone, one request at a time, through the backend's plain
``generate``. It is computed once per run and shared with every xdist worker
(:class:`~pytest_infercheck.shared_work.SharedWork`), while holding the target's load lock
exclusively, so no stress level of any worker loads the same engine meanwhile (load from
other kinds of checks is not coordinated).

Level ``L``: every prompt ``copies = max(repeats, ceil(L / prompts))`` times, copies of a
prompt side by side, so a prompt is in flight with itself and at least ``L`` requests exist.

- An engine with batched generation of its own (it overrides ``generate_batch``: mlx-lm
  in-process) gets consecutive batches of ``L`` requests (a batch is also cut where the
  generation parameters change); each request's interval is its batch call's.
- Any other engine (HTTP servers) gets every request started at once with at most ``L`` in
  flight (a semaphore), inside ``under_load()``: no client gate and no retries, so a 503
  busy answer is an error of the level, not a retry.

With ``beside`` (isolation): the references are each model's prompts alone, model after
model, on the one server; a level's jobs are every prompt's copies for each model in turn
(target, then each ``beside`` model: ``s01 base, s01 tuned, s01 tuned2, s01 base, ...``), all
started at once as above, each request through its own model's backend.

A managed server that has died is not load: a level asks whether it is alive before it
sends and, if any request failed, after; a dead one errors the level with the server's
death (exit code, last log lines), not with an error rate. A level whose every request
failed has nothing to judge: its failure is a
:class:`~pytest_infercheck.verdict.conduct.RequestFailure` (the item fails with the
server's message whatever ``max_error_rate`` allows).

A level holds the target's load lock shared: levels on different xdist workers overlap on
the same server (pytest-xdist is the load generator); each level's figures are its own
requests. Each level is measured once per run: its evidence is published in the shared
folder and reused by its item and the aggregate, whichever runs first, on whichever worker.
Under ``fail_on: decisive`` the outputs that leave their reference at a near-tie are scored
on the target with their reference after the level's requests (:mod:`..tie_scoring`).
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import time
from collections.abc import Mapping, Sequence
from functools import cached_property
from typing import TYPE_CHECKING, Any

from ...conversation import has_generated
from ...records import load_record, plain_data
from ...shared_work import SharedWork
from ...verdict.conduct import RequestFailure
from ..framework.target import TargetGatherer
from ..tie_scoring import ScoreJob, rescore
from .evidence import StressEvidence
from .measure import (
    Job,
    Output,
    batches,
    jobs_for,
    measure_level,
    output_of,
    ref_key,
    reference_of,
)
from .records import Reference
from .spec import StressSpec

if TYPE_CHECKING:
    from ...backends import Backend, PromptInput
    from ...generation_cache import ResolvedTarget
    from ...suites import Prompt
    from ..framework.plan import ItemPlan


async def send_burst(backend: Backend, jobs: Sequence[Job], level: int) -> list[Output]:
    """Every job started at once, at most ``level`` in flight; errors become outputs."""
    return await send_mixed([(backend, job, "") for job in jobs], level)


async def send_mixed(sends: Sequence[tuple[Backend, Job, str]], level: int) -> list[Output]:
    """Every ``(backend, job, side)`` started at once in order, at most ``level`` in flight,
    each through its own backend (``beside``: one model each, one server); errors become
    outputs of their side."""
    gate = asyncio.Semaphore(level)

    async def one(backend: Backend, job: Job, side: str) -> tuple[str, float, float, Any, str]:
        prompt, rendered, params = job
        async with gate:
            start = time.perf_counter()
            try:
                result: Any = await backend.generate(rendered, params)
            except Exception as exc:  # counted by kind, never dropped
                result = exc
            return prompt.id, start, time.perf_counter(), result, side

    # Outputs (and their fault checks) are made once every request is done: nothing of the
    # harness's runs while a request holds its place in flight.
    done = await asyncio.gather(*(one(*send) for send in sends))
    return [output_of(*one_done) for one_done in done]


async def send_batches(backend: Backend, jobs: Sequence[Job], level: int) -> list[Output]:
    """Batches of ``level`` jobs through ``generate_batch``, one after the other."""
    done: list[tuple[str, float, float, Any]] = []
    for batch in batches(jobs, level):
        start = time.perf_counter()
        try:
            results: list[Any] = await backend.generate_batch(
                [rendered for _, rendered, _ in batch], batch[0][2]
            )
        except Exception as exc:  # the whole batch failed: each request is an error
            results = [exc] * len(batch)
        end = time.perf_counter()
        done += [(p.id, start, end, r) for (p, _, _), r in zip(batch, results, strict=True)]
    return [output_of(*one) for one in done]  # checked after the level: no gap between batches


class StressGather(TargetGatherer[StressSpec]):
    """The stress check of one target x suite in this process (see the module docstring)."""

    @cached_property
    def shared(self) -> SharedWork:
        """The run's shared folder (a subfolder of the managed-servers folder)."""
        servers = self.run.cache.servers
        return SharedWork(None if servers is None else servers.state_dir / "stress")

    @cached_property
    def _key(self) -> str:
        """This check x suite, the same in every process of the run."""
        run = self.run
        ident = repr((str(run.loaded.path), run.index, run.suite.name))
        return hashlib.sha256(ident.encode()).hexdigest()[:16]

    @cached_property
    def _load_lock(self) -> str:
        """The lock of the engine under load, shared by every stress check of the target."""
        return "load-" + hashlib.sha256(repr(self.target.key).encode()).hexdigest()[:16]

    def gather(self, plans: Sequence[ItemPlan]) -> Mapping[str, Any]:
        return {plan.full_name: self.level(int(plan.key)) for plan in plans}

    def sides(self) -> list[tuple[str, ResolvedTarget]]:
        """The models a level asks, each with its live target: the target alone (side
        ``""``), or with ``beside`` the target's model then each ``beside`` model, by name."""
        if not self.spec.beside:
            return [("", self.target)]
        run = self.run
        model = run.check.baseline_side(run.index).ref.partition("@")[0]
        beside = [
            (side.label or side.ref, run.resolve(side)) for side in run.check.test_sides(run.index)
        ]
        return [(model, self.target), *beside]

    def render_on(self, target: ResolvedTarget, prompt: Prompt) -> PromptInput:
        """``prompt`` as ``target`` receives it (:meth:`render`, on any of the sides)."""
        thinking = self.run.settings.thinking
        if has_generated(prompt):
            return self.run.cache.conversation(target, prompt, thinking, self.params(prompt)).final
        return self.run.cache.render(target, prompt, thinking)

    def references(self) -> dict[str, Reference]:
        """Each prompt generated alone, by :func:`~.measure.ref_key` (its id; with
        ``beside``, each model's: ``tuned/s01``), computed once per run (see the module
        docstring)."""
        run = self.run
        sides = self.sides()

        def alone() -> dict[str, dict[str, Any]]:
            with self.shared.locked(self._load_lock, exclusive=True):
                return {
                    ref_key(side, p.id): plain_data(
                        reference_of(
                            run.cache.call(
                                target,
                                target.backend.generate(self.render_on(target, p), self.params(p)),
                            )
                        )
                    )
                    for side, target in sides
                    for p in run.suite.prompts
                }

        shared = self.shared.once(f"{self._key}-references", alone)
        return {pid: load_record(Reference, ref) for pid, ref in shared.items()}

    def level(self, level: int) -> StressEvidence:
        """The evidence of ``level``, measured once per run by whichever process needs it
        first."""
        shared = self.shared.once(f"{self._key}-c{level}", lambda: plain_data(self._measure(level)))
        return load_record(StressEvidence, shared)

    def _measure(self, level: int) -> StressEvidence:
        from ...backends.http import under_load  # httpx: loaded only by runs that use HTTP

        run, target = self.run, self.target
        references = self.references()
        sides = self.sides()
        rendered = {
            (side, p.id): self.render_on(side_target, p)
            for side, side_target in sides
            for p in run.suite.prompts
        }
        sends = [
            (side_target.backend, (p, rendered[side, p.id], self.params(p)), side)
            for p in jobs_for(run.suite.prompts, level, self.spec.repeats)
            for side, side_target in sides
        ]
        jobs = [job for _, job, _ in sends]
        run.cache.check_alive(target)
        with self.shared.locked(self._load_lock, exclusive=False), under_load():
            if target.backend.batching is not None and not self.spec.beside:
                outputs = run.cache.run(send_batches(target.backend, jobs, level))
            else:
                outputs = run.cache.run(send_mixed(sends, level))
        if any(output.error is not None for output in outputs):
            # a dead (or dying) server is its death, not a load failure
            run.cache.check_alive(target, after_failures=True)
        thresholds = run.thresholds
        data, near = measure_level(
            level, target.label, outputs, references, run.suite.prompts, thresholds.tie_margin
        )
        data.measured_by = os.environ.get("PYTEST_XDIST_WORKER", "main")
        evidence = StressEvidence(data, near, confidence=thresholds.flips.confidence)
        failed = [o for o in outputs if o.error is not None]
        if failed:
            said = failed[0].message or failed[0].error or ""
            status = failed[0].status
            evidence.first_error = f"HTTP {status}: {said}" if status is not None else said
        if outputs and len(failed) == len(outputs):  # nothing to judge: every request failed
            first = failed[0]
            what = f"every request ({len(failed)} of {len(outputs)}) at c{level}"
            message = first.message or first.error or ""
            evidence.failures.append(RequestFailure(target.label, what, message, first.status))
        if thresholds.fail_on == "decisive" and near:
            self._rescore(evidence, jobs, outputs, references)
        return evidence

    def _rescore(
        self,
        evidence: StressEvidence,
        jobs: Sequence[Job],
        outputs: Sequence[Output],
        references: Mapping[str, Reference],
    ) -> None:
        """Score each near-tie output and its reference on the target."""
        rendered = {prompt.id: r for prompt, r, _ in jobs}

        def job(prompt_id: str, ids: Sequence[int] | None, what: str) -> ScoreJob:
            prompt_ids = rendered[prompt_id].token_ids
            return ScoreJob(
                None if prompt_ids is None else tuple(prompt_ids),
                None if ids is None else tuple(ids),
                what,
            )

        pairs = [
            (
                job(t.prompt_id, outputs[t.request].token_ids, f"request {t.request}"),
                job(t.prompt_id, references[t.prompt_id].token_ids, f"{t.prompt_id}'s reference"),
            )
            for t in evidence.near_ties
        ]
        scored, failures = rescore(self.run.cache, self.target, [j for p in pairs for j in p])
        for tie, (output, reference) in zip(evidence.near_ties, pairs, strict=True):
            tie.output, tie.reference = scored[output], scored[reference]
        evidence.failures.extend(failures)
