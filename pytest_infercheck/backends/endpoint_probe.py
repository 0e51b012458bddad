"""Probing which generation paths a server offers: its streamed request and its
``completions``, ``chat`` and ``messages`` endpoints (stream-parity and endpoint-parity),
and an OpenAI-compatible server's ``/tokenize`` (tokenization).

A probe is one minimal request per path through the backend's own code (a one-token greedy
generation of ``Hi``): the path is **offered** when it answers, **lacking** when the server
answers HTTP 404, 405 or 501 (no such route or method; the evidence keeps the status and
the server's words), and neither (not probed: every later request is made, and a failure
fails its item) on any other outcome: a 400 or 500, a broken body, a path the backend's
code has no client for. A path is called lacking only when at least one probed path
answered, so a server that refuses everything (a wrong model name, a broken gateway) is not
read as lacking every path: its requests are made and fail.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Mapping
from typing import TYPE_CHECKING, Any

from ..verdict.conduct import Abilities
from .base import BackendError, GenerationParams, PromptInput

if TYPE_CHECKING:
    from .base import Backend

NOT_OFFERED = frozenset({404, 405, 501})
"""The statuses that say a path is not there (rather than a request refused)."""
ENDPOINTS = ("completions", "chat", "messages")
STREAMING = "streaming"
TOKENIZE = "tokenize-endpoint"
PROBE_TEXT = "Hi"
PROBE_PARAMS = GenerationParams(max_tokens=1, temperature=0.0)


def endpoint_ability(endpoint: str) -> str:
    """The ability of an endpoint: ``chat`` -> ``chat-endpoint``."""
    return f"{endpoint}-endpoint"


def lacking_evidence(what: str, exc: BaseException) -> str | None:
    """``what: HTTP 404: <body>`` when ``exc`` says the path is not there, else None."""
    status = getattr(exc, "status", None)
    if not isinstance(exc, BackendError) or status not in NOT_OFFERED:
        return None
    body = str(getattr(exc, "body", "") or "").strip()[:200]
    return f"{what}: HTTP {status}" + (f": {body}" if body else "")


def classify(results: Mapping[str, tuple[str, Any]]) -> Abilities:
    """Abilities from each probed ability's ``(what was asked, its result or exception)``
    (see the module docstring)."""
    offered = frozenset(a for a, (_, r) in results.items() if not isinstance(r, BaseException))
    lacking: dict[str, str] = {}
    if offered:
        for ability, (what, result) in results.items():
            if isinstance(result, BaseException) and (evidence := lacking_evidence(what, result)):
                lacking[ability] = evidence
    return Abilities(offered, lacking)


def union(*parts: Abilities) -> Abilities:
    """Abilities probed in several parts, as one."""
    offered: frozenset[str] = frozenset().union(*(p.offered for p in parts))
    lacking = {k: v for p in parts for k, v in p.lacking.items()}
    return Abilities(offered, lacking)


async def _settled(probes: Mapping[str, tuple[str, Awaitable[Any]]]) -> dict[str, tuple[str, Any]]:
    names = list(probes)
    results = await asyncio.gather(*(probes[n][1] for n in names), return_exceptions=True)
    for result in results:
        if isinstance(result, BaseException) and not isinstance(result, BackendError):
            raise result
    return {n: (probes[n][0], r) for n, r in zip(names, results, strict=True)}


async def probe_generation_paths(
    backend: Backend, endpoints: tuple[str, ...] = ENDPOINTS, stream: bool = True
) -> Abilities:
    """Which of its streamed request and ``endpoints`` ``backend``'s server offers (see the
    module docstring), probed at once."""
    raw = PromptInput(PROBE_TEXT, None, templated=False)
    messages = PromptInput(PROBE_TEXT, None, templated=True)
    probes: dict[str, tuple[str, Awaitable[Any]]] = {
        endpoint_ability(e): (f"the {e} endpoint", backend.generate_via(e, messages, PROBE_PARAMS))
        for e in endpoints
    }
    if stream:
        probes[STREAMING] = ("a streamed request", backend.generate_stream(raw, PROBE_PARAMS))
    return classify(await _settled(probes))
