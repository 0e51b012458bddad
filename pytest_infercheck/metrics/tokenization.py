"""How two engines' prompts differ: rendered text, special tokens and BOS, prompt ids.

The one place where two prompts are compared: the ``tokenization`` check kind gives its
verdict, and a comparison's divergence origin (:mod:`.origin`, stages 1-3) maps the cause
to its stage. Pure functions over what each engine reported for one rendered prompt
(:class:`TokenSide`). The verdict (:func:`compare_tokenizations`) is one of ``identical``
(the same ids), ``count-only`` (one side reports only a prompt token count, and the counts
are equal) or ``differs``, with one :class:`Cause`, the first found in this order:

1. ``empty``: a side tokenized the prompt to no tokens at all (never legitimate);
2. ``template``: the rendered texts differ (after removing, on each side, the spelling of
   its leading special tokens where the text starts with it, a side without ids those of
   the other side, and up to Unicode NFC): the chat template was rendered differently,
   whatever the tokenizers do. Decided whenever both texts are known, with or without ids;
   equal ids are ``identical`` whatever the texts;
3. ``bos``: the leading special tokens differ (a BOS added on one side only, or twice), or
   one side's ids are the other's with tokens added at the start (and maybe the end);
4. ``special-tokens``: one side's ids are the other's with tokens added only at the end
   (an EOS). Rules 3 and 4 by added tokens hold when those tokens come from the tokenizer,
   not the text: the texts are equal, or the added ids are special tokens of their side;
5. ``control-tokens``: at the first differing position one side has a special token whose
   text the other side tokenizes as ordinary tokens (llama.cpp promotes e.g. ``<|fim_*|>``
   or Llama 3's ``</s>`` to CONTROL, so text spelling them is parsed as the one token);
6. ``special-tokens``: at the first differing position one side has a special token and
   the other does not (for no reason found above);
7. ``normalization``: the text is not in Unicode NFC, and one side's ids are what the other
   side gives for the NFC-normalised text (Qwen's HF tokenizer normalises NFC, llama.cpp
   does not);
8. ``ids``: anything else (a changed id, a different merge);
9. ``count``: only counts are known and they differ (or a side has neither).

Positions (of ids and of characters) are :func:`~.text.first_divergence`. When the texts
differ only by NFC and the cause is not ``normalization``, the explanation says so.
``control-tokens`` and ``normalization`` are properties of the tokenizers rather than bugs
(:data:`TOKENIZER_PROPERTIES`); a check may allow them, and still says them.
"""

from __future__ import annotations

import enum
import unicodedata
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from .text import first_divergence

WINDOW = 8
"""Token positions shown (and asked for their texts) from the first difference on."""
LEADING = 4
"""Leading positions asked whether they are special tokens (BOS and the like)."""


class Cause(enum.Enum):
    """Why two tokenizations of one prompt differ (see the module docstring for the order)."""

    EMPTY = "empty"
    TEMPLATE = "template"
    BOS = "bos"
    CONTROL = "control-tokens"
    SPECIAL = "special-tokens"
    NORMALIZATION = "normalization"
    IDS = "ids"
    COUNT = "count"


SNIPPET = 24
"""Characters of each rendered text shown on each side of a template difference."""

TOKENIZER_PROPERTIES = frozenset({Cause.NORMALIZATION, Cause.CONTROL})
"""Causes that are properties of the tokenizers rather than bugs (a check may allow them)."""


class Status(enum.Enum):
    IDENTICAL = "identical"
    COUNT_ONLY = "count-only"
    DIFFERS = "differs"


@dataclass(frozen=True)
class TokenSide:
    """What one engine reported for a rendered prompt.

    ``text``: the rendered text (None: the engine renders it where it cannot be seen);
    ``ids``: the prompt's token ids as the engine processes them (None: it gives only a
    count); ``count``: the prompt token count when ``ids`` is None; ``pieces``: each id's
    text, by position, where known (at least the leading special tokens and a window from
    the first difference); ``special``: ids known to be special (control) tokens of this
    engine; ``nfc_ids``: the engine's ids of the NFC-normalised :func:`body_text` (asked only
    when the text is not NFC and the ids differ)."""

    text: str | None
    ids: Sequence[int] | None
    count: int | None = None
    pieces: Mapping[int, str] = field(default_factory=dict)
    special: frozenset[int] = frozenset()
    nfc_ids: Sequence[int] | None = None

    @property
    def size(self) -> int | None:
        """The number of prompt tokens: ``len(ids)``, else ``count``."""
        return len(self.ids) if self.ids is not None else self.count


@dataclass(frozen=True)
class TokenVerdict:
    """Two tokenizations compared: :attr:`status`, and for ``differs`` its :attr:`cause`,
    the first differing token position (None when only counts are known), the first
    differing character of the rendered texts (``template`` only) and a sentence saying
    it."""

    status: Status
    cause: Cause | None
    first_difference: int | None
    text_difference: int | None
    explanation: str


def leading_specials(side: TokenSide) -> int:
    """How many of the side's ids, from the start, are special tokens."""
    n = 0
    for token in side.ids or ():
        if token not in side.special:
            break
        n += 1
    return n


def spellings(side: TokenSide) -> list[str]:
    """The texts of the side's leading special tokens, in order (where known)."""
    return [side.pieces.get(p, "") for p in range(leading_specials(side))]


def body_text(side: TokenSide, spelled: Sequence[str] | None = None) -> str | None:
    """The rendered text without the spelling of its leading special tokens, removed one by
    one while the text starts with it (an engine that adds a BOS without spelling it in
    the text has nothing removed). ``spelled``: the spellings to remove instead of the
    side's own (:func:`spellings`), for a side without ids, given its counterpart's."""
    if side.text is None:
        return None
    text = side.text
    for piece in spellings(side) if spelled is None else spelled:
        if piece and text.startswith(piece):
            text = text[len(piece) :]
    return text


def body_texts(reference: TokenSide, other: TokenSide) -> tuple[str | None, str | None]:
    """Both sides' :func:`body_text`; a side without ids has its counterpart's leading
    spellings removed (a server that renders its own template shows the BOS's spelling
    the other side's ids name)."""
    ref_spelled = spellings(other) if reference.ids is None else None
    other_spelled = spellings(reference) if other.ids is None else None
    return body_text(reference, ref_spelled), body_text(other, other_spelled)


def needs_nfc_probe(reference: TokenSide, other: TokenSide) -> bool:
    """Whether :func:`compare_tokenizations` can use ``nfc_ids``: both sides have ids that
    differ, body texts equal up to NFC, and one of them not NFC (an engine whose rendered
    text is its decoded ids, as mlx-lm's raw render with a BOS, shows the NFC text)."""
    if reference.ids is None or other.ids is None or list(reference.ids) == list(other.ids):
        return False
    texts = body_texts(reference, other)
    if texts[0] is None or texts[1] is None or _nfc(texts[0]) != _nfc(texts[1]):
        return False
    return not (is_nfc(texts[0]) and is_nfc(texts[1]))


def _nfc(text: str) -> str:
    return unicodedata.normalize("NFC", text)


def is_nfc(text: str) -> bool:
    return _nfc(text) == text


def _piece(side: TokenSide, position: int) -> str:
    piece = side.pieces.get(position)
    return repr(piece) if piece is not None else "?"


def _token(side: TokenSide, position: int) -> str:
    """``id 42 'x'``, or ``nothing`` past the end."""
    ids = side.ids or ()
    if position >= len(ids):
        return "nothing (end of prompt)"
    return f"id {ids[position]} {_piece(side, position)}"


def spelled_as_control(
    special: TokenSide, plain: TokenSide, position: int
) -> tuple[int, int, int] | None:
    """A special token of ``special`` that ``plain`` spells as ordinary text, from the first
    difference ``position`` on: the shortest spans ``special.ids[position:position + ks]``
    and ``plain.ids[position:position + kp]`` whose texts are equal (where the two
    tokenizations meet again), when the first holds a special token and the second none.
    Token boundaries around the special token may differ too (``' ' '</s>' '.'`` against
    ``' </' 's' '>.'``). Returns ``(offset of the special token in its span, ks, kp)``;
    None when no such spans exist within the known pieces."""
    ids_s, ids_p = special.ids or (), plain.ids or ()
    text_s = text_p = ""
    ks = kp = 0
    while True:
        if text_s and text_s == text_p:
            break
        if len(text_s) <= len(text_p):
            piece = special.pieces.get(position + ks)
            if position + ks >= len(ids_s) or piece is None:
                return None
            text_s += piece
            ks += 1
        else:
            piece = plain.pieces.get(position + kp)
            if position + kp >= len(ids_p) or piece is None:
                return None
            text_p += piece
            kp += 1
    span_s = ids_s[position : position + ks]
    if any(t in plain.special for t in ids_p[position : position + kp]):
        return None
    offsets = [j for j, t in enumerate(span_s) if t in special.special]
    return (offsets[0], ks, kp) if offsets else None


def added_run(a: Sequence[int], b: Sequence[int]) -> tuple[bool, int, int] | None:
    """When the longer of ``a`` and ``b`` is the shorter with tokens added only at the start
    and/or the end (the shorter found at the first position where it fits): ``(a is the
    longer, number added at the start, number added at the end)``; None otherwise (equal
    lengths, or a difference inside)."""
    if len(a) == len(b):
        return None
    longer, shorter = (list(a), list(b)) if len(a) > len(b) else (list(b), list(a))
    n = len(shorter)
    at = next((i for i in range(len(longer) - n + 1) if longer[i : i + n] == shorter), None)
    if at is None:
        return None
    return len(a) > len(b), at, len(longer) - n - at


def compare_tokenizations(
    reference: TokenSide, other: TokenSide, names: tuple[str, str] = ("reference", "other")
) -> TokenVerdict:
    """The verdict on two tokenizations of one prompt (see the module docstring); ``names``
    name the sides in the explanation. The one place where two prompts are compared: the
    ``tokenization`` check kind and the comparisons' divergence origin
    (:func:`~pytest_infercheck.metrics.origin.locate_origin`) both ask it."""
    ref_name, other_name = names
    for side, name in ((reference, ref_name), (other, other_name)):
        if side.size == 0:
            return TokenVerdict(
                Status.DIFFERS, Cause.EMPTY, 0, None, f"empty tokenization: {name} has no tokens"
            )
    bodies = body_texts(reference, other)
    template = _template(reference, other, bodies, names)
    if reference.ids is None or other.ids is None:
        if template is not None:
            return TokenVerdict(Status.DIFFERS, Cause.TEMPLATE, None, *template)
        return _counts(reference, other, names)
    position = first_divergence(reference.ids, other.ids)
    if position is None:
        return TokenVerdict(Status.IDENTICAL, None, None, None, "identical ids")
    head = f"ids differ from position {position}: {ref_name} {_token(reference, position)}, "
    head += f"{other_name} {_token(other, position)}"
    if template is not None:
        return TokenVerdict(
            Status.DIFFERS, Cause.TEMPLATE, position, template[0], f"{template[1]}; {head}"
        )
    cause, sentence = _ids_cause(reference, other, position, names, texts_equal=None not in bodies)
    explanation = f"{sentence}; {head}" if sentence else head
    if None not in bodies and bodies[0] != bodies[1] and cause is not Cause.NORMALIZATION:
        explanation += "; the rendered texts differ only by NFC"
    return TokenVerdict(Status.DIFFERS, cause, position, None, explanation)


def _snippet(text: str, at: int) -> str:
    return repr(text[max(0, at - SNIPPET) : at + SNIPPET])


def _template(
    reference: TokenSide,
    other: TokenSide,
    bodies: tuple[str | None, str | None],
    names: tuple[str, str],
) -> tuple[int, str] | None:
    """``(character, sentence)`` when the body texts differ after NFC (the character counted
    in the reference's rendered text); None otherwise."""
    ref_body, other_body = bodies
    if ref_body is None or other_body is None or _nfc(ref_body) == _nfc(other_body):
        return None
    at = first_divergence(ref_body, other_body)
    assert at is not None and reference.text is not None and other.text is not None
    ref_at = at + len(reference.text) - len(ref_body)
    other_at = at + len(other.text) - len(other_body)
    return ref_at, (
        f"the two engines render the template differently (rendered texts differ from "
        f"character {ref_at}): {names[0]} {_snippet(reference.text, ref_at)} vs {names[1]} "
        f"{_snippet(other.text, other_at)}"
    )


def _ids_cause(
    reference: TokenSide,
    other: TokenSide,
    position: int,
    names: tuple[str, str],
    texts_equal: bool,
) -> tuple[Cause, str]:
    """The cause of differing ids of equal texts (rules 3-7 of the module docstring) and its
    sentence (empty for ``ids``: the position says it)."""
    ref_name, other_name = names
    assert reference.ids is not None and other.ids is not None
    ref_lead, other_lead = leading_specials(reference), leading_specials(other)
    if list(reference.ids[:ref_lead]) != list(other.ids[:other_lead]):
        rest = (
            "the rest identical"
            if list(reference.ids[ref_lead:]) == list(other.ids[other_lead:])
            else "the rest differs too"
        )
        return Cause.BOS, (
            f"BOS / leading special tokens differ: {ref_name} starts with "
            f"{_leading(reference, ref_lead)}, {other_name} with {_leading(other, other_lead)} "
            f"({rest})"
        )
    added = _added(reference, other, names, texts_equal)
    if added is not None:
        return added
    for special, plain, s_name, p_name in (
        (reference, other, ref_name, other_name),
        (other, reference, other_name, ref_name),
    ):
        found = spelled_as_control(special, plain, position)
        if found is not None:
            offset, ks, kp = found
            at = position + offset
            spelled = "".join(special.pieces[position + j] for j in range(ks))
            within = "" if ks == 1 else f" within {spelled!r} ({ks} tokens)"
            return Cause.CONTROL, (
                f"control token (a tokenizer property): {s_name} parses "
                f"{_piece(special, at)} as one special token (id "
                f"{(special.ids or ())[at]}){within}, {p_name} as {kp} ordinary tokens"
            )
    ref_special = position < len(reference.ids) and reference.ids[position] in reference.special
    other_special = position < len(other.ids) and other.ids[position] in other.special
    if ref_special != other_special:
        return Cause.SPECIAL, (
            f"special tokens differ: {ref_name if ref_special else other_name} has a special "
            "token where the other has none"
        )
    normaliser = _normaliser(reference, other, names)
    if normaliser is not None:
        return Cause.NORMALIZATION, (
            f"Unicode normalization (a tokenizer property): the text is not NFC; "
            f"{normaliser[0]} normalizes it to NFC, {normaliser[1]} does not (given the NFC "
            f"text it gives {normaliser[0]}'s ids)"
        )
    return Cause.IDS, ""


def _added(
    reference: TokenSide, other: TokenSide, names: tuple[str, str], texts_equal: bool
) -> tuple[Cause, str] | None:
    """``bos`` (tokens added at the start) or ``special-tokens`` (only at the end) when one
    side's ids are the other's with tokens added there (:func:`added_run`), and those tokens
    come from the tokenizer, not the text: the texts are equal, or the added ids are
    special tokens of their side."""
    assert reference.ids is not None and other.ids is not None
    run = added_run(reference.ids, other.ids)
    if run is None:
        return None
    ref_longer, start, end = run
    longer, shorter = (reference, other) if ref_longer else (other, reference)
    long_name, short_name = names if ref_longer else (names[1], names[0])
    long_ids, short_ids = list(longer.ids or ()), list(shorter.ids or ())
    tail = range(len(long_ids) - end, len(long_ids))
    positions = [*range(start), *tail]
    if not texts_equal and not all(long_ids[p] in longer.special for p in positions):
        return None
    where = []
    if start:
        where.append(f"{_named(longer, range(start))} added at the start")
    if end:
        where.append(
            f"{_named(longer, range(len(long_ids) - end, len(long_ids)))} added at the end"
        )
    sentence = f"{long_name} has the ids of {short_name} with " + " and ".join(where)
    if start and short_ids and long_ids[start - 1] == short_ids[0]:
        first = short_ids[0]
        n_long = next((i for i, x in enumerate(long_ids) if x != first), len(long_ids))
        n_short = next((i for i, x in enumerate(short_ids) if x != first), len(short_ids))
        sentence += (
            f" ({n_long} leading {_named(longer, [0])[1:-1]} on {long_name}'s side, {n_short} "
            f"on {short_name}'s: a BOS or special token added twice)"
        )
    if start:
        return Cause.BOS, f"BOS / leading special tokens differ: {sentence}"
    return Cause.SPECIAL, f"special tokens differ: {sentence}"


def _named(side: TokenSide, positions: Iterable[int]) -> str:
    """``[1 '<s>', 7]``: the side's ids at ``positions``, with their texts where known."""
    ids = side.ids or ()
    names = [f"{ids[p]} {side.pieces[p]!r}" if p in side.pieces else str(ids[p]) for p in positions]
    return "[" + ", ".join(names) + "]"


def _leading(side: TokenSide, n: int) -> str:
    if n == 0:
        return "no special token"
    pieces = ", ".join(f"{side.ids[i] if side.ids else '?'} {_piece(side, i)}" for i in range(n))
    return f"{n} special token{'s' if n > 1 else ''} ({pieces})"


def _normaliser(
    reference: TokenSide, other: TokenSide, names: tuple[str, str]
) -> tuple[str, str] | None:
    """``(normalising side, other side)`` by name when one side's ids after its leading
    special tokens are exactly what the other side gives for the NFC text; else None."""
    if not needs_nfc_probe(reference, other):
        return None
    pairs = ((reference, other, names), (other, reference, (names[1], names[0])))
    for x, y, (x_name, y_name) in pairs:
        body = list((x.ids or ())[leading_specials(x) :])
        if y.nfc_ids is not None and list(y.nfc_ids) == body:
            return x_name, y_name
    return None


def _counts(reference: TokenSide, other: TokenSide, names: tuple[str, str]) -> TokenVerdict:
    """Only counts are comparable (a side has no ids): equal counts are ``count-only``."""
    ref_n, other_n = reference.size, other.size
    what = f"{names[0]} {ref_n} tokens, {names[1]} {other_n}"
    if ref_n is None or other_n is None:
        return TokenVerdict(
            Status.DIFFERS, Cause.COUNT, None, None, f"no prompt token count to compare: {what}"
        )
    if ref_n == other_n:
        return TokenVerdict(
            Status.COUNT_ONLY,
            None,
            None,
            None,
            f"count only: the same prompt token count ({what}); ids not compared (a side "
            "gives no ids)",
        )
    hint = ""
    for side, name, more in (
        (reference, names[0], ref_n - other_n),
        (other, names[1], other_n - ref_n),
    ):
        lead = leading_specials(side)
        if lead and lead == more:
            hint = f"; the difference is {name}'s {_leading(side, lead)}: a BOS one side adds?"
    return TokenVerdict(
        Status.DIFFERS,
        Cause.COUNT,
        None,
        None,
        f"prompt token counts differ by {other_n - ref_n:+d}: {what} (count only: a side "
        f"gives no ids){hint}",
    )
