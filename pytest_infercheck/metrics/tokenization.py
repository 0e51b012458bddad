"""Tokenization parity: are the prompt token ids of two engines the same, and if not, why.

Pure functions over what each engine reported for one rendered prompt (:class:`TokenSide`).
The verdict (:func:`compare_tokenizations`) is one of ``identical`` (the same ids),
``count-only`` (one side reports only a prompt token count, and the counts are equal) or
``differs``, with one :class:`Cause`, the first found in this order:

1. ``empty``: a side tokenized the prompt to no tokens at all (never legitimate);
2. ``template``: the rendered texts differ (after removing, on each side, the spelling of
   its leading special tokens where the text starts with it, and up to Unicode NFC): the
   chat template was rendered differently, whatever the tokenizers do;
3. ``bos``: the leading special tokens differ (a BOS added on one side only, or twice);
4. ``control-tokens``: at the first differing position one side has a special token whose
   text the other side tokenizes as ordinary tokens (llama.cpp promotes e.g. ``<|fim_*|>``
   or Llama 3's ``</s>`` to CONTROL, so text spelling them is parsed as the one token);
5. ``special-tokens``: at the first differing position one side has a special token and
   the other does not (for no reason found above);
6. ``normalization``: the text is not in Unicode NFC, and one side's ids are what the other
   side gives for the NFC-normalised text (Qwen's HF tokenizer normalises NFC, llama.cpp
   does not);
7. ``ids``: anything else (a changed id, a different merge);
8. ``count``: only counts are known and they differ.

``control-tokens`` and ``normalization`` are properties of the tokenizers rather than bugs
(:data:`TOKENIZER_PROPERTIES`); a check may allow them, and still says them.
"""

from __future__ import annotations

import enum
import unicodedata
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field


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


def first_difference(a: Sequence[int], b: Sequence[int]) -> int | None:
    """The first index where ``a`` and ``b`` differ (the shorter length when one is a prefix
    of the other); None when they are equal."""
    for i, (x, y) in enumerate(zip(a, b, strict=False)):
        if x != y:
            return i
    return None if len(a) == len(b) else min(len(a), len(b))


def first_text_difference(a: str, b: str) -> int | None:
    """The first character index where ``a`` and ``b`` differ (None: equal)."""
    for i, (x, y) in enumerate(zip(a, b, strict=False)):
        if x != y:
            return i
    return None if len(a) == len(b) else min(len(a), len(b))


def leading_specials(side: TokenSide) -> int:
    """How many of the side's ids, from the start, are special tokens."""
    n = 0
    for token in side.ids or ():
        if token not in side.special:
            break
        n += 1
    return n


def body_text(side: TokenSide) -> str | None:
    """The rendered text without the spelling of its leading special tokens, removed one by
    one while the text starts with it (an engine that adds a BOS without spelling it in
    the text has nothing removed)."""
    if side.text is None:
        return None
    text = side.text
    for position in range(leading_specials(side)):
        piece = side.pieces.get(position)
        if piece and text.startswith(piece):
            text = text[len(piece) :]
    return text


def needs_nfc_probe(reference: TokenSide, other: TokenSide) -> bool:
    """Whether :func:`compare_tokenizations` can use ``nfc_ids``: both sides have ids that
    differ, body texts equal up to NFC, and one of them not NFC (an engine whose rendered
    text is its decoded ids, as mlx-lm's raw render with a BOS, shows the NFC text)."""
    if reference.ids is None or other.ids is None or list(reference.ids) == list(other.ids):
        return False
    texts = body_text(reference), body_text(other)
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


def spelled_as_control(special: TokenSide, plain: TokenSide, position: int) -> int | None:
    """When ``special`` has a special token at ``position`` whose text is exactly the texts
    of ``plain``'s next ``k`` ordinary (non-special) tokens from ``position``, that ``k``;
    else None."""
    ids_s, ids_p = special.ids or (), plain.ids or ()
    if position >= len(ids_s) or ids_s[position] not in special.special:
        return None
    target = special.pieces.get(position)
    if not target:
        return None
    spelled = ""
    k = 0
    while len(spelled) < len(target) and position + k < len(ids_p):
        token = ids_p[position + k]
        piece = plain.pieces.get(position + k)
        if token in plain.special or piece is None:
            return None
        spelled += piece
        k += 1
    return k if spelled == target else None


def compare_tokenizations(
    reference: TokenSide, other: TokenSide, names: tuple[str, str] = ("reference", "other")
) -> TokenVerdict:
    """The verdict on two tokenizations of one prompt (see the module docstring); ``names``
    name the sides in the explanation."""
    ref_name, other_name = names
    for side, name in ((reference, ref_name), (other, other_name)):
        if side.size == 0:
            return TokenVerdict(
                Status.DIFFERS, Cause.EMPTY, 0, None, f"empty tokenization: {name} has no tokens"
            )
    if reference.ids is None or other.ids is None:
        return _counts(reference, other, names)
    position = first_difference(reference.ids, other.ids)
    if position is None:
        return TokenVerdict(Status.IDENTICAL, None, None, None, "identical ids")
    head = f"ids differ from position {position}: {ref_name} {_token(reference, position)}, "
    head += f"{other_name} {_token(other, position)}"

    ref_body, other_body = body_text(reference), body_text(other)
    if ref_body is not None and other_body is not None and _nfc(ref_body) != _nfc(other_body):
        at = first_text_difference(ref_body, other_body)
        assert at is not None
        lead = len(reference.text or "") - len(ref_body)
        return TokenVerdict(
            Status.DIFFERS,
            Cause.TEMPLATE,
            position,
            at + lead,
            f"rendered text differs (template) from character {at + lead}: {ref_name} "
            f"{ref_body[at : at + 20]!r}, {other_name} {other_body[at : at + 20]!r}; {head}",
        )

    ref_lead, other_lead = leading_specials(reference), leading_specials(other)
    if list(reference.ids[:ref_lead]) != list(other.ids[:other_lead]):
        rest = (
            "the rest identical"
            if list(reference.ids[ref_lead:]) == list(other.ids[other_lead:])
            else "the rest differs too"
        )
        return TokenVerdict(
            Status.DIFFERS,
            Cause.BOS,
            position,
            None,
            f"BOS / leading special tokens differ: {ref_name} starts with "
            f"{_leading(reference, ref_lead)}, {other_name} with {_leading(other, other_lead)} "
            f"({rest}); {head}",
        )

    for special, plain, s_name, p_name in (
        (reference, other, ref_name, other_name),
        (other, reference, other_name, ref_name),
    ):
        k = spelled_as_control(special, plain, position)
        if k is not None:
            return TokenVerdict(
                Status.DIFFERS,
                Cause.CONTROL,
                position,
                None,
                f"control token (a tokenizer property): {s_name} parses "
                f"{_piece(special, position)} as one special token (id "
                f"{(special.ids or ())[position]}), {p_name} as {k} ordinary tokens; {head}",
            )
    ref_special = position < len(reference.ids) and reference.ids[position] in reference.special
    other_special = position < len(other.ids) and other.ids[position] in other.special
    if ref_special != other_special:
        return TokenVerdict(
            Status.DIFFERS,
            Cause.SPECIAL,
            position,
            None,
            f"special tokens differ: {ref_name if ref_special else other_name} has a special "
            f"token where the other has none; {head}",
        )

    normaliser = _normaliser(reference, other, names)
    if normaliser is not None:
        return TokenVerdict(
            Status.DIFFERS,
            Cause.NORMALIZATION,
            position,
            None,
            f"Unicode normalization (a tokenizer property): the text is not NFC; "
            f"{normaliser[0]} normalizes it to NFC, {normaliser[1]} does not (given the NFC "
            f"text it gives {normaliser[0]}'s ids); {head}",
        )
    return TokenVerdict(Status.DIFFERS, Cause.IDS, position, None, head)


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
