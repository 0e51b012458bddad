"""Where a divergence between two sides of a comparison starts: the ordered stages.

A prompt goes through five stages on its way to an output; when two outputs differ, the
divergence starts at the first stage whose result differs (:data:`STAGES`, in order):

1. ``template``: the rendered prompt text (the chat template applied). Two texts that are
   equal after Unicode NFC normalisation are *not* a template difference (a template
   renders characters; normalising them is the tokenizer's business, stage 3).
2. ``special-tokens``: special tokens and BOS count. The prompt ids differ only by tokens
   added at the start and/or the end of one side's ids (the other's ids are a contiguous
   run inside them): a BOS added on top of a template that already has one, an EOS.
3. ``prompt-ids``: the prompt ids differ otherwise: the first differing position ``k``.
4. ``generated-tokens``: same prompt, the generated token ids differ from step ``t`` (the
   end-of-sequence token included: stopping is a decision too).
5. ``detokenization``: same generated tokens, different texts.

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

__all__ = [
    "DETOKENIZATIONS",
    "STAGES",
    "Origin",
    "PromptSide",
    "Stage",
    "TextSideTokens",
    "locate_origin",
    "prompt_ids_difference",
    "special_tokens_difference",
    "template_difference",
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

DETOKENIZATIONS = (
    "decoded",
    "decoded, the first token's leading space dropped",
    "decoded without special tokens",
    "decoded without special tokens, the first token's leading space dropped",
)
"""The known ways an engine turns the same ids into text (rule (c) of the module docstring)."""

SNIPPET = 24
"""Characters shown on each side of a difference."""


@dataclass(frozen=True)
class PromptSide:
    """What one side shows of its prompt: the rendered text and the prompt ids (None: the
    side does not expose it)."""

    rendered: str | None
    ids: Sequence[int] | None


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


def _snippet(text: str, at: int) -> str:
    start = max(0, at - SNIPPET)
    return repr(text[start : at + SNIPPET])


def template_difference(base: str, test: str) -> str | None:
    """The rendered prompts' difference: ``rendered prompts differ from character N:
    baseline '...' vs test '...'``; None when equal or equal after NFC (a normalisation
    difference is the tokenizer's, not the template's)."""
    if base == test or unicodedata.normalize("NFC", base) == unicodedata.normalize("NFC", test):
        return None
    at = first_divergence(base, test)
    assert at is not None
    return (
        f"the two servers render the template differently: rendered prompts differ from "
        f"character {at}: baseline {_snippet(base, at)} vs test {_snippet(test, at)}"
    )


def _name(ids: Sequence[int], pieces: Mapping[int, str]) -> str:
    return "[" + ", ".join(f"{i} {pieces[i]!r}" if i in pieces else str(i) for i in ids) + "]"


def special_tokens_difference(
    base: Sequence[int], test: Sequence[int], pieces: Mapping[int, str] | None = None
) -> str | None:
    """When one side's prompt ids are the other's with tokens added only at the start and/or
    the end (the shorter is a contiguous run of the longer, found at the first position
    where it fits): ``the test prompt has [1 '<s>'] added at the start (2 leading id 1, the
    baseline 1)``. None otherwise (equal ids, or a difference inside)."""
    names = pieces or {}
    base, test = list(base), list(test)
    if base == test or len(base) == len(test):
        return None
    longer, shorter, who = (
        (test, base, "test") if len(test) > len(base) else (base, test, "baseline")
    )
    other = "baseline" if who == "test" else "test"
    n = len(shorter)
    at = next((i for i in range(len(longer) - n + 1) if longer[i : i + n] == shorter), None)
    if at is None:
        return None
    head, tail = longer[:at], longer[at + n :]
    added = []
    if head:
        added.append(f"{_name(head, names)} added at the start")
    if tail:
        added.append(f"{_name(tail, names)} added at the end")
    detail = f"the {who} prompt has the {other}'s ids with " + " and ".join(added)
    if head and shorter and head[-1] == shorter[0]:
        first = shorter[0]
        lead_long = next((i for i, x in enumerate(longer) if x != first), len(longer))
        lead_short = next((i for i, x in enumerate(shorter) if x != first), len(shorter))
        detail += (
            f" ({lead_long} leading {_name([first], names)} on the {who} side, "
            f"{lead_short} on the {other}'s: a BOS or special token added twice)"
        )
    return detail


def prompt_ids_difference(
    base: Sequence[int], test: Sequence[int], pieces: Mapping[int, str] | None = None
) -> str | None:
    """The first differing prompt id: ``prompt ids differ at position k: baseline 5 'a' vs
    test 7 'b'``; None when equal."""
    names = pieces or {}
    at = first_divergence(list(base), list(test))
    if at is None:
        return None

    def one(ids: Sequence[int]) -> str:
        return _name([ids[at]], names)[1:-1] if at < len(ids) else "(end of prompt)"

    return (
        f"prompt ids differ at position {at}: baseline {one(base)} vs test {one(test)} "
        f"({len(base)} vs {len(test)} prompt tokens)"
    )


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
    unobserved: list[Stage] = []
    prompt_detail: str | None = None
    prompt_stage: Stage | None = None
    if not shared_prompt:
        if base_prompt.rendered is None or test_prompt.rendered is None:
            unobserved.append("template")
        else:
            prompt_detail = template_difference(base_prompt.rendered, test_prompt.rendered)
            prompt_stage = "template" if prompt_detail else None
        if prompt_stage is None:
            if base_prompt.ids is None or test_prompt.ids is None:
                unobserved += ["special-tokens", "prompt-ids"]
            else:
                prompt_detail = special_tokens_difference(base_prompt.ids, test_prompt.ids, pieces)
                prompt_stage = "special-tokens" if prompt_detail else None
                if prompt_stage is None:
                    prompt_detail = prompt_ids_difference(base_prompt.ids, test_prompt.ids, pieces)
                    prompt_stage = "prompt-ids" if prompt_detail else None
                rendered = (base_prompt.rendered, test_prompt.rendered)
                if prompt_stage is not None and None not in rendered and len(set(rendered)) > 1:
                    prompt_detail = f"{prompt_detail}; the rendered texts differ only by NFC"
    if outputs_same:
        note = f"; but the prompts differ ({prompt_stage}: {prompt_detail})" if prompt_stage else ""
        return Origin(None, f"the outputs are the same{note}", tuple(unobserved))
    if prompt_stage is not None and prompt_detail is not None:
        return Origin(prompt_stage, prompt_detail + _unobserved(unobserved), tuple(unobserved))
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
                tuple(unobserved),
            )
        return Origin(
            "detokenization",
            f"the generated token ids agree; {texts} (detokenization)" + prompt_note,
            tuple(unobserved),
        )
    if text_side is not None and text_side.tokens_agree is not None:
        if text_side.tokens_agree:
            return Origin(
                "detokenization",
                f"the tokens agree ({text_side.how}, the test side returns no ids); {texts}"
                + prompt_note,
                tuple(unobserved),
            )
        return Origin(
            "generated-tokens",
            f"generated tokens differ from step {text_side.step} ({text_side.how}; the test "
            "side returns no ids)" + prompt_note,
            tuple(unobserved),
        )
    return Origin(
        "undetermined",
        f"{texts}; where it starts cannot be told: no token ids on both sides and no shared "
        "tokenizer to re-tokenize with" + prompt_note,
        tuple(unobserved),
    )


def _step(ids: Sequence[int], step: int, pieces: Mapping[int, str] | None) -> str:
    if step >= len(ids):
        return "(stopped)"
    return _name([ids[step]], pieces or {})[1:-1]
