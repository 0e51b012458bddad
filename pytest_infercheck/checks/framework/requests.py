"""What a gather facet needs around its requests: run many at once on one target, each one's
result or its ``BackendError``, and a failed request as a
:class:`~pytest_infercheck.verdict.conduct.RequestFailure` with the server's own words."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Coroutine, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

from ...backends.base import BackendError
from ...verdict.conduct import RequestFailure

if TYPE_CHECKING:
    from ...generation_cache import GenerationCache, ResolvedTarget

T = TypeVar("T")


def server_message(exc: BackendError) -> tuple[str, int | None]:
    """What the server said of a failed request, and its HTTP status (None: no answer): the
    ``error.message`` (or ``detail``, ``error``, ``message``) of a JSON error body, else the
    body, else the exception's text."""
    status = getattr(exc, "status", None)
    body = str(getattr(exc, "body", "") or "").strip()
    if status is None or not body:
        return str(exc), status
    try:
        data = json.loads(body)
    except ValueError:
        return body[:500], status
    if isinstance(data, dict):
        error = data.get("error")
        if isinstance(error, dict) and error.get("message"):
            return str(error["message"]), status
        for key in ("detail", "error", "message"):
            if data.get(key):
                return str(data[key]), status
    return body[:500], status


def request_failure(side: str, what: str, exc: BackendError) -> RequestFailure:
    """``exc`` (a request of ``side`` for ``what``) as the item's failed request."""
    message, status = server_message(exc)
    return RequestFailure(side, what, message, status)


def settle(
    cache: GenerationCache, target: ResolvedTarget, coros: Sequence[Coroutine[Any, Any, T]]
) -> list[T | BackendError]:
    """Run ``coros`` (requests of ``target``) at once; each one's result, or its
    ``BackendError``; any other exception is raised (a bug). A managed server that died
    meanwhile is raised as its death (with its last log lines)."""
    if not coros:
        return []

    async def all_of() -> list[Any]:
        return await asyncio.gather(*coros, return_exceptions=True)

    results = cache.call(target, all_of())
    for result in results:
        if isinstance(result, BaseException) and not isinstance(result, BackendError):
            raise result
    if any(isinstance(r, BackendError) for r in results):
        cache.check_alive(target, after_failures=True)
    return results
