"""The wire of an OpenAI-compatible server: the bodies its requests send (chat messages,
tools, Anthropic messages) and the readers of its answers (a choice, a stream's chunks, a
message, both logprob shapes), as :class:`~.base.Generation` s. Pure: no I/O (the backend,
:mod:`.openai_compat`, sends and receives)."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from typing import Any

from ..metrics.consistency import unsorted_positions
from ..tools import ToolCall
from .base import Generation, GenerationParams, PromptInput, openai_messages
from .http import HttpError

THINK_BLOCK = re.compile(r"^\s*<think>(.*?)</think>\s*", re.DOTALL)


def chat_path(chat: bool) -> str:
    return "/v1/chat/completions" if chat else "/v1/completions"


def chat_endpoint(chat: bool) -> str:
    """The endpoint's name: ``chat`` or ``completions``."""
    return "chat" if chat else "completions"


def chat_messages(prompt: PromptInput, *, object_arguments: bool = False) -> list[dict[str, Any]]:
    """The messages of ``prompt`` in the OpenAI chat shape: every turn of a conversation
    (:func:`~.base.openai_messages`: assistant calls as ``tool_calls``, tool turns with their
    ``tool_call_id``; ``object_arguments`` for a chat template), else the system (if any)
    and user messages."""
    if prompt.messages is not None:
        return openai_messages(prompt.messages, object_arguments=object_arguments)
    messages = [{"role": "system", "content": prompt.system}] if prompt.system else []
    messages.append({"role": "user", "content": prompt.text})
    return messages


def tool_fields(prompt: PromptInput, *, choice: bool = True) -> dict[str, Any]:
    """The request fields that offer ``prompt``'s tools: ``tools`` (OpenAI function schemas)
    and, with ``choice``, its ``tool_choice``; nothing for a prompt without tools (a
    request without tools stays as it was). A template endpoint (``/tokenize``,
    ``/apply-template``) is sent no ``tool_choice``: a template does not see it."""
    fields: dict[str, Any] = {}
    if prompt.tools:
        fields["tools"] = [tool.openai() for tool in prompt.tools]
    if choice and prompt.tool_choice is not None:
        fields["tool_choice"] = prompt.tool_choice
    return fields


def parse_choice(answer: Any, *, chat: bool) -> Generation:
    """The first choice of a (chat) completion response as a :class:`Generation` (the
    response's ``usage`` on it), the other choices of an ``n > 1`` request in its
    ``others``."""
    generation = _parse_one(_first_choice(answer), chat)
    read_usage(generation, answer.get("usage") if isinstance(answer, dict) else None)
    rest = answer["choices"][1:]
    generation.others = tuple(_parse_one(c, chat) for c in rest if isinstance(c, dict))
    return generation


def _parse_one(choice: dict[str, Any], chat: bool) -> Generation:
    """One choice of a (chat) completion response."""
    if chat:
        message = choice.get("message") or {}
        text = message.get("content") or ""
        reasoning = message.get("reasoning_content") or message.get("reasoning")
    else:
        text, reasoning = choice.get("text") or "", None
    generation = text_generation(
        text, reasoning, choice.get("finish_reason"), choice.get("logprobs")
    )
    if chat:
        generation.tool_calls = message_calls(message.get("tool_calls"))
    return generation


def message_calls(tool_calls: Any) -> tuple[ToolCall, ...]:
    """A chat message's ``tool_calls`` (``[{"id", "type", "function": {"name",
    "arguments"}}]``; Ollama's ``arguments`` are an object) as calls, in order: arguments
    text that is not JSON is kept as a call with ``arguments_valid=False``, a missing name
    as ``""``; ``null`` or no list: none."""
    if not isinstance(tool_calls, list):
        return ()
    calls = []
    for entry in tool_calls:
        function = entry.get("function") if isinstance(entry, dict) else None
        function = function if isinstance(function, dict) else {}
        calls.append(ToolCall.parse(str(function.get("name") or ""), function.get("arguments")))
    return tuple(calls)


def delta_calls(deltas: Sequence[Any]) -> tuple[ToolCall, ...]:
    """The calls of a stream's ``delta.tool_calls`` fragments, assembled: by ``index`` (in
    order of first appearance when a server sends none), the name as sent (first non-empty
    one), the ``arguments`` fragments concatenated, then parsed as :func:`message_calls`
    parses a whole call."""
    names: dict[Any, str] = {}
    arguments: dict[Any, list[str]] = {}
    for position, fragment in enumerate(deltas):
        if not isinstance(fragment, dict):
            continue
        index = fragment.get("index", position)
        function = fragment.get("function")
        if not isinstance(function, dict):
            function = {}
        if function.get("name") and not names.get(index):
            names[index] = str(function["name"])
        names.setdefault(index, "")
        piece = function.get("arguments")
        arguments.setdefault(index, []).append(
            piece if isinstance(piece, str) else json.dumps(piece) if piece is not None else ""
        )
    return tuple(ToolCall.parse(names[i], "".join(arguments[i])) for i in names)


def read_usage(generation: Generation, usage: Any) -> None:
    """The counts of a response's ``usage`` on ``generation``: ``completion_tokens``,
    ``prompt_tokens`` and ``prompt_tokens_details.cached_tokens`` (prompt tokens served from
    the prefix cache: vLLM with ``--enable-prompt-tokens-details``, llama-server), where
    given."""
    if not isinstance(usage, dict):
        return
    if isinstance(usage.get("completion_tokens"), int):
        generation.completion_tokens = usage["completion_tokens"]
    if isinstance(usage.get("prompt_tokens"), int):
        generation.prompt_tokens = usage["prompt_tokens"]
    details = usage.get("prompt_tokens_details")
    if isinstance(details, dict) and isinstance(details.get("cached_tokens"), int):
        generation.cached_tokens = details["cached_tokens"]


def _first_choice(answer: Any) -> dict[str, Any]:
    try:
        choice: dict[str, Any] = answer["choices"][0]
    except (KeyError, IndexError, TypeError) as exc:
        raise HttpError(f"response has no choices: {str(answer)[:200]!r}") from exc
    return choice


STREAM_USAGE: dict[str, Any] = {"stream": True, "stream_options": {"include_usage": True}}
"""A streamed request's fields: the stream, and its usage in a final chunk (the OpenAI API's
``stream_options.include_usage``, taken by vLLM, SGLang, llama-server, mlx_lm.server 0.32
and vllm-mlx 0.6), so a streamed answer's counts are judged as a whole one's."""


def assemble_chunks(chunks: list[Any], *, chat: bool) -> Generation:
    """A streamed (chat) completion's chunks as one :class:`Generation`: the texts and
    logprobs concatenated in order, the last finish reason. Logprobs of either shape: chat's
    ``content`` entries, or the legacy completions lists (``tokens``, ``token_logprobs``,
    ``top_logprobs``), joined list by list. Chunks without choices are skipped; a final
    usage chunk's counts are read. The choices of an ``n > 1`` request are told apart by
    their ``index`` (the first is choice 0, the others in :attr:`Generation.others`)."""
    parts: dict[int, _StreamedChoice] = {}
    usage: Any = None
    for chunk in chunks:
        if not isinstance(chunk, dict):
            continue
        usage = chunk.get("usage") or usage
        for position, choice in enumerate(chunk.get("choices") or []):
            if not isinstance(choice, dict):
                continue
            index = choice.get("index", position)
            parts.setdefault(index if isinstance(index, int) else position, _StreamedChoice())
            parts[index if isinstance(index, int) else position].add(choice, chat)
    if not parts:
        parts[0] = _StreamedChoice()
    first, *rest = (parts[i].generation() for i in sorted(parts))
    read_usage(first, usage)
    first.others = tuple(rest)
    return first


class _StreamedChoice:
    """One choice of a stream, assembled from its chunks."""

    def __init__(self) -> None:
        self.text: list[str] = []
        self.reasoning: list[str] = []
        self.finish: Any = None
        self.entries: list[Any] = []
        self.calls: list[Any] = []
        self.legacy: dict[str, list[Any]] = {"tokens": [], "token_logprobs": [], "top_logprobs": []}

    def add(self, choice: dict[str, Any], chat: bool) -> None:
        if chat:
            delta = choice.get("delta") or {}
            self.text.append(delta.get("content") or "")
            self.reasoning.append(delta.get("reasoning_content") or delta.get("reasoning") or "")
            self.calls.extend(delta.get("tool_calls") or [])
        else:
            self.text.append(choice.get("text") or "")
        logprobs = choice.get("logprobs")
        if isinstance(logprobs, dict) and isinstance(logprobs.get("content"), list):
            self.entries.extend(logprobs["content"])
        elif isinstance(logprobs, dict) and isinstance(logprobs.get("token_logprobs"), list):
            for key, values in self.legacy.items():
                values.extend(logprobs.get(key) or [])
        self.finish = choice.get("finish_reason") or self.finish

    def generation(self) -> Generation:
        joined: dict[str, Any] | None = None
        if self.entries:
            joined = {"content": self.entries}
        elif self.legacy["token_logprobs"]:
            joined = {key: values for key, values in self.legacy.items() if values}
        reasoning = "".join(self.reasoning) or None
        generation = text_generation("".join(self.text), reasoning, self.finish, joined)
        generation.tool_calls = delta_calls(self.calls)
        return generation


def text_generation(text: str, reasoning: str | None, finish: Any, logprobs: Any) -> Generation:
    """A text-only :class:`Generation`: a leading ``<think>`` block moved to ``reasoning``,
    logprobs of either shape parsed, token texts in ``token_texts``."""
    match = THINK_BLOCK.match(text)
    if match:
        reasoning, text = match.group(1), text[match.end() :]
    chosen, top, tokens = parse_logprobs(logprobs)
    ids = _entry_ids(logprobs)
    if ids is not None and unsorted_positions(ids[1], keyed_by="id"):
        # A server whose top-k lists are not most likely first need not report the ids it
        # generated: mlx_lm.server 0.32.2 copies each chosen id from the first entry of its
        # unsorted list ("46" generated, ids of "5", "7", "3" reported). Its text is what is
        # compared; the unsorted lists stay a fault of the item (text-keyed).
        ids = None
    return Generation(
        text=text,
        token_ids=None if ids is None else ids[0],
        finish_reason=str(finish or "unknown"),
        chosen_logprobs=chosen,
        top_logprobs=top if ids is None else ids[1],
        top_keys="text" if ids is None else "id",
        token_texts=tokens,
        reasoning=reasoning or None,
    )


def _int_id(entry: Any) -> int | None:
    value = entry.get("id") if isinstance(entry, dict) else None
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _entry_ids(logprobs: Any) -> tuple[list[int], list[dict[Any, float]]] | None:
    """The token ids and the id-keyed top-k maps of a ``content`` logprobs list whose every
    entry and top-k entry carries an integer ``id`` (the server's own ids); else None."""
    entries = logprobs.get("content") if isinstance(logprobs, dict) else None
    if not isinstance(entries, list) or not entries:
        return None
    ids = [_int_id(e) for e in entries]
    tops = [e.get("top_logprobs") or [] for e in entries]
    if any(i is None for i in ids) or any(_int_id(t) is None for row in tops for t in row):
        return None
    maps: list[dict[Any, float]] = [{t["id"]: float(t["logprob"]) for t in row} for row in tops]
    return [int(i) for i in ids if i is not None], maps


def messages_payload(prompt: PromptInput, params: GenerationParams, model: str | None) -> Any:
    """An Anthropic-style ``/v1/messages`` request (greedy) for ``prompt``: its turns
    (:func:`anthropic_messages`), ``system`` apart, and its tools as Anthropic tools
    (``{"name", "description", "input_schema"}``) with the tool choice mapped (``auto`` ->
    ``{"type": "auto"}``, ``required`` -> ``any``, ``none`` -> ``none``, a named function ->
    ``{"type": "tool", "name"}``)."""
    body: dict[str, Any] = {
        "max_tokens": params.max_tokens,
        "temperature": params.temperature,
        "messages": anthropic_messages(prompt),
    }
    if model is not None:
        body["model"] = model
    if prompt.system:
        body["system"] = prompt.system
    if prompt.tools:
        body["tools"] = [
            {
                "name": tool.name,
                **({"description": tool.description} if tool.description is not None else {}),
                "input_schema": dict(tool.parameters),
            }
            for tool in prompt.tools
        ]
    choice = prompt.tool_choice
    if isinstance(choice, Mapping):
        body["tool_choice"] = {"type": "tool", "name": choice["function"]["name"]}
    elif choice is not None:
        body["tool_choice"] = {"type": {"required": "any"}.get(choice, choice)}
    return body


def anthropic_messages(prompt: PromptInput) -> list[dict[str, Any]]:
    """``prompt``'s turns but the system turn, as Anthropic messages: plain turns as they are
    (``{"role", "content"}``); an assistant turn's calls as ``tool_use`` blocks (``{"type":
    "tool_use", "id", "name", "input"}``, after a ``text`` block of its content, if any); tool
    turns as ``tool_result`` blocks (``{"type": "tool_result", "tool_use_id", "content"}``),
    the results of one turn's calls in one user message."""
    out: list[dict[str, Any]] = []
    for message in chat_messages(prompt, object_arguments=True):
        if message["role"] == "system":
            continue
        if message["role"] == "tool":
            block = {
                "type": "tool_result",
                "tool_use_id": message["tool_call_id"],
                "content": message["content"],
            }
            last = out[-1] if out else None
            if last is not None and last["role"] == "user" and isinstance(last["content"], list):
                last["content"].append(block)
            else:
                out.append({"role": "user", "content": [block]})
        elif "tool_calls" in message:
            text = [{"type": "text", "text": message["content"]}] if message["content"] else []
            uses = [
                {
                    "type": "tool_use",
                    "id": call["id"],
                    "name": call["function"]["name"],
                    "input": call["function"]["arguments"],
                }
                for call in message["tool_calls"]
            ]
            out.append({"role": "assistant", "content": [*text, *uses]})
        else:
            out.append(message)
    return out


def parse_message(answer: Any) -> Generation:
    """An Anthropic-style message: its text blocks joined; ``thinking`` blocks are the
    reasoning; ``stop_reason`` ``end_turn``/``stop_sequence`` -> ``stop``, ``max_tokens`` ->
    ``length``."""
    if not isinstance(answer, dict) or not isinstance(answer.get("content"), list):
        raise HttpError(f"response is not a message: {str(answer)[:200]!r}")
    blocks = [b for b in answer["content"] if isinstance(b, dict)]
    text = "".join(str(b.get("text") or "") for b in blocks if b.get("type") == "text")
    thinking = "".join(str(b.get("thinking") or "") for b in blocks if b.get("type") == "thinking")
    stop = answer.get("stop_reason")
    finish = {
        "end_turn": "stop",
        "stop_sequence": "stop",
        "max_tokens": "length",
        "tool_use": "tool_calls",
    }.get(str(stop), stop)
    generation = text_generation(text, thinking or None, finish, None)
    generation.tool_calls = tuple(
        ToolCall.parse(str(b.get("name") or ""), b.get("input"))
        for b in blocks
        if b.get("type") == "tool_use"
    )
    return generation


def parse_logprobs(
    logprobs: Any,
) -> tuple[list[float] | None, list[dict[Any, float]] | None, list[str] | None]:
    """Chosen-token logprobs, top-k maps (keyed by token text) and the chosen tokens' texts,
    from either shape; ``(None, None, None)`` when the server sent none."""
    if not logprobs or not isinstance(logprobs, dict):
        return None, None, None
    if isinstance(logprobs.get("content"), list):
        entries = logprobs["content"]
        chosen = [float(e["logprob"]) for e in entries]
        top = [
            {t["token"]: float(t["logprob"]) for t in e.get("top_logprobs") or []} for e in entries
        ]
        return chosen, top, [str(e.get("token", "")) for e in entries]
    if isinstance(logprobs.get("token_logprobs"), list):
        chosen = [float(v) for v in logprobs["token_logprobs"] if v is not None]
        top = [
            {k: float(v) for k, v in (entry or {}).items()}
            for entry in logprobs.get("top_logprobs") or []
        ]
        return chosen, top or None, [str(t) for t in logprobs.get("tokens") or []]
    return None, None, None
