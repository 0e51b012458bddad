"""A faulty HTTP proxy in front of a real inference server, for showing that the plugin's
checks fail on a faulty backend.

The proxy forwards every request to ``upstream`` and perturbs *generation* responses
(POST ``/completion``, ``/v1/completions``, ``/v1/chat/completions``, ``/v1/messages``,
``/api/generate``, ``/api/chat``, plus llama-server's aliases ``/completions`` and
``/chat/completions``) according to a :class:`Fault`. Everything else passes through.

An altered response changes its last generated token on every channel it has:

- the chosen token is replaced by its best different alternative from the entry's
  ``top_logprobs`` (id, token text, bytes, logprob), as a sampler picking the runner-up
  would; without alternatives the id becomes ``id - 1`` (``1`` for id 0) and the logprob
  drops by 1;
- the text's trailing token text is replaced accordingly; without logprob entries the
  text's last character changes (digits cycle ``0-9``, letters cycle, anything else
  becomes ``x``), and an empty text gets ``x`` appended;
- llama-server ``/completion``: ``content``, ``tokens`` and ``completion_probabilities``;
  OpenAI: ``choices[0].text`` / ``message.content`` / ``delta.content`` and
  ``logprobs.content`` (or the legacy ``tokens`` / ``token_logprobs``); Anthropic
  ``/v1/messages``: the last text block (one is added when there is none); Ollama:
  ``response`` / ``message.content``.

With ``stutter``, an altered non-streamed llama-server ``/completion`` answer has every
generated token twice instead (``t0 t0 t1 t1 ...``: ``tokens``, ``completion_probabilities``
and ``content``; an end-of-sequence token it stopped on stays once, last), the FP8 KV-cache
bug's output; streams pass unaltered.

With ``empty_body``, a request chosen for alteration is not forwarded at all: the proxy
answers it with HTTP 200 and an empty body (no content type), as a broken server or gateway
may, streamed or not. With ``error_status`` (a 4xx or 5xx), such a request is answered with
that status and a JSON error (``faulty proxy: injected HTTP 500``) instead.

With ``fail_nth_of_prompt: N``, the N-th generation request carrying a given prompt (the
same ``prompt`` or ``messages``, counted per prompt over every generation path) is not
forwarded: the proxy answers it ``fail_status`` (500) with a JSON error body, as a server
that fails one warm request would.

With ``perturb_warm``, every request that may use the prompt cache (no ``cache_prompt:
false``, no ``cache_salt``) whose prompt was seen before, or extends one seen before (a later
turn), is altered as above: on a server that caches every prompt, every cache hit changes
its last token the same way, while the first sight of each prompt stays intact.

With ``alter_paths``, every generation response on those paths (``/v1/chat/completions``)
is altered, whatever the order of the requests.

With ``refuse_streams`` (an HTTP status), every generation request that asks for a streamed
answer (``stream: true``) is not forwarded: the proxy answers it with that status and an
OpenAI-style error body (``{"error": {"code", "message": "faulty proxy: streaming
refused"}}``), as a gateway or server that refuses (4xx) or fails (5xx) streams would.

Two faults of structured answers (tool calls), independent of the above, alter every
generation response they apply to:

- ``calls_to_content``: a non-streamed chat completion's ``message.tool_calls`` are removed
  and written into its ``content`` as Hermes text (``<tool_call>\n{"name": ..., "arguments":
  {...}}\n</tool_call>``, after any content), ``finish_reason`` left as it was; an Anthropic
  message's ``tool_use`` blocks become such text blocks, ``stop_reason`` left. What a server
  whose tool parser missed the call returns. Streams pass unaltered.
- ``null_stream_tool_calls``: in a streamed chat completion every delta's ``tool_calls``
  becomes ``null`` and a ``finish_reason`` of ``tool_calls`` becomes ``stop`` (a server with
  a reasoning and a tool parser both on, as users reported it); non-streamed answers pass.

With ``drop_fields`` (``{"top_p"}``, ``{"seed"}``), those fields are removed from the JSON
body of every sampled generation request (``temperature`` > 0) before it is forwarded: a
server that ignores a sampling parameter (its own default applies instead: llama-server's
``top_p`` 0.95, ``top_k`` 40, ``temperature`` 0.8, a random seed). Greedy requests pass.

Two faults drop a LoRA adapter from every generation request, as a gateway that strips
unknown fields or routes to the base model would (the silent base-model answer, vLLM #34186):
``drop_lora`` sets every ``lora`` entry's ``scale`` to 0 (llama-server's per-request
adapters); ``model_to`` rewrites the ``model`` field (vLLM: the LoRA module's name becomes
the base model's). ``/lora-adapters`` and ``/v1/models`` still list the adapter. And one
swaps adapters, as a server that mixes up the adapters of concurrent requests would:
``swap_lora_every`` N rotates the ``lora`` scales of every Nth generation request that asks
for an adapter (a scale not 0) one entry on (id 0's scale goes to id 1, the last's to id 0):
it is answered with the other adapter; base-model requests (every scale 0) pass.

With ``refuse_tools``, a generation request whose body offers ``tools`` is not forwarded: the
proxy answers HTTP 400 with an OpenAI error body (:data:`TOOLS_REFUSED`), as a server whose
tool parser broke refuses every tool request; requests without tools pass. With
``refuse_params``, a generation request whose body has one of those keys is answered HTTP 400
(:data:`PARAMS_REFUSED` and the keys), as an engine refuses a field it does not take.

Faults of request parameters: ``drop_params`` removes those keys from every generation
request before forwarding it (a gateway or engine that drops ``stop``, ``n_probs``,
``ignore_eos``, ``top_p``), ``set_params`` sets keys to other values (``top_p`` swapped);
``return_stop`` appends the stop string an answer stopped on to its text (llama-server's
``stopping_word``; an OpenAI choice finished ``stop`` gets the request's first stop string),
streamed or not; ``usage_offset`` adds to its completion count (``tokens_predicted`` of the
final answer or chunk, ``usage.completion_tokens``), ``prompt_usage_offset`` to its prompt
count (``tokens_evaluated``, ``usage.prompt_tokens``). ``cut_prompt`` drops the first half
of every generation request's prompt before forwarding it (:func:`cut_prompt`: ids or
text), as a gateway or a context limit that cuts prompts silently would.

Streams (SSE, and Ollama's NDJSON) are forwarded event by event. When a stream may be
altered, the proxy holds back the events from the last content-carrying event on (usually
one event), so it can alter that event at the end of the stream.
"""

from __future__ import annotations

import contextlib
import json
import socket
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from typing import Any

import httpcore  # noqa: F401  (with httpx: see pytest_infercheck/backends/http.py)
import httpx

GENERATION_PATHS = frozenset(
    {
        "/completion",
        "/completions",
        "/v1/completions",
        "/chat/completions",
        "/v1/chat/completions",
        "/v1/messages",
        "/api/generate",
        "/api/chat",
    }
)

# Not forwarded in either direction (hop-by-hop, or recomputed by the proxy / httpx).
_SKIP_REQUEST_HEADERS = frozenset(
    {
        "host",
        "content-length",
        "transfer-encoding",
        "connection",
        "keep-alive",
        "proxy-connection",
        "te",
        "trailer",
        "upgrade",
        "accept-encoding",
    }
)
_SKIP_RESPONSE_HEADERS = frozenset(
    {
        "content-length",
        "transfer-encoding",
        "connection",
        "keep-alive",
        "content-encoding",
        "trailer",
        "upgrade",
    }
)


@dataclass(frozen=True)
class Fault:
    perturb_every: int = 0  # every Nth generation response is altered (0 = never)
    perturb_when_concurrent: bool = False  # alter only if another generation request overlapped
    drop_stream_chunk: bool = False  # in streams, drop the 2nd content-carrying chunk
    poison: str | None = None  # after a request whose body contains this, alter every later one
    delay_s: float = 0.0  # added latency per generation request
    empty_body: bool = False  # an altered request gets HTTP 200 with an empty body instead
    error_status: int = 0  # an altered request gets this HTTP status (a JSON error) instead
    stutter: bool = False  # an altered non-streamed llama-server /completion: every token twice
    perturb_repeat: bool = False  # alter the second request with a prompt seen once before
    perturb_later_turns: bool = False  # alter a cacheable request extending an earlier prompt
    calls_to_content: bool = False  # non-streamed answers: tool calls moved into content
    null_stream_tool_calls: bool = False  # streamed chat: tool_calls null, finish_reason stop
    fail_nth_of_prompt: int = 0  # the Nth request of a prompt is answered fail_status (0: never)
    fail_status: int = 500
    perturb_warm: bool = False  # alter every cacheable request of a prompt seen or extended before
    refuse_streams: int = 0  # a streamed generation request is answered with this HTTP status
    alter_paths: frozenset[str] = frozenset()  # every generation response on these paths
    refuse_tools: bool = False  # a request offering tools: HTTP 400, not forwarded
    refuse_params: frozenset[str] = frozenset()  # a request with these keys: HTTP 400
    drop_params: frozenset[str] = frozenset()  # these keys removed from generation requests
    set_params: tuple[tuple[str, Any], ...] = ()  # these keys set (replaced) in them
    return_stop: bool = False  # an answer that stopped on a stop string returns it too
    usage_offset: int = 0  # added to the answer's completion token count
    prompt_usage_offset: int = 0  # added to the answer's prompt token count
    drop_fields: frozenset[str] = frozenset()  # removed from every sampled generation request
    drop_lora: bool = False  # llama-server: every `lora` scale of a generation request set to 0
    model_to: str | None = None  # a generation request's `model` rewritten to this (vLLM base)
    swap_lora_every: int = 0  # every Nth request asking for an adapter: `lora` scales rotated
    cut_prompt: bool = False  # the first half of a generation request's prompt dropped


TOOLS_REFUSED = "faulty proxy: the tool parser failed to load"
"""The error message of a tool request refused under ``refuse_tools``."""
PARAMS_REFUSED = "faulty proxy: field not supported"
"""The error message of a request refused under ``refuse_params`` (the fields follow)."""


def _json_keys(body: bytes) -> set[str]:
    """The top-level keys of a JSON object body (none when it is not one)."""
    try:
        doc = json.loads(body)
    except ValueError:
        return set()
    return set(doc) if isinstance(doc, dict) else set()


def offers_tools(body: bytes) -> bool:
    """Whether a request body is JSON offering a non-empty ``tools`` list."""
    try:
        payload = json.loads(body)
    except ValueError:
        return False
    return isinstance(payload, dict) and bool(payload.get("tools"))


# --------------------------------------------------------------------------------------
# Altering payloads


def _other_char(char: str) -> str:
    if char.isdigit() and char.isascii():
        return str((int(char) + 1) % 10)
    if char.isascii() and char.isalpha():
        base = ord("a") if char.islower() else ord("A")
        return chr(base + (ord(char) - base + 1) % 26)
    return "y" if char == "x" else "x"


def _change_last_char(text: str) -> str:
    return text[:-1] + _other_char(text[-1]) if text else "x"


def _swap_entry(entry: dict[str, Any], token_key: str = "token") -> tuple[str, str]:
    """Replace the chosen token of a logprob entry (``{id?, token, bytes?, logprob,
    top_logprobs?}``) in place by its best different alternative. Returns
    ``(old_text, new_text)`` of the token."""
    old_text = str(entry.get(token_key) or "")
    old_id = entry.get("id")
    for alt in entry.get("top_logprobs") or []:
        if not isinstance(alt, dict):
            continue
        text = str(alt.get(token_key) or "")
        if text and text != old_text and alt.get("id", object()) != old_id:
            for key in ("id", token_key, "bytes", "logprob"):
                if key in alt:
                    entry[key] = alt[key]
            return old_text, text
    new_text = _change_last_char(old_text)
    entry[token_key] = new_text
    if "bytes" in entry:
        entry["bytes"] = list(new_text.encode())
    if isinstance(old_id, int):
        entry["id"] = old_id - 1 if old_id > 0 else 1
    if isinstance(entry.get("logprob"), (int, float)):
        entry["logprob"] = float(entry["logprob"]) - 1.0
    return old_text, new_text


def _last_content_index(entries: list[Any], token_key: str = "token") -> int:
    """Index of the last entry whose token has text (the last one if none has)."""
    for i in range(len(entries) - 1, -1, -1):
        if isinstance(entries[i], dict) and entries[i].get(token_key):
            return i
    return len(entries) - 1


def _new_text(text: str, old: str, new: str) -> str:
    if old and text.endswith(old):
        return text[: -len(old)] + new
    if not old:
        return text + new
    return _change_last_char(text)


def _alter_entries(entries: Any, text: str) -> tuple[str, int | None]:
    """Swap the last content entry of a logprob list; return the new text and the entry's
    index (None when there are no entries: the text's last character changes instead)."""
    if isinstance(entries, list) and entries and isinstance(entries[-1], dict):
        index = _last_content_index(entries)
        old, new = _swap_entry(entries[index])
        return _new_text(text, old, new), index
    return _change_last_char(text), None


def _alter_llama_native(obj: dict[str, Any]) -> None:
    """llama-server ``/completion`` (a whole response or one stream chunk)."""
    text = str(obj.get("content") or "")
    entries = obj.get("completion_probabilities")
    tokens = obj.get("tokens")
    old_id = None
    if isinstance(entries, list) and entries and isinstance(entries[-1], dict):
        index = _last_content_index(entries)
        old_id = entries[index].get("id")
    obj["content"], index_or_none = _alter_entries(entries, text)
    if not (isinstance(tokens, list) and tokens):
        return
    if index_or_none is not None and isinstance(entries, list):
        new_id = entries[index_or_none].get("id")
        if len(tokens) == len(entries):
            position = index_or_none
        else:  # the UTF-8 gap: probabilities and ids are not 1:1; find the id from the end
            found = [i for i, t in enumerate(tokens) if t == old_id]
            position = found[-1] if found else len(tokens) - 1
        tokens[position] = new_id
        return
    eos_last = obj.get("stop_type") == "eos" and len(tokens) >= 2
    position = len(tokens) - 2 if eos_last else len(tokens) - 1
    old = tokens[position]
    tokens[position] = old - 1 if isinstance(old, int) and old > 0 else 1


def _alter_openai_choice(choice: dict[str, Any]) -> None:
    holder: dict[str, Any] | None = None
    if "text" in choice:
        holder, key = choice, "text"
    elif isinstance(choice.get("message"), dict):
        holder, key = choice["message"], "content"
    elif isinstance(choice.get("delta"), dict):
        holder, key = choice["delta"], "content"
    text = str(holder.get(key) or "") if holder is not None else ""
    logprobs = choice.get("logprobs")
    if isinstance(logprobs, dict) and isinstance(logprobs.get("content"), list):
        new, _ = _alter_entries(logprobs["content"], text)
    elif isinstance(logprobs, dict) and isinstance(logprobs.get("tokens"), list):
        # Legacy completions shape: tokens / token_logprobs / top_logprobs, parallel lists.
        tokens = logprobs["tokens"]
        if tokens:
            index = _last_content_index([{"token": t} for t in tokens])
            old = str(tokens[index] or "")
            tokens[index] = _change_last_char(old)
            values = logprobs.get("token_logprobs")
            if isinstance(values, list) and index < len(values) and values[index] is not None:
                values[index] = float(values[index]) - 1.0
            new = _new_text(text, old, tokens[index])
        else:
            new = _change_last_char(text)
    else:
        new = _change_last_char(text)
    if holder is not None:
        holder[key] = new


def _alter_anthropic(obj: dict[str, Any]) -> None:
    if obj.get("type") == "content_block_delta" and isinstance(obj.get("delta"), dict):
        obj["delta"]["text"] = _change_last_char(str(obj["delta"].get("text") or ""))
        return
    blocks = obj.get("content")
    if not isinstance(blocks, list):
        return
    for block in reversed(blocks):
        if isinstance(block, dict) and block.get("type") == "text":
            block["text"] = _change_last_char(str(block.get("text") or ""))
            return
    blocks.append({"type": "text", "text": "x"})


def stutter_llama_native(obj: dict[str, Any]) -> bool:
    """Every generated token of a llama-server ``/completion`` answer twice (module
    docstring); False when it is not one."""
    if not isinstance(obj.get("content"), str) or not isinstance(obj.get("tokens"), list):
        return False
    tokens = obj["tokens"]
    eos = tokens[-1:] if obj.get("stop_type") == "eos" and tokens else []
    body = tokens[: len(tokens) - len(eos)]
    obj["tokens"] = [t for t in body for _ in (0, 1)] + eos
    entries = obj.get("completion_probabilities")
    if isinstance(entries, list):
        kept = entries[: len(body)]
        obj["completion_probabilities"] = [e for e in kept for _ in (0, 1)] + entries[len(body) :]
        obj["content"] = "".join(str(e.get("token", "")) * 2 for e in kept)
    else:
        obj["content"] = "".join(c * 2 for c in obj["content"])
    if isinstance(obj.get("tokens_predicted"), int):
        obj["tokens_predicted"] = len(obj["tokens"])
    return True


def alter_payload(obj: Any) -> bool:
    """Alter one decoded generation response (or stream event) in place; False when it has
    no generated-content slot this proxy knows."""
    if not isinstance(obj, dict):
        return False
    choices = obj.get("choices")
    if isinstance(choices, list) and choices and isinstance(choices[0], dict):
        _alter_openai_choice(choices[0])
        return True
    if obj.get("type") == "content_block_delta" or (
        obj.get("type") == "message" and isinstance(obj.get("content"), list)
    ):
        _alter_anthropic(obj)
        return True
    if isinstance(obj.get("content"), str):
        _alter_llama_native(obj)
        return True
    if isinstance(obj.get("response"), str):
        obj["response"] = _change_last_char(obj["response"])
        return True
    message = obj.get("message")
    if isinstance(message, dict) and isinstance(message.get("content"), str):
        message["content"] = _change_last_char(message["content"])
        return True
    return False


def hermes_text(name: Any, arguments: Any) -> str:
    """A call as Hermes / Qwen 2.5 text; ``arguments`` as the OpenAI wire gives them (a JSON
    text, written as its value; a text that is not JSON is written as it is)."""
    if isinstance(arguments, str):
        try:
            arguments = json.loads(arguments)
        except ValueError:
            head = json.dumps(name)
            return f'<tool_call>\n{{"name": {head}, "arguments": {arguments}}}\n</tool_call>'
    call = json.dumps({"name": name, "arguments": arguments}, ensure_ascii=False)
    return f"<tool_call>\n{call}\n</tool_call>"


def calls_to_content(obj: Any) -> bool:
    """Move a non-streamed answer's tool calls into its content (module docstring); False
    when it has none."""
    if not isinstance(obj, dict):
        return False
    changed = False
    for choice in obj.get("choices") or []:
        message = choice.get("message") if isinstance(choice, dict) else None
        if not isinstance(message, dict) or not message.get("tool_calls"):
            continue
        text = "".join(
            hermes_text(
                call.get("function", {}).get("name"), call.get("function", {}).get("arguments")
            )
            for call in message["tool_calls"]
            if isinstance(call, dict)
        )
        message["content"] = (message.get("content") or "") + text
        del message["tool_calls"]
        changed = True
    blocks = obj.get("content") if obj.get("type") == "message" else None
    if isinstance(blocks, list):
        for i, block in enumerate(blocks):
            if isinstance(block, dict) and block.get("type") == "tool_use":
                blocks[i] = {
                    "type": "text",
                    "text": hermes_text(block.get("name"), block.get("input")),
                }
                changed = True
    return changed


def null_tool_calls(obj: Any) -> bool:
    """A streamed chat chunk with its ``tool_calls`` nulled and ``finish_reason:
    tool_calls`` made ``stop`` (module docstring); False when it has neither."""
    if not isinstance(obj, dict):
        return False
    changed = False
    for choice in obj.get("choices") or []:
        if not isinstance(choice, dict):
            continue
        delta = choice.get("delta")
        if isinstance(delta, dict) and delta.get("tool_calls") is not None:
            delta["tool_calls"] = None
            changed = True
        if choice.get("finish_reason") == "tool_calls":
            choice["finish_reason"] = "stop"
            changed = True
    return changed


def _text_of(obj: Any) -> str | None:
    """The generated text an event/response carries (None: no text slot)."""
    if not isinstance(obj, dict):
        return None
    choices = obj.get("choices")
    if isinstance(choices, list) and choices and isinstance(choices[0], dict):
        choice = choices[0]
        if "text" in choice:
            return str(choice.get("text") or "")
        for key in ("delta", "message"):
            part = choice.get(key)
            if isinstance(part, dict) and "content" in part:
                return str(part.get("content") or "")
        return None
    if obj.get("type") == "content_block_delta" and isinstance(obj.get("delta"), dict):
        return str(obj["delta"].get("text") or "")
    if isinstance(obj.get("content"), str):
        return str(obj["content"])
    if isinstance(obj.get("response"), str):
        return str(obj["response"])
    message = obj.get("message")
    if isinstance(message, dict) and isinstance(message.get("content"), str):
        return str(message["content"])
    return None


def _has_tokens(obj: dict[str, Any]) -> bool:
    if obj.get("tokens") or obj.get("completion_probabilities"):
        return True
    choices = obj.get("choices")
    if isinstance(choices, list) and choices and isinstance(choices[0], dict):
        logprobs = choices[0].get("logprobs")
        if isinstance(logprobs, dict):
            return bool(logprobs.get("content") or logprobs.get("tokens"))
    return False


def content_rank(obj: Any) -> int:
    """3: carries generated text; 2: carries token ids/logprobs only; 1: has an empty text
    slot; 0: carries no generated content."""
    text = _text_of(obj)
    if text:
        return 3
    if isinstance(obj, dict) and _has_tokens(obj):
        return 2
    return 1 if text is not None else 0


# --------------------------------------------------------------------------------------
# Stream events


class _Event:
    """One SSE event (``data:`` lines) or one NDJSON line, with its raw bytes."""

    def __init__(self, raw: bytes, sse: bool) -> None:
        self.raw = raw
        self.sse = sse
        self.payload: Any = None
        data = self._data()
        if data is not None and data.strip() not in (b"", b"[DONE]"):
            try:
                self.payload = json.loads(data)
            except ValueError:
                self.payload = None
        self.rank = content_rank(self.payload)

    def _data(self) -> bytes | None:
        if not self.sse:
            return self.raw.strip()
        lines = [line for line in self.raw.splitlines() if line.startswith(b"data:")]
        if not lines:
            return None
        return b"\n".join(line[5:].removeprefix(b" ") for line in lines)

    def alter(self) -> bool:
        return self.rewrite(alter_payload)

    def rewrite(self, change: Callable[[Any], bool]) -> bool:
        """Apply ``change`` to the payload in place and re-encode the event; False (the event
        unchanged) when it changed nothing."""
        if not change(self.payload):
            return False
        data = json.dumps(self.payload, ensure_ascii=False, separators=(",", ":")).encode()
        if not self.sse:
            ending = self.raw[len(self.raw.rstrip(b"\r\n")) :]
            self.raw = data + ending
            return True
        out: list[bytes] = []
        placed = False
        for line in self.raw.splitlines(keepends=True):
            if line.startswith(b"data:"):
                if not placed:
                    ending = line[len(line.rstrip(b"\r\n")) :] or b"\n"
                    out.append(b"data: " + data + ending)
                    placed = True
                continue
            out.append(line)
        self.raw = b"".join(out)
        return True


def _split_events(chunks: Iterator[bytes], sse: bool) -> Iterator[_Event]:
    buffer = b""
    for chunk in chunks:
        buffer += chunk
        while True:
            if sse:
                ends = [
                    (i, len(sep)) for sep in (b"\n\n", b"\r\n\r\n") if (i := buffer.find(sep)) >= 0
                ]
                if not ends:
                    break
                i, n = min(ends)
            else:
                i, n = buffer.find(b"\n"), 1
                if i < 0:
                    break
            raw, buffer = buffer[: i + n], buffer[i + n :]
            yield _Event(raw, sse)
    if buffer:
        yield _Event(buffer, sse)


# --------------------------------------------------------------------------------------
# The proxy


class _Request:
    """One generation request in flight."""

    def __init__(
        self, ordinal: int, poisoned: bool, history: bool = False, fail: bool = False
    ) -> None:
        self.ordinal = ordinal
        self.poisoned = poisoned
        self.overlapped = False
        self.history = history
        """Chosen by the prompt's history (``perturb_repeat``, ``perturb_later_turns``,
        ``perturb_warm``)."""
        self.fail = fail
        """Answered ``fail_status`` instead of forwarded (``fail_nth_of_prompt``)."""
        self.body = b""
        """The request's body as the client sent it."""


def cut_prompt(doc: dict[str, Any]) -> bool:
    """Drop the first half of a generation request's prompt, in place: a ``prompt`` (or
    SGLang's ``input_ids``) of ids keeps its second half of ids, a text its second half of
    characters; a chat request's last message its second half of characters. Whether
    anything was cut."""
    for key in ("prompt", "input_ids"):
        value = doc.get(key)
        if isinstance(value, (list, str)) and len(value) >= 2:
            doc[key] = value[len(value) // 2 :]
            return True
    messages = doc.get("messages")
    if isinstance(messages, list) and messages and isinstance(messages[-1], dict):
        content = messages[-1].get("content")
        if isinstance(content, str) and len(content) >= 2:
            messages[-1] = {**messages[-1], "content": content[len(content) // 2 :]}
            return True
    return False


def prompt_of(body: bytes) -> tuple[Any, bool]:
    """The prompt of a generation request body (its ``prompt``, text or token ids, or its
    ``messages``; None when the body is not JSON or has neither) and whether the request may
    use the server's prompt cache (no ``cache_prompt: false``, no ``cache_salt``)."""
    try:
        doc = json.loads(body)
    except ValueError:
        return None, True
    if not isinstance(doc, dict):
        return None, True
    cacheable = doc.get("cache_prompt", True) is not False and "cache_salt" not in doc
    return doc.get("prompt", doc.get("messages")), cacheable


def streamed(body: bytes) -> bool:
    """Whether a request body asks for a streamed answer (``stream: true``)."""
    try:
        doc = json.loads(body)
    except ValueError:
        return False
    return isinstance(doc, dict) and doc.get("stream") is True


def extends(later: Any, earlier: Any) -> bool:
    """Whether prompt ``later`` strictly extends prompt ``earlier`` (a text, a list of token
    ids or of messages with ``earlier`` as its proper prefix): a later turn."""
    if isinstance(later, str) and isinstance(earlier, str):
        return len(later) > len(earlier) and later.startswith(earlier)
    if isinstance(later, list) and isinstance(earlier, list):
        return len(later) > len(earlier) and later[: len(earlier)] == earlier
    return False


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    block_on_close = False
    request_queue_size = 256  # the default listen backlog (5) resets bursts of connections
    proxy: FaultyProxy


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: _Server

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def setup(self) -> None:
        super().setup()
        self.server.proxy._connection_opened(self.connection)

    def finish(self) -> None:
        try:
            super().finish()
        finally:
            self.server.proxy._connection_closed(self.connection)

    def do_GET(self) -> None:
        self._handle()

    do_POST = do_PUT = do_DELETE = do_PATCH = do_OPTIONS = do_HEAD = do_GET

    def _read_body(self) -> bytes:
        if "chunked" in (self.headers.get("Transfer-Encoding") or "").lower():
            parts: list[bytes] = []
            while True:
                size = int(self.rfile.readline().split(b";")[0].strip() or b"0", 16)
                if size == 0:
                    while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                        pass
                    return b"".join(parts)
                parts.append(self.rfile.read(size))
                self.rfile.readline()
        length = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(length) if length else b""

    def _handle(self) -> None:
        try:
            body = self._read_body()
        except (OSError, ValueError):
            self.close_connection = True
            return
        try:
            self.server.proxy._serve(self, body)
        except (BrokenPipeError, ConnectionResetError, ConnectionAbortedError):
            self.close_connection = True  # the client went away
        except OSError:
            self.close_connection = True


class FaultyProxy:
    """A proxy in a background thread; use as a context manager."""

    url: str
    requests: int
    altered: int
    failed: int
    max_in_flight: int

    def __init__(self, upstream: str, fault: Fault = Fault()) -> None:
        self.upstream = upstream.rstrip("/")
        self.fault = fault
        self.requests = 0
        self.altered = 0
        self.failed = 0
        self.max_in_flight = 0
        self._lock = threading.Lock()
        self._active: set[_Request] = set()
        self._poisoned = False
        self._adapter_requests = 0  # generation requests that asked for an adapter
        self._seen: dict[str, int] = {}  # prompt (as JSON) -> requests that sent it
        self._prompts: list[Any] = []  # every distinct prompt, in order
        self._connections: set[socket.socket] = set()
        self._handlers: set[threading.Thread] = set()  # connection threads, joined on close
        self._client = httpx.Client(
            base_url=self.upstream,
            timeout=httpx.Timeout(300.0, connect=10.0),
            # No idle upstream connections: llama-server keeps one HTTP thread per kept-alive
            # connection (Keep-Alive: timeout=5), so a pool of them stalled bursts of new
            # requests by about 5 s. A fresh local connection per request costs little.
            limits=httpx.Limits(max_connections=128, max_keepalive_connections=0),
        )
        self._server = _Server(("127.0.0.1", 0), _Handler)
        self._server.proxy = self
        host, port = self._server.server_address[:2]
        self.url = f"http://{host!s}:{port}"
        self._thread: threading.Thread | None = None

    # -- lifecycle ----------------------------------------------------------------------

    def __enter__(self) -> FaultyProxy:
        self._thread = threading.Thread(
            target=self._server.serve_forever,
            kwargs={"poll_interval": 0.05},
            name=f"faulty-proxy-{self.url}",
            daemon=True,
        )
        self._thread.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def close(self) -> None:
        if self._thread is not None:
            self._server.shutdown()
            self._thread.join(timeout=10)
            self._thread = None
        with self._lock:
            connections = list(self._connections)
        for connection in connections:  # wake handlers waiting on idle keep-alive sockets
            with contextlib.suppress(OSError):
                connection.shutdown(socket.SHUT_RDWR)
        self._server.server_close()
        with self._lock:
            handlers = list(self._handlers)
        for thread in handlers:
            if thread is not threading.current_thread():
                thread.join(timeout=10)
        self._client.close()

    def _connection_opened(self, connection: socket.socket) -> None:
        with self._lock:
            self._connections.add(connection)
            self._handlers = {t for t in self._handlers if t.is_alive()}
            self._handlers.add(threading.current_thread())

    def _connection_closed(self, connection: socket.socket) -> None:
        with self._lock:
            self._connections.discard(connection)

    # -- bookkeeping --------------------------------------------------------------------

    def _by_history(self, prompt: Any, cacheable: bool) -> tuple[bool, bool]:
        """Record ``prompt`` (under the lock) and say whether its history selects it for
        alteration: the second time it is seen (``perturb_repeat``), or, on a request that
        may use the prompt cache, extending an earlier prompt (``perturb_later_turns``: a
        later turn served from the cache; its uncached reference stays intact), or seen or
        extended before (``perturb_warm``); and whether it is the N-th request of its prompt
        (``fail_nth_of_prompt``)."""
        if prompt is None:
            return False, False
        key = json.dumps(prompt, sort_keys=True)
        seen = self._seen.get(key, 0)
        self._seen[key] = seen + 1
        later = any(extends(prompt, earlier) for earlier in self._prompts)
        if seen == 0:
            self._prompts.append(prompt)
        fault = self.fault
        alter = (
            (fault.perturb_repeat and seen == 1)
            or (fault.perturb_later_turns and later and cacheable)
            or (fault.perturb_warm and (seen > 0 or later) and cacheable)
        )
        return alter, fault.fail_nth_of_prompt > 0 and seen + 1 == fault.fail_nth_of_prompt

    def _begin(self, prompt: Any = None, cacheable: bool = True) -> _Request:
        with self._lock:
            self.requests += 1
            history, fail = self._by_history(prompt, cacheable)
            request = _Request(self.requests, self._poisoned, history, fail)
            self._active.add(request)
            if len(self._active) > 1:
                for other in self._active:
                    other.overlapped = True
            self.max_in_flight = max(self.max_in_flight, len(self._active))
            return request

    def _end(self, request: _Request) -> None:
        with self._lock:
            self._active.discard(request)

    def _check_poison(self, body: bytes) -> None:
        poison = self.fault.poison
        if poison is not None and poison.encode() in body:
            with self._lock:
                self._poisoned = True

    def _may_alter(self, request: _Request) -> bool:
        """Whether the request could still be altered (the overlap may come later)."""
        fault = self.fault
        every = fault.perturb_every > 0 and request.ordinal % fault.perturb_every == 0
        return every or request.poisoned or request.history or fault.perturb_when_concurrent

    def _should_alter(self, request: _Request) -> bool:
        fault = self.fault
        every = fault.perturb_every > 0 and request.ordinal % fault.perturb_every == 0
        with self._lock:
            concurrent = fault.perturb_when_concurrent and request.overlapped
        return every or request.poisoned or request.history or concurrent

    def _count_altered(self) -> None:
        with self._lock:
            self.altered += 1

    # -- serving ------------------------------------------------------------------------

    def _drop_adapter(self, body: bytes) -> bytes:
        """``body`` without its adapter (``drop_lora``, ``model_to``), counted as altered."""
        try:
            obj = json.loads(body)
        except ValueError:
            return body
        if not isinstance(obj, dict):
            return body
        changed = False
        if self.fault.drop_lora and isinstance(obj.get("lora"), list):
            obj["lora"] = [{**e, "scale": 0.0} for e in obj["lora"] if isinstance(e, dict)]
            changed = True
        if self.fault.model_to is not None and "model" in obj:
            changed = changed or obj["model"] != self.fault.model_to
            obj["model"] = self.fault.model_to
        if not changed:
            return body
        self._count_altered()
        return json.dumps(obj).encode()

    def _swap_adapter(self, body: bytes) -> bytes:
        """``body`` with its ``lora`` scales rotated one entry on when it is the Nth request
        asking for an adapter (``swap_lora_every``), counted as altered."""
        try:
            obj = json.loads(body)
        except ValueError:
            return body
        lora = obj.get("lora") if isinstance(obj, dict) else None
        if not isinstance(lora, list) or len(lora) < 2:
            return body
        if not any(isinstance(e, dict) and e.get("scale") for e in lora):
            return body  # the base model: nothing to swap
        with self._lock:
            self._adapter_requests += 1
            nth = self._adapter_requests
        if nth % self.fault.swap_lora_every:
            return body
        scales = [e.get("scale", 0.0) for e in lora]
        obj["lora"] = [{**e, "scale": scales[i - 1]} for i, e in enumerate(lora)]
        self._count_altered()
        return json.dumps(obj).encode()

    def _serve(self, handler: _Handler, body: bytes) -> None:
        path = handler.path.split("?", 1)[0]
        generation = handler.command == "POST" and path in GENERATION_PATHS
        if generation and (self.fault.drop_lora or self.fault.model_to is not None):
            body = self._drop_adapter(body)
        if generation and self.fault.swap_lora_every:
            body = self._swap_adapter(body)
        request = self._begin(*prompt_of(body)) if generation else None
        if request is not None:
            request.body = body
        if request is not None and path in self.fault.alter_paths:
            request.history = True  # selected for alteration, as by its history
        self._check_poison(body)  # after _begin: the poison request itself stays intact
        if generation and self.fault.drop_fields:
            body = self._dropped(body)
        try:
            if request is not None and self.fault.delay_s > 0:
                time.sleep(self.fault.delay_s)
            self._forward(handler, body, request)
        finally:
            if request is not None:
                self._end(request)

    def _dropped(self, body: bytes) -> bytes:
        """``body`` without :attr:`Fault.drop_fields` when it asks a sampled generation."""
        try:
            payload = json.loads(body)
        except ValueError:
            return body
        if not isinstance(payload, dict) or not (payload.get("temperature") or 0) > 0:
            return body
        if not any(k in payload for k in self.fault.drop_fields):
            return body
        self._count_altered()
        kept = {k: v for k, v in payload.items() if k not in self.fault.drop_fields}
        return json.dumps(kept).encode()

    def _forward(self, handler: _Handler, body: bytes, request: _Request | None) -> None:
        refused = None
        if request is not None and self.fault.refuse_tools and offers_tools(body):
            refused = TOOLS_REFUSED
        elif request is not None and self.fault.refuse_params:
            asked = sorted(k for k in self.fault.refuse_params if k in _json_keys(body))
            refused = f"{PARAMS_REFUSED}: {', '.join(asked)}" if asked else None
        if refused is not None:
            self._count_altered()
            error = {"error": {"code": 400, "message": refused, "type": "invalid_request_error"}}
            data = json.dumps(error).encode()
            self._send_whole(handler, 400, [("Content-Type", "application/json")], data)
            return
        if request is not None and request.fail:
            with self._lock:
                self.failed += 1
            status = self.fault.fail_status
            message = json.dumps({"error": {"message": f"faulty proxy: HTTP {status} on purpose"}})
            self._send_whole(
                handler, status, [("Content-Type", "application/json")], message.encode()
            )
            return
        if request is not None and self.fault.empty_body and self._should_alter(request):
            self._count_altered()
            self._send_whole(handler, 200, [], b"")
            return
        status = self.fault.error_status
        if request is not None and status and self._should_alter(request):
            self._count_altered()
            message = json.dumps(
                {"error": {"code": status, "message": f"faulty proxy: injected HTTP {status}"}}
            )
            self._send_whole(
                handler, status, [("Content-Type", "application/json")], message.encode()
            )
            return
        if request is not None and self.fault.refuse_streams and streamed(body):
            self._count_altered()
            status = self.fault.refuse_streams
            error = {"error": {"code": status, "message": "faulty proxy: streaming refused"}}
            data = json.dumps(error).encode()
            self._send_whole(handler, status, [("Content-Type", "application/json")], data)
            return
        if request is not None:
            body = self._rewritten_request(body)
        headers = {
            k: v for k, v in handler.headers.items() if k.lower() not in _SKIP_REQUEST_HEADERS
        }
        upstream_request = self._client.build_request(
            handler.command, handler.path, headers=headers, content=body
        )
        try:
            response = self._client.send(upstream_request, stream=True)
        except httpx.HTTPError as error:
            message = json.dumps({"error": {"message": f"faulty proxy: upstream: {error}"}})
            self._send_whole(handler, 502, [("Content-Type", "application/json")], message.encode())
            return
        try:
            out_headers = [
                (k, v)
                for k, v in response.headers.items()
                if k.lower() not in _SKIP_RESPONSE_HEADERS
            ]
            content_type = response.headers.get("content-type", "").lower()
            sse = "text/event-stream" in content_type
            ndjson = "ndjson" in content_type
            if request is not None and response.status_code < 400 and (sse or ndjson):
                self._send_stream(handler, response, out_headers, request, sse)
                return
            data = response.read()
            if request is not None and response.status_code < 400 and self._should_alter(request):
                data = self._altered_body(data)
            if request is not None and response.status_code < 400 and self.fault.calls_to_content:
                data = self._rewritten_body(data, calls_to_content)
            if request is not None and response.status_code < 400:
                data = self._rewritten_body(data, self._answer_fault(body))
            self._send_whole(handler, response.status_code, out_headers, data)
        finally:
            response.close()

    def _rewritten_request(self, body: bytes) -> bytes:
        """A generation request without the keys of ``drop_params``, with those of
        ``set_params`` and, under ``cut_prompt``, its prompt cut (:func:`cut_prompt`);
        unchanged when none applies or it is not JSON."""
        fault = self.fault
        if not (fault.drop_params or fault.set_params or fault.cut_prompt):
            return body
        try:
            doc = json.loads(body)
        except ValueError:
            return body
        if not isinstance(doc, dict):
            return body
        hit = [k for k in fault.drop_params if k in doc] + [k for k, _ in fault.set_params]
        if fault.cut_prompt and cut_prompt(doc):
            hit.append("prompt")
        for key in fault.drop_params:
            doc.pop(key, None)
        doc.update(dict(fault.set_params))
        if hit:
            self._count_altered()
        return json.dumps(doc).encode()

    def _answer_fault(self, body: bytes) -> Callable[[Any], bool]:
        """What ``return_stop`` and the usage offsets do to an answer (or a stream event) of
        the request ``body``: the stop string it stopped on appended to its text (llama-server's
        ``stopping_word``; an OpenAI choice that finished ``stop`` gets the request's first stop
        string), its completion count raised (``tokens_predicted``, ``usage.completion_tokens``).
        """
        fault = self.fault
        try:
            doc = json.loads(body)
        except ValueError:
            doc = {}
        stops = doc.get("stop") if isinstance(doc, dict) else None
        stop = stops[0] if isinstance(stops, list) and stops else stops
        stop = stop if isinstance(stop, str) else None

        def change(obj: Any) -> bool:
            if not isinstance(obj, dict):
                return False
            changed = False
            if fault.return_stop:
                word = obj.get("stopping_word")
                if obj.get("stop_type") == "word" and isinstance(word, str) and word:
                    obj["content"] = str(obj.get("content") or "") + word
                    changed = True
                for choice in obj.get("choices") or []:
                    if stop and isinstance(choice, dict) and choice.get("finish_reason") == "stop":
                        holder = choice.get("message") or choice.get("delta")
                        if isinstance(holder, dict):
                            holder["content"] = str(holder.get("content") or "") + stop
                        else:
                            choice["text"] = str(choice.get("text") or "") + stop
                        changed = True
            usage = obj.get("usage")
            for native, field, offset in (
                ("tokens_predicted", "completion_tokens", fault.usage_offset),
                ("tokens_evaluated", "prompt_tokens", fault.prompt_usage_offset),
            ):
                if not offset:
                    continue
                if isinstance(obj.get(native), int) and obj.get("stop") is True:
                    obj[native] += offset
                    changed = True
                if isinstance(usage, dict) and isinstance(usage.get(field), int):
                    usage[field] += offset
                    changed = True
            return changed

        return change

    def _altered_body(self, data: bytes) -> bytes:
        try:
            payload = json.loads(data)
        except ValueError:
            return data
        altered = stutter_llama_native(payload) if self.fault.stutter else alter_payload(payload)
        if not altered:
            return data
        self._count_altered()
        return json.dumps(payload, ensure_ascii=False).encode()

    def _rewritten_body(self, data: bytes, change: Callable[[Any], bool]) -> bytes:
        try:
            payload = json.loads(data)
        except ValueError:
            return data
        if not change(payload):
            return data
        self._count_altered()
        return json.dumps(payload, ensure_ascii=False).encode()

    @staticmethod
    def _send_whole(
        handler: _Handler, status: int, headers: list[tuple[str, str]], data: bytes
    ) -> None:
        handler.send_response(status)
        for key, value in headers:
            handler.send_header(key, value)
        handler.send_header("Content-Length", str(len(data)))
        handler.end_headers()
        if handler.command != "HEAD":
            handler.wfile.write(data)
        handler.wfile.flush()

    def _send_stream(
        self,
        handler: _Handler,
        response: httpx.Response,
        headers: list[tuple[str, str]],
        request: _Request,
        sse: bool,
    ) -> None:
        handler.send_response(response.status_code)
        for key, value in headers:
            handler.send_header(key, value)
        handler.send_header("Transfer-Encoding", "chunked")
        handler.end_headers()
        handler.wfile.flush()

        def write(data: bytes) -> None:
            if data:
                handler.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
                handler.wfile.flush()

        fault = self.fault
        if fault.return_stop or fault.usage_offset or fault.prompt_usage_offset:
            change = self._answer_fault(request.body)
            answered = False
            for event in _split_events(response.iter_bytes(), sse):
                answered = event.rewrite(change) or answered
                write(event.raw)
            if answered:
                self._count_altered()
        elif fault.null_stream_tool_calls:
            nulled = False
            for event in _split_events(response.iter_bytes(), sse):
                nulled = event.rewrite(null_tool_calls) or nulled
                write(event.raw)
            if nulled:
                self._count_altered()
        elif not (fault.drop_stream_chunk or self._may_alter(request)):
            for chunk in response.iter_bytes():
                write(chunk)
        else:
            self._relay_events(response.iter_bytes(), sse, request, write)
        handler.wfile.write(b"0\r\n\r\n")
        handler.wfile.flush()

    def _relay_events(
        self,
        chunks: Iterator[bytes],
        sse: bool,
        request: _Request,
        write: Callable[[bytes], None],
    ) -> None:
        """Forward events, dropping the 2nd content-carrying one (``drop_stream_chunk``) and
        holding back the events from the best candidate for alteration on."""
        may_alter = self._may_alter(request)
        content_seen = 0
        dropped = False
        pending: list[_Event] = []  # pending[0] is the candidate, when there is one
        candidate_rank = 0
        for event in _split_events(chunks, sse):
            if event.rank >= 2:
                content_seen += 1
                if self.fault.drop_stream_chunk and content_seen == 2:
                    dropped = True
                    continue
            if not may_alter:
                write(event.raw)
            elif event.rank >= 1 and event.rank >= candidate_rank:
                write(b"".join(e.raw for e in pending))
                pending, candidate_rank = [event], event.rank
            elif pending:
                pending.append(event)
            else:
                write(event.raw)
        altered = False
        if pending and self._should_alter(request):
            altered = pending[0].alter()
        write(b"".join(e.raw for e in pending))
        if altered or dropped:
            self._count_altered()
