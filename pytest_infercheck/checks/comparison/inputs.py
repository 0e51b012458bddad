"""Which prompt each side of a comparison receives, and why: decided once, recorded.

The baseline renders the prompt (its chat template, its tokenizer). The test side then
receives, in this order of preference:

1. **the baseline's ids** when its backend accepts them
   (:meth:`~pytest_infercheck.backends.base.Backend.accepts_token_ids`: equal vocabulary
   fingerprints, or its own tokenizer reproduces the ids from the rendered text); a server
   without ids in raw mode receives the rendered text, the exact string of those ids;
2. **the baseline's ids** when its backend takes prompt ids and the two vocabularies agree
   on them: the test side's detokenization of the ids equals the baseline's. Tokenizers that
   differ only in normalisation (Qwen's HF tokenizer applies NFC, llama.cpp does not) give
   other ids for the same text, but mean the same by these ids: the comparison then still
   runs on one input, and says so;
3. **its own render** otherwise (a server that applies its own chat template, a baseline
   without ids, vocabularies that disagree).

The record (:class:`PromptInputs`) names the case, the reason, and the prompt ids each side
received (None where the engine does not expose them).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from ...backends import BackendError, PromptInput
from ...backends.capabilities import TemplatedText
from ...metrics.text import first_divergence

if TYPE_CHECKING:
    from collections.abc import Sequence

    from ...conversation import Message
    from ...generation_cache import GenerationCache, ResolvedTarget
    from ...suites import Prompt

SHARED_IDS = "shared ids"
SHARED_TEXT = "shared text"
OWN_RENDER = "own render"


@dataclass(frozen=True)
class PromptInputs:
    """Which prompt each side received, and why (a field of the comparison's record)."""

    sharing: str
    """``shared ids`` (the test side generated from the baseline's prompt ids), ``shared
    text`` (it received the baseline's rendered text, the exact string of its ids, and
    tokenized it itself) or ``own render`` (it rendered the prompt itself)."""
    reason: str
    """Why, e.g. ``the vocabularies agree on these ids (...); its own tokenization of the
    rendered text differs at position 3``."""
    base_ids: list[int] | None
    """The baseline's prompt ids (None: its engine exposes none)."""
    test_ids: list[int] | None
    """The test side's prompt ids (None: its engine exposes none)."""

    @property
    def shared(self) -> bool:
        """Whether the test side received the baseline's prompt (ids or their exact text)."""
        return self.sharing != OWN_RENDER


@dataclass(frozen=True)
class SideInputs:
    """What :func:`decide_inputs` decided: each side's input, the record, and each side's
    rendered text where it is known (for the ``template`` stage)."""

    base: PromptInput
    test: PromptInput
    record: PromptInputs
    base_rendered: str | None
    test_rendered: str | None


def decide_inputs(
    cache: GenerationCache,
    baseline: ResolvedTarget,
    test: ResolvedTarget,
    prompt: Prompt,
    thinking: bool,
    messages: Sequence[Message] | None = None,
) -> SideInputs:
    """The inputs of both sides by the rules of the module docstring: of ``prompt``, or, when
    ``messages`` is given, of those concrete turns of its conversation (the baseline's
    history, :mod:`.turns`)."""
    rendered = _render(cache, baseline, prompt, thinking, messages)
    base_ids = list(rendered.token_ids) if rendered.token_ids is not None else None
    base_text = _rendered_text(cache, baseline, rendered)
    takes_ids = test.backend.capabilities.token_ids
    if cache.accepts_ids(test, rendered):
        fingerprint = test.backend.tokenizer_fingerprint()
        if not takes_ids:
            record = PromptInputs(
                SHARED_TEXT,
                "the baseline's rendered text (the exact string of its ids) is sent as raw "
                "text; the server tokenizes it and returns no prompt ids",
                base_ids,
                None,
            )
        elif fingerprint is not None and fingerprint == rendered.tokenizer_fingerprint:
            record = PromptInputs(
                SHARED_IDS, "the same tokenizer (equal vocabulary fingerprints)", base_ids, base_ids
            )
        else:
            record = PromptInputs(
                SHARED_IDS,
                "its own tokenizer gives the same ids for the rendered text",
                base_ids,
                base_ids,
            )
        return SideInputs(rendered, rendered, record, base_text, base_text)
    if base_ids is not None and takes_ids:
        agreement = _vocabularies_agree(cache, baseline, test, rendered)
        if agreement is not None:
            shared = PromptInput(
                rendered.text,
                rendered.token_ids,
                rendered.templated,
                None,  # ids taken as they are
                system=rendered.system,
                thinking=rendered.thinking,
            )
            record = PromptInputs(SHARED_IDS, agreement, base_ids, base_ids)
            return SideInputs(rendered, shared, record, base_text, base_text)
    own = _render(cache, test, prompt, thinking, messages)
    if base_ids is None:
        why = "the baseline has no prompt ids to share"
    elif not takes_ids:
        why = "the server takes messages and applies its own chat template"
    else:
        why = "its tokenizer gives other ids and the vocabularies disagree on the baseline's"
    test_ids = list(own.token_ids) if own.token_ids is not None else None
    record = PromptInputs(OWN_RENDER, why, base_ids, test_ids)
    return SideInputs(rendered, own, record, base_text, _rendered_text(cache, test, own))


def _render(
    cache: GenerationCache,
    target: ResolvedTarget,
    prompt: Prompt,
    thinking: bool,
    messages: Sequence[Message] | None,
) -> PromptInput:
    """``target``'s rendering of ``prompt``, or of the concrete turns ``messages``."""
    if messages is None:
        return cache.render(target, prompt, thinking)
    return cache.render_turns(target, prompt, messages, thinking)


def _vocabularies_agree(
    cache: GenerationCache, baseline: ResolvedTarget, test: ResolvedTarget, rendered: PromptInput
) -> str | None:
    """The reason for rule 2 when the test side's detokenization of the baseline's ids equals
    the baseline's own (None: they differ, or either side exposes no tokenizer)."""
    ids = list(rendered.token_ids or ())
    try:
        base_text = cache.call(baseline, baseline.backend.detokenize(ids))
        test_text = cache.call(test, test.backend.detokenize(ids))
        own = cache.call(test, test.backend.tokenize(rendered.text))
    except BackendError:
        return None  # e.g. ids outside the test side's vocabulary
    if base_text is None or test_text is None or base_text != test_text:
        return None
    reason = (
        "the vocabularies agree on these ids (the test side's detokenization equals the baseline's)"
    )
    if own is not None:
        at = first_divergence(own, ids)
        if at is not None:
            reason += (
                f"; its own tokenization of the rendered text differs at position {at} "
                f"({len(own)} vs {len(ids)} tokens, e.g. Unicode normalisation)"
            )
    return reason


def _rendered_text(
    cache: GenerationCache, target: ResolvedTarget, rendered: PromptInput
) -> str | None:
    """The text the side's engine tokenizes: the rendered text, or, for a server that applies
    its own template to messages, that template rendered from its served model folder
    (what such a server renders); None when unknown."""
    if rendered.token_ids is not None or not rendered.templated:
        return rendered.text
    backend = target.backend
    if not isinstance(backend, TemplatedText) or backend.model_folder() is None:
        return None
    try:
        text: str = cache.call(target, backend.templated_text(rendered))
    except BackendError:
        return None
    return text
