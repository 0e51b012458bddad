"""The work of one comparison check x suite (compare, sweep, diff): per-prompt comparisons,
the sweep's self-check, the context of the suite aggregate, and recording a golden.

Items: one per prompt and test side (``r017``, or ``r017[q4]`` with several sides), after a
sweep's ``self-check``. Results are memoised on the run (one per check x suite and process),
so the aggregate item reuses what the prompt items computed (and computes what ``-k`` or
another worker left out, all at once: :meth:`ComparisonRun.prepare`). The aggregate itself
is :func:`.summary.summarize` (a sweep's :func:`.summary.summarize_sweep`) of the items'
records.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, TypeVar

from ...backends.capabilities import Stepping
from ...conversation import Conversation, has_generated
from ...golden import golden_name, record_prompts, replay_lines, verify_replay
from ...metrics.consistency import reported_logprobs
from ...metrics.degenerate import DegenerateScan
from ...metrics.determinism import logprob_diff
from ...metrics.sameness import same_generation
from ...specs import LogprobTolerance
from ..protocol import CheckRun, ItemPlan, Outcome, memoised
from .aggregate import SELF_CHECK, SelfCheckRecord
from .batched import LockstepJob, batching_note, licence, run_lockstep, stepper_of
from .gates import is_ungated, item_verdict, warn_unexercised, warn_ungated
from .inputs import SideInputs, decide_inputs
from .options import (
    CompareSpec,
    ComparisonSpec,
    DiffSpec,
    DiffThresholds,
    SweepSpec,
    Thresholds,
)
from .prompt import PromptComparison, compare_prompt, look_up_origins
from .summary import ComparisonContext, SweepContext
from .turns import compare_turns, final_turn, first_divergent_turn
from .verdicts import describe

if TYPE_CHECKING:
    from ...config import CheckSpec
    from ...generation_cache import ResolvedTarget
    from ...specs import Side
    from ...suites import Prompt, Suite

CS = TypeVar("CS", bound=ComparisonSpec)
CT = TypeVar("CT", bound=Thresholds)

SELF_CHECK_FAILED = (
    "baseline self-check FAILED: the baseline is not deterministic, so no sweep level can be "
    "judged against it"
)


@dataclass
class ComparisonRun(CheckRun[CS, CT]):
    """The comparisons of one compare/sweep/diff check x suite, memoised on the run (shared by
    the suite's items and its aggregate); typed by the kind's options ``CS`` and thresholds
    ``CT``."""

    _comparisons: dict[tuple[str, str], PromptComparison] = field(
        default_factory=dict, init=False, repr=False
    )
    """By (prompt id, test side ref): the prompt's comparison."""
    _self_checks: dict[str, str | None] = field(default_factory=dict, init=False, repr=False)
    """By prompt id: how its two baseline generations differ (None: reproduced)."""
    _inputs: dict[tuple[str, str], SideInputs] = field(default_factory=dict, init=False, repr=False)
    """By (prompt id, test side ref): the inputs both sides receive (:mod:`.inputs`)."""
    _prefetched: dict[str, set[str]] = field(default_factory=dict, init=False, repr=False)
    """By test side ref: the prompt ids prefetched for it (or that needed no prefetch)."""
    _stepped: set[str] = field(default_factory=set, init=False, repr=False)
    """The prompt ids offered to the lockstep (:meth:`step_in_lockstep`), stepped or not."""
    _self_check_generated: str = field(default="", init=False, repr=False)
    """How the self-check's two baseline runs were generated (:class:`SelfCheckRecord`)."""
    _batching_note: str = field(default="", init=False, repr=False)
    """Why the lockstep stepped prompts one at a time ("" when batched or not stepped)."""
    golden_payloads: dict[str, dict[str, Any]] = field(default_factory=dict, init=False, repr=False)
    """Under ``--infercheck-record``, by prompt id: what
    :func:`~pytest_infercheck.golden.record_prompts` recorded of the prompt (a header and an
    entry for the golden writer)."""

    # -- collection time ---------------------------------------------------------------------
    @classmethod
    def plan(cls, check: CheckSpec, suite: Suite) -> list[ItemPlan]:
        """``self-check`` (a sweep that asks for it), then each prompt x test side."""
        spec: ComparisonSpec = check.spec
        labels = [side.label for side in spec.test_sides(())]
        plans = [ItemPlan(SELF_CHECK, SELF_CHECK, SELF_CHECK)] if spec.runs_self_check() else []
        plans += [
            ItemPlan(p.id, "prompt", p.id, param=label) for p in suite.prompts for label in labels
        ]
        return plans

    # -- items -----------------------------------------------------------------------------------
    def run_item(self, plan: ItemPlan) -> Outcome:
        if plan.role == SELF_CHECK:
            problems = self.self_check()
            failed = [p.id for p in self.suite.prompts if self._self_checks[p.id] is not None]
            return Outcome(
                problems,
                SELF_CHECK_FAILED,
                SelfCheckRecord(problems, failed, self._self_check_generated),
                [("infercheck_self_check_problems", len(problems))],
            )
        if self.recording:
            return self.record([plan.key])
        side = next(s for s in self.tests() if s.label == plan.param)
        result, violations = self.prompt_result(plan.key, side.ref)
        text = describe(result)
        if result.batching_note:
            text += f"\ngenerated one at a time: {result.batching_note}"
        if result.unexercised:
            text += "\nunexercised: " + "; ".join(result.unexercised)
            warn_unexercised(f"{self.check.kind} {plan.key}", result, self.thresholds)
        return Outcome(
            violations, text, result, self.item_properties(result), degenerate=result.degenerate
        )

    # -- targets ----------------------------------------------------------------------------
    @property
    def baseline(self) -> ResolvedTarget:
        return self.resolve(self.check.baseline_side(self.index))

    def tests(self) -> list[Side]:
        """The test sides in the user's order: one for compare, the sweep's models, the diff's
        other backends."""
        return self.check.test_sides(self.index)

    # -- per prompt ------------------------------------------------------------------------------
    def prefetch(self, side: Side, prompts: list[Prompt] | None = None) -> None:
        """Generate ``prompts`` (default: the selected prompts of the suite) on both sides at
        once, but those already prefetched: in-process models in lockstep with every
        in-process test side (:meth:`step_in_lockstep`), a concurrent (HTTP) backend
        concurrently (its renders first, then its generations, then what the divergence
        origins of the prompts whose outputs differ ask the engines:
        :func:`.prompt.look_up_origins`); anything else generates item by item."""
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
        thinking = self.settings.thinking
        self.cache.render_many(baseline, prompts, thinking)
        base_jobs, test_jobs = [], []
        for prompt in prompts:
            inputs = self.inputs(prompt, side)
            base_jobs.append((inputs.base, self.params(prompt)))
            test_jobs.append((inputs.test, self.params(prompt)))
        # One side after the other: on a 2-core machine two servers generating at once
        # finished later than in turn (0.95 s vs 0.75 s for 20 x 64, llama-server and vllm-mlx).
        self.cache.prefetch(baseline, base_jobs)
        self.cache.prefetch(test, test_jobs)
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
        check (:class:`~pytest_infercheck.checks.batch_invariance.BatchInvarianceSpec`) of
        the same target in the matrix (the smallest, if several), else 0 (bit-identical)."""
        if not self.settings.batching:
            return False, "batching turned off (--infercheck-no-batching)", 0.0
        target = self.loaded.target(side.ref, side.loc)
        if not self.loaded.matrix.backends[target.backend].batching:
            return False, f"backend {target.backend!r}: batching: false", 0.0
        from ..batch_invariance import BatchInvarianceSpec

        tolerances = []
        for i, check in enumerate(self.loaded.matrix.checks):
            if not isinstance(check.spec, BatchInvarianceSpec):
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

    def inputs(self, prompt: Prompt, side: Side) -> SideInputs:
        """What the baseline and ``side`` receive for ``prompt`` (decided once, memoised)."""
        return memoised(
            self._inputs,
            (prompt.id, side.ref),
            lambda: decide_inputs(
                self.cache,
                self.baseline,
                self.resolve(side),
                prompt,
                self.settings.thinking,
                self.base_conversation(prompt).messages if has_generated(prompt) else None,
            ),
        )

    def base_conversation(self, prompt: Prompt) -> Conversation:
        """``prompt`` filled in by the baseline: its turns are both sides' history."""
        return self.cache.conversation(
            self.baseline, prompt, self.settings.thinking, self.params(prompt)
        )

    def prompt_result(self, prompt_id: str, test_ref: str) -> tuple[PromptComparison, list[str]]:
        """The comparison of one prompt (memoised) and the per-item thresholds it breaks."""
        result = memoised(
            self._comparisons, (prompt_id, test_ref), lambda: self._compare(prompt_id, test_ref)
        )
        return result, item_verdict(result, self.thresholds)

    def _compare(self, prompt_id: str, test_ref: str) -> PromptComparison:
        verify_replay(self, test_ref, prompt_id)
        side = next(s for s in self.tests() if s.ref == test_ref)
        self.prefetch(side)
        prompt = self.prompt(prompt_id)
        inputs = self.inputs(prompt, side)
        result = compare_prompt(
            self.cache,
            self.baseline,
            self.resolve(side),
            prompt,
            self.params(prompt),
            thinking=self.settings.thinking,
            inputs=inputs,
            batching_note=self._batching_note,
            tie_margin=self.thresholds.tie_margin,
        )
        if prompt.messages is None:
            return result
        conversation = self.base_conversation(prompt)
        turns, faults, readings = compare_turns(
            self.cache,
            self.baseline,
            self.resolve(side),
            prompt,
            conversation,
            self.params(prompt),
            self.settings.thinking,
        )
        turns.append(final_turn(len(prompt.messages), result))
        return replace(
            result,
            turns=turns,
            first_divergent_turn=first_divergent_turn(turns),
            faults=faults + result.faults,
            degenerate=DegenerateScan.merged(
                [DegenerateScan.of([r.degenerate for r in readings]), result.degenerate]
            ),
        )

    # -- golden recording (--infercheck-record) ----------------------------------------------
    @property
    def recording(self) -> bool:
        """Under ``--infercheck-record`` a compare against a golden records its test side."""
        return self.settings.record and golden_name(self) is not None

    def record(self, prompt_ids: list[str]) -> Outcome:
        """Record ``prompt_ids`` into the golden: the item's data and the writer's entries."""
        data, entries = record_prompts(self, prompt_ids)
        return Outcome(data=data, role="record", golden_entries=entries)

    def item_properties(self, result: PromptComparison) -> list[tuple[str, Any]]:
        """Scalar numbers for JUnit properties and the report; plain types only."""
        return [
            ("infercheck_method", result.method),
            ("infercheck_kl_mean", result.kl_mean),
            ("infercheck_kl_max", result.kl_max),
            ("infercheck_same_top_rate", result.same_top_rate),
            ("infercheck_first_divergence", result.first_divergence),
            ("infercheck_divergence_label", result.divergence_label),
            ("infercheck_noise_floor", result.noise_floor),
            ("infercheck_similarity", round(result.similarity, 6)),
            ("infercheck_severity", result.severity),
            ("infercheck_flip", result.flip),
            ("infercheck_base_reasoning_chars", result.base_reasoning_chars),
            ("infercheck_test_reasoning_chars", result.test_reasoning_chars),
            ("infercheck_unexercised", len(result.unexercised)),
        ]

    # -- suite level -------------------------------------------------------------------------------
    def prepare(self, plans: list[ItemPlan]) -> None:
        """Every prompt the aggregate covers, on every test side, generated at once
        (:meth:`prefetch`: in lockstep, or concurrently) before its items are asked for."""
        wanted = {plan.key for plan in plans if plan.role == "prompt"}
        prompts = [p for p in self.suite.prompts if p.id in wanted]
        for side in self.tests():
            self.prefetch(side, prompts)

    def aggregate(self) -> Outcome:
        """The suite gates (the kind's ``summarize`` of the items' records, see
        :meth:`CheckRun.aggregate`); an ungated check warns, naming its line
        (:func:`.gates.warn_ungated`). Under ``--infercheck-record`` the aggregate records
        the whole suite into the golden instead."""
        if self.recording:
            return self.record([p.id for p in self.suite.prompts])
        outcome = super().aggregate()
        if is_ungated(self.thresholds):
            warn_ungated(self.loaded, self.index, self.check.kind, self.thresholds)
        return outcome

    def context(self) -> ComparisonContext:
        """The kind, the suite, the test sides' labels, the engines (the baseline's first)
        and, for a golden baseline, its replay line."""
        tests = [self.resolve(side) for side in self.tests()]
        return ComparisonContext(
            check=self.check.kind,
            suite=self.suite.name,
            tests=list(dict.fromkeys(t.label for t in tests)),
            engines={t.label: t.backend.identity() for t in [self.baseline, *tests]},
            replay=replay_lines(self.baseline, tests),
        )

    def self_check(self, prompts: list[Prompt] | None = None) -> list[str]:
        """Differences between two independent baseline generations of every prompt (of
        ``prompts``; default: the suite's), one line per prompt that did not reproduce."""
        problems: list[str] = []
        chosen = self.suite.prompts if prompts is None else prompts
        todo = [p for p in chosen if p.id not in self._self_checks]
        if todo:
            self.step_in_lockstep(self.prefetch_prompts())
            self._self_check_generated = self._second_baseline(todo)
        for prompt in chosen:
            if prompt.id not in self._self_checks:
                self._self_checks[prompt.id] = self._reproduce(prompt)
            problem = self._self_checks[prompt.id]
            if problem is not None:
                problems.append(f"{prompt.id}: {problem}")
        return problems

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

    def _reproduce(self, prompt: Prompt) -> str | None:
        """How the baseline's second generation of ``prompt`` differs from its first (None:
        identical tokens, text and chosen logprobs)."""
        baseline = self.baseline
        rendered = self.base_conversation(prompt).final
        params = self.params(prompt)
        first = self.cache.generate(baseline, rendered, params, run=0)
        second = self.cache.generate(baseline, rendered, params, run=1)
        verdict = same_generation(first, second)
        if not verdict.same:
            return verdict.describe()
        a = reported_logprobs(first.chosen_logprobs, first.top_logprobs)
        b = reported_logprobs(second.chosen_logprobs, second.top_logprobs)
        if a is None and b is None:
            return None
        # Fail closed: a NaN logprob is a difference (logprob_diff: NaN); so, of unknown size,
        # are logprobs in one run only, runs of different lengths and a position reported in
        # one run only. Positions neither run reported (llama-server: a token that ends inside
        # a UTF-8 character) are left out, as every check leaves them.
        aligned = (
            a is not None and b is not None and [x is None for x in a] == [y is None for y in b]
        )
        drift = logprob_diff(a, b, None) if aligned else math.nan
        if drift is None or drift == 0.0:
            return None
        return f"same tokens, logprobs drift by {drift:.3g}"


@dataclass
class CompareRun(ComparisonRun[CompareSpec, Thresholds]):
    """A ``compare``: one test side against a baseline (a golden file, or a live target)."""


@dataclass
class SweepRun(ComparisonRun[SweepSpec, Thresholds]):
    """A ``sweep``: several levels against one baseline, which first reproduces itself."""

    def context(self) -> SweepContext:
        """The comparison's context, the cliff's ``cliff_alpha`` and whether the sweep
        checks its baseline first (its ``self-check`` item's record is the cliff's first
        level)."""
        return SweepContext(
            **vars(super().context()),
            cliff_alpha=self.spec.cliff_alpha,
            self_check=self.spec.runs_self_check(),
        )


@dataclass
class DiffRun(ComparisonRun[DiffSpec, DiffThresholds]):
    """A ``diff``: one model across engines or configurations (``expect:`` beside its
    thresholds)."""
