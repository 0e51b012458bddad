"""The gather facet's lookups of where a comparison's divergence starts
(:func:`~pytest_infercheck.metrics.origin.locate_origin`): the engines' names of the ids the
origin's detail shows, their special tokens and NFC probes of prompts the sides rendered each
their own way, and a text-only side judged by re-tokenization (:mod:`.retokenize`).

A run asks every prompt's lookups at once, ahead of its items (:func:`look_up_origins`:
concurrent requests to an HTTP engine), which then find them answered.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, NamedTuple

from ...metrics.origin import Origin, PromptSide, locate_origin, nfc_probe_texts
from ...metrics.text import first_divergence
from ...metrics.tokenization import LEADING, WINDOW
from .evidence import outputs_verdict
from .retokenize import judged_ids, text_side_verdict

if TYPE_CHECKING:
    from ...backends import Generation
    from ...generation_cache import GenerationCache, ResolvedTarget
    from ...metrics.sameness import Sameness
    from .inputs import SideInputs


def origin(
    cache: GenerationCache,
    baseline: ResolvedTarget,
    test: ResolvedTarget,
    inputs: SideInputs,
    base: Generation,
    other: Generation,
    verdict: Sameness,
) -> Origin:
    """Where the divergence starts (:func:`~pytest_infercheck.metrics.origin.locate_origin`).
    Generated ids are compared when both sides have them and share a vocabulary (one
    prompt, or equal fingerprints); a text-only test side is judged by re-tokenization
    (:mod:`.retokenize`, which checks that its tokenizer agrees with the baseline's ids); ids
    are named by the baseline's tokenizer (the test's for ids only it has). When the outputs
    differ and each side rendered its own prompt, each engine also names its special tokens
    among its prompt ids and, where the texts differ only by NFC, tokenizes the NFC text
    (what :func:`~pytest_infercheck.metrics.tokenization.compare_tokenizations` needs for
    stages 1-3)."""
    record = inputs.record
    comparable = _comparable_ids(baseline, test, inputs, base, other)
    text_side = None
    pieces: dict[int, str] = {}
    base_prompt = PromptSide(inputs.base_rendered, record.base_ids)
    test_prompt = PromptSide(inputs.test_rendered, record.test_ids)
    if not verdict.same:
        text_side = text_side_verdict(cache, baseline, test, base, other)
        lookups = origin_lookups(baseline, test, inputs, base, other)
        for target, ids in ((baseline, lookups.base_ids), (test, lookups.test_ids)):
            named = cache.call(target, target.backend.token_pieces(ids)) if ids else None
            pieces.update(zip(ids, named or [], strict=False))
        if not record.shared:
            base_prompt, test_prompt = (
                _with_specials(cache, baseline, base_prompt, test_prompt),
                _with_specials(cache, test, test_prompt, base_prompt),
            )
            texts = nfc_probe_texts(base_prompt, test_prompt, pieces)
            if texts is not None:
                base_prompt = _with_nfc_ids(cache, baseline, base_prompt, texts[0])
                test_prompt = _with_nfc_ids(cache, test, test_prompt, texts[1])
    return locate_origin(
        shared_prompt=record.shared,
        base_prompt=base_prompt,
        test_prompt=test_prompt,
        outputs_same=verdict.same,
        base_text=base.text,
        test_text=other.text,
        base_ids=base.token_ids if comparable else None,
        test_ids=other.token_ids if comparable else None,
        text_side=text_side,
        pieces=pieces,
    )


def _comparable_ids(
    baseline: ResolvedTarget,
    test: ResolvedTarget,
    inputs: SideInputs,
    base: Generation,
    other: Generation,
) -> bool:
    """Whether the generated ids of both sides are compared: both have ids, of one
    vocabulary (the sides received one prompt's ids, or their tokenizers' fingerprints are
    equal)."""
    fingerprint = baseline.backend.tokenizer_fingerprint()
    same_vocab = inputs.record.shared or (
        fingerprint is not None and fingerprint == test.backend.tokenizer_fingerprint()
    )
    return same_vocab and base.token_ids is not None and other.token_ids is not None


class OriginLookups(NamedTuple):
    """What :func:`_origin` asks the engines about a prompt whose outputs differ, besides
    special tokens and NFC probes of prompts the sides rendered each their own way."""

    base_ids: list[int]
    """The ids the baseline's engine names (:func:`_named` of its prompt and output), sorted."""
    test_ids: list[int]
    """The ids only the test side has that its engine names, sorted."""
    retokenized: list[int] | None
    """The baseline's ids that the baseline detokenizes to judge a text-only test side
    (:func:`.retokenize.judged_ids`)."""


def origin_lookups(
    baseline: ResolvedTarget,
    test: ResolvedTarget,
    inputs: SideInputs,
    base: Generation,
    other: Generation,
) -> OriginLookups:
    """The engine lookups of :func:`_origin` for outputs ``base`` and ``other`` that differ,
    so that a run can ask every prompt's at once before its items (:func:`look_up_origins`).
    Ids are named only where the origin's detail shows them: a prompt's when the sides
    rendered each their own (stages 1-3 compare the prompts), the first differing step's
    when the generated ids are compared."""
    record = inputs.record
    base_ids: set[int] = set()
    test_ids: set[int] = set()
    if not record.shared:
        base_ids |= _named(record.base_ids, record.test_ids)
        test_ids |= _named(record.test_ids, record.base_ids)
    if _comparable_ids(baseline, test, inputs, base, other):
        base_ids |= _named(base.token_ids, other.token_ids, prompt=False)
        test_ids |= _named(other.token_ids, base.token_ids, prompt=False)
    return OriginLookups(
        sorted(base_ids), sorted(test_ids - base_ids), judged_ids(test, base, other)
    )


def look_up_origins(
    cache: GenerationCache,
    baseline: ResolvedTarget,
    test: ResolvedTarget,
    compared: Sequence[tuple[SideInputs, Generation, Generation]],
) -> None:
    """Ask, for every (inputs, baseline output, test output) of ``compared`` whose outputs
    differ, the lookups of its divergence origin at once (concurrent requests to an HTTP
    engine), ahead of the items, which then find them answered; one request after another,
    item by item, took 0.1 s of a 20-prompt diff."""
    lookups = [
        origin_lookups(baseline, test, inputs, base, other)
        for inputs, base, other in compared
        if not outputs_verdict(inputs, base, other).same
    ]
    if not lookups:
        return
    judged = [lk.retokenized for lk in lookups if lk.retokenized is not None]
    cache.look_up_ahead(baseline, [i for lk in lookups for i in lk.base_ids], judged)
    cache.look_up_ahead(test, [i for lk in lookups for i in lk.test_ids], [])


def _named(
    ids: Sequence[int] | None, other: Sequence[int] | None, *, prompt: bool = True
) -> set[int]:
    """The ids of ``ids`` that the prompt comparison looks at, so that only those are asked
    for their texts and whether they are special (a server answers one request per id): of
    a prompt, the first :data:`LEADING`, :data:`WINDOW` from the first difference with
    ``other`` and the last :data:`WINDOW` (an added EOS), as the ``tokenization`` check
    asks; of a generation, the first differing step's."""
    if not ids:
        return set()
    at = first_divergence(list(ids), list(other or ())) or 0
    if prompt:
        positions = {*range(LEADING), *range(at, at + WINDOW), *range(len(ids) - WINDOW, len(ids))}
    else:
        positions = {at}
    return {ids[p] for p in positions if 0 <= p < len(ids)}


def _with_specials(
    cache: GenerationCache, target: ResolvedTarget, side: PromptSide, other: PromptSide
) -> PromptSide:
    """``side`` with the special tokens, by its engine, among its :func:`_named` ids."""
    if not side.ids:
        return side
    chosen = sorted(_named(side.ids, other.ids))
    special = cache.call(target, target.backend.special_tokens(chosen))
    return replace(side, special=frozenset(special or ()))


def _with_nfc_ids(
    cache: GenerationCache, target: ResolvedTarget, side: PromptSide, nfc_text: str
) -> PromptSide:
    """``side`` with its engine's ids of the NFC-normalised text (stage 3's normalisation)."""
    return replace(side, nfc_ids=cache.call(target, target.backend.tokenize(nfc_text)))
