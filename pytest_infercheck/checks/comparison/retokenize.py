"""The generated tokens of a side that returns only text, judged against the baseline's ids.

A server without token ids (mlx_lm.server in raw mode, vllm-mlx) still serves a model
folder: its tokenizer, loaded here, is the server's own. It is used only when it means the
same by the baseline's generated ids: its decode of them equals the baseline's own
detokenization. Then :func:`~pytest_infercheck.metrics.origin.text_side_tokens` decides (its
rules a-d) from that tokenizer's decodings of the baseline's ids, the decoded prefixes and
the re-tokenized text.
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ...backends import BackendError, Generation
from ...backends.capabilities import ModelFolder
from ...metrics.origin import TextSideTokens, text_side_tokens
from ...metrics.text import first_divergence

if TYPE_CHECKING:
    from ...generation_cache import GenerationCache, ResolvedTarget


@functools.lru_cache(maxsize=8)
def _folder_tokenizer(folder: Path) -> Any:
    """The tokenizer of a model folder's ``tokenizer.json``, by the ``tokenizers`` library
    (importing transformers for it cost about 2 s of a diff), loaded once per process. Its
    decode must equal the baseline's own detokenization before it is used at all, so a
    setting of the folder it does not read (e.g. ``clean_up_tokenization_spaces``) can only
    leave an item unjudged, never misjudge it."""
    from tokenizers import Tokenizer

    return Tokenizer.from_file(str(folder / "tokenizer.json"))


def text_ids(generation: Generation) -> list[int]:
    """The ids a generation's text came from: its ids without the end-of-sequence token it
    stopped on."""
    ids = list(generation.token_ids or [])
    return ids[:-1] if generation.finish_reason == "stop" and ids else ids


def judged_ids(test: ResolvedTarget, base: Generation, other: Generation) -> list[int] | None:
    """The baseline's ids (:func:`text_ids`) that the text-only output ``other`` of ``test``
    is judged against by :func:`text_side_verdict`; None when there is nothing to judge:
    ``other`` has ids of its own, ``base`` has none, or ``test`` serves no tokenizer."""
    judged = _judged(test, base, other)
    return None if judged is None else judged[1]


def _judged(
    test: ResolvedTarget, base: Generation, other: Generation
) -> tuple[Any, list[int]] | None:
    """The test side's tokenizer and :func:`judged_ids`, or None (nothing to judge)."""
    if other.token_ids is not None or base.token_ids is None:
        return None
    tokenizer = _tokenizer_of(test)
    return None if tokenizer is None else (tokenizer, text_ids(base))


def _tokenizer_of(test: ResolvedTarget) -> Any:
    """The tokenizer of the model folder ``test`` serves; None when it serves none, or it
    does not load."""
    folder = test.backend.model_folder() if isinstance(test.backend, ModelFolder) else None
    if folder is None:
        return None
    try:
        return _folder_tokenizer(Path(folder))
    except Exception:  # any loading failure: no tokenizer to judge with
        return None


def text_side_verdict(
    cache: GenerationCache,
    baseline: ResolvedTarget,
    test: ResolvedTarget,
    base: Generation,
    other: Generation,
) -> TextSideTokens | None:
    """Whether the text-only ``other`` generated ``base``'s tokens (None: ``other`` has ids,
    ``base`` has none, or no tokenizer of the test side agrees with the baseline's ids)."""
    judged = _judged(test, base, other)
    if judged is None:
        return None
    tokenizer, ids = judged
    decoded = str(tokenizer.decode(ids, skip_special_tokens=False))
    try:
        base_decoded = cache.detokenize(baseline, ids)
    except BackendError:
        return None
    if base_decoded is None or base_decoded != decoded:
        return None
    return text_side_tokens(
        ids,
        decoded,
        str(tokenizer.decode(ids, skip_special_tokens=True)),
        [str(tokenizer.decode(ids[: i + 1], skip_special_tokens=False)) for i in range(len(ids))],
        other.text,
        list(tokenizer.encode(other.text, add_special_tokens=False).ids),
        base.text,
    )


def retokenized_divergence(test: ResolvedTarget, a_text: str, b_text: str) -> int | None:
    """The first index where the ids of ``a_text`` and ``b_text`` differ, both tokenized by
    the tokenizer of the model folder ``test`` serves (no special tokens added); None when
    it serves none, or the two tokenize alike."""
    tokenizer = _tokenizer_of(test)
    if tokenizer is None:
        return None
    a = list(tokenizer.encode(a_text, add_special_tokens=False).ids)
    b = list(tokenizer.encode(b_text, add_special_tokens=False).ids)
    return first_divergence(a, b)
