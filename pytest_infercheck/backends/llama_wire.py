"""llama-server's native ``/completion`` answers, read (pure): a completion as a
:class:`~.base.Generation` (:func:`native_generation`, probability entries aligned on token
ids: :func:`align_probabilities`), a streamed completion assembled (:class:`StreamedCompletion`)
and a request's feature activity from its ``timings`` (:func:`timings_activity`). The backend
that asks is :mod:`.llama_server`."""

from __future__ import annotations

import math
from typing import Any

from ..features import FeatureActivity
from .base import Generation


def native_generation(
    text: str, tokens: list[int], entries: list[dict[str, Any]], stop_type: Any
) -> Generation:
    """A ``/completion`` answer (whole or assembled from a stream) as a :class:`Generation`."""
    chosen, top = align_probabilities(tokens, entries)
    return Generation(
        text=text,
        token_ids=tokens,
        finish_reason="stop" if stop_type in ("eos", "word") else "length",
        chosen_logprobs=chosen,
        top_logprobs=top,
    )


class StreamedCompletion:
    """One completion of a streamed ``/completion`` answer, assembled from its chunks (an
    ``n_cmpl > 1`` stream interleaves its completions, told apart by ``index``)."""

    def __init__(self) -> None:
        self.text: list[str] = []
        self.tokens: list[int] = []
        self.entries: list[dict[str, Any]] = []
        self.stop: Any = None
        self.timings: Any = None
        self.counts: dict[str, Any] = {}

    def add(self, chunk: Any) -> None:
        if not isinstance(chunk, dict):
            return
        self.text.append(str(chunk.get("content") or ""))
        self.tokens.extend(int(t) for t in chunk.get("tokens") or [])
        self.entries.extend(chunk.get("completion_probabilities") or [])
        self.stop = chunk.get("stop_type") or self.stop
        self.timings = chunk.get("timings") or self.timings  # the last chunk's: the request's
        for key in ("tokens_evaluated", "tokens_predicted"):
            if key in chunk:
                self.counts[key] = chunk[key]

    def generation(self) -> Generation:
        generation = native_generation("".join(self.text), self.tokens, self.entries, self.stop)
        generation.prompt_tokens = _count(self.counts.get("tokens_evaluated"))
        generation.completion_tokens = _count(self.counts.get("tokens_predicted"))
        return generation


TIMINGS_SOURCE = "llama-server timings (draft_n, draft_n_accepted, cache_n) of the request"


def timings_activity(timings: object) -> FeatureActivity | None:
    """One request's feature activity from its ``/completion`` answer's ``timings``:

        drafted  = timings.draft_n            (0 when absent)
        accepted = timings.draft_n_accepted   (0 when absent)
        cache_hit_tokens = timings.cache_n

    llama-server writes ``draft_n`` and ``draft_n_accepted`` only when the request drafted
    at least one token (``server_slot_stats::to_json``, llama.cpp of llama-cpp-python
    0.3.36), so timings without them are a request that drafted nothing. None: no timings
    object (nothing reported); a field that is not a non-negative whole number is None.
    """
    if not isinstance(timings, dict):
        return None
    return FeatureActivity(
        drafted=_count(timings.get("draft_n", 0)),
        accepted=_count(timings.get("draft_n_accepted", 0)),
        cache_hit_tokens=_count(timings.get("cache_n")),
        source=TIMINGS_SOURCE,
    )


def _count(value: object) -> int | None:
    """``value`` as a count: a non-negative int (a bool is not one), else None."""
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None


def align_probabilities(
    tokens: list[int], entries: list[dict[str, Any]]
) -> tuple[list[float], list[dict[Any, float]]]:
    """Chosen logprob and top-k map per generated token, matched by id.

    llama-server omits the entry of a token that ends inside a UTF-8 character; such a
    position gets NaN and an empty map rather than shifting every later entry.
    """
    chosen: list[float] = []
    top: list[dict[Any, float]] = []
    j = 0
    for token in tokens:
        if j < len(entries) and int(entries[j].get("id", -1)) == token:
            entry = entries[j]
            chosen.append(float(entry.get("logprob", math.nan)))
            top.append({int(t["id"]): float(t["logprob"]) for t in entry.get("top_logprobs", [])})
            j += 1
        else:
            chosen.append(math.nan)
            top.append({})
    return chosen, top
