"""Whether two generations are the same: the one rule every check uses.

The rule (:func:`compare_outputs`). The *basis* is the strongest evidence both sides carry:

* ``ids+text``: both sides have token ids;
* ``token-texts+text``: neither pair of ids is complete, but both sides have token texts
  (servers that return no ids give the text of each token);
* ``text``: otherwise (also when only one side has ids or token texts).

Two outputs are the **same** when their texts are equal **and**, on the ``ids+text`` basis,
their token ids are equal **and**, on the ``token-texts+text`` basis, their token texts are
equal. Text is always compared, so "same" is never weaker than comparing ids alone or text
alone. Equal ids with a different text is a *detokenization difference*: not the same, and
reported as such.

The **first divergence** of two outputs that are not the same is, in this order: the first
differing token id (unit ``token``) when the basis is ``ids+text`` and the ids differ; the
first differing token text (unit ``token``) when the basis is ``token-texts+text`` and the
token texts differ; else the first differing character of the texts (unit ``char``). When
one sequence is a strict prefix of the other it is the length of the shorter one, so an
empty output against a non-empty one diverges at 0. It is None when the outputs are the
same.

Tool calls a chat server returned apart from the text (``Generation.tool_calls``) are part
of the output: when either side has some, the two are the same only if their calls are too
(:func:`~pytest_infercheck.tools.canonical_calls`: name and arguments as JSON values). Calls
that differ beside an equal text diverge at the end of the text (unit ``char``): the calls
are compared after it.

Sequences are compared by their elements, so a list and a tuple of the same ids are equal.
Pure: plain sequences in, a frozen :class:`Sameness` out; no engine, no numpy.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from enum import Enum
from typing import TYPE_CHECKING, Any, Literal

from ..tools import canonical_calls
from .text import first_divergence as _first_divergence

if TYPE_CHECKING:
    from ..backends.base import Generation

__all__ = [
    "Basis",
    "DivergenceUnit",
    "Sameness",
    "compare_outputs",
    "returned_calls",
    "same_generation",
]

DivergenceUnit = Literal["token", "char"]


class Basis(str, Enum):
    """What two outputs were compared on (see the module docstring)."""

    IDS_TEXT = "ids+text"
    TOKEN_TEXTS_TEXT = "token-texts+text"
    TEXT = "text"

    def __str__(self) -> str:
        return self.value


@dataclass(frozen=True)
class Sameness:
    """The verdict on two outputs (see the module docstring for the rule).

    ``ids_equal`` is None unless the basis is ``ids+text``; ``token_texts_equal`` is None
    unless the basis is ``token-texts+text``. ``first_divergence`` and ``divergence_unit``
    are None exactly when ``same``.
    """

    same: bool
    basis: Basis
    ids_equal: bool | None
    text_equal: bool
    first_divergence: int | None
    divergence_unit: DivergenceUnit | None
    token_texts_equal: bool | None = None
    calls_equal: bool | None = None
    """Whether the tool calls returned apart from the text are the same; None when neither
    side returned any."""

    @property
    def detokenization_difference(self) -> bool:
        """Equal token ids but a different text."""
        return self.ids_equal is True and not self.text_equal

    def describe(self) -> str:
        """A short phrase: ``identical``, ``token ids differ from token 3``, ``same token
        ids, text differs from character 12 (detokenization difference)``, ..."""
        if self.same:
            return "identical"
        phrase = self._text_phrase()
        if self.calls_equal is False:
            tail = "tool calls returned apart differ"
            return f"{phrase}; {tail}" if phrase else f"same text, {tail}"
        return phrase

    def _text_phrase(self) -> str:
        """How the texts (ids, token texts) differ; empty when they do not."""
        at = self.first_divergence
        if self.text_equal and self.ids_equal is not False and self.token_texts_equal is not False:
            return ""
        if self.ids_equal is False:
            return f"token ids differ from token {at}"
        if self.token_texts_equal is False:
            return f"token texts differ from token {at}"
        if self.ids_equal:
            return f"same token ids, text differs from character {at} (detokenization difference)"
        if self.token_texts_equal:
            return f"same token texts, text differs from character {at}"
        return f"text differs from character {at}"

    def to_dict(self) -> dict[str, Any]:
        """Plain types for item data and JSON (``basis`` as its value; ``calls_equal`` only
        where a side returned tool calls apart)."""
        data = {
            "same": self.same,
            "basis": self.basis.value,
            "ids_equal": self.ids_equal,
            "token_texts_equal": self.token_texts_equal,
            "text_equal": self.text_equal,
            "first_divergence": self.first_divergence,
            "divergence_unit": self.divergence_unit,
        }
        return data if self.calls_equal is None else {**data, "calls_equal": self.calls_equal}


def compare_outputs(
    a_text: str,
    a_ids: Sequence[int] | None,
    b_text: str,
    b_ids: Sequence[int] | None,
    a_tokens: Sequence[str] | None = None,
    b_tokens: Sequence[str] | None = None,
    a_calls: str = "",
    b_calls: str = "",
) -> Sameness:
    """Whether output ``a`` and output ``b`` are the same, on which basis, and where they
    first diverge (the rule is in the module docstring).

    ``*_ids`` are the token ids (None when the engine gives none); ``*_tokens`` the texts of
    the tokens (None when not known). Token texts are ignored when both sides have ids.
    ``*_calls``: the canonical text of the tool calls the server returned apart
    (:func:`~pytest_infercheck.tools.canonical_calls`; empty: none).
    """
    text_equal = a_text == b_text
    ids_equal: bool | None = None
    tokens_equal: bool | None = None
    divergence: int | None = None
    unit: DivergenceUnit | None = None
    if a_ids is not None and b_ids is not None:
        basis = Basis.IDS_TEXT
        divergence = _first_divergence(a_ids, b_ids)
        ids_equal = divergence is None
    elif a_tokens is not None and b_tokens is not None:
        basis = Basis.TOKEN_TEXTS_TEXT
        divergence = _first_divergence(a_tokens, b_tokens)
        tokens_equal = divergence is None
    else:
        basis = Basis.TEXT
    calls_equal = None if not (a_calls or b_calls) else a_calls == b_calls
    if divergence is not None:
        unit = "token"
    elif not text_equal:
        divergence, unit = _first_divergence(a_text, b_text), "char"
    elif calls_equal is False:
        divergence, unit = len(a_text), "char"
    return Sameness(
        same=text_equal
        and ids_equal is not False
        and tokens_equal is not False
        and calls_equal is not False,
        basis=basis,
        ids_equal=ids_equal,
        text_equal=text_equal,
        first_divergence=divergence,
        divergence_unit=unit,
        token_texts_equal=tokens_equal,
        calls_equal=calls_equal,
    )


def same_generation(a: Generation, b: Generation) -> Sameness:
    """:func:`compare_outputs` of two generations: their ``text``, ``token_ids``, token
    texts (``token_texts``) and the tool calls returned apart (``tool_calls``)."""
    return compare_outputs(
        a.text,
        a.token_ids,
        b.text,
        b.token_ids,
        a.token_texts,
        b.token_texts,
        returned_calls(a),
        returned_calls(b),
    )


def returned_calls(generation: Generation) -> str:
    """The canonical text of the tool calls ``generation``'s server returned apart from its
    text (:func:`~pytest_infercheck.tools.canonical_calls`); empty when none."""
    return canonical_calls(generation.tool_calls) if generation.tool_calls else ""
