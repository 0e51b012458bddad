"""vLLM's answers, read (pure): its token ids (``token_id:N``, from
``return_tokens_as_token_ids``), a (chat) completion keyed by id (:func:`id_generation`),
the teacher-forced rows of ``prompt_logprobs`` (:func:`prompt_logprob_rows`), and the prompt
cache's size from ``/metrics`` (:func:`cache_config_tokens`). The backend that asks is
:mod:`.vllm`."""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from typing import Any

from .base import BackendError, Generation, TopKRow
from .http import HttpError
from .openai_wire import message_calls, read_usage

TOKEN_ID = re.compile(r"^token_id:(-?\d+)$")
CACHE_CONFIG = re.compile(r"^vllm:cache_config_info\{(?P<labels>[^}]*)\}", re.MULTILINE)


def cache_config_tokens(metrics: str) -> int | None:
    """``num_gpu_blocks x block_size`` from the labels of ``vllm:cache_config_info`` in a
    Prometheus ``/metrics`` text; None when either label is missing or not an integer."""
    found = CACHE_CONFIG.search(metrics)
    if found is None:
        return None
    labels = dict(re.findall(r'(\w+)="([^"]*)"', found["labels"]))
    try:
        return int(labels["num_gpu_blocks"]) * int(labels["block_size"])
    except (KeyError, ValueError):
        return None


def token_id(token: Any, name: str = "vllm") -> int:
    """The id of a ``token_id:N`` token string (``return_tokens_as_token_ids``)."""
    found = TOKEN_ID.match(str(token))
    if found is None:
        raise BackendError(
            f"backend {name!r}: token {str(token)[:40]!r} is not 'token_id:N' "
            "(does the server support return_tokens_as_token_ids?)"
        )
    return int(found.group(1))


class TokenEntries:
    """Generated tokens and their logprobs, assembled from one answer or a stream."""

    def __init__(self) -> None:
        self.ids: list[int] = []
        self.chosen: list[float] = []
        self.top: list[dict[Any, float]] = []

    def extend_legacy(self, logprobs: Any, name: str = "vllm") -> None:
        """The completions shape ``{tokens, token_logprobs, top_logprobs}``."""
        if not isinstance(logprobs, dict):
            return
        tokens = logprobs.get("tokens") or []
        values = logprobs.get("token_logprobs") or []
        tops = logprobs.get("top_logprobs") or [None] * len(tokens)
        for token, value, top in zip(tokens, values, tops, strict=True):
            self.ids.append(token_id(token, name))
            self.chosen.append(math.nan if value is None else float(value))
            self.top.append({token_id(k, name): float(v) for k, v in (top or {}).items()})

    def extend_chat(self, logprobs: Any, name: str = "vllm") -> None:
        """The chat shape ``{content: [{token, logprob, top_logprobs: [...]}]}``."""
        if not isinstance(logprobs, dict):
            return
        for entry in logprobs.get("content") or []:
            self.ids.append(token_id(entry.get("token"), name))
            self.chosen.append(float(entry.get("logprob", math.nan)))
            self.top.append(
                {
                    token_id(t.get("token"), name): float(t.get("logprob", math.nan))
                    for t in entry.get("top_logprobs") or []
                }
            )

    def generation(self, text: str, finish: Any, usage: Any, name: str) -> Generation:
        if not self.ids and text:
            raise BackendError(f"backend {name!r}: the answer has text but no token logprobs")
        generation = Generation(
            text=text,
            token_ids=list(self.ids),
            finish_reason="stop" if finish == "stop" else str(finish or "unknown"),
            chosen_logprobs=list(self.chosen),
            top_logprobs=list(self.top),
        )
        read_usage(generation, usage)
        return generation


def id_generation(answer: Any, *, chat: bool, name: str = "vllm") -> Generation:
    """A (chat) completion answered with ``return_tokens_as_token_ids`` as a
    :class:`Generation` keyed by token id (the other choices of an ``n > 1`` request in its
    ``others``, the response's ``usage`` on the first)."""
    try:
        choices = answer["choices"]
        first = choices[0]
    except (KeyError, IndexError, TypeError) as exc:
        raise HttpError(f"response has no choices: {str(answer)[:200]!r}") from exc
    generation = _choice_generation(first, chat, answer.get("usage"), name)
    generation.others = tuple(_choice_generation(c, chat, None, name) for c in choices[1:])
    return generation


def streamed_id_generation(chunks: Sequence[Any], name: str = "vllm") -> Generation:
    """A streamed ``/v1/completions`` answer (``return_tokens_as_token_ids``) assembled per
    choice ``index``: texts and token entries in order, the last finish reason, the final
    usage chunk's counts on the first choice."""
    texts: dict[int, list[str]] = {}
    entries: dict[int, TokenEntries] = {}
    finish: dict[int, Any] = {}
    usage: Any = None
    for chunk in chunks:
        if not isinstance(chunk, dict):
            continue
        usage = chunk.get("usage") or usage
        for position, choice in enumerate(chunk.get("choices") or []):
            index = choice.get("index", position)
            index = index if isinstance(index, int) else position
            texts.setdefault(index, []).append(str(choice.get("text") or ""))
            entries.setdefault(index, TokenEntries()).extend_legacy(choice.get("logprobs"), name)
            finish[index] = choice.get("finish_reason") or finish.get(index)
    order = sorted(texts) or [0]
    made = [
        entries.get(i, TokenEntries()).generation(
            "".join(texts.get(i, [])), finish.get(i), usage if n == 0 else None, name
        )
        for n, i in enumerate(order)
    ]
    made[0].others = tuple(made[1:])
    return made[0]


def _choice_generation(choice: Any, chat: bool, usage: Any, name: str) -> Generation:
    """One choice of a (chat) completion keyed by id."""
    entries = TokenEntries()
    if chat:
        message = choice.get("message") or {}
        text = str(message.get("content") or "")
        entries.extend_chat(choice.get("logprobs"), name)
    else:
        text = str(choice.get("text") or "")
        entries.extend_legacy(choice.get("logprobs"), name)
    generation = entries.generation(text, choice.get("finish_reason"), usage, name)
    if chat:
        message = choice.get("message") or {}
        generation.reasoning = message.get("reasoning_content") or message.get("reasoning")
        generation.tool_calls = message_calls(message.get("tool_calls"))
    return generation


def prompt_logprob_rows(
    entries: Sequence[Mapping[str, Any] | None],
    n_prompt: int,
    continuation_ids: Sequence[int],
    k: int,
    name: str = "vllm",
) -> list[TopKRow]:
    """The rows of ``continuation_ids`` from vLLM's ``prompt_logprobs`` of the request whose
    prompt was ``n_prompt`` prompt ids then the continuation: entry ``n_prompt + i`` maps
    token ids (as strings) to ``{logprob, rank}``; it holds the top ``k`` (ranks 1..k) and
    the given token (whatever its rank). Row i: ``chosen`` the logprob of
    ``continuation_ids[i]``, ``top`` the entries of rank <= k (by value when no ranks)."""
    if len(entries) < n_prompt + len(continuation_ids):
        raise BackendError(
            f"backend {name!r}: {len(entries)} prompt_logprobs entries for a prompt of "
            f"{n_prompt} + {len(continuation_ids)} tokens"
        )
    rows = []
    for i, token in enumerate(continuation_ids):
        entry = entries[n_prompt + i]
        if not isinstance(entry, Mapping) or str(token) not in entry:
            raise BackendError(
                f"backend {name!r}: prompt_logprobs at position {i} lack the given token {token}"
            )
        values = {int(v): _logprob(e) for v, e in entry.items()}
        ranks = {
            int(v): e["rank"]
            for v, e in entry.items()
            if isinstance(e, Mapping) and isinstance(e.get("rank"), int)
        }
        if len(ranks) == len(values):
            top = {v: lp for v, lp in values.items() if ranks[v] <= k}
        else:
            top = dict(sorted(values.items(), key=lambda kv: (-kv[1], kv[0]))[:k])
        rows.append(TopKRow(values[int(token)], top))
    return rows


def _logprob(entry: Any) -> float:
    value = entry.get("logprob") if isinstance(entry, Mapping) else entry
    return math.nan if value is None else float(value)
