"""The gather facet of tokenization: every request of the items a process runs, target by
target, each target's requests at once, before anything is judged.

1. Each target's abilities are probed once (an OpenAI-compatible server's ``POST
   /tokenize``: ``tokenize-endpoint``). A server the probe found without one gives only a
   count (``usage.prompt_tokens`` of a one-token request), and its items say so
   (:class:`~pytest_infercheck.verdict.conduct.Unsupported`); its ids are never given up on
   after a request fails.
2. Each prompt is rendered by each target (its chat template, its BOS) and measured: its ids
   (the render's, or the server's ``/tokenize``), else its count.
3. Where the two sides' ids differ (or their counts), each side's tokenizer is asked which of
   the leading ids and of a window from the first difference are special tokens, and their
   texts; where the text is not NFC, each side's ids of the NFC-normalised text.

A request that fails (a render, ``/tokenize``, a count, a tokenizer question) is the item's
:class:`~pytest_infercheck.verdict.conduct.RequestFailure`, with the server's message.
"""

from __future__ import annotations

import unicodedata
from collections.abc import Coroutine, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from ...backends.base import BackendError
from ...backends.capabilities import TOKENIZE_TOPIC
from ...backends.endpoint_probe import TOKENIZE
from ...metrics.text import first_divergence
from ...metrics.tokenization import LEADING, WINDOW, TokenSide, body_text, needs_nfc_probe
from ..framework.failures import request_failure
from ..framework.requests import settle
from ..framework.target import TargetContext
from .evidence import Measured, TokenEvidence
from .records import TokenSideRecord
from .spec import Source

if TYPE_CHECKING:
    from ...backends import Backend, PromptInput
    from ...generation_cache import ResolvedTarget
    from ...suites import Prompt
    from ..framework.plan import ItemPlan
    from ..framework.run import RunContext


async def measure(backend: Backend, label: str, prompt: PromptInput) -> Measured:
    """``prompt`` (rendered by ``backend``) as ``backend`` processes it: its ids, else its
    count (see the module docstring)."""
    ids = await backend.prompt_ids(prompt)
    text = prompt.text if prompt.token_ids is not None else None
    if ids is not None:
        source: Source = "render" if prompt.token_ids is not None else "tokenize-endpoint"
        return Measured(TokenSideRecord(label, source, text, ids, len(ids)), True)
    count = await backend.prompt_token_count(prompt)
    source = "usage" if count is not None else "none"
    return Measured(TokenSideRecord(label, source, text, None, count), False)


async def details(backend: Backend, side: TokenSide, positions: Sequence[int]) -> TokenSide:
    """``side`` with the special tokens among its ids at ``positions`` and their texts."""
    ids = side.ids or ()
    at = [p for p in positions if p < len(ids)]
    chosen = [ids[p] for p in at]
    special = await backend.special_tokens(chosen) if chosen else set()
    pieces = await backend.token_pieces(chosen) if chosen else []
    return TokenSide(
        side.text,
        side.ids,
        side.count,
        dict(zip(at, pieces or [], strict=False)),
        frozenset(special or ()),
    )


async def nfc_probe(backend: Backend, side: TokenSide) -> TokenSide:
    """``side`` with its engine's ids of its NFC-normalised :func:`body_text`."""
    text = body_text(side)
    if text is None:
        return side
    ids = await backend.tokenize(unicodedata.normalize("NFC", text))
    return TokenSide(side.text, side.ids, side.count, side.pieces, side.special, ids)


def positions_to_ask(reference: Measured, other: Measured) -> list[int]:
    """Which positions each side's tokenizer is asked about: the leading ones and a window
    from the first difference where the ids differ; the leading ones where only counts are
    known and differ (a BOS a count lacks); none otherwise."""
    a, b = reference.side.ids, other.side.ids
    position = first_divergence(a, b) if a is not None and b is not None else None
    if position is not None:
        return sorted({*range(LEADING), *range(position, position + WINDOW)})
    return list(range(LEADING)) if reference.side.count != other.side.count else []


def plain(measured: Measured) -> TokenSide:
    side = measured.side
    return TokenSide(text=side.text, ids=side.ids, count=side.count)


class TokenizationGather:
    """Each prompt tokenized by every target (see the module docstring)."""

    def __init__(self, run: RunContext) -> None:
        self.run = run

    def targets(self) -> dict[str | None, ResolvedTarget]:
        """The reference (key None) and each other target by its label in item ids."""
        run = self.run
        out: dict[str | None, ResolvedTarget] = {
            None: run.resolve(run.check.baseline_side(run.index))
        }
        for side in run.check.test_sides(run.index):
            out[side.label] = run.resolve(side)
        return out

    def gather(self, plans: Sequence[ItemPlan]) -> Mapping[str, Any]:
        run = self.run
        targets = self.targets()
        wanted = {None, *(p.param for p in plans)}
        targets = {k: t for k, t in targets.items() if k in wanted}
        prompts = list({p.key: run.prompt(p.key) for p in plans}.values())
        unsupported = {
            key: run.cache.abilities(t, TOKENIZE_TOPIC).unsupported(
                TOKENIZE, f"the ids of {t.label}"
            )
            for key, t in targets.items()
        }
        measured = {key: self._measure(t, prompts) for key, t in targets.items()}
        evidence: dict[str, TokenEvidence] = {}
        for plan in plans:
            ref, other = targets[None], targets[plan.param]
            item = TokenEvidence(
                run.prompt(plan.key), (ref.label, other.label), allow=frozenset(run.spec.allow)
            )
            for key in (None, plan.param):
                if (lacking := unsupported[key]) is not None:
                    item.conduct.unsupported.append(lacking)
            for key, slot in ((None, "reference"), (plan.param, "other")):
                got = measured[key][plan.key]
                if isinstance(got, Measured):
                    setattr(item, slot, got)
                else:
                    item.conduct.failures.append(got)
            evidence[plan.full_name] = item
        self._ask(targets, plans, evidence)
        return evidence

    def _measure(self, target: ResolvedTarget, prompts: list[Prompt]) -> dict[str, Measured | Any]:
        """Each prompt rendered and measured by ``target``: its :class:`Measured`, or the
        failed request."""
        cache, thinking = self.run.cache, self.run.settings.thinking
        cache.render_many(target, prompts, thinking)
        out: dict[str, Any] = {}
        rendered = {}
        for prompt in prompts:
            try:
                rendered[prompt.id] = cache.render(target, prompt, thinking)
            except BackendError as exc:
                what = f"rendering prompt {prompt.id}"
                out[prompt.id] = request_failure(target.label, what, exc)
        ids = list(rendered)
        results = settle(
            cache, target, [measure(target.backend, target.label, rendered[i]) for i in ids]
        )
        for pid, result in zip(ids, results, strict=True):
            if isinstance(result, BackendError):
                what = f"the token ids (or count) of prompt {pid}"
                out[pid] = request_failure(target.label, what, result)
            else:
                out[pid] = result
        return out

    def _ask(
        self,
        targets: dict[str | None, ResolvedTarget],
        plans: Sequence[ItemPlan],
        evidence: dict[str, TokenEvidence],
    ) -> None:
        """Each side's tokenizer asked what the comparison needs (see the module docstring):
        special tokens and texts, then the NFC probe."""
        asked: dict[str | None, list[tuple[str, str, Coroutine[Any, Any, TokenSide]]]] = {}
        for plan in plans:
            item = evidence[plan.full_name]
            if item.reference is None or item.other is None:
                continue
            positions = positions_to_ask(item.reference, item.other)
            for key, measured, slot in (
                (None, item.reference, "reference_tokens"),
                (plan.param, item.other, "other_tokens"),
            ):
                side = plain(measured)
                if side.ids is None or not measured.rendered_ids or not positions:
                    setattr(item, slot, side)
                    continue
                job = details(targets[key].backend, side, positions)
                asked.setdefault(key, []).append((plan.full_name, slot, job))
        self._settle(targets, asked, evidence, "the texts and kinds of tokens")
        nfc: dict[str | None, list[tuple[str, str, Coroutine[Any, Any, TokenSide]]]] = {}
        for plan in plans:
            item = evidence[plan.full_name]
            ref, other = item.reference_tokens, item.other_tokens
            if ref is None or other is None or not needs_nfc_probe(ref, other):
                continue
            for key, side, slot in (
                (None, ref, "reference_tokens"),
                (plan.param, other, "other_tokens"),
            ):
                job = nfc_probe(targets[key].backend, side)
                nfc.setdefault(key, []).append((plan.full_name, slot, job))
        self._settle(targets, nfc, evidence, "the token ids of the NFC-normalised text")

    def _settle(
        self,
        targets: dict[str | None, ResolvedTarget],
        jobs: dict[str | None, list[tuple[str, str, Coroutine[Any, Any, TokenSide]]]],
        evidence: dict[str, TokenEvidence],
        what: str,
    ) -> None:
        for key, todo in jobs.items():
            target = targets[key]
            results = settle(self.run.cache, target, [job for _, _, job in todo])
            for (name, slot, _), result in zip(todo, results, strict=True):
                item = evidence[name]
                if isinstance(result, BackendError):
                    item.conduct.failures.append(request_failure(target.label, what, result))
                    setattr(item, slot, None)
                else:
                    setattr(item, slot, result)

    def context(self) -> TargetContext:
        """The reference target and every target's engine."""
        targets = list(self.targets().values())
        return TargetContext(targets[0].label, {t.label: t.backend.identity() for t in targets})
