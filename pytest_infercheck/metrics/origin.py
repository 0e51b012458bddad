"""Where a divergence between two sides of a comparison starts: the ordered stages.

A prompt goes through five stages on its way to an output; when two outputs differ, the
divergence starts at the first stage whose result differs (:data:`STAGES`, in order):

1. ``template``: the rendered prompt text (the chat template applied);
2. ``special-tokens``: special tokens and BOS count (a BOS added once more or missing, an
   EOS added at the end, text spelling a token one side parses as a control token);
3. ``prompt-ids``: the prompt ids differ otherwise (Unicode normalisation, a merge);
4. ``generated-tokens``: same prompt, the generated token ids differ from step ``t`` (the
   end-of-sequence token included: stopping is a decision too).
5. ``detokenization``: same generated tokens, different texts.

Stages 1-3 are decided in one place, :func:`~.tokenization.compare_tokenizations` (the
``tokenization`` check kind's verdict): its cause names the stage (:data:`PROMPT_STAGE`)
and its explanation is the stage's detail (two texts equal after NFC are not a template
difference: normalising is the tokenizer's business, stage 3).

A side that received the other's prompt (the same ids, or the exact string of those ids)
cannot diverge at stages 1-3. A stage a side does not expose (a server that applies its own
template and returns no prompt ids) is *unobserved*: skipped, and named in the detail of a
later stage, so a later stage is never presented as the proven start.

Generated tokens of a side that returns no ids (:func:`text_side_tokens`) are judged from
its text against the other side's ids, decoded by a tokenizer both share, in this order:

a. the texts are equal: no divergence;
b. the text re-tokenizes to exactly the other side's ids: the tokens agree;
c. the text equals one of the known detokenizations of the other side's ids
   (:data:`DETOKENIZATIONS`: plain decode; the first token's leading space dropped, as
   mlx-lm's streaming detokenizers and SentencePiece decoders do; special tokens skipped;
   both): the tokens agree, the texts differ by detokenization only;
d. otherwise the tokens differ from step ``t``: the number of the other side's tokens whose
   decoded prefix (under the detokenization that matches longest) is a prefix of the text.

Re-tokenization alone is not enough: a dropped leading space changes the first token
(``" foo"`` is one token, ``"foo"`` another), and a model may emit a non-canonical token
sequence that re-tokenizes differently; hence (c) and (d) work from the other side's ids.

When the outputs are the same, there is no divergence (:attr:`Origin.stage` None) even if the
prompts differ; the detail then says so. When the outputs differ and no observed stage shows
where, the stage is ``undetermined``.

Pure: plain sequences and strings in, a frozen :class:`Origin` out.
"""

from __future__ import annotations

import unicodedata
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal

from .text import first_divergence
from .tokenization import (
    Cause,
    Status,
    TokenSide,
    body_texts,
    compare_tokenizations,
    needs_nfc_probe,
)

__all__ = [
    "DETOKENIZATIONS",
    "PROMPT_STAGE",
    "STAGES",
    "Origin",
    "PromptSide",
    "Stage",
    "TextSideTokens",
    "locate_origin",
    "nfc_probe_texts",
    "prompt_stage",
    "text_side_tokens",
]

Stage = Literal[
    "template", "special-tokens", "prompt-ids", "generated-tokens", "detokenization", "undetermined"
]
STAGES: tuple[Stage, ...] = (
    "template",
    "special-tokens",
    "prompt-ids",
    "generated-tokens",
    "detokenization",
)
"""The stages in the order a prompt goes through them (``undetermined`` is not a stage)."""

PROMPT_STAGE: dict[Cause | None, Stage] = {
    Cause.TEMPLATE: "template",
    Cause.BOS: "special-tokens",
    Cause.SPECIAL: "special-tokens",
    Cause.CONTROL: "special-tokens",
    Cause.EMPTY: "prompt-ids",
    Cause.NORMALIZATION: "prompt-ids",
    Cause.IDS: "prompt-ids",
}
"""The stage of each cause of :func:`~.tokenization.compare_tokenizations` (``count``, which
compares no ids, has none: those stages are unobserved)."""

DETOKENIZATIONS = (
    "decoded",
    "decoded, the first token's leading space dropped",
    "decoded without special tokens",
    "decoded without special tokens, the first token's leading space dropped",
)
"""The known ways an engine turns the same ids into text (rule (c) of the module docstring)."""


@dataclass(frozen=True)
class PromptSide:
    """What one side shows of its prompt: the rendered text and the prompt ids (None: the
    side does not expose it)."""

    rendered: str | None
    ids: Sequence[int] | None
    special: frozenset[int] = frozenset()
    """Ids among :attr:`ids` known to be special tokens of the side's engine."""
    nfc_ids: Sequence[int] | None = None
    """The side's ids of its NFC-normalised text, where asked
    (:func:`~.tokenization.needs_nfc_probe`)."""


@dataclass(frozen=True)
class TextSideTokens:
    """A side without token ids, judged against the other side's generated ids (rules a-d).

    ``tokens_agree`` is None when nothing could be told (no shared tokenizer)."""

    tokens_agree: bool | None
    step: int | None
    """The first differing generated token (rule d); None when the tokens agree."""
    how: str
    """The evidence, e.g. ``the text is the baseline's tokens decoded, the first token's
    leading space dropped``."""


@dataclass(frozen=True)
class Origin:
    """Where a divergence starts (see the module docstring)."""

    stage: Stage | None
    """The first stage that differs; None: the outputs are the same."""
    detail: str
    """A sentence a person can act on: position, ids, texts."""
    unobserved: tuple[Stage, ...] = field(default=())
    """Stages before :attr:`stage` that the sides did not expose."""


def prompt_stage(
    base: PromptSide, test: PromptSide, pieces: Mapping[int, str] | None = None
) -> tuple[Stage | None, str, tuple[Stage, ...]]:
    """Stages 1-3: ``(stage, detail, unobserved stages)`` from
    :func:`~.tokenization.compare_tokenizations` of the two prompts (``pieces`` name ids,
    by id); the stage None when the prompts do not differ where they are observed."""
    unobserved: list[Stage] = []
    if base.rendered is None or test.rendered is None:
        unobserved.append("template")
    verdict = compare_tokenizations(
        _token_side(base, pieces or {}), _token_side(test, pieces or {}), ("baseline", "test")
    )
    stage = PROMPT_STAGE.get(verdict.cause) if verdict.status is Status.DIFFERS else None
    if stage != "template" and (base.ids is None or test.ids is None):
        unobserved += ["special-tokens", "prompt-ids"]
    return stage, verdict.explanation if stage else "", tuple(unobserved)


def nfc_probe_texts(
    base: PromptSide, test: PromptSide, pieces: Mapping[int, str] | None = None
) -> tuple[str, str] | None:
    """The NFC-normalised body texts (:func:`~.tokenization.body_text`) each side's
    tokenizer is to tokenize into :attr:`PromptSide.nfc_ids`, when
    :func:`~.tokenization.needs_nfc_probe` holds; else None."""
    sides = _token_side(base, pieces or {}), _token_side(test, pieces or {})
    if not needs_nfc_probe(*sides):
        return None
    bodies = body_texts(*sides)
    assert bodies[0] is not None and bodies[1] is not None
    return unicodedata.normalize("NFC", bodies[0]), unicodedata.normalize("NFC", bodies[1])


def _token_side(side: PromptSide, pieces: Mapping[int, str]) -> TokenSide:
    ids = side.ids
    by_position = {p: pieces[i] for p, i in enumerate(ids or ()) if i in pieces}
    return TokenSide(side.rendered, ids, None, by_position, side.special, side.nfc_ids)


def _leading_space_dropped(text: str) -> str | None:
    return text[1:] if text.startswith(" ") else None


def text_side_tokens(
    base_ids: Sequence[int],
    decoded: str,
    decoded_no_special: str,
    prefixes: Sequence[str],
    text: str,
    retokenized: Sequence[int] | None,
    base_text: str,
) -> TextSideTokens:
    """Whether a side that returned only ``text`` generated the other side's ``base_ids``
    (the ids its text came from, without a final EOS), by rules a-d of the module
    docstring.

    ``decoded`` and ``decoded_no_special`` are ``base_ids`` decoded by the shared tokenizer
    with and without special tokens; ``prefixes[i]`` is ``base_ids[: i + 1]`` decoded;
    ``retokenized`` is ``text`` tokenized by the shared tokenizer (None: not known);
    ``base_text`` the other side's own text."""
    if text == base_text:
        return TextSideTokens(True, None, "the texts are equal")
    if retokenized is not None and list(retokenized) == list(base_ids):
        return TextSideTokens(True, None, "the text re-tokenizes to the baseline's tokens")
    candidates = [
        decoded,
        _leading_space_dropped(decoded),
        decoded_no_special,
        _leading_space_dropped(decoded_no_special),
    ]
    for name, candidate in zip(DETOKENIZATIONS, candidates, strict=True):
        if candidate is not None and candidate == text:
            return TextSideTokens(True, None, f"the text is the baseline's tokens {name}")
    step = 0
    for drop in (False, True):
        for i, prefix in enumerate(prefixes):
            shown = prefix[1:] if drop and prefix.startswith(" ") else prefix
            if not text.startswith(shown) or (drop and not prefix.startswith(" ")):
                break
            step = max(step, i + 1)
    step = min(step, len(base_ids))
    return TextSideTokens(
        False,
        step,
        f"the text agrees with the baseline's first {step} tokens decoded, then differs",
    )


def _unobserved(stages: Sequence[Stage]) -> str:
    return f" ({', '.join(stages)} not observable)" if stages else ""


def locate_origin(
    *,
    shared_prompt: bool,
    base_prompt: PromptSide,
    test_prompt: PromptSide,
    outputs_same: bool,
    base_text: str,
    test_text: str,
    base_ids: Sequence[int] | None,
    test_ids: Sequence[int] | None,
    text_side: TextSideTokens | None = None,
    pieces: Mapping[int, str] | None = None,
) -> Origin:
    """The first stage where the two sides differ (the module docstring's rules).

    ``shared_prompt``: the test side received the baseline's prompt, so stages 1-3 agree by
    construction. ``base_ids``/``test_ids`` are the generated ids (EOS included; None: not
    returned). ``text_side`` is :func:`text_side_tokens`'s verdict when the test side
    returned no ids. ``pieces`` names token ids in the detail."""
    stage: Stage | None = None
    prompt_detail = ""
    unobserved: tuple[Stage, ...] = ()
    if not shared_prompt:
        stage, prompt_detail, unobserved = prompt_stage(base_prompt, test_prompt, pieces)
    if outputs_same:
        note = f"; but the prompts differ ({stage}: {prompt_detail})" if stage else ""
        return Origin(None, f"the outputs are the same{note}", unobserved)
    if stage is not None:
        return Origin(stage, prompt_detail + _unobserved(unobserved), unobserved)
    prompt_note = _unobserved(unobserved)
    text_at = first_divergence(base_text, test_text)
    texts = "the texts are equal" if text_at is None else f"texts differ from character {text_at}"
    if base_ids is not None and test_ids is not None:
        step = first_divergence(list(base_ids), list(test_ids))
        if step is not None:
            return Origin(
                "generated-tokens",
                f"generated tokens differ from step {step}: baseline "
                f"{_step(base_ids, step, pieces)} vs test {_step(test_ids, step, pieces)}"
                + prompt_note,
                unobserved,
            )
        return Origin(
            "detokenization",
            f"the generated token ids agree; {texts} (detokenization)" + prompt_note,
            unobserved,
        )
    if text_side is not None and text_side.tokens_agree is not None:
        if text_side.tokens_agree:
            return Origin(
                "detokenization",
                f"the tokens agree ({text_side.how}, the test side returns no ids); {texts}"
                + prompt_note,
                unobserved,
            )
        return Origin(
            "generated-tokens",
            f"generated tokens differ from step {text_side.step} ({text_side.how}; the test "
            "side returns no ids)" + prompt_note,
            unobserved,
        )
    return Origin(
        "undetermined",
        f"{texts}; where it starts cannot be told: no token ids on both sides and no shared "
        "tokenizer to re-tokenize with" + prompt_note,
        unobserved,
    )


def _step(ids: Sequence[int], step: int, pieces: Mapping[int, str] | None) -> str:
    """The id at ``step`` with its text where known (``8 'd'``), ``(stopped)`` past the end."""
    if step >= len(ids):
        return "(stopped)"
    piece = (pieces or {}).get(ids[step])
    return str(ids[step]) if piece is None else f"{ids[step]} {piece!r}"
