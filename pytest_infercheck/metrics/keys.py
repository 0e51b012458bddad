"""Token texts as keys: when a text names one token of a top-k row, and when it does not.

A server that returns no token ids keys its top-k logprobs by token text
(:attr:`~pytest_infercheck.backends.base.Generation.top_keys` ``"text"``). A text is a
faithful key only when no other token of the row could carry it. It cannot be trusted when:

- it holds U+FFFD or a lone surrogate: a byte-fallback token, or a piece of a UTF-8
  character, decoded on its own (``\\xe2`` and ``\\x80`` both read ``\\ufffd``);
- it is spelled ``bytes:...`` / ``byte:...`` (how OpenAI and llama.cpp write a token that is
  not valid UTF-8 on its own; :mod:`.consistency` treats these keys the same way);
- it is empty (special tokens decoded without their text);
- two entries of the row carried it (a tokenizer whose single-token decode strips a
  leading space, two added tokens with one spelling, or any of the above): a map built from
  the entries keeps one of their logprobs under the text, and which one depends on the
  order the server sent them. :func:`text_top_k` builds the map and remembers such texts
  (:class:`TextTopK`), each under the largest of its entries' logprobs.

Reading a logprob through such a key may read another token's number: :func:`ambiguous_key`
says when, for the margins of :mod:`.ties` (which then report no number, or an honest
bound, never an exact one) and for :func:`step_text` (which then does not locate a step's
token by its text). Ids are never ambiguous. Pure functions.
"""

from __future__ import annotations

import re
from collections.abc import Hashable, Iterable, Mapping, Sequence
from typing import Any

__all__ = [
    "TextTopK",
    "ambiguous_key",
    "ambiguous_text",
    "collided",
    "step_text",
    "step_texts",
    "text_top_k",
]

_BYTES_SPELLING = re.compile(r"^bytes?:")
_SURROGATES = re.compile("[\ud800-\udfff]")


def ambiguous_text(text: str) -> bool:
    """Whether a token text could be carried by more than one token of any vocabulary
    (module docstring): empty, holding U+FFFD or a lone surrogate, or spelled ``bytes:``."""
    return (
        not text
        or "\ufffd" in text
        or _SURROGATES.search(text) is not None
        or _BYTES_SPELLING.match(text) is not None
    )


class TextTopK(dict[str, float]):
    """A top-k row keyed by token text that remembers the texts more than one of its entries
    carried (:attr:`collided`); each such text maps to the largest of its entries' logprobs,
    so the value read for it is at least the logprob of any token that carries it."""

    collided: frozenset[str]

    def __init__(self, values: Mapping[str, float], collided: Iterable[str] = ()) -> None:
        super().__init__(values)
        self.collided = frozenset(collided)

    def __reduce__(self) -> Any:  # copy / pickle keep the collided texts
        return (type(self), (dict(self), self.collided))


def text_top_k(entries: Iterable[tuple[str, float]]) -> TextTopK:
    """A text-keyed top-k row from a server's ``(token text, logprob)`` entries, in any
    order: each text under the largest logprob of the entries that carry it, the texts two
    or more entries carried in :attr:`TextTopK.collided`."""
    values: dict[str, float] = {}
    twice: set[str] = set()
    for text, logprob in entries:
        if text in values:
            twice.add(text)
            values[text] = max(values[text], float(logprob))
        else:
            values[text] = float(logprob)
    return TextTopK(values, twice)


def collided(top: Mapping[Any, float] | None) -> frozenset[Any]:
    """The keys of ``top`` that more than one entry carried, as far as the map knows (a
    :class:`TextTopK` does; a plain dict keeps no trace of a collision)."""
    return top.collided if isinstance(top, TextTopK) else frozenset()


def ambiguous_key(key: Hashable, top: Mapping[Any, float] | None = None) -> bool:
    """Whether reading ``top[key]`` may read another token's logprob: ``key`` is a text
    that :func:`ambiguous_text` names, or one that more than one entry of ``top`` carried
    (:func:`collided`). Ids (any non-text key) never are."""
    if not isinstance(key, str):
        return False
    return ambiguous_text(key) or key in collided(top)


def step_text(step: Mapping[Any, float] | None, chosen: float | None) -> str | None:
    """The text of a step's chosen token read from its text-keyed top-k: the one key whose
    logprob equals the chosen token's; None when no key or more than one does, or when
    that key is ambiguous (:func:`ambiguous_key`: the text could be another token's, so it
    does not locate this one)."""
    if not step or chosen is None:
        return None
    matches = [key for key, logprob in step.items() if logprob == chosen]
    if len(matches) != 1 or not isinstance(matches[0], str):
        return None
    return None if ambiguous_key(matches[0], step) else matches[0]


def step_texts(
    top: Sequence[Mapping[Any, float]] | None,
    chosen: Sequence[float | None] | None,
    text: str,
) -> list[str] | None:
    """Each generated token's text read from its step's text-keyed top-k (:func:`step_text`),
    kept only when every step's is located and they join into the generation's ``text``
    exactly; None otherwise (one ambiguous step leaves the whole generation unlocated: the
    steps after it could not be told apart from another token's)."""
    if not top or not chosen or len(top) != len(chosen):
        return None
    texts = []
    for step, value in zip(top, chosen, strict=True):
        located = step_text(step, value)
        if located is None:
            return None
        texts.append(located)
    return texts if "".join(texts) == text else None
