"""llama-server's native ``/completion`` answers, read (pure): a completion as a
:class:`~.base.Generation` (:func:`native_generation`, probability entries aligned on token
ids: :func:`align_probabilities`), a streamed completion assembled (:class:`StreamedCompletion`)
and a request's feature activity from its ``timings`` (:func:`timings_activity`). The backend
that asks is :mod:`.llama_server`."""

from __future__ import annotations

import math
import os
from collections.abc import Mapping, Sequence
from typing import Any

from ..features import FeatureActivity
from .base import BackendError, Generation


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


LORA_PATHS = frozenset(
    {"/completion", "/completions", "/v1/completions", "/v1/chat/completions", "/v1/messages"}
)
"""llama-server's generation endpoints: each takes a per-request ``lora`` list."""


def lora_scales(
    loaded: Sequence[Mapping[str, Any]], adapter: str | None, name: str
) -> list[dict[str, Any]]:
    """The per-request ``lora`` field for a backend with ``adapter`` (None: the base model)
    on a llama-server whose ``/lora-adapters`` answered ``loaded`` (``[{id, path, scale},
    ...]``): scale 1 for the adapter (the first loaded one whose path names the same file),
    0 for every other. A server started with ``--lora`` applies it at scale 1 to a request
    that names none, so the base model is asked for with every scale 0. Raises a
    :class:`BackendError` when the adapter is not among those loaded (the server would
    answer with the base model: the silent failure an adapter check exists for)."""
    mine = None
    if adapter is not None:
        mine = next((e.get("id") for e in loaded if _same_file(str(e.get("path")), adapter)), None)
        if mine is None:
            paths = [str(e.get("path")) for e in loaded] or "none"
            raise BackendError(
                f"backend {name!r}: llama-server has not loaded the LoRA adapter {adapter} "
                f"(its /lora-adapters: {paths}): start it with --lora {adapter}"
            )
    return [{"id": e.get("id"), "scale": 1.0 if e.get("id") == mine else 0.0} for e in loaded]


def _same_file(a: str, b: str) -> bool:
    """Whether two paths name the same file (symlinks and ``..`` resolved)."""
    return os.path.realpath(a) == os.path.realpath(b)
