"""structured-parity's gather facet: every request of the items this process runs, all I/O
and no judging.

In order, for the items asked at once:

1. each target's backend must answer structured chat requests
   (:class:`~pytest_infercheck.structured.records.StructuredChat`; else its items error);
2. each target's abilities are probed once, before any of the check's requests
   (:meth:`~pytest_infercheck.generation_cache.GenerationCache.abilities`: the backend's
   :meth:`~pytest_infercheck.backends.base.Backend.probe_abilities`, one minimal request per
   structured path: :mod:`~pytest_infercheck.structured.probe`);
3. each prompt's request (:func:`~pytest_infercheck.structured.request.structured_request`),
   its ``generate`` turns filled in with the first target's ``chat`` answer to the turns
   before them (its content and parsed calls), so that every target and path receives the
   same history; prompts concurrently, a prompt's turns in order (a turn that cannot be
   filled errors the prompt's items);
4. at once, concurrently (each backend bounds its own requests in flight): every path of
   every target (default: every path its backend can send; ``chat``, the reference, always),
   the first target's ``chat`` for the items of the other targets (one request serves
   them all), and for those items both targets' render of the request to prompt ids
   (:meth:`~pytest_infercheck.backends.base.Backend.render_messages` with the tools:
   llama-server ``/apply-template`` then ``/tokenize``, vLLM ``/tokenize``; a server that
   templates only when it generates gives none).

What a path gets is recorded, never excused: a path the target's probe found lacking is not
sent (:meth:`~pytest_infercheck.verdict.conduct.Abilities.unsupported`: the item says so and
compares nothing on it; ``chat`` is always sent); a path that cannot express the request
(:class:`~pytest_infercheck.structured.records.Inexpressible`, raised before anything is
sent) is not exercised, decided before its request; a request that is refused (4xx) or fails
(5xx, no answer), or a render that fails, is a
:class:`~pytest_infercheck.verdict.conduct.RequestFailure` with the server's message, which
fails the item (the reference's too, on every item that compares with it).
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ...backends.base import BackendError, Message
from ...backends.capabilities import STRUCTURED
from ...structured.probe import ability
from ...structured.records import (
    ChatTurn,
    Inexpressible,
    MalformedResponse,
    Path,
    RequestFailed,
    StructuredChat,
    StructuredRequest,
    StructuredResponse,
)
from ...structured.request import generate_indices, structured_request, with_n
from ...structured.results import NotAnswered
from ...tools import ToolCall, canonical_json
from ...verdict.conduct import (
    Abilities,
    Conduct,
    RequestFailure,
    not_exercised_before_requests,
)
from ..framework.plan import ItemPlan
from .evidence import PathAnswer, PromptIds, StructuredEvidence
from .records import RequestFacts, StructuredParityContext
from .spec import PATHS, REFERENCE, StructuredParitySpec

if TYPE_CHECKING:
    from ...generation_cache import ResolvedTarget
    from ...suites import Prompt
    from ..framework.run import RunContext

Got = StructuredResponse | NotAnswered | RequestFailure
"""What one request came back with: an answer, nothing (not sent, malformed), or a failure."""


@dataclass
class Target:
    """One target of the check: its label in item ids, the live target, its structured chat
    and its probed abilities (or why it cannot take part)."""

    label: str
    resolved: ResolvedTarget | None = None
    chat: StructuredChat | None = None
    abilities: Abilities = field(default_factory=Abilities)
    error: BackendError | None = None


def request_facts(
    prompt: Prompt, request: StructuredRequest, filled: Sequence[int]
) -> RequestFacts:
    choice = request.tool_choice
    return RequestFacts(
        prompt=prompt.text,
        turns=len(request.messages),
        tools=[t.name for t in request.tools],
        tool_choice=choice if isinstance(choice, str) or choice is None else canonical_json(choice),
        response_format=(
            None if request.response_format is None else canonical_json(request.response_format)
        ),
        max_tokens=request.max_tokens,
        filled=[i + 1 for i in filled],
    )


def first_ids_difference(a: Sequence[int], b: Sequence[int]) -> int:
    return next(
        (i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), min(len(a), len(b))
    )


def same_prompt(a: tuple[int, ...] | str, b: tuple[int, ...] | str) -> PromptIds:
    """Whether two renders of a request (ids, or why there are none) agree."""
    if isinstance(a, str) or isinstance(b, str):
        return PromptIds(None, "unknown: " + "; ".join(x for x in (a, b) if isinstance(x, str)))
    if a == b:
        return PromptIds(True, f"same ({len(a)} ids)")
    at = first_ids_difference(a, b)
    return PromptIds(False, f"differ at position {at} ({len(a)} vs {len(b)} ids)")


def failure(side: str, what: str, exc: BackendError) -> RequestFailure:
    """A failed request as the conduct records it: the server's status and message."""
    if isinstance(exc, RequestFailed):
        return RequestFailure(side, what, exc.message, exc.status)
    return RequestFailure(side, what, str(exc), getattr(exc, "status", None))


class StructuredGatherer:
    """The I/O of one structured-parity check x suite (see the module docstring)."""

    def __init__(self, run: RunContext) -> None:
        self.run = run
        spec: StructuredParitySpec = run.spec
        self.spec = spec
        self.labels = spec.labels()
        self._targets: dict[str, Target] = {}
        self._requests: dict[str, tuple[StructuredRequest, tuple[int, ...]] | BackendError] = {}
        self._got: dict[tuple[str, str, Path], Got] = {}
        """By (target label, prompt id, path)."""
        self._ids: dict[tuple[str, str], tuple[int, ...] | str | RequestFailure] = {}
        """By (target label, prompt id): the request's prompt ids, why there are none, or the
        render's failure."""

    # -- targets -----------------------------------------------------------------------------
    def _target(self, label: str) -> Target:
        """The target ``label``, resolved and probed once (step 1 and 2)."""
        if label not in self._targets:
            target = Target(label)
            self._targets[label] = target
            sides = [
                self.run.check.baseline_side(self.run.index),
                *self.run.check.test_sides(self.run.index),
            ]
            try:
                target.resolved = self.run.resolve(sides[self.labels.index(label)])
                backend = target.resolved.backend
                if not isinstance(backend, StructuredChat):
                    raise BackendError(
                        "structured-parity needs a server that answers structured chat "
                        f"requests: {target.resolved.label} ({type(backend).__name__}) does not"
                    )
                target.chat = backend
                target.abilities = self.run.cache.abilities(target.resolved, STRUCTURED)
            except BackendError as exc:
                target.error = exc
        return self._targets[label]

    def _paths(self, target: Target) -> list[Path]:
        """The paths sent to ``target``, ``chat`` first: those listed, else every path its
        backend can send."""
        assert target.chat is not None
        wanted = self.spec.paths
        if wanted is None:
            offered = set(target.chat.structured_paths())
            return [p for p in PATHS if p in offered or p == REFERENCE]
        return [p for p in PATHS if p in wanted]

    # -- running coroutines ------------------------------------------------------------------
    def _settle(self, jobs: Sequence[tuple[Target, Coroutine[Any, Any, Any]]]) -> list[Any]:
        """Run ``jobs`` concurrently, each watching its target's managed server; each one's
        result or exception. A target whose managed server died meanwhile (a request of it
        got no answer or a 5xx) raises its death, with its last log lines."""
        cache = self.run.cache

        async def watched(target: Target, coro: Coroutine[Any, Any, Any]) -> Any:
            assert target.resolved is not None
            with cache.watching(target.resolved):
                return await coro

        async def every() -> list[Any]:
            return await asyncio.gather(*(watched(t, c) for t, c in jobs), return_exceptions=True)

        results = cache.run(every()) if jobs else []
        failed = {
            t.label: t
            for (t, _), r in zip(jobs, results, strict=True)
            if isinstance(r, BackendError)
            or (isinstance(r, RequestFailure) and (r.status is None or r.status >= 500))
        }
        for target in failed.values():
            assert target.resolved is not None
            cache.check_alive(target.resolved, after_failures=True)
        for result in results:
            if isinstance(result, BaseException) and not isinstance(
                result, BackendError | Inexpressible
            ):
                raise result
        return results

    # -- requests ----------------------------------------------------------------------------
    def _fill_requests(self, prompts: Sequence[Prompt]) -> None:
        """Each prompt's request, its ``generate`` turns filled by the first target's
        ``chat`` (step 3); prompts concurrently, a prompt's turns in order."""
        todo = [p for p in prompts if p.id not in self._requests]
        first = self._target(self.labels[0])
        if not todo or first.chat is None:
            return
        chat = first.chat
        settings = self.run.settings
        seed = 0 if settings.seed is None else settings.seed

        async def build(prompt: Prompt) -> tuple[StructuredRequest, tuple[int, ...]]:
            tokens = self.run.params(prompt).max_tokens
            filled: dict[int, ChatTurn] = {}
            indices = generate_indices(prompt)
            for index in indices:
                history = structured_request(prompt, tokens, seed=seed, filled=filled, upto=index)
                try:
                    answer = await chat.structured(history, REFERENCE)
                except (BackendError, Inexpressible) as exc:
                    raise BackendError(
                        f"turn {index + 1} is 'generate' and {first.label} chat failed to fill "
                        f"it: {exc}"
                    ) from exc
                if not answer.choices:
                    raise BackendError(f"turn {index + 1}: {first.label} chat answered no choice")
                choice = answer.choices[0]
                calls: tuple[ToolCall, ...] = tuple(
                    c.call for c in choice.calls if c.place == "tool_calls"
                )
                filled[index] = ChatTurn("assistant", choice.content, calls)
            return structured_request(prompt, tokens, seed=seed, filled=filled), indices

        results = self._settle([(first, build(p)) for p in todo])
        for prompt, result in zip(todo, results, strict=True):
            self._requests[prompt.id] = result

    async def _ask(self, target: Target, request: StructuredRequest, path: Path) -> Got:
        """``request`` through ``path`` of ``target``: its answer, or why there is none."""
        assert target.chat is not None
        sent = with_n(request, 2) if path == "chat-n2" else request
        try:
            return await target.chat.structured(sent, path)
        except Inexpressible as exc:
            return NotAnswered("not exercised", str(exc))
        except MalformedResponse as exc:
            return NotAnswered("malformed", str(exc))
        except BackendError as exc:
            return failure(target.label, path, exc)

    async def _render(
        self, target: Target, request: StructuredRequest
    ) -> tuple[int, ...] | str | RequestFailure:
        """The request's prompt ids on ``target`` (its backend's render of the turns with the
        tools), why there are none, or the render's failure."""
        assert target.resolved is not None
        messages = [
            Message(t.role, t.content or "", tuple(t.tool_calls), t.name) for t in request.messages
        ]
        try:
            rendered = await target.resolved.backend.render_messages(
                messages,
                self.run.settings.thinking,
                tools=request.tools,
                tool_choice=request.tool_choice,
            )
        except BackendError as exc:
            return failure(target.resolved.label, "the render of the request (prompt ids)", exc)
        if rendered.token_ids is None:
            return f"{target.resolved.label} templates on the server (no prompt ids)"
        return tuple(rendered.token_ids)

    def _send(self, plans: Sequence[ItemPlan]) -> None:
        """Every request ``plans`` need that was not sent yet, at once (step 4)."""
        jobs: list[tuple[Target, Coroutine[Any, Any, Any]]] = []
        keys: list[tuple[str, Any]] = []
        asked: set[tuple[str, Any]] = set()

        def add(kind: str, key: Any, target: Target, coro: Coroutine[Any, Any, Any]) -> None:
            if (kind, key) in asked:
                coro.close()
                return
            asked.add((kind, key))
            keys.append((kind, key))
            jobs.append((target, coro))

        first = self._target(self.labels[0])
        for plan in plans:
            target = self._target(plan.param or self.labels[0])
            built = self._requests.get(plan.key)
            if target.chat is None or first.chat is None or not isinstance(built, tuple):
                continue
            request = built[0]
            for path in self._paths(target):
                key = (target.label, plan.key, path)
                if key in self._got or self._lacking(target, path) is not None:
                    continue
                add("got", key, target, self._ask(target, request, path))
            if target is first:
                continue
            if (first.label, plan.key, REFERENCE) not in self._got:
                key = (first.label, plan.key, REFERENCE)
                add("got", key, first, self._ask(first, request, REFERENCE))
            for side in (first, target):
                if (side.label, plan.key) not in self._ids:
                    add("ids", (side.label, plan.key), side, self._render(side, request))
        results = self._settle(jobs)
        for (kind, key), result in zip(keys, results, strict=True):
            if kind == "got":
                self._got[key] = result
            else:
                self._ids[key] = result

    def _lacking(self, target: Target, path: Path) -> str | None:
        """What ``target``'s probe saw of ``path`` when it found it lacking (``chat``, the
        reference, is never excused)."""
        if path == REFERENCE:
            return None
        unsupported = target.abilities.unsupported(ability(path), path)
        return None if unsupported is None else unsupported.evidence

    # -- evidence ----------------------------------------------------------------------------
    def _answer(
        self, target: Target, prompt_id: str, path: Path, conduct: Conduct, side: str
    ) -> PathAnswer:
        """What ``path`` of ``target`` got for the prompt, its conduct recorded."""
        assert target.resolved is not None
        label = target.resolved.label
        lacking = self._lacking(target, path)
        if lacking is not None:
            unsupported = target.abilities.unsupported(ability(path), path)
            assert unsupported is not None
            conduct.unsupported.append(unsupported)
            return PathAnswer(label, path, NotAnswered("unsupported", lacking))
        got = self._got[(target.label, prompt_id, path)]
        if isinstance(got, RequestFailure):
            conduct.failures.append(RequestFailure(side, got.what, got.message, got.status))
            status = "" if got.status is None else f"HTTP {got.status}: "
            return PathAnswer(label, path, NotAnswered("error", status + got.message))
        if isinstance(got, NotAnswered) and got.status == "not exercised":
            conduct.not_exercised.append(not_exercised_before_requests(path, got.message))
        return PathAnswer(label, path, got)

    def _ids_of(self, target: Target, prompt_id: str, conduct: Conduct) -> tuple[int, ...] | str:
        ids = self._ids[(target.label, prompt_id)]
        if isinstance(ids, RequestFailure):
            conduct.failures.append(ids)
            return f"{ids.side}: {ids.what} failed"
        return ids

    def _evidence(self, plan: ItemPlan) -> StructuredEvidence | BackendError:
        label = plan.param or self.labels[0]
        target, first = self._target(label), self._target(self.labels[0])
        for side in (target, first):
            if side.error is not None:
                return side.error
        built = self._requests[plan.key]
        if isinstance(built, BackendError):
            return built
        request, filled = built
        assert target.resolved is not None and first.resolved is not None
        conduct = Conduct()
        own = target.resolved.label
        answers = [self._answer(target, plan.key, p, conduct, own) for p in self._paths(target)]
        evidence = StructuredEvidence(
            prompt_id=plan.key,
            target=own,
            side=label,
            reference_target=first.resolved.label,
            reference_side=self.labels[0],
            request=request,
            facts=request_facts(self.run.prompt(plan.key), request, filled),
            answers=answers,
            conduct=conduct,
        )
        if target is not first:
            reference = f"{first.resolved.label} (the reference)"
            evidence.reference_chat = self._answer(first, plan.key, REFERENCE, conduct, reference)
            evidence.prompt_ids = same_prompt(
                self._ids_of(first, plan.key, conduct), self._ids_of(target, plan.key, conduct)
            )
        return evidence

    def gather(self, plans: Sequence[ItemPlan]) -> Mapping[str, Any]:
        """The evidence of each of ``plans`` (see the module docstring); a ``BackendError``
        for a plan whose target cannot take part or whose request could not be built."""
        for label in dict.fromkeys([self.labels[0], *(p.param or self.labels[0] for p in plans)]):
            self._target(label)
        self._fill_requests([self.run.prompt(k) for k in dict.fromkeys(p.key for p in plans)])
        self._send(plans)
        return {plan.full_name: self._evidence(plan) for plan in plans}

    def context(self) -> StructuredParityContext:
        targets = []
        for label in self.labels:
            target = self._target(label)
            if target.resolved is None:
                assert target.error is not None
                raise target.error
            targets.append(target.resolved)
        return StructuredParityContext(
            targets[0].label,
            [t.label for t in targets],
            list(self.labels),
            {t.label: t.backend.identity() for t in targets},
        )
