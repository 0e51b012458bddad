"""cache-parity: an engine's prompt cache must not change what it generates.

Per prompt (one item, ``cache-parity[<target>]::<suite>::<prompt id>``), on one target, a
**reference** is generated with no reusable cache state, then each **scenario** generates the
prompt again through the engine's cache and is compared with it:

- reference: ``uncached`` where the backend can bypass its cache
  (:class:`~pytest_infercheck.backends.capabilities.UncachedGeneration`: llama-server
  ``cache_prompt: false``, vLLM a unique ``cache_salt``, mlx-lm a fresh prompt cache); else
  ``first-request``: the first request for the prompt in this check (vllm-mlx, mlx_lm.server,
  an ``openai`` server: no way around their cache; if the server saw the prompt before, its
  reference may itself be a cache hit, and the item says so);
- ``shared-prefix``: after another prompt sharing a long prefix (its text's first three
  quarters, the rest reversed) went through the cache: a partial hit;
- ``exact-repeat``: the prompt again (a full hit);
- ``multi-turn``: a conversation (a suite ``messages`` line, its ``generate`` turns filled in
  by the target) after its turns up to the previous user turn went through the cache (their
  answer generated and kept): the later turn served from the cached earlier ones. A
  single-turn prompt as the second user turn of a conversation rendered by the backend's chat
  template (another single-turn suite prompt, its answer, then this prompt), after the first
  turn went through the cache (its own reference: that conversation uncached, or
  first-request). ``not exercised`` where the backend cannot render a conversation (raw text);
- ``eviction``: after enough distinct prompts of the prompt's length to fill the cache's
  capacity (``eviction_tokens``, else the backend's own
  :class:`~pytest_infercheck.backends.capabilities.CacheCapacity`: vLLM's ``/metrics``); the
  capacity unknown, or more than ``max_eviction_prompts`` prompts needed: ``not exercised``
  with the reason;
- ``concurrent``: the prompt and its prefix-sharing sibling in flight together (``not
  exercised`` on a backend that takes one request at a time).

A scenario **matches** when its tokens equal the reference's (token ids where the backend gives
them, and text: :func:`~pytest_infercheck.metrics.sameness.same_generation`) and its chosen
logprobs are within ``logprob_tolerance`` of the reference's where the tokens agree (a NaN
difference never is). A differing scenario fails the item, naming the scenario and the first
divergent token, labelled ``near-tie``/``decisive``/``unknown``
(:mod:`~pytest_infercheck.metrics.ties`; ``fail_on: decisive`` passes near-ties). An empty
output against a non-empty reference is an ``empty generation`` fault; an output whose tokens
are a strict prefix of the reference's is named ``truncated``. Every output's own faults
(:mod:`~pytest_infercheck.metrics.consistency`) fail too.

Cache hits: each request's ``cached_tokens`` as the engine reports it (vLLM's
``usage.prompt_tokens_details.cached_tokens`` with ``--enable-prompt-tokens-details``,
llama-server's ``timings.cache_n``, mlx-lm's kept cache) is recorded per scenario, with its
``hit``: ``hit`` (> 0), ``no-hit`` (0), ``unreported``. A scenario that expects a hit
(every one but ``eviction``) and got ``no-hit`` did not exercise the cache: it is counted and
shown (``no hit``), a warning in the report, and a violation with ``require_hits: true``. A
passing comparison without a hit proves nothing about the cache, but a differing one is still
a real difference, so it fails either way.

The aggregate (:func:`summarize`, pure) counts per scenario the prompts compared, differing,
without a hit and not exercised, and fails naming the prompts with violations.
"""

from __future__ import annotations

import asyncio
import dataclasses
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from pydantic import Field

from ..backends import BackendError, Generation
from ..backends.capabilities import CacheCapacity, CachedGeneration, UncachedGeneration
from ..conversation import Message, concrete, prompt_turns
from ..metrics.consistency import (
    Fault,
    aggregate_faults,
    empty_fault,
    read_generation,
    reported_logprobs,
)
from ..metrics.degenerate import DegenerateScan
from ..metrics.determinism import logprob_diff, side_tokens
from ..metrics.sameness import same_generation
from ..metrics.ties import TieDivergence, count_labels, describe_tie, tie_divergence
from ..records import OMIT_WHEN_EMPTY, load_record, plain_data
from ..render.markup import esc, table
from ..render.table import check_table
from ..render.views import facts, side_by_side
from ..specs import LogprobTolerance, TargetCheck, TieGates
from .protocol import (
    Aggregates,
    ItemPlan,
    Outcome,
    RecordedItem,
    Summary,
    TargetRun,
    records_of,
    target_kind,
)

if TYPE_CHECKING:
    from ..backends import Backend, GenerationParams, PromptInput
    from ..suites import Prompt

Scenario = Literal["shared-prefix", "exact-repeat", "multi-turn", "eviction", "concurrent"]
SCENARIOS: tuple[Scenario, ...] = (
    "shared-prefix",
    "exact-repeat",
    "multi-turn",
    "eviction",
    "concurrent",
)
"""Every scenario, in the order they run on a prompt (each leaves the cache state the next
one starts from)."""
EXPECTS_HIT: frozenset[str] = frozenset(SCENARIOS) - {"eviction"}
ReferenceKind = Literal["uncached", "first-request"]
FIRST_REQUEST_NOTE = (
    "the server has no way around its cache: the reference is the first request for this "
    "prompt in this check (a hit if the server saw the prompt before)"
)
Hit = Literal["hit", "no-hit", "unreported"]


class CacheParitySpec(TargetCheck):
    """Each prompt's uncached reference against its generations through the cache."""

    scenarios: list[Scenario] = Field(default_factory=lambda: list(SCENARIOS), min_length=1)
    eviction_tokens: int | None = Field(default=None, ge=0)
    """The cache's capacity in tokens (e.g. a llama-server ``-np 1 -c N --cache-ram 0``:
    ``N``); None: asked from the backend (vLLM), else ``eviction`` is not exercised."""
    max_eviction_prompts: int = Field(default=32, ge=1)
    """The most distinct prompts sent to push a prefix out."""


class CacheParityThresholds(LogprobTolerance, TieGates):
    """``logprob_tolerance`` where a scenario's tokens agree with the reference;
    ``tie_margin``/``fail_on`` (:class:`~pytest_infercheck.specs.TieGates`); ``require_hits``:
    a scenario that expects a cache hit and got none fails its item (default: shown only)."""

    require_hits: bool = False


# -- records ------------------------------------------------------------------------------------


@dataclass
class ScenarioResult:
    """One scenario of a prompt, against its reference."""

    scenario: str
    exercised: bool
    """False: the scenario could not set up its cache state (:attr:`note` says why); nothing
    was compared."""
    note: str | None = None
    """Why not exercised, or what set it up (``after 5 prompts of 40 tokens``)."""
    match: bool | None = None
    """Same tokens and text as the reference; None when not compared."""
    first_divergence: int | None = None
    divergence_unit: str | None = None
    max_logprob_diff: float | None = None
    """``max_t |lp_ref[t] - lp[t]|`` where the tokens agree; None without logprobs."""
    text: str | None = None
    """The scenario's output (None when not compared)."""
    truncated: bool = False
    """Its tokens are a strict, non-empty prefix of the reference's."""
    cached_tokens: int | None = None
    """Prompt tokens the engine reported reused from its cache for this request."""
    hit: Hit | None = None
    """From :attr:`cached_tokens`: ``hit``, ``no-hit`` or ``unreported``."""
    reference: str | None = field(default=None, metadata=OMIT_WHEN_EMPTY)
    """The text of the scenario's own reference when it is not the prompt's (multi-turn)."""
    companion: str | None = field(default=None, metadata=OMIT_WHEN_EMPTY)
    """The other prompt the scenario sent (the prefix-sharing sibling, the first turn)."""
    error: str | None = field(default=None, metadata=OMIT_WHEN_EMPTY)
    faults: list[Fault] = field(default_factory=list, metadata=OMIT_WHEN_EMPTY)
    tie: TieDivergence | None = field(default=None, metadata=OMIT_WHEN_EMPTY)
    degenerate: DegenerateScan = field(default_factory=DegenerateScan)
    """The degenerate findings of the generations it read (its output, and its own
    reference), by the one reading of every generation
    (:func:`~pytest_infercheck.metrics.consistency.read_generation`)."""


@dataclass
class CacheParityPrompt:
    """The record of one prompt's item (role ``prompt``)."""

    prompt_id: str
    target: str
    reference_kind: str
    """``uncached`` or ``first-request`` (:data:`FIRST_REQUEST_NOTE`)."""
    reference_text: str
    reference_token_ids: list[int] | None
    reference_cached_tokens: int | None
    scenarios: list[ScenarioResult]
    reference_faults: list[Fault] = field(default_factory=list, metadata=OMIT_WHEN_EMPTY)


@dataclass
class ScenarioCounts:
    """One scenario over the prompts of a check x suite."""

    compared: int = 0
    differ: int = 0
    """Compared prompts with a violation in this scenario."""
    no_hit: int = 0
    """Compared prompts that expected a hit and got 0 cached tokens."""
    unreported: int = 0
    """Compared prompts whose cache hits the engine did not report."""
    not_exercised: int = 0


@dataclass
class CacheParityAggregate:
    """The record of a cache-parity check x suite (role ``aggregate``)."""

    target: str
    prompts: int
    parity_prompts: int
    """Prompts without a violation."""
    reference_kind: str | None
    scenarios: dict[str, ScenarioCounts]
    engines: dict[str, dict[str, Any]]
    divergence_labels: dict[str, int] = field(default_factory=dict, metadata=OMIT_WHEN_EMPTY)


@dataclass
class CacheParityContext:
    target: str
    engines: dict[str, dict[str, Any]]


# -- pure judgement -----------------------------------------------------------------------------


def hit_of(cached_tokens: int | None) -> Hit:
    """``hit`` when the engine reported cached prompt tokens, ``no-hit`` for 0,
    ``unreported`` for None."""
    if cached_tokens is None:
        return "unreported"
    return "hit" if cached_tokens > 0 else "no-hit"


def compare_scenario(
    scenario: str,
    reference: Generation,
    output: Generation | BaseException,
    *,
    tie_margin: float,
    note: str | None = None,
    companion: str | None = None,
    own_reference: bool = False,
) -> ScenarioResult:
    """A scenario's ``output`` against ``reference``: sameness, the logprob difference where
    the tokens agree, truncation, faults (its own, and an empty output against a non-empty
    reference), the first divergent token labelled at ``tie_margin``, and its cache hit."""
    base = ScenarioResult(
        scenario,
        True,
        note,
        companion=companion,
        reference=reference.text if own_reference else None,
    )
    own = [read_generation("the scenario's reference", reference)] if own_reference else []
    base.degenerate = DegenerateScan.of([r.degenerate for r in own])
    if isinstance(output, BaseException):
        base.match, base.error = False, f"{type(output).__name__}: {output}"
        return base
    reading = read_generation(f"the {scenario} output", output)
    base.degenerate = DegenerateScan.of([r.degenerate for r in [*own, reading]])
    verdict = same_generation(reference, output)
    token_divergence = verdict.divergence_unit == "token"
    aligned = verdict.first_divergence if token_divergence else None
    if not verdict.same and not token_divergence and not verdict.detokenization_difference:
        aligned = 0  # texts differ and no tokens say where: nothing is comparable
    ref_ids, ids = reference.token_ids, output.token_ids
    empty = empty_fault(
        (output.text, output.token_ids, output.finish_reason),
        (reference.text, reference.token_ids, reference.finish_reason),
        a_name=f"the {scenario} output",
        b_name="the reference",
    )
    base.match = verdict.same
    base.first_divergence = verdict.first_divergence
    base.divergence_unit = verdict.divergence_unit
    base.max_logprob_diff = logprob_diff(
        reported_logprobs(reference.chosen_logprobs, reference.top_logprobs),
        reported_logprobs(output.chosen_logprobs, output.top_logprobs),
        aligned,
    )
    base.text = output.text
    base.truncated = bool(
        ref_ids is not None and ids and len(ids) < len(ref_ids) and ref_ids[: len(ids)] == ids
    )
    base.cached_tokens = output.cached_tokens
    base.hit = hit_of(output.cached_tokens)
    base.faults = [*reading.faults, *([] if empty is None else [empty])]
    if token_divergence and verdict.first_divergence is not None and ids and ref_ids:
        at = verdict.first_divergence
        if at < len(ids) and at < len(ref_ids):
            base.tie = tie_divergence(side_tokens(reference), side_tokens(output), at, tie_margin)
    return base


def scenario_violations(
    result: ScenarioResult, reference_text: str, thresholds: CacheParityThresholds
) -> list[str]:
    """Why one scenario fails: its request failing, its faults, an output that differs from
    the reference (named ``truncated`` when it is a strict prefix; not under ``fail_on:
    decisive`` at a near-tie), logprobs beyond ``logprob_tolerance`` (or NaN), and with
    ``require_hits`` no cache hit where one was expected, or no hit count at all (a gate
    that cannot be judged fails rather than passes)."""
    if not result.exercised:
        return []
    name = result.scenario
    violations = [f"{name}: {f.text}" for f in result.faults]
    if result.error is not None:
        violations.append(f"{name}: the request failed: {result.error}")
        return violations
    near_tie = (
        thresholds.fail_on == "decisive"
        and result.tie is not None
        and result.tie.divergence_label == "near-tie"
    )
    if result.match is False and not near_tie:
        ref = result.reference if result.reference is not None else reference_text
        what = "truncated output" if result.truncated else "output differs from the reference"
        where = (
            describe_tie(result.tie, ("reference", name))
            if result.tie is not None
            else f"first at {result.divergence_unit} {result.first_divergence}"
        )
        violations.append(f"{name}: {what}, {where}: {ref!r} vs {result.text!r}")
    diff = result.max_logprob_diff
    if diff is not None and not diff <= thresholds.logprob_tolerance:
        violations.append(
            f"{name}: logprobs moved by {diff:.3g} "
            f"{'> ' if math.isfinite(diff) else '(not finite): fails '}"
            f"logprob_tolerance {thresholds.logprob_tolerance}"
        )
    if thresholds.require_hits and name in EXPECTS_HIT and result.hit == "no-hit":
        violations.append(f"{name}: no cache hit (0 cached tokens): the cache was not exercised")
    if thresholds.require_hits and name in EXPECTS_HIT and result.hit == "unreported":
        violations.append(
            f"{name}: the engine reports no cached tokens, so require_hits cannot be judged "
            "(remove it for this target, or enable its per-request cache accounting)"
        )
    return violations


def prompt_violations(record: CacheParityPrompt, thresholds: CacheParityThresholds) -> list[str]:
    """Every violation of a prompt: its reference's faults, then each scenario's."""
    violations = [f"reference: {f.text}" for f in record.reference_faults]
    for result in record.scenarios:
        violations += scenario_violations(result, record.reference_text, thresholds)
    return violations


def scenario_counts(
    records: Sequence[CacheParityPrompt], thresholds: CacheParityThresholds
) -> dict[str, ScenarioCounts]:
    """Per scenario (in :data:`SCENARIOS` order, those that ran): prompts compared, with a
    violation, without an expected hit, with unreported hits, not exercised."""
    counts: dict[str, ScenarioCounts] = {}
    for record in records:
        for r in record.scenarios:
            c = counts.setdefault(r.scenario, ScenarioCounts())
            if not r.exercised:
                c.not_exercised += 1
                continue
            c.compared += 1
            c.differ += bool(scenario_violations(r, record.reference_text, thresholds))
            c.no_hit += r.scenario in EXPECTS_HIT and r.hit == "no-hit"
            c.unreported += r.hit == "unreported"
    return {s: counts[s] for s in SCENARIOS if s in counts}


def summarize(
    items: Sequence[RecordedItem], thresholds: CacheParityThresholds, context: CacheParityContext
) -> Summary:
    """The aggregate of the prompts' records: prompts at parity, per-scenario counts
    (:func:`scenario_counts`), divergence labels; violations: errored items, prompts with
    faults, and the prompts with any other violation, named with their scenarios."""
    records: list[CacheParityPrompt] = records_of(items, "prompt")
    failing = [(r, prompt_violations(r, thresholds)) for r in records]
    counts = scenario_counts(records, thresholds)
    faulty = [
        (r.prompt_id, [*r.reference_faults, *(f for s in r.scenarios for f in s.faults)])
        for r in records
        if r.reference_faults or any(s.faults for s in r.scenarios)
    ]
    violations = aggregate_faults(faulty, n_items=len(records))
    differing = [
        f"{r.prompt_id} ({', '.join(dict.fromkeys(v.split(':')[0] for v in vs))})"
        for r, vs in failing
        if vs
    ]
    if differing:
        violations.append(
            f"{len(differing)} of {len(records)} prompts differ on a cache hit: "
            + ", ".join(differing[:10])
            + (f", ... {len(differing) - 10} more" if len(differing) > 10 else "")
        )
    labels = [s.tie.divergence_label for r in records for s in r.scenarios if s.tie is not None]
    kinds = {r.reference_kind for r in records}
    data = CacheParityAggregate(
        target=context.target,
        prompts=len(records),
        parity_prompts=sum(not vs for _, vs in failing),
        reference_kind=kinds.pop() if len(kinds) == 1 else None,
        scenarios=counts,
        engines=context.engines,
        divergence_labels=count_labels(labels) if labels else {},
    )
    lines = [
        f"{context.target}: {data.parity_prompts}/{len(records)} prompts identical on every "
        f"cache scenario (reference: {data.reference_kind})"
    ]
    lines += [f"  {name}: {counts_text(c)}" for name, c in counts.items()]
    properties: list[tuple[str, Any]] = [
        ("infercheck_parity_prompts", data.parity_prompts),
        ("infercheck_prompts", len(records)),
        *((f"infercheck_no_hit_{s.replace('-', '_')}", c.no_hit) for s, c in counts.items()),
    ]
    return Summary(data, violations, "\n".join(lines), properties)


def counts_text(c: ScenarioCounts) -> str:
    """``3 compared, 0 differ, 1 no hit, 0 unreported, 0 not exercised``."""
    return (
        f"{c.compared} compared, {c.differ} differ, {c.no_hit} no hit, "
        f"{c.unreported} hits unreported, {c.not_exercised} not exercised"
    )


# -- running ------------------------------------------------------------------------------------


def sibling_text(text: str) -> str:
    """A prompt sharing ``text``'s first three quarters (at least one character), the rest
    reversed (`` again`` appended when reversing changes nothing)."""
    cut = max(1, 3 * len(text) // 4)
    tail = text[cut:][::-1]
    return text[:cut] + tail if tail != text[cut:] else text + " again"


def filler_text(text: str, i: int) -> str:
    """The ``i``-th eviction prompt: as long as ``text`` and sharing no prefix with it."""
    return f"{i} {text[::-1]}"


@dataclass
class CacheParityRun(TargetRun[CacheParitySpec, CacheParityThresholds]):
    """Each prompt's reference and scenarios, in suite order; every request goes to the
    engine (no generation cache)."""

    # -- requests ---------------------------------------------------------------------------
    def _uncached(self, prompt: PromptInput, params: GenerationParams) -> Generation:
        backend = self.target.backend
        if isinstance(backend, UncachedGeneration):
            return self.cache.call(self.target, backend.generate_uncached(prompt, params))
        return self._cached(prompt, params)

    async def _through_cache(self, prompt: PromptInput, params: GenerationParams) -> Generation:
        backend: Backend = self.target.backend
        if isinstance(backend, CachedGeneration):
            return await backend.generate_cached(prompt, params)
        return await backend.generate(prompt, params)

    def _cached(self, prompt: PromptInput, params: GenerationParams) -> Generation:
        return self.cache.call(self.target, self._through_cache(prompt, params))

    def _attempt(self, prompt: PromptInput, params: GenerationParams) -> Generation | BackendError:
        try:
            return self._cached(prompt, params)
        except BackendError as exc:
            return exc

    # -- scenarios --------------------------------------------------------------------------
    def run_item(self, plan: ItemPlan) -> Outcome:
        prompt = self.prompt(plan.key)
        params = self.params(prompt)
        rendered = self.render(prompt)
        uncached = isinstance(self.target.backend, UncachedGeneration)
        reference = self._uncached(rendered, params)
        reference_reading = read_generation("the reference", reference)
        results = [
            self._scenario(name, prompt, rendered, params, reference)
            for name in SCENARIOS
            if name in self.spec.scenarios
        ]
        record = CacheParityPrompt(
            prompt_id=prompt.id,
            target=self.target.label,
            reference_kind="uncached" if uncached else "first-request",
            reference_text=reference.text,
            reference_token_ids=reference.token_ids,
            reference_cached_tokens=reference.cached_tokens,
            scenarios=results,
            reference_faults=reference_reading.faults,
        )
        props: list[tuple[str, Any]] = [
            ("infercheck_scenarios", sum(r.exercised for r in results)),
            ("infercheck_matching_scenarios", sum(bool(r.match) for r in results)),
            ("infercheck_no_hit", sum(r.hit == "no-hit" for r in results)),
            *(
                (f"infercheck_cached_tokens_{r.scenario.replace('-', '_')}", r.cached_tokens)
                for r in results
                if r.exercised
            ),
        ]
        scans = [
            DegenerateScan.of([reference_reading.degenerate]),
            *(r.degenerate for r in results),
        ]
        return Outcome(
            prompt_violations(record, self.thresholds),
            describe(record),
            record,
            props,
            degenerate=DegenerateScan.merged(scans),
        )

    def _scenario(
        self,
        name: Scenario,
        prompt: Prompt,
        rendered: PromptInput,
        params: GenerationParams,
        reference: Generation,
    ) -> ScenarioResult:
        margin = self.thresholds.tie_margin
        if name == "shared-prefix":
            sibling = sibling_text(prompt.text)
            self._cached(self._with_last_turn(prompt, sibling), params)
            out = self._attempt(rendered, params)
            return compare_scenario(name, reference, out, tie_margin=margin, companion=sibling)
        if name == "exact-repeat":
            return compare_scenario(
                name, reference, self._attempt(rendered, params), tie_margin=margin
            )
        if name == "multi-turn":
            try:
                return self._multi_turn(prompt, rendered, params, reference)
            except BackendError as exc:
                return ScenarioResult("multi-turn", False, f"no conversation: {exc}")
        if name == "eviction":
            return self._eviction(prompt, rendered, params, reference)
        return self._concurrent(prompt, rendered, params, reference)

    def _turns(self, prompt: Prompt) -> tuple[Message, ...]:
        """``prompt``'s concrete turns: a conversation's with its ``generate`` turns as the
        target filled them in, else its system turn (if any) and its user turn."""
        if prompt.messages is not None:
            return self.conversation(prompt).messages
        return concrete(prompt_turns(prompt), {})

    def _render_turns(self, prompt: Prompt, turns: Sequence[Message]) -> PromptInput:
        return self.cache.render_turns(self.target, prompt, turns, self.settings.thinking)

    def _with_last_turn(self, prompt: Prompt, text: str) -> PromptInput:
        """``prompt``'s turns with the last (user) turn's content replaced by ``text``."""
        return self._render_turns(prompt, (*self._turns(prompt)[:-1], Message("user", text)))

    def _multi_turn(
        self, prompt: Prompt, rendered: PromptInput, params: GenerationParams, reference: Generation
    ) -> ScenarioResult:
        """A conversation: its turns up to the previous user turn through the cache (their
        answer generated and kept), then the whole conversation, against the prompt's
        reference. A single-turn prompt: :meth:`_composed_turn`.

        Raises:
            BackendError: the backend cannot render a conversation (not exercised).
        """
        turns = self._turns(prompt)
        earlier = earlier_turns(turns)
        if earlier is None:
            return self._composed_turn(prompt, params)
        self._cached(self._render_turns(prompt, earlier), params)
        out = self._attempt(rendered, params)
        users = sum(turn.role == "user" for turn in turns)
        note = f"after turns 1-{len(earlier)} of {len(turns)} (user turn {users - 1} of {users})"
        return compare_scenario(
            "multi-turn", reference, out, tie_margin=self.thresholds.tie_margin, note=note
        )

    def _composed_turn(self, prompt: Prompt, params: GenerationParams) -> ScenarioResult:
        """``prompt`` as the second user turn of a conversation (rendered by the backend's
        chat template over the turns): another single-turn suite prompt (its system turn,
        its user turn), its answer through the cache, then ``prompt``. Its own reference is
        that conversation uncached; then the first turn goes through the cache again and the
        conversation after it.

        Raises:
            BackendError: the backend cannot render a conversation.
        """
        others = [p for p in self.suite.prompts if p.id != prompt.id and p.messages is None]
        first = others[0] if others else prompt
        first_turns = self._turns(first)
        first_turn = self._render_turns(first, first_turns)
        answer = self._cached(first_turn, self.params(first))
        turns = (*first_turns, Message("assistant", answer.text), Message("user", prompt.text))
        second = self._render_turns(prompt, turns)
        reference = self._uncached(second, params)
        self._cached(first_turn, self.params(first))
        out = self._attempt(second, params)
        return compare_scenario(
            "multi-turn",
            reference,
            out,
            tie_margin=self.thresholds.tie_margin,
            companion=first.id,
            own_reference=True,
        )

    def _eviction(
        self, prompt: Prompt, rendered: PromptInput, params: GenerationParams, reference: Generation
    ) -> ScenarioResult:
        capacity = self.spec.eviction_tokens
        backend = self.target.backend
        if capacity is None and isinstance(backend, CacheCapacity):
            capacity = self.cache.call(self.target, backend.cache_capacity())
        if capacity is None:
            return ScenarioResult(
                "eviction",
                False,
                "the cache's capacity is not known (set eviction_tokens, e.g. for a server "
                "started with a small KV cache)",
            )
        whole = "\n".join(turn.content for turn in self._turns(prompt))
        fillers = [self._render_turns(prompt, [Message("user", filler_text(whole, 0))])]
        size = len(fillers[0].token_ids or ()) or max(1, len(fillers[0].text) // 4)
        needed = capacity // size + 1
        if needed > self.spec.max_eviction_prompts:
            return ScenarioResult(
                "eviction",
                False,
                f"filling the cache ({capacity} tokens) takes {needed} prompts of {size} "
                f"tokens, more than max_eviction_prompts {self.spec.max_eviction_prompts}",
            )
        fillers += [
            self._render_turns(prompt, [Message("user", filler_text(whole, i))])
            for i in range(1, needed)
        ]
        one = _with_max_tokens(params, 1)
        for filler in fillers:
            self._cached(filler, one)
        out = self._attempt(rendered, params)
        note = f"after {needed} prompts of {size} tokens (capacity {capacity})"
        cached = None if isinstance(out, BaseException) else out.cached_tokens
        size = len(rendered.token_ids or ())
        if cached is not None and size and cached >= size - 1:
            note += f"; the prefix was still cached ({cached} tokens): it holds more"
        elif cached is not None and size:
            note += f"; {cached} of {size} prompt tokens reused: the prefix was pushed out"
        return compare_scenario(
            "eviction", reference, out, tie_margin=self.thresholds.tie_margin, note=note
        )

    def _concurrent(
        self, prompt: Prompt, rendered: PromptInput, params: GenerationParams, reference: Generation
    ) -> ScenarioResult:
        if self.target.backend.concurrency < 2:
            return ScenarioResult("concurrent", False, "the backend takes one request at a time")
        sibling = sibling_text(prompt.text)
        other = self._with_last_turn(prompt, sibling)

        async def together() -> list[Generation | BaseException]:
            return list(
                await asyncio.gather(
                    self._through_cache(rendered, params),
                    self._through_cache(other, params),
                    return_exceptions=True,
                )
            )

        out = self.cache.call(self.target, together())[0]
        return compare_scenario(
            "concurrent", reference, out, tie_margin=self.thresholds.tie_margin, companion=sibling
        )

    def context(self) -> CacheParityContext:
        target = self.target
        return CacheParityContext(target.label, {target.label: target.backend.identity()})


def earlier_turns(turns: Sequence[Message]) -> tuple[Message, ...] | None:
    """``turns`` up to (and with) the user turn before the last one: the conversation as it
    stood one exchange earlier; None when the last user turn is the only one."""
    users = [i for i, turn in enumerate(turns) if turn.role == "user"]
    return tuple(turns[: users[-2] + 1]) if len(users) > 1 else None


def _with_max_tokens(params: GenerationParams, n: int) -> GenerationParams:
    return dataclasses.replace(params, max_tokens=n)


# -- presentation -------------------------------------------------------------------------------


def describe(record: CacheParityPrompt) -> str:
    """The item's report: the reference, then one line per scenario."""
    lines = [f"reference ({record.reference_kind}): {record.reference_text!r}"]
    if record.reference_kind == "first-request":
        lines.append(f"  ({FIRST_REQUEST_NOTE})")
    for r in record.scenarios:
        if not r.exercised:
            lines.append(f"  {r.scenario}: not exercised: {r.note}")
            continue
        verdict = "identical" if r.match else (r.error or f"differs at {r.first_divergence}")
        hit = f"{r.hit}" + (f" ({r.cached_tokens} cached tokens)" if r.cached_tokens else "")
        lines.append(f"  {r.scenario}: {verdict}; cache {hit}" + (f"; {r.note}" if r.note else ""))
        if r.hit == "no-hit" and r.scenario in EXPECTS_HIT:
            lines.append(f"    no cache hit: {r.scenario} did not exercise the cache")
    return "\n".join(lines)


def summary_lines(aggregates: Aggregates) -> list[str]:
    """One row per cache-parity check x suite for the terminal summary."""

    def cells(data: dict[str, Any]) -> list[str]:
        record = load_record(CacheParityAggregate, data)
        counts = record.scenarios.values()
        return [
            f"{record.parity_prompts}/{record.prompts}",
            str(record.reference_kind),
            str(sum(c.no_hit for c in counts)),
            str(sum(c.not_exercised for c in counts)),
        ]

    columns = (("identical", ">"), ("reference", "<"), ("no hit", ">"), ("not exercised", ">"))
    return check_table(aggregates, columns, cells)


def cache_parity_prompt(data: Mapping[str, Any]) -> str:
    """The reference, a table of the scenarios, and each differing scenario beside it."""
    record = load_record(CacheParityPrompt, data)
    parts = [facts(plain_data(record), ("scenarios", "reference_faults", "reference_token_ids"))]
    rows = [
        [
            esc(r.scenario),
            "not exercised" if not r.exercised else ("identical" if r.match else "differs"),
            esc(r.hit or "-"),
            esc("-" if r.cached_tokens is None else str(r.cached_tokens)),
            esc(r.note or ""),
        ]
        for r in record.scenarios
    ]
    parts.append(table(["scenario", "verdict", "cache", "cached tokens", "note"], rows))
    faults = [*record.reference_faults, *(f for r in record.scenarios for f in r.faults)]
    if faults:
        parts.append("<h4>faults</h4>" + table(["fault"], [[esc(f.text)] for f in faults]))
    for r in record.scenarios:
        if r.exercised and r.match is False and r.text is not None:
            ref = r.reference if r.reference is not None else record.reference_text
            parts.append(side_by_side("reference", ref, r.scenario, r.text, r.first_divergence))
            if r.tie is not None:
                parts.append(f"<p>{esc(describe_tie(r.tie, ('reference', r.scenario)))}</p>")
    return "".join(parts)


CACHE_PARITY = target_kind(
    "cache-parity",
    CacheParitySpec,
    CacheParityRun,
    thresholds=CacheParityThresholds,
    context=CacheParityContext,
    summarize=summarize,
    summary_lines=summary_lines,
    records={"prompt": CacheParityPrompt, "aggregate": CacheParityAggregate},
    views={"prompt": cache_parity_prompt},
)
