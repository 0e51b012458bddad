"""The gather facet of stream-parity and endpoint-parity: every request of the items a
process runs, concurrently (a backend bounds its own requests in flight), before anything is
judged.

Before any request, the target's abilities are probed once
(:meth:`~pytest_infercheck.generation_cache.GenerationCache.abilities`): a path the probe
found lacking (``streaming``, ``completions-endpoint``, ``chat-endpoint``,
``messages-endpoint``) is recorded :class:`~pytest_infercheck.verdict.conduct.Unsupported`
and not requested. Every other request is made; one that fails (a 4xx refusal, a 5xx, a
broken stream, a render the server refuses) is recorded as a
:class:`~pytest_infercheck.verdict.conduct.RequestFailure` with the server's message, on the
reference side too, and its side has no output (the item fails). A target served
in-process fails every item and the aggregate (a ``BackendError`` naming the server kinds).

Under ``fail_on: decisive``, a stream-parity item whose outputs part at a near-tie token gets
the streamed path continued from the non-streamed tokens up to and including it (the prompt's
ids and those tokens sent as the prompt), in rounds: a continuation that parts at a near-tie
again is continued past it, up to :data:`MAX_CONTINUATIONS`. Which items need one is read from
the evidence so far with the same pure functions the judge uses (:mod:`.compare`); the
verdict is the judge's.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Coroutine, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from ...backends.base import BackendError, PromptInput
from ...backends.capabilities import GENERATION_PATHS
from ...conversation import has_generated
from ..framework.failures import request_failure
from ..framework.requests import settle
from ..framework.target import TargetContext, TargetGatherer
from .compare import continuation_divergence
from .evidence import Forced, ParityEvidence
from .records import EndpointParityContext

if TYPE_CHECKING:
    from ...backends.base import Generation
    from ...generation_cache import ResolvedTarget
    from ...suites import Prompt
    from ..framework.plan import ItemPlan

MAX_CONTINUATIONS = 4
"""Continuations past near-ties per item (each one request)."""
STREAMING = "streaming"
"""The ability of streaming the backend's own request (:mod:`...backends.endpoint_probe`)."""


def endpoint_ability(endpoint: str) -> str:
    """``chat`` -> ``chat-endpoint`` (:mod:`...backends.endpoint_probe`)."""
    return f"{endpoint}-endpoint"


class _ParityGather(TargetGatherer[Any]):
    """What both parity kinds' gatherers share: the target, which must be served over HTTP
    (an in-process one fails every item and the aggregate)."""

    @property
    def served(self) -> ResolvedTarget:
        return self.served_target()

    def _engines(self, target: ResolvedTarget) -> dict[str, dict[str, Any]]:
        return {target.label: target.backend.identity()}


class StreamGather(_ParityGather):
    """stream-parity: each prompt rendered, generated as usual (through the generation
    cache) and streamed, at once; continuations past near-ties under ``fail_on:
    decisive``."""

    def gather(self, plans: Sequence[ItemPlan]) -> Mapping[str, Any]:
        run, target = self.run, self.served
        cache, thresholds = run.cache, run.thresholds
        lacking = cache.abilities(target, GENERATION_PATHS).unsupported(
            STREAMING, "the streamed request"
        )
        prompts = list({p.key: run.prompt(p.key) for p in plans}.values())
        evidence = {p.id: self._evidence(target, p) for p in prompts}
        rendered = self._render(target, prompts, evidence)
        self._references(target, prompts, rendered, evidence)
        if lacking is not None:
            for item in evidence.values():
                item.conduct.unsupported.append(lacking)
        else:
            self._streamed(target, prompts, rendered, evidence)
        if thresholds.fail_on == "decisive":
            self._continue(target, rendered, evidence)
        return {plan.full_name: evidence[plan.key] for plan in plans}

    def _evidence(self, target: ResolvedTarget, prompt: Prompt) -> ParityEvidence:
        return ParityEvidence(
            prompt,
            target.label,
            ("non-streamed", "streamed"),
            None,
            None,
            self.run.thresholds.tie_margin,
            logprob_note=target.backend.logprob_unavailable_reason(),
        )

    def _render(
        self,
        target: ResolvedTarget,
        prompts: list[Prompt],
        evidence: dict[str, ParityEvidence],
    ) -> dict[str, PromptInput]:
        """Each prompt as the target receives it (a conversation's ``generate`` turns filled
        in by the target); a render that fails is the item's failed request."""
        ready = [p for p in prompts if not has_generated(p)]
        self.run.cache.render_many(target, ready, self.run.settings.thinking)
        out: dict[str, PromptInput] = {}
        for prompt in prompts:
            try:
                out[prompt.id] = self.render(prompt)
            except BackendError as exc:
                what = f"rendering prompt {prompt.id}"
                evidence[prompt.id].conduct.failures.append(
                    request_failure(target.label, what, exc)
                )
        return out

    def _references(
        self,
        target: ResolvedTarget,
        prompts: list[Prompt],
        rendered: dict[str, PromptInput],
        evidence: dict[str, ParityEvidence],
    ) -> None:
        """The non-streamed generations, through the generation cache (shared with other
        checks of the target), concurrently."""
        cache = self.run.cache
        jobs = [(rendered[p.id], self.params(p)) for p in prompts if p.id in rendered]
        failed = cache.prefetch(target, jobs)  # (a failed job is not asked again)
        for prompt in prompts:
            if prompt.id not in rendered:
                continue
            params = self.params(prompt)
            try:
                error = failed.get((rendered[prompt.id].key(), params.key(), 0))
                if error is not None:
                    raise error
                generation = cache.generate(target, rendered[prompt.id], params)
            except BackendError as exc:
                what = "the non-streamed request"
                evidence[prompt.id].conduct.failures.append(
                    request_failure(target.label, what, exc)
                )
                continue
            evidence[prompt.id].reference = generation

    def _streamed(
        self,
        target: ResolvedTarget,
        prompts: list[Prompt],
        rendered: dict[str, PromptInput],
        evidence: dict[str, ParityEvidence],
    ) -> None:
        todo = [p for p in prompts if p.id in rendered]
        backend = target.backend
        results = settle(
            self.run.cache,
            target,
            [backend.generate_stream(rendered[p.id], self.params(p)) for p in todo],
        )
        for prompt, result in zip(todo, results, strict=True):
            item = evidence[prompt.id]
            if isinstance(result, BackendError):
                item.conduct.failures.append(
                    request_failure(target.label, "the streamed request", result)
                )
            else:
                item.other = result

    def _continue(
        self,
        target: ResolvedTarget,
        rendered: dict[str, PromptInput],
        evidence: dict[str, ParityEvidence],
    ) -> None:
        """The continuations past near-ties (see the module docstring), in rounds."""
        starts = {pid: s for pid, item in evidence.items() if (s := self._first_start(item))}
        for pid in list(starts):
            if rendered[pid].token_ids is None:
                evidence[pid].unforced = (
                    "the target's render gives no token ids, so its streamed path cannot be "
                    "given the non-streamed tokens to continue from"
                )
                del starts[pid]
        for _ in range(MAX_CONTINUATIONS):
            if not starts:
                return
            todo = list(starts.items())
            results = settle(
                self.run.cache,
                target,
                [self._continuation(target, rendered[pid], evidence[pid], s) for pid, s in todo],
            )
            starts = {}
            for (pid, start), result in zip(todo, results, strict=True):
                item = evidence[pid]
                if isinstance(result, BackendError):
                    what = f"the streamed request continued from token {start}"
                    item.conduct.failures.append(request_failure(target.label, what, result))
                    continue
                item.forced.append(Forced(start, result))
                assert item.reference is not None
                later = continuation_divergence(item.reference, result, start, item.tie_margin)
                n_ref = len(item.reference.token_ids or [])
                if (
                    later is not None
                    and later.divergence_label == "near-tie"
                    and later.token + 1 < n_ref
                ):
                    starts[pid] = later.token + 1

    @staticmethod
    def _first_start(item: ParityEvidence) -> int | None:
        """Where the first continuation starts (after the near-tie token), when the item
        needs one: its outputs part at a near-tie token that the reference follows."""
        comparison = item.comparison
        if comparison is None or comparison.tie is None:
            return None
        if comparison.tie.divergence_label != "near-tie":
            return None
        assert item.reference is not None
        start = comparison.tie.token + 1
        return start if start < len(item.reference.token_ids or []) else None

    def _continuation(
        self, target: ResolvedTarget, rendered: PromptInput, item: ParityEvidence, start: int
    ) -> Coroutine[Any, Any, Generation]:
        """The streamed request of the prompt's ids and the reference's first ``start``
        tokens, for the rest of the budget."""
        reference = item.reference
        assert reference is not None and reference.token_ids is not None
        assert rendered.token_ids is not None
        texts = reference.token_texts
        prefix_text = "".join(texts[:start]) if texts is not None else ""
        forced = dataclasses.replace(
            rendered,
            text=rendered.text + prefix_text,
            token_ids=(*rendered.token_ids, *reference.token_ids[:start]),
        )
        params = self.params(item.prompt)
        budget = dataclasses.replace(params, max_tokens=max(1, params.max_tokens - start))
        return target.backend.generate_stream(forced, budget)

    def context(self) -> TargetContext:
        target = self.served
        return TargetContext(target.label, self._engines(target))


class EndpointGather(_ParityGather):
    """endpoint-parity: each prompt's messages through each of the check's endpoints, at
    once; the reference endpoint's generation serves every item of the prompt."""

    UNFORCED = (
        "an endpoint's request cannot be given the reference's tokens to continue from (the "
        "chat endpoints take messages)"
    )

    @property
    def endpoints(self) -> list[str]:
        return list(self.run.spec.endpoints)

    def gather(self, plans: Sequence[ItemPlan]) -> Mapping[str, Any]:
        run, target = self.run, self.served
        abilities = run.cache.abilities(target, GENERATION_PATHS)
        reference = self.endpoints[0]
        prompts = {p.key: run.prompt(p.key) for p in plans}
        wanted = {(p.key, e) for p in plans for e in (reference, p.param or "")}
        lacking = {
            e: abilities.unsupported(endpoint_ability(e), f"the {e} endpoint")
            for e in self.endpoints
        }
        todo = sorted((pid, e) for pid, e in wanted if lacking[e] is None)
        backend = target.backend
        results = settle(
            run.cache,
            target,
            [
                backend.generate_via(e, self.messages(prompts[pid]), self.params(prompts[pid]))
                for pid, e in todo
            ],
        )
        done = dict(zip(todo, results, strict=True))
        out: dict[str, Any] = {}
        for plan in plans:
            endpoint = plan.param or ""
            item = ParityEvidence(
                prompts[plan.key],
                target.label,
                (reference, endpoint),
                None,
                None,
                run.thresholds.tie_margin,
                unforced=self.UNFORCED,
            )
            for side, label in ((0, reference), (1, endpoint)):
                missing = lacking[label]
                if missing is not None:
                    item.conduct.unsupported.append(missing)
                    continue
                result = done[(plan.key, label)]
                if isinstance(result, BackendError):
                    what = f"the {label} endpoint's request"
                    item.conduct.failures.append(request_failure(target.label, what, result))
                elif side == 0:
                    item.reference = result
                else:
                    item.other = result
            out[plan.full_name] = item
        return out

    def messages(self, prompt: Prompt) -> PromptInput:
        return PromptInput(
            prompt.text,
            None,
            templated=True,
            system=prompt.system,
            thinking=self.run.settings.thinking,
        )

    def context(self) -> EndpointParityContext:
        target = self.served
        return EndpointParityContext(target.label, self.endpoints[0], self._engines(target))  # type: ignore[arg-type]
