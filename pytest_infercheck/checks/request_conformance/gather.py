"""request-conformance's gather facet: every request of the items a process runs, at once,
before anything is judged.

Decided before any request, from the matrix: a probe whose parameters the target's backend
kind does not take is not exercised (:func:`~pytest_infercheck.backends.params.refusal`);
``usage`` on an in-process engine is not exercised (it reports no usage: its counts are its
own), nor are streamed answers (it has no stream). Then the target is probed once per topic
(:meth:`~pytest_infercheck.generation_cache.GenerationCache.abilities`): a parameter its
server refuses (``request-params``: HTTP 400/422 on a one-token request asking it) makes
the probes that ask it ``unsupported``; a stream it lacks (``generation-paths``) the
streamed answers. Every other request is made: the prompt's greedy reference (through the
generation cache, shared with other checks), then each probe's request built from it
(:mod:`.probes`), non-streamed and streamed, concurrently; a request that fails is the
item's :class:`~pytest_infercheck.verdict.conduct.RequestFailure` with the server's words.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Coroutine, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from ...backends.base import BackendError, Generation, GenerationParams, PromptInput
from ...backends.capabilities import GENERATION_PATHS, REQUEST_PARAMS, TOKENIZE_TOPIC
from ...backends.endpoint_probe import STREAMING, TOKENIZE, param_ability
from ...backends.params import refusal
from ...request_params import target_backend
from ...specs import SERVER_KINDS
from ...verdict.conduct import Abilities, not_exercised_before_requests
from ..framework.failures import request_failure
from ..framework.requests import settle
from ..framework.target import TargetGatherer
from .evidence import Answer, ConformanceEvidence
from .probes import PROBE_PARAMS, Reference, ask
from .spec import RequestConformanceSpec

if TYPE_CHECKING:
    from ...suites import Prompt
    from ..framework.plan import ItemPlan


class ConformanceGather(TargetGatherer[RequestConformanceSpec]):
    """The probes of one check x suite in this process (see the module docstring)."""

    def gather(self, plans: Sequence[ItemPlan]) -> Mapping[str, Any]:
        run, target = self.run, self.target
        side = run.check.baseline_side(run.index)
        kind, chat = target_backend(run.loaded, run.loaded.target(side.ref, side.loc))
        self.server = kind in SERVER_KINDS
        items = {p.full_name: ConformanceEvidence(p.key, str(p.param), target.label) for p in plans}
        live = [p for p in plans if self._decided(items[p.full_name], kind, chat)]
        if not live:
            return items
        needs = {n for p in live for n in PROBE_PARAMS[str(p.param)]}
        asked = run.cache.abilities(target, REQUEST_PARAMS) if needs else Abilities()
        for plan in list(live):
            item = items[plan.full_name]
            for name in PROBE_PARAMS[item.probe]:
                lacking = asked.unsupported(param_ability(name), f"probe {item.probe}")
                if lacking is not None:
                    item.conduct.unsupported.append(lacking)
                    live.remove(plan)
                    break
        self.stream_lacking = None
        if self.server and self.spec.streamed and live:
            paths = run.cache.abilities(target, GENERATION_PATHS)
            self.stream_lacking = paths.unsupported(STREAMING, "the streamed answer")
        prompts = list({p.key: run.prompt(p.key) for p in live}.values())
        rendered, references = self._references(prompts, [items[p.full_name] for p in live])
        self._requests([items[p.full_name] for p in live], rendered, references)
        return items

    def _decided(self, item: ConformanceEvidence, kind: str, chat: bool | None) -> bool:
        """Whether ``item``'s probe is sent: False when the matrix alone rules it out."""
        for name in PROBE_PARAMS[item.probe]:
            why = refusal(self.target.backend.name, kind, chat, name)
            if why is not None:
                item.conduct.not_exercised.append(
                    not_exercised_before_requests(f"probe {item.probe}", why)
                )
                return False
        if item.probe == "usage" and not self.server:
            why = f"{kind} runs in-process: it reports no usage (its counts are its own)"
            item.conduct.not_exercised.append(not_exercised_before_requests("probe usage", why))
            return False
        return True

    # -- the references ---------------------------------------------------------------------
    def _references(
        self, prompts: list[Prompt], items: list[ConformanceEvidence]
    ) -> tuple[dict[str, PromptInput], dict[str, Generation]]:
        """Each prompt rendered and generated greedily (through the generation cache); the
        items of a prompt whose render or reference failed get the failure."""
        run, target = self.run, self.target
        by_prompt: dict[str, list[ConformanceEvidence]] = {}
        for item in items:
            by_prompt.setdefault(item.prompt_id, []).append(item)

        def failed(prompt_id: str, what: str, exc: BackendError) -> None:
            for item in by_prompt[prompt_id]:
                item.conduct.failures.append(request_failure(target.label, what, exc))

        run.cache.render_many(target, prompts, run.settings.thinking)
        rendered: dict[str, PromptInput] = {}
        for prompt in prompts:
            try:
                rendered[prompt.id] = self.render(prompt)
            except BackendError as exc:
                failed(prompt.id, f"rendering prompt {prompt.id}", exc)
        jobs = [(rendered[p.id], self.params(p)) for p in prompts if p.id in rendered]
        errors = run.cache.prefetch(target, jobs)
        references: dict[str, Generation] = {}
        for prompt in prompts:
            if prompt.id not in rendered:
                continue
            params = self.params(prompt)
            try:
                error = errors.get((rendered[prompt.id].key(), params.key(), 0))
                if error is not None:
                    raise error
                references[prompt.id] = run.cache.generate(target, rendered[prompt.id], params)
            except BackendError as exc:
                failed(prompt.id, "the greedy reference", exc)
        counts = self._prompt_counts(rendered, by_prompt)
        pieces = self._pieces(references)
        for prompt in prompts:
            if prompt.id not in references:
                continue
            generation = references[prompt.id]
            texts, how = pieces[prompt.id]
            ids = generation.token_ids
            eos = generation.finish_reason == "stop"
            body = None if ids is None else tuple(ids[: len(ids) - (1 if eos and ids else 0)])
            reference = Reference(texts, body, eos, self.params(prompt).max_tokens, how)
            for item in by_prompt[prompt.id]:
                item.reference = reference
                item.generation = generation
                item.eos_id = ids[-1] if eos and ids else None
                item.prompt_tokens, item.prompt_note = counts.get(prompt.id, (None, None))
        return rendered, references

    def _prompt_counts(
        self, rendered: dict[str, PromptInput], by_prompt: dict[str, list[ConformanceEvidence]]
    ) -> dict[str, tuple[int | None, str | None]]:
        """Each prompt's token count as the engine tokenizes it: its rendered ids, else the
        server's own ``/tokenize`` where the probe found it (a failure of it is the usage
        items' failed request), else unknown with why."""
        out: dict[str, tuple[int | None, str | None]] = {}
        need = [pid for pid, r in rendered.items() if r.token_ids is None]
        for pid, r in rendered.items():
            if r.token_ids is not None:
                out[pid] = (len(r.token_ids), None)
        wants_usage = any(i.probe == "usage" for pid in need for i in by_prompt[pid])
        if not need or not wants_usage:
            return out
        target = self.target
        abilities = self.run.cache.abilities(target, TOKENIZE_TOPIC)
        if not abilities.offers(TOKENIZE):
            why = abilities.lacking.get(TOKENIZE, "the server's tokenize endpoint was not found")
            return {**out, **{pid: (None, f"prompt token count unknown: {why}") for pid in need}}
        results = settle(
            self.run.cache, target, [target.backend.prompt_ids(rendered[pid]) for pid in need]
        )
        for pid, result in zip(need, results, strict=True):
            if isinstance(result, BackendError):
                for item in by_prompt[pid]:
                    if item.probe == "usage":
                        what = "the prompt's tokenization (/tokenize)"
                        item.conduct.failures.append(request_failure(target.label, what, result))
                out[pid] = (None, "prompt token count unknown: /tokenize failed")
            else:
                out[pid] = (None if result is None else len(result), None)
        return out

    def _pieces(self, references: dict[str, Generation]) -> dict[str, tuple[tuple[str, ...], str]]:
        """Each reference's generated token texts (no end-of-sequence), whose concatenation
        is its text: the server's token texts, else its tokenizer's pieces of the ids, else
        the characters (the token boundaries unknown)."""
        target = self.target
        with_ids = {
            pid: list(g.token_ids) for pid, g in references.items() if g.token_ids is not None
        }
        names = list(with_ids)
        found = settle(
            self.run.cache, target, [target.backend.token_pieces(with_ids[p]) for p in names]
        )
        pieces_of = dict(zip(names, found, strict=True))
        out: dict[str, tuple[tuple[str, ...], str]] = {}
        for pid, g in references.items():
            eos = g.finish_reason == "stop"
            candidates: list[tuple[Any, str]] = [(g.token_texts, "token texts")]
            candidates.append((pieces_of.get(pid), "token ids"))
            out[pid] = (tuple(g.text), "characters")
            for texts, how in candidates:
                if not isinstance(texts, list):
                    continue
                for cut in (len(texts) - 1, len(texts)) if eos else (len(texts),):
                    if cut >= 0 and "".join(texts[:cut]) == g.text:
                        out[pid] = (tuple(texts[:cut]), how)
                        break
                if out[pid][1] == how:
                    break
        return out

    # -- the probes -------------------------------------------------------------------------
    def _requests(
        self,
        items: list[ConformanceEvidence],
        rendered: dict[str, PromptInput],
        references: dict[str, Generation],
    ) -> None:
        """Each probe's requests, non-streamed and streamed, all at once."""
        backend = self.target.backend
        jobs: list[tuple[ConformanceEvidence, str, Coroutine[Any, Any, Generation]]] = []
        for item in items:
            if item.reference is None:
                continue
            item.asked = ask(item.probe, item.reference, self.spec.top_logprobs)
            if item.asked.unbuildable is not None:
                continue
            prompt = rendered[item.prompt_id]
            params = with_asked(self.params(self.run.prompt(item.prompt_id)), item.asked.params)
            if item.probe == "usage":
                item.answers.append(Answer("non-streamed", references[item.prompt_id]))
            else:
                jobs.append((item, "non-streamed", backend.generate(prompt, params)))
            if not self.spec.streamed:
                continue
            if not self.server:
                item.notes.append("no streamed answer: the engine runs in-process")
            elif self.stream_lacking is not None:
                item.conduct.unsupported.append(self.stream_lacking)
            else:
                jobs.append((item, "streamed", backend.generate_stream(prompt, params)))
        results = settle(self.run.cache, self.target, [job for _, _, job in jobs])
        for (item, mode, _), result in zip(jobs, results, strict=True):
            if isinstance(result, BackendError):
                what = f"probe {item.probe} ({mode})"
                item.conduct.failures.append(request_failure(self.target.label, what, result))
            else:
                item.answers.append(Answer(mode, result))
        for item in items:
            item.answers.sort(key=lambda a: a.mode != "non-streamed")


def with_asked(base: GenerationParams, asked: Mapping[str, Any]) -> GenerationParams:
    """``base`` (the prompt's greedy params) with a probe's parameters."""
    values = dict(asked)
    if "stop" in values:
        values["stop"] = tuple(values["stop"])
    return dataclasses.replace(base, **values)
