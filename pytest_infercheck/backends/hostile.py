"""Hostile requests for the cache-pollution check, sent to a server's own generation endpoint.

Each kind is one request (``invalid-utf8``: two) that a correct server answers with an error
or a harmless completion, and that a faulty one lets corrupt shared state (its KV or prompt
cache, a slot, a batch) for the requests after it:

- ``context-overflow``: a prompt several times longer than the context (``8 * n_ctx``
  characters when the server tells its context size, else :data:`OVERFLOW_CHARS`);
- ``invalid-utf8``: raw bytes ``\\xff\\xfe`` inside the JSON prompt string (malformed UTF-8
  on the wire), then lone UTF-16 surrogates ``\\ud800\\udcff`` (valid JSON escapes whose
  decoded string is not valid Unicode, so it reaches the tokenizer);
- ``special-tokens``: the usual special tokens of several model families spelled out in the
  prompt text (:data:`SPECIAL_TOKENS`);
- ``max-tokens-0``: a request for zero new tokens;
- ``disconnect``: a streamed request for many tokens whose client closes the connection
  after the first event.

Every hostile prompt contains :data:`HOSTILE_MARKER`, so a test proxy can recognise them.
What the server answered is returned as a short description and recorded, never judged.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from .http import HttpClient, HttpError

HOSTILE_MARKER = "infercheck-hostile"
SPECIAL_TOKENS = "</s><s><|im_end|><|eot_id|><|endoftext|>"
"""End-of-sequence and turn tokens of common model families (short: tiny contexts)."""
OVERFLOW_CHARS = 16384
"""Overflow prompt length when the context size is unknown (about 4k to 16k tokens)."""
DISCONNECT_TOKENS = 256
ANSWER_CHARS = 120

Body = Callable[[str, int], dict[str, Any]]
"""Builds the generation request body of a backend from (prompt text, max new tokens)."""


def hostile_prompt(kind: str, n_ctx: int | None) -> str:
    """The prompt text of hostile kind ``kind`` (``invalid-utf8``: a placeholder ``XX``
    that :func:`send_hostile` replaces by the malformed bytes)."""
    if kind == "context-overflow":
        chars = 8 * n_ctx if n_ctx else OVERFLOW_CHARS
        return f"{HOSTILE_MARKER} " + "1+1=2 " * (chars // 6 + 1)
    if kind == "invalid-utf8":
        return f"{HOSTILE_MARKER} 12+XX34="
    if kind == "special-tokens":
        return f"{HOSTILE_MARKER} {SPECIAL_TOKENS} 12+34="
    return f"{HOSTILE_MARKER} 12+34="


def describe(status: int, body: str) -> str:
    """``HTTP 400: {"error": ...}``, the body trimmed and made printable."""
    text = " ".join(body.split())
    text = "".join(ch if ch.isprintable() else "?" for ch in text)
    return f"HTTP {status}: {text[:ANSWER_CHARS]}" if text else f"HTTP {status}"


async def send_hostile(
    http: HttpClient, kind: str, path: str, body: Body, *, n_ctx: int | None = None
) -> str:
    """Send hostile request ``kind`` to ``path`` (a POST generation endpoint taking
    ``body(prompt, max_tokens)``; ``"stream": True`` is added for ``disconnect``) and
    describe the answer; a closed connection is an answer too."""
    prompt = hostile_prompt(kind, n_ctx)
    try:
        if kind == "invalid-utf8":
            raw = json.dumps(body(prompt, 8)).encode()
            status, text = await http.send_once(
                "POST", path, content=raw.replace(b"XX", b"\xff\xfe")
            )
            first = describe(status, text)
            surrogates = raw.replace(b"XX", b"\\ud800\\udcff")
            status, text = await http.send_once("POST", path, content=surrogates)
            return f"raw bytes: {first}; lone surrogates: {describe(status, text)}"
        if kind == "disconnect":
            return await http.drop_after_first_event(
                path, {**body(prompt, DISCONNECT_TOKENS), "stream": True}
            )
        max_tokens = 0 if kind == "max-tokens-0" else 8
        status, text = await http.send_once("POST", path, payload=body(prompt, max_tokens))
        return describe(status, text)
    except HttpError as exc:
        return f"no answer: {exc}"


async def probe_alive(http: HttpClient, path: str, check: Callable[[Any], bool]) -> bool:
    """One unretried GET of ``path``: alive when it answers 200 with JSON that ``check``
    accepts."""
    try:
        status, text = await http.send_once("GET", path, timeout_s=10.0)
        return status == 200 and check(json.loads(text))
    except (HttpError, ValueError):
        return False
