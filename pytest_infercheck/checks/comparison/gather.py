"""The gather facet of the comparison kinds: every request of a check x suite, made at once
before any item is judged.

For the items a process runs (:meth:`ComparisonGatherer.gather`):

1. every prompt on every test side generated at once (:meth:`~ComparisonGatherer.prefetch`):
   in-process models in lockstep with every in-process test side (:mod:`.batched`: the
   baseline's generation, each test side teacher-forced on it and its own continuation, in
   one pass, with ``KL_t``, the test side's most likely token and both margins at every
   position), a concurrent (HTTP) backend concurrently (renders, then generations, then the
   divergence origins' lookups of the prompts whose outputs differ, :mod:`.origins`);
2. a sweep's self-check: the baseline generated a second time, the other way from the first;
3. each item's evidence (:func:`.gather_prompt.gather_prompt`): what step 1 did not fetch
   (a separate teacher-forced scoring, a margin no row in hand gives) asked then.

Under ``--infercheck-record`` a compare against a golden records its test side instead
(:mod:`~pytest_infercheck.golden.record`), and its aggregate records the whole suite. An
ungated check warns when its aggregate is made (:func:`.gates.warn_ungated`). A gatherer
never judges, and never turns an engine's error into anything but the item's error.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from ...backends import BackendError
from ...backends.capabilities import Stepping
from ...cache_keys import ScoreJob
from ...conversation import Conversation, has_generated
from ...golden import golden_name, record_prompts, replay_lines, verify_replay
from ...specs import LogprobTolerance
from ..framework.outcome import Outcome
from .ahead import accept_ids_ahead, overlapped, scorings_ahead
from .batched import LockstepJob, batching_note, licence, run_lockstep, stepper_of
from .evidence import RecordingEvidence, Reproduced, SelfCheckEvidence
from .gates import warn_unexercised, warn_ungated
from .gather_prompt import gather_prompt
from .inputs import SideInputs, decide_inputs
from .origins import look_up_origins
from .spec import SELF_CHECK, is_ungated
from .summarize import ComparisonContext, SweepContext

if TYPE_CHECKING:
    from ...backends import GenerationParams
    from ...generation_cache import ResolvedTarget
    from ...specs import Side
    from ...suites import Prompt
    from ..framework.plan import ItemPlan
    from ..framework.run import RunContext
    from .evidence import PromptEvidence


class ComparisonGatherer:
    """The I/O of one compare / sweep / diff check x suite in one process (see the module
    docstring); what the golden recording reads of a run, too (``check``, ``index``,
    ``loaded``, ``suite``, ``cache``, ``settings``, :meth:`tests`, :meth:`resolve`,
    :meth:`params`, :attr:`golden_payloads`)."""

    def __init__(self, run: RunContext) -> None:
        self.run = run
        self.cache = run.cache
        self.loaded = run.loaded
        self.check = run.check
        self.index = run.index
        self.suite = run.suite
        self.settings = run.settings
        self.selected = run.selected
        self._inputs: dict[tuple[str, str], SideInputs] = {}
        self._prefetched: dict[str, set[str]] = {}
        self._stepped: set[str] = set()
        self._batching_note = ""
        self._self_check_generated = ""
        self.golden_payloads: dict[str, dict[str, Any]] = {}
        """Under ``--infercheck-record``, by prompt id: what
        :func:`~pytest_infercheck.golden.record_prompts` recorded of the prompt."""

    # -- what the golden recording and the items read ---------------------------------------
    @property
    def spec(self) -> Any:
        return self.check.spec

    @property
    def thresholds(self) -> Any:
        return self.run.thresholds

    @property
    def baseline(self) -> ResolvedTarget:
        return self.resolve(self.check.baseline_side(self.index))

    def tests(self) -> list[Side]:
        """The test sides in the user's order: one for compare, the sweep's models, the diff's
        other backends."""
        return self.check.test_sides(self.index)

    def resolve(self, side: Side) -> ResolvedTarget:
        return self.run.resolve(side)

    def prompt(self, prompt_id: str) -> Prompt:
        return self.run.prompt(prompt_id)

    def params(self, prompt: Prompt) -> GenerationParams:
        return self.run.params(prompt)

    @property
    def recording(self) -> bool:
        """Under ``--infercheck-record`` a compare against a golden records its test side."""
        return self.settings.record and golden_name(self) is not None

    # -- the facet ----------------------------------------------------------------------------
    def gather(self, plans: Sequence[ItemPlan]) -> Mapping[str, Any]:
        """The evidence of each of ``plans`` (a ``BackendError`` for an item whose engine
        failed), every prompt generated at once first."""
        out: dict[str, Any] = {}
        if self.recording:
            for plan in plans:
                out[plan.full_name] = self._attempt(functools.partial(self._record, [plan.key]))
            return out
        wanted = {plan.key for plan in plans if plan.role == "prompt"}
        prompts = [p for p in self.suite.prompts if p.id in wanted]
        for side in self.tests():
            # a failed generation is not cached: the items that need it meet the error
            self._attempt(functools.partial(self.prefetch, side, prompts))
        for plan in plans:
            if plan.role == SELF_CHECK:
                out[plan.full_name] = self._attempt(self._self_check)
                continue
            side = next(s for s in self.tests() if s.label == plan.param)
            found = self._attempt(functools.partial(self.prompt_evidence, plan.key, side))
            out[plan.full_name] = found
            if not isinstance(found, BackendError):
                self._warn_unexercised(plan, found)
        return out

    def context(self) -> ComparisonContext:
        """The kind, the suite, the test sides' labels, the engines (the baseline's first)
        and, for a golden baseline, its replay line; a sweep's cliff settings."""
        tests = [self.resolve(side) for side in self.tests()]
        context = ComparisonContext(
            check=self.check.kind,
            suite=self.suite.name,
            tests=list(dict.fromkeys(t.label for t in tests)),
            engines={t.label: t.backend.identity() for t in [self.baseline, *tests]},
            replay=replay_lines(self.baseline, tests),
        )
        if self.check.kind != "sweep":
            return context
        return SweepContext(
            **vars(context),
            cliff_alpha=self.spec.cliff_alpha,
            self_check=self.spec.runs_self_check(),
        )

    def aggregate(self, judged: Callable[[], Outcome]) -> Outcome:
        """The framework's aggregate; an ungated check warns, naming its line. Under
        ``--infercheck-record`` the aggregate records the whole suite into the golden
        instead."""
        if self.recording:
            data, entries = record_prompts(self, [p.id for p in self.suite.prompts])
            return Outcome(data=data, role="record", golden_entries=entries)
        outcome = judged()
        if is_ungated(self.thresholds):
            warn_ungated(self.loaded, self.index, self.check.kind, self.thresholds)
        return outcome

    @staticmethod
    def _attempt(work: Callable[[], Any]) -> Any:
        try:
            return work()
        except BackendError as exc:
            return exc

    def _record(self, prompt_ids: list[str]) -> RecordingEvidence:
        recording, payloads = record_prompts(self, prompt_ids)
        return RecordingEvidence(recording, payloads)

    def _warn_unexercised(self, plan: ItemPlan, evidence: PromptEvidence) -> None:
        never = [
            f"{r.side} {r.target}: {why}"
            for r in evidence.feature_activity
            for why in r.unexercised
        ]
        if never:
            warn_unexercised(f"{self.check.kind} {plan.key}", never, self.thresholds)

    # -- one prompt -------------------------------------------------------------------------
    def prompt_evidence(self, prompt_id: str, side: Side) -> PromptEvidence:
        """The evidence of one prompt x test side (:func:`.gather_prompt.gather_prompt`);
        a golden baseline is first checked to hold the prompt."""
        verify_replay(self, side.ref, prompt_id)
        self.prefetch(side)
        prompt = self.prompt(prompt_id)
        conversation = self.base_conversation(prompt) if prompt.messages is not None else None
        return gather_prompt(
            self.cache,
            self.baseline,
            self.resolve(side),
            prompt,
            self.params(prompt),
            thinking=self.settings.thinking,
            inputs=self.inputs(prompt, side),
            batching_note=self._batching_note,
            conversation=conversation,
        )

    def inputs(self, prompt: Prompt, side: Side) -> SideInputs:
        """What the baseline and ``side`` receive for ``prompt`` (decided once)."""
        key = (prompt.id, side.ref)
        if key not in self._inputs:
            self._inputs[key] = decide_inputs(
                self.cache,
                self.baseline,
                self.resolve(side),
                prompt,
                self.settings.thinking,
                self.base_conversation(prompt).messages if has_generated(prompt) else None,
            )
        return self._inputs[key]

    def base_conversation(self, prompt: Prompt) -> Conversation:
        """``prompt`` filled in by the baseline: its turns are both sides' history."""
        return self.cache.conversation(
            self.baseline, prompt, self.settings.thinking, self.params(prompt)
        )

    # -- every prompt at once -------------------------------------------------------------------
    def prefetch(self, side: Side, prompts: list[Prompt] | None = None) -> None:
        """Generate ``prompts`` (default: the selected prompts of the suite) on both sides at
        once, but those already prefetched: in-process models in lockstep with every
        in-process test side (:meth:`step_in_lockstep`), a concurrent (HTTP) backend
        concurrently (its renders first, then its generations, then what the divergence
        origins of the prompts whose outputs differ ask the engines:
        :func:`.origins.look_up_origins`); anything else generates item by item."""
        done = self._prefetched.setdefault(side.ref, set())
        chosen = self.prefetch_prompts() if prompts is None else prompts
        prompts = [p for p in chosen if p.id not in done]
        if not prompts:
            return
        done.update(p.id for p in prompts)
        self.step_in_lockstep(prompts)
        baseline, test = self.baseline, self.resolve(side)
        if baseline.backend.concurrency <= 1 and test.backend.concurrency <= 1:
            return
        thinking, ahead = self.settings.thinking, self.settings.batching
        self.cache.render_many(baseline, prompts, thinking)
        if ahead:
            accept_ids_ahead(self.cache, baseline, test, prompts, thinking)
        base_jobs, test_jobs, sides = [], [], []
        for prompt in prompts:
            inputs = self.inputs(prompt, side)
            base_jobs.append((inputs.base, self.params(prompt)))
            test_jobs.append((inputs.test, self.params(prompt)))
            sides.append((inputs, self.params(prompt)))
        # One side after the other: on a 2-core machine two servers generating at once
        # finished later than in turn (0.95 s vs 0.75 s for 20 x 64, llama-server and vllm-mlx).
        self.cache.prefetch(baseline, base_jobs)
        if not (ahead and overlapped(self.cache, baseline, test, sides)):
            base_scores: list[ScoreJob] = []
            test_scores: list[ScoreJob] = []
            if ahead:  # the items' scorings with the generations (:mod:`.ahead`)
                base_scores, test_scores = scorings_ahead(self.cache, baseline, test, sides)
                self.cache.prefetch(baseline, [], scores=base_scores)
            self.cache.prefetch(test, test_jobs, scores=test_scores)
        compared = [
            (
                self.inputs(p, side),
                self.cache.generate(baseline, base, q),
                self.cache.generate(test, other, q),
            )
            for p, (base, q), (other, _) in zip(prompts, base_jobs, test_jobs, strict=True)
            if self.cache.has_generation(baseline, base, q)
            and self.cache.has_generation(test, other, q)
        ]
        look_up_origins(self.cache, baseline, test, compared)

    def prefetch_prompts(self) -> list[Prompt]:
        """The selected prompts of the suite (all of them when none is selected)."""
        return [p for p in self.suite.prompts if p.id in self.selected] or list(self.suite.prompts)

    def step_in_lockstep(self, prompts: list[Prompt]) -> None:
        """Step ``prompts`` through the baseline and every test side together, where all are
        in-process models that step, greedy, on one shared prompt (:mod:`.batched`); each
        prompt once per run (those offered before are left out). Batched when every target
        is licensed, else one prompt at a time."""
        prompts = [p for p in prompts if p.id not in self._stepped]
        if not prompts:
            return
        self._stepped.update(p.id for p in prompts)
        baseline = self.baseline
        sides = [s for s in self.tests() if stepper_of(self.resolve(s)) is not None]
        if stepper_of(baseline) is None or not sides:
            return
        tests = [self.resolve(s) for s in sides]
        jobs = [job for p in prompts if (job := self._lockstep_job(p, sides)) is not None]
        if not jobs:
            return
        probe_ids = [job.ids for job in jobs]
        licences = [
            licence(self.cache, target, *self._batching_allowed(side), probe_ids)
            for target, side in zip(
                [baseline, *tests], [self.check.baseline_side(self.index), *sides], strict=True
            )
        ]
        batched = all(lic.batched for lic in licences)
        self._batching_note = batching_note(licences)
        run_lockstep(self.cache, baseline, tests, jobs, batched)

    def _batching_allowed(self, side: Side) -> tuple[bool, str, float]:
        """Whether the settings allow batching ``side``'s target, if not why, and the
        probe's logprob tolerance for it: the ``logprob_tolerance`` of a batch invariance
        check of the same target in the matrix (the smallest, if several), else 0
        (bit-identical)."""
        if not self.settings.batching:
            return False, "batching turned off (--infercheck-no-batching)", 0.0
        target = self.loaded.target(side.ref, side.loc)
        if not self.loaded.matrix.backends[target.backend].batching:
            return False, f"backend {target.backend!r}: batching: false", 0.0
        tolerances = []
        for i, check in enumerate(self.loaded.matrix.checks):
            if check.kind != "batch-invariance":
                continue
            checked = check.baseline_side(i)
            thresholds = check.kind_thresholds()
            assert isinstance(thresholds, LogprobTolerance)
            if self.loaded.target(checked.ref, checked.loc) == target:
                tolerances.append(thresholds.logprob_tolerance)
        return True, "", min(tolerances, default=0.0)

    def _lockstep_job(self, prompt: Prompt, sides: list[Side]) -> LockstepJob | None:
        """``prompt`` as a lockstep job: greedy, every side given the baseline's ids."""
        params = self.params(prompt)
        if params.temperature != 0 or params.max_tokens < 1:
            return None
        inputs = [self.inputs(prompt, side) for side in sides]
        if not all(i.record.shared for i in inputs):
            return None
        base_input = inputs[0].base
        baseline = self.baseline.backend
        if not isinstance(baseline, Stepping):
            return None
        ids = baseline.lockstep_ids(base_input)
        for side, i in zip(sides, inputs, strict=True):
            test = self.resolve(side).backend
            if not ids or not isinstance(test, Stepping) or test.lockstep_ids(i.test) != ids:
                return None
        return LockstepJob(prompt, base_input, ids, params, tuple(i.test for i in inputs))

    # -- a sweep's self-check ---------------------------------------------------------------
    def _self_check(self) -> SelfCheckEvidence:
        """Every prompt of the suite generated twice on the baseline (the second time the
        other way from the first, :meth:`_second_baseline`)."""
        prompts = list(self.suite.prompts)
        self.step_in_lockstep(self.prefetch_prompts())
        self._self_check_generated = self._second_baseline(prompts)
        pairs = []
        for prompt in prompts:
            rendered = self.base_conversation(prompt).final
            params = self.params(prompt)
            first = self.cache.generate(self.baseline, rendered, params, run=0)
            second = self.cache.generate(self.baseline, rendered, params, run=1)
            pairs.append(Reproduced(prompt.id, first, second))
        return SelfCheckEvidence(pairs, self._self_check_generated)

    def _second_baseline(self, prompts: list[Prompt]) -> str:
        """Generate the baseline's second run of ``prompts`` the other way from its first:
        one at a time after a batched first run (the default path), batched in one batch
        after a first run one at a time, when the baseline steps and is licensed to batch.
        Returns how the two runs were generated."""
        baseline = self.baseline
        rendered = [self.base_conversation(p).final for p in prompts]
        params = [self.params(p) for p in prompts]
        firsts = [
            self.cache.generate(baseline, r, q) for r, q in zip(rendered, params, strict=True)
        ]
        sizes = [g.batched for g in firsts]
        if max(sizes) > 1:
            return "batched, then one at a time"
        stepper = stepper_of(baseline)
        side = self.check.baseline_side(self.index)
        if stepper is None or any(q.temperature != 0 or q.max_tokens < 1 for q in params):
            return "one at a time, twice"
        assert isinstance(baseline.backend, Stepping)  # it has a stepper
        ids = [baseline.backend.lockstep_ids(r) for r in rendered]
        allowed = licence(self.cache, baseline, *self._batching_allowed(side), ids)
        if not allowed.batched or len(prompts) < 2 or not all(ids):
            return "one at a time, twice" + (f" ({allowed.note})" if allowed.note else "")
        from ...backends.mlx_lockstep import greedy

        seconds = greedy(stepper, ids, [q.max_tokens for q in params])
        for r, q, g in zip(rendered, params, seconds, strict=True):
            self.cache.put_generation(baseline, r, q, g, run=1)
        return "one at a time, then batched"
