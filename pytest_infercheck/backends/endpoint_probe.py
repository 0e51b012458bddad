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


REFUSED = frozenset({400, 422})
"""The statuses that say a request's field was refused (rather than a path missing)."""
PARAM_PROBES: dict[str, GenerationParams] = {
    "stop": GenerationParams(1, stop=("\n",)),
    "n": GenerationParams(1, temperature=1.0, seed=0, n=2),
    "min_tokens": GenerationParams(2, min_tokens=1),
    "ignore_eos": GenerationParams(1, ignore_eos=True),
    "logprobs": GenerationParams(1, logprobs=2),
    "include_stop": GenerationParams(1, stop=("\n",), include_stop=True),
    "seed": GenerationParams(1, temperature=1.0, seed=1),
    "top_p": GenerationParams(1, temperature=1.0, seed=0, top_p=0.9),
    "top_k": GenerationParams(1, temperature=1.0, seed=0, top_k=2),
    "min_p": GenerationParams(1, temperature=1.0, seed=0, min_p=0.1),
    "presence_penalty": GenerationParams(1, presence_penalty=0.5),
    "frequency_penalty": GenerationParams(1, frequency_penalty=0.5),
    "repetition_penalty": GenerationParams(1, repetition_penalty=1.1),
    "logit_bias": GenerationParams(1, logit_bias=((0, -1.0),)),
}
"""The one-token request that asks each parameter (``n`` samples: vLLM refuses ``n > 1`` at
temperature 0)."""


def param_ability(name: str) -> str:
    """The ability of a request parameter: ``stop`` -> ``param:stop``."""
    return f"param:{name}"


async def probe_request_params(backend: Backend, names: frozenset[str]) -> Abilities:
    """Which of the request parameters ``names`` (those the backend's kind sends,
    :mod:`.params`) ``backend``'s server takes: one one-token request of ``Hi`` per
    parameter (:data:`PARAM_PROBES`) and one plain request, at once. A parameter is
    **offered** when its request answers, **lacking** when the server refuses it (HTTP 400 or
    422, the evidence keeping the server's words) while the plain request answered, and not
    probed otherwise (its requests are made and judged). Offered says only that the field is
    accepted: whether it is applied is what the checks measure."""
    prompt = await backend.render(PROBE_TEXT, None, False)
    probes: dict[str, tuple[str, Awaitable[Any]]] = {
        param_ability(n): (f"a request with {n}", backend.generate(prompt, PARAM_PROBES[n]))
        for n in sorted(names)
        if n in PARAM_PROBES
    }
    probes["plain"] = ("a plain request", backend.generate(prompt, PROBE_PARAMS))
    results = await _settled(probes)
    plain = results.pop("plain")[1]
    offered = frozenset(a for a, (_, r) in results.items() if not isinstance(r, BaseException))
    lacking: dict[str, str] = {}
    if not isinstance(plain, BaseException):
        for ability, (what, result) in results.items():
            status = getattr(result, "status", None)
            if isinstance(result, BackendError) and status in REFUSED:
                body = str(getattr(result, "body", "") or "").strip()[:300]
                lacking[ability] = f"{what}: HTTP {status}" + (f": {body}" if body else "")
    return Abilities(offered, lacking)
