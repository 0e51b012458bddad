"""What a gather facet needs around its requests: run many at once on one target, each one's
result or its ``BackendError`` (:mod:`.failures` says a failed one in the server's words)."""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

from ...backends.base import BackendError

if TYPE_CHECKING:
    from ...generation_cache import GenerationCache, ResolvedTarget

T = TypeVar("T")


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
