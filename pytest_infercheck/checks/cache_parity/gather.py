"""cache-parity's gather facet: every request of the check, in an order that keeps each
prompt's reference cold; it never judges.

Per prompt, a **reference** is generated with no reusable cache state, then each
**scenario** generates the prompt again through the engine's cache:

- the reference is ``uncached`` where the backend has an uncached request
  (:class:`~pytest_infercheck.backends.capabilities.UncachedGeneration`: llama-server
  ``cache_prompt: false``, vLLM a unique ``cache_salt``, mlx-lm a fresh prompt cache); else
  (vllm-mlx, mlx_lm.server, an ``openai`` server) it is ``first-request``: every prompt's
  reference is sent before any scenario's request of the check, so nothing this check sends
  for the prompt can have warmed it, and the engine's reported cached tokens on it are kept
  (the framework fails a reference reported warm, or one not sent first with no count:
  :class:`~pytest_infercheck.verdict.conduct.ColdReference`);
- ``shared-prefix``: after another prompt sharing a long prefix (its text's first three
  quarters, the rest reversed) went through the cache: a partial hit;
- ``exact-repeat``: the prompt again (a full hit);
- ``multi-turn``: a conversation (a suite ``messages`` line, its ``generate`` turns filled
  in by the target) after its turns up to the previous user turn went through the cache.
  A single-turn prompt: as the second user turn after another single-turn suite prompt and
  its answer, against that conversation's own uncached reference;
- ``eviction``: after enough distinct prompts of the prompt's length to fill the cache's
  capacity (``eviction_tokens``, else the backend's
  :class:`~pytest_infercheck.backends.capabilities.CacheCapacity`);
- ``concurrent``: the prompt and its prefix-sharing sibling in flight together.

**Not exercised**, only for reasons known before any generation request (the matrix, the
backend's declared capabilities, its cache capacity): ``multi-turn`` where the backend
renders no conversation (raw text), or, on an engine without an uncached request, for a
single-turn prompt (its composed conversation's own reference would follow its first turn's
answer through the cache); every scenario of a conversation with ``generate`` turns on such an
engine (its turns are generated through the cache before its last one: no cold reference);
``eviction`` with the capacity unknown or needing more than ``max_eviction_prompts``
prompts; ``concurrent`` on a backend that takes one request at a time.

**Every failed request** (the reference's, a priming request's, a scenario's own; rendering
included) is recorded as a :class:`~pytest_infercheck.verdict.conduct.RequestFailure` with
the server's message, and the scenario it belongs to is not compared: the item fails.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Coroutine, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ...backends.base import BackendError, Generation, GenerationParams, Message, PromptInput
from ...backends.capabilities import CacheCapacity, CachedGeneration, UncachedGeneration
from ...conversation import concrete, has_generated, prompt_turns
from ...verdict.conduct import (
    ColdReference,
    Conduct,
    not_exercised_before_requests,
)
from ..framework.failures import request_failure
from ..framework.plan import ItemPlan
from ..framework.requests import settle
from ..framework.target import TargetGatherer
from .evidence import PromptEvidence, ScenarioEvidence
from .records import CacheParityContext
from .spec import SCENARIOS, CacheParitySpec, Scenario

if TYPE_CHECKING:
    from ...suites import Prompt
    from ..framework.run import RunContext

REFERENCE = "the reference"
OWN_REFERENCE = "the multi-turn scenario's own reference"
FIRST_TURN = "the multi-turn scenario's uncached first turn"


def sibling_text(text: str) -> str:
    """A prompt sharing ``text``'s first three quarters (at least one character), the rest
    reversed (`` again`` appended when reversing changes nothing)."""
    cut = max(1, 3 * len(text) // 4)
    tail = text[cut:][::-1]
    return text[:cut] + tail if tail != text[cut:] else text + " again"


def filler_text(text: str, i: int) -> str:
    """The ``i``-th eviction prompt: as long as ``text`` and sharing no prefix with it."""
    return f"{i} {text[::-1]}"


def earlier_turns(turns: Sequence[Message]) -> tuple[Message, ...] | None:
    """``turns`` up to (and with) the user turn before the last one: the conversation as it
    stood one exchange earlier; None when the last user turn is the only one."""
    users = [i for i, turn in enumerate(turns) if turn.role == "user"]
    return tuple(turns[: users[-2] + 1]) if len(users) > 1 else None


class Failed(Exception):
    """A request of a scenario failed (already recorded in the item's conduct)."""


@dataclass
class _Item:
    """One prompt's gathering under way."""

    plan: ItemPlan
    prompt: Prompt
    params: GenerationParams
    conduct: Conduct = field(default_factory=Conduct)
    rendered: PromptInput | None = None
    reference: Generation | None = None
    reference_error: str | None = None
    skipped: dict[str, str] = field(default_factory=dict)
    """Scenario -> why it is not exercised (decided before any request)."""
    fillers: list[PromptInput] = field(default_factory=list)
    eviction_note: str = ""
    eviction_error: str | None = None
    """Sizing the eviction prompts failed (a request's failure, recorded)."""
    scenarios: list[ScenarioEvidence] = field(default_factory=list)


class CacheParityGather(TargetGatherer[CacheParitySpec]):
    """The gather facet of one check x suite (see the module docstring)."""

    def __init__(self, run: RunContext) -> None:
        super().__init__(run)
        self.sent: set[str] = set()
        """The keys of every prompt this gatherer sent, for :attr:`ColdReference.sent_first`."""

    @property
    def uncached(self) -> bool:
        return isinstance(self.target.backend, UncachedGeneration)

    def context(self) -> CacheParityContext:
        target = self.target
        return CacheParityContext(target.label, {target.label: target.backend.identity()})

    # -- the gathering ------------------------------------------------------------------------
    def gather(self, plans: Sequence[ItemPlan]) -> Mapping[str, PromptEvidence]:
        """Every item's evidence: decisions, then every reference, then each prompt's
        scenarios in suite order (see the module docstring)."""
        target = self.target
        items = [
            _Item(plan, prompt, self.run.params(prompt))
            for plan in plans
            for prompt in [self.run.prompt(plan.key)]
        ]
        for item in items:
            self._decide(item)
        for item in items:
            self._reference(item)
        for item in items:
            item.scenarios = [
                self._scenario(name, item) for name in SCENARIOS if name in self.spec.scenarios
            ]
            self._whole(item)
        kind = "uncached" if self.uncached else "first-request"
        return {
            item.plan.full_name: PromptEvidence(
                item.prompt.id,
                target.label,
                kind,
                item.reference,
                item.scenarios,
                item.conduct,
                item.reference_error,
            )
            for item in items
        }

    # -- requests -----------------------------------------------------------------------------
    def _call(
        self, item: _Item, side: str, what: str, work: Callable[[], Coroutine[Any, Any, Any]]
    ) -> Any:
        """``work()`` run for the target; a failure is recorded (side, what, the server's
        message) and raised as :class:`Failed` with its text."""
        try:
            return self.run.cache.call(self.target, work())
        except BackendError as exc:
            failure = request_failure(side, what, exc)
            item.conduct.failures.append(failure)
            raise Failed(failure.text()) from exc

    def _through_cache(
        self, prompt: PromptInput, params: GenerationParams
    ) -> Coroutine[Any, Any, Generation]:
        backend = self.target.backend
        self.sent.add(prompt.key())
        if isinstance(backend, CachedGeneration):
            return backend.generate_cached(prompt, params)
        return backend.generate(prompt, params)

    def _cached(
        self,
        item: _Item,
        side: str,
        what: str,
        prompt: PromptInput,
        params: GenerationParams | None = None,
    ) -> Generation:
        use = params or item.params
        result: Generation = self._call(item, side, what, lambda: self._through_cache(prompt, use))
        return result

    def _render(
        self, item: _Item, side: str, what: str, work: Callable[[], PromptInput]
    ) -> PromptInput:
        try:
            return work()
        except BackendError as exc:
            failure = request_failure(side, what, exc)
            item.conduct.failures.append(failure)
            raise Failed(failure.text()) from exc

    def _turns(self, prompt: Prompt) -> tuple[Message, ...]:
        """``prompt``'s concrete turns: a conversation's with its ``generate`` turns as the
        target filled them in, else its system turn (if any) and its user turn."""
        if prompt.messages is not None:
            return self.conversation(prompt).messages
        return concrete(prompt_turns(prompt), {})

    def _render_turns(self, prompt: Prompt, turns: Sequence[Message]) -> PromptInput:
        return self.run.cache.render_turns(self.target, prompt, turns, self.run.settings.thinking)

    # -- before any request: what cannot be exercised ------------------------------------------
    def _decide(self, item: _Item) -> None:
        """The scenarios of ``item`` that cannot be exercised, from the matrix, the backend's
        declared capabilities and its cache capacity (no generation request yet)."""
        backend = self.target.backend
        named = f"backend {backend.name!r} ({backend.kind})"
        wanted = [s for s in SCENARIOS if s in self.spec.scenarios]
        if not self.uncached and has_generated(item.prompt):
            reason = (
                f"no cold reference: {named} has no uncached request, and this "
                "conversation's generate turns go through its cache before its last turn"
            )
            item.skipped = dict.fromkeys(wanted, reason)
        if "multi-turn" in wanted and "multi-turn" not in item.skipped:
            if not backend.capabilities.chat_template:
                item.skipped["multi-turn"] = (
                    f"{named} renders no conversation (raw text, no chat template)"
                )
            elif item.prompt.messages is None and not self.uncached:
                item.skipped["multi-turn"] = (
                    f"a single-turn prompt's later turn needs the composed conversation's own "
                    f"cold reference, and {named} has no uncached request (the first "
                    "turn's answer would warm it)"
                )
        if "concurrent" in wanted and backend.concurrency < 2:
            item.skipped.setdefault("concurrent", "the backend takes one request at a time")
        if "eviction" in wanted and "eviction" not in item.skipped:
            try:
                self._size_eviction(item)
            except Failed as exc:
                item.eviction_error = str(exc)
        for scenario, reason in item.skipped.items():
            item.conduct.not_exercised.append(not_exercised_before_requests(scenario, reason))

    def _capacity(self, item: _Item) -> int | None:
        capacity = self.spec.eviction_tokens
        backend = self.target.backend
        if capacity is None and isinstance(backend, CacheCapacity):
            found: int | None = self._call(
                item, "eviction", "asking the cache's capacity", backend.cache_capacity
            )
            return found
        return capacity

    def _size_eviction(self, item: _Item) -> None:
        """The eviction prompts of ``item``, or why eviction is not exercised."""
        capacity = self._capacity(item)
        if capacity is None:
            item.skipped["eviction"] = (
                "the cache's capacity is not known (set eviction_tokens, e.g. for a server "
                "started with a small KV cache)"
            )
            return
        prompt = item.prompt
        whole = "\n".join(turn.content for turn in self._render_source_turns(item))
        first = self._render(
            item,
            "eviction",
            "rendering an eviction prompt",
            lambda: self._render_turns(prompt, [Message("user", filler_text(whole, 0))]),
        )
        size = len(first.token_ids or ()) or max(1, len(first.text) // 4)
        needed = capacity // size + 1
        if needed > self.spec.max_eviction_prompts:
            item.skipped["eviction"] = (
                f"filling the cache ({capacity} tokens) takes {needed} prompts of {size} "
                f"tokens, more than max_eviction_prompts {self.spec.max_eviction_prompts}"
            )
            return
        item.fillers = [first]
        for i in range(1, needed):
            turn = [Message("user", filler_text(whole, i))]
            item.fillers.append(
                self._render(
                    item,
                    "eviction",
                    "rendering an eviction prompt",
                    lambda turn=turn: self._render_turns(prompt, turn),  # type: ignore[misc]
                )
            )
        item.eviction_note = f"after {needed} prompts of {size} tokens (capacity {capacity})"

    def _render_source_turns(self, item: _Item) -> Sequence[Any]:
        """The turns an eviction prompt is sized on: the prompt's written turns (their
        ``generate`` turns are not filled in yet, before any request)."""
        prompt = item.prompt
        if prompt.messages is not None and has_generated(prompt):
            return [t for t in prompt.messages if not t.generated]
        return self._turns(prompt)

    # -- the reference ---------------------------------------------------------------------------
    def _reference(self, item: _Item) -> None:
        """``item``'s reference: uncached, or sent now, before any scenario's request."""
        if set(self.spec.scenarios) <= set(item.skipped):
            return
        backend = self.target.backend
        try:
            item.rendered = self._render(
                item, REFERENCE, "rendering the prompt", lambda: self.render(item.prompt)
            )
            rendered = item.rendered
            first = rendered.key() not in self.sent
            if isinstance(backend, UncachedGeneration):
                self.sent.add(rendered.key())
                item.reference = self._call(
                    item,
                    REFERENCE,
                    "its uncached request",
                    lambda: backend.generate_uncached(rendered, item.params),
                )
            else:
                item.reference = self._cached(item, REFERENCE, "its request", rendered)
        except Failed as exc:
            item.reference_error = str(exc)
            return
        item.conduct.cold.append(self._cold(REFERENCE, item.reference, first))

    def _whole(self, item: _Item) -> None:
        """A reference sent first on an engine without an uncached request that reported
        cached tokens: its prompt sent twice more through the cache, after its scenarios,
        and the second's count kept as the engine's count of the prompt served whole
        (:attr:`ColdReference.whole`: fewer on the reference is a prefix it shares with
        prompts sent before it; as many, a prompt the engine already held)."""
        cold = item.conduct.cold
        if self.uncached or not cold or item.rendered is None:
            return
        reference = cold[0]
        if not reference.sent_first or not reference.cached_tokens:
            return
        rendered = item.rendered
        try:
            self._cached(item, REFERENCE, "its prompt again (to count it served whole)", rendered)
            again = self._cached(
                item, REFERENCE, "its prompt a third time (to count it served whole)", rendered
            )
        except Failed:
            return
        cold[0] = dataclasses.replace(reference, whole=again.cached_tokens)

    def _cold(self, side: str, reference: Generation, first: bool) -> ColdReference:
        """How ``reference`` was kept cold, with the cached tokens the engine reported."""
        cached = reference.cached_tokens
        if self.uncached:
            return ColdReference(side, "uncached-request", cached)
        if cached is not None:
            return ColdReference(side, "reported-zero", cached, sent_first=first)
        return ColdReference(side, "sent-first", cached, sent_first=first)

    # -- the scenarios ---------------------------------------------------------------------------
    def _scenario(self, name: Scenario, item: _Item) -> ScenarioEvidence:
        if name in item.skipped:
            return ScenarioEvidence(name, exercised=False, note=item.skipped[name])
        if item.reference is None or item.rendered is None:
            return ScenarioEvidence(name)  # not compared: the reference request failed
        evidence = ScenarioEvidence(name)
        try:
            run = {
                "shared-prefix": self._shared_prefix,
                "exact-repeat": self._exact_repeat,
                "multi-turn": self._multi_turn,
                "eviction": self._eviction,
                "concurrent": self._concurrent,
            }[name]
            run(item, evidence)
        except Failed as exc:
            evidence.output = None
            evidence.error = str(exc)
        return evidence

    def _with_last_turn(self, item: _Item, side: str, text: str) -> PromptInput:
        """``item``'s turns with the last (user) turn's content replaced by ``text``."""
        prompt = item.prompt
        return self._render(
            item,
            side,
            "rendering the prefix-sharing sibling",
            lambda: self._render_turns(prompt, (*self._turns(prompt)[:-1], Message("user", text))),
        )

    def _shared_prefix(self, item: _Item, evidence: ScenarioEvidence) -> None:
        assert item.rendered is not None
        sibling = sibling_text(item.prompt.text)
        evidence.companion = sibling
        other = self._with_last_turn(item, "shared-prefix", sibling)
        self._cached(item, "shared-prefix", "the prefix-sharing sibling", other)
        evidence.output = self._cached(item, "shared-prefix", "its request", item.rendered)

    def _exact_repeat(self, item: _Item, evidence: ScenarioEvidence) -> None:
        assert item.rendered is not None
        evidence.output = self._cached(item, "exact-repeat", "its request", item.rendered)

    def _multi_turn(self, item: _Item, evidence: ScenarioEvidence) -> None:
        """A conversation: its turns up to the previous user turn through the cache (their
        answer generated and kept), then the whole conversation. A single-turn prompt:
        :meth:`_composed_turn`."""
        assert item.rendered is not None
        prompt = item.prompt
        turns = self._turns(prompt)
        earlier = earlier_turns(turns)
        if earlier is None:
            self._composed_turn(item, evidence)
            return
        primer = self._render(
            item,
            "multi-turn",
            "rendering the earlier turns",
            lambda: self._render_turns(prompt, earlier),
        )
        self._cached(item, "multi-turn", "the earlier turns", primer)
        evidence.output = self._cached(item, "multi-turn", "the later turn", item.rendered)
        users = sum(turn.role == "user" for turn in turns)
        evidence.note = (
            f"after turns 1-{len(earlier)} of {len(turns)} (user turn {users - 1} of {users})"
        )

    def _composed_turn(self, item: _Item, evidence: ScenarioEvidence) -> None:
        """``item``'s prompt as the second user turn of a conversation: another single-turn
        suite prompt (its system turn, its user turn), its answer, then this prompt. The
        answer written into the conversation is the first turn's uncached generation; then
        the first turn goes through the cache (compared with that answer: a cache that
        changes it fails here too) and the conversation after it, against the conversation's
        own uncached reference (an engine without an uncached request does not get here)."""
        prompt = item.prompt
        backend = self.target.backend
        assert isinstance(backend, UncachedGeneration)
        others = [p for p in self.run.suite.prompts if p.id != prompt.id and p.messages is None]
        first = others[0] if others else prompt
        evidence.companion = first.id
        first_turns = self._turns(first)
        first_turn = self._render(
            item,
            "multi-turn",
            "rendering the first turn",
            lambda: self._render_turns(first, first_turns),
        )
        first_params = self.run.params(first)
        self.sent.add(first_turn.key())
        answer: Generation = self._call(
            item,
            "multi-turn",
            "the uncached first turn",
            lambda: backend.generate_uncached(first_turn, first_params),
        )
        item.conduct.cold.append(self._cold(FIRST_TURN, answer, True))
        turns = (*first_turns, Message("assistant", answer.text), Message("user", prompt.text))
        second = self._render(
            item,
            "multi-turn",
            "rendering the conversation",
            lambda: self._render_turns(prompt, turns),
        )
        primed = self._cached(
            item, "multi-turn", "the first turn through the cache", first_turn, first_params
        )
        evidence.first_turn = (answer, primed)
        self.sent.add(second.key())
        own: Generation = self._call(
            item,
            OWN_REFERENCE,
            "its uncached request",
            lambda: backend.generate_uncached(second, item.params),
        )
        evidence.reference = own
        item.conduct.cold.append(self._cold(OWN_REFERENCE, own, True))
        evidence.output = self._cached(item, "multi-turn", "the later turn", second)

    def _eviction(self, item: _Item, evidence: ScenarioEvidence) -> None:
        assert item.rendered is not None
        if item.eviction_error is not None:
            raise Failed(item.eviction_error)
        one = dataclasses.replace(item.params, max_tokens=1)
        for filler in item.fillers:
            self._cached(item, "eviction", "an eviction prompt", filler, one)
        out = self._cached(item, "eviction", "its request", item.rendered)
        evidence.output = out
        note = item.eviction_note
        cached, size = out.cached_tokens, len(item.rendered.token_ids or ())
        if cached is not None and size and cached >= size - 1:
            note += f"; the prefix was still cached ({cached} tokens): it holds more"
        elif cached is not None and size:
            note += f"; {cached} of {size} prompt tokens reused: the prefix was pushed out"
        evidence.note = note

    def _concurrent(self, item: _Item, evidence: ScenarioEvidence) -> None:
        rendered = item.rendered
        assert rendered is not None
        sibling = sibling_text(item.prompt.text)
        evidence.companion = sibling
        other = self._with_last_turn(item, "concurrent", sibling)

        try:
            outs = settle(
                self.run.cache,
                self.target,
                [
                    self._through_cache(rendered, item.params),
                    self._through_cache(other, item.params),
                ],
            )
        except BackendError as exc:  # the server died meanwhile
            failure = request_failure("concurrent", "the pair in flight", exc)
            item.conduct.failures.append(failure)
            raise Failed(failure.text()) from exc
        for what, out in zip(("its request", "the sibling beside it"), outs, strict=True):
            if isinstance(out, BackendError):
                failure = request_failure("concurrent", what, out)
                item.conduct.failures.append(failure)
                raise Failed(failure.text())
        assert isinstance(outs[0], Generation)
        evidence.output = outs[0]
