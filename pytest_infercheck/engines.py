"""The engines of one process: each target's backend created once (a model loaded, or a
server started through :class:`~.servers.ServerPool`), wrapped once by the
``pytest_infercheck_wrap_backend`` hook, its abilities probed once per topic, and every
backend coroutine run on one private event loop (items are synchronous), watched for the
death of its managed server. :class:`~.generation_cache.GenerationCache` adds the caches
of their work.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Coroutine, Sequence
from contextlib import AbstractContextManager, nullcontext
from typing import TYPE_CHECKING, Any, TypeVar

from .backends import Backend, BackendError, create_backend
from .cache_keys import ResolvedTarget, TargetKey
from .golden.file import load_golden
from .golden.names import golden_path
from .golden.replay import GoldenBackend
from .servers import ServerPool, server_spec
from .verdict.conduct import Abilities

if TYPE_CHECKING:
    from pathlib import Path

    from .matrix import LoadedMatrix, Target

T = TypeVar("T")

DYING_GRACE_S = 10.0
"""How long a check whose requests to a managed server failed waits for that server to exit
(:meth:`Engines.check_alive`) before judging the failures as its answers: vLLM with
``VLLM_BATCH_INVARIANT=1`` answers HTTP 500 and exits seconds later."""
DEATH_POLL_S = 0.25


def _where_attached(exc: BackendError, matrix: LoadedMatrix, name: str) -> BackendError | None:
    """A server attached at its ``url`` that cannot be reached: the error again, saying
    where that ``url`` is written (``infercheck.yaml:6``), else None."""
    import os

    from .backends.http import Unreachable

    if not isinstance(exc, Unreachable):
        return None
    loc = ("backends", name, "url")
    path = os.path.relpath(matrix.path) if matrix.path.is_absolute() else str(matrix.path)
    line = matrix.source.line_of(loc)
    where = f"{path}:{line}" if line else path
    return Unreachable(f"{exc} (its url is written at {where}: backends.{name}.url)")


class Engines:
    """The backends of one process and the loop they run on; see the module docstring."""

    def __init__(self, servers: ServerPool | None = None, hook: Any = None) -> None:
        self.servers = servers
        self.hook = hook
        """The config's hook relay (``config.hook``), to call ``pytest_infercheck_wrap_backend``
        on each backend created; None: backends are used as created."""
        self._backends: dict[TargetKey, Backend] = {}
        self._wrapped: dict[TargetKey, TargetKey] = {}
        """A wrapper's key -> the key of the backend it wraps (its server, if any)."""
        self._abilities: dict[tuple[Any, ...], Abilities] = {}
        self._loop: asyncio.AbstractEventLoop | None = None

    # -- targets -------------------------------------------------------------------------
    def resolve(self, matrix: LoadedMatrix, target: Target) -> ResolvedTarget:
        """The live backend for ``target`` of ``matrix`` (created on first use); for a golden
        baseline, the replay of its file."""
        if target.golden is not None:
            return self._resolve_golden(golden_path(matrix, target.golden), target.label)
        source, revision = matrix.model_source(
            target.model, matrix.matrix.backends[target.backend].kind
        )
        spec = matrix.matrix.backends[target.backend]
        adapter = matrix.model_adapter(target.model, spec.kind)
        key: TargetKey = (source, revision, spec.model_dump_json())
        if adapter is not None:
            key = (*key, "adapter", adapter)
        if key not in self._backends:
            url = None
            if spec.serve is not None:
                if self.servers is None:
                    raise BackendError(f"backend {target.backend!r}: no server pool to start it")
                url = self.servers.url_for(key, target.backend, server_spec(spec, source))
            with_adapter = {"adapter": adapter} if adapter is not None else {}
            backend = create_backend(target.backend, spec, source, revision, url, **with_adapter)
            try:
                self.run(backend.ensure_ready())
            except BackendError as exc:
                hinted = _where_attached(exc, matrix, target.backend) if url is None else None
                if hinted is None:
                    raise
                raise hinted from exc
            self._backends[key] = backend
        if self.hook is None:
            return ResolvedTarget(target.label, key, self._backends[key])
        wrapped_key = (*key, "wrapped", target.backend)
        if wrapped_key not in self._wrapped:
            wrapper = self.hook.pytest_infercheck_wrap_backend(
                backend=self._backends[key], name=target.backend, spec=spec
            )
            if wrapper is not None and wrapper is not self._backends[key]:
                self._backends[wrapped_key] = wrapper
            self._wrapped[wrapped_key] = key
        if wrapped_key in self._backends:
            return ResolvedTarget(target.label, wrapped_key, self._backends[wrapped_key])
        return ResolvedTarget(target.label, key, self._backends[key])

    def _resolve_golden(self, path: Path, label: str) -> ResolvedTarget:
        key = ("golden", str(path))
        if key not in self._backends:
            self._backends[key] = GoldenBackend(label, load_golden(path))
        return ResolvedTarget(label, key, self._backends[key])

    def abilities(self, target: ResolvedTarget, topic: str) -> Abilities:
        """What ``target``'s engine offers and lacks of ``topic``, probed once per topic
        (before the first check that asks sends its requests:
        :meth:`~.backends.base.Backend.probe_abilities`)."""
        key = (*target.key, topic)
        if key not in self._abilities:
            self._abilities[key] = self.call(target, target.backend.probe_abilities(topic))
        return self._abilities[key]

    # -- running coroutines ------------------------------------------------------------------
    def run(self, coro: Coroutine[Any, Any, T]) -> T:
        """Run a backend coroutine on the cache's own loop (items are synchronous)."""
        if self._loop is None or self._loop.is_closed():
            self._loop = asyncio.new_event_loop()
        return self._loop.run_until_complete(coro)

    def _settled(self, coros: Sequence[Coroutine[Any, Any, T]]) -> list[T | BaseException]:
        """Run ``coros`` concurrently (a backend bounds its own requests in flight); each
        one's result or exception, in order."""

        async def gather() -> list[T | BaseException]:
            return await asyncio.gather(*coros, return_exceptions=True)

        return self.run(gather())

    def call(self, target: ResolvedTarget, coro: Coroutine[Any, Any, T]) -> T:
        """Run ``coro`` for ``target``; a failure of a managed server that has died is
        reported as its death, with the server's last log lines (a dead server is not
        retried, see :meth:`~.servers.ServerPool.watching`)."""
        try:
            with self.watching(target):
                return self.run(coro)
        except BackendError:
            self.check_alive(target)
            raise

    def watching(self, target: ResolvedTarget) -> AbstractContextManager[None]:
        """A context in which ``target``'s requests are not retried once its managed server
        has died (nothing for a target without one)."""
        if self.servers is None:
            return nullcontext()
        return self.servers.watching(self._wrapped.get(target.key, target.key))

    def check_alive(self, target: ResolvedTarget, *, after_failures: bool = False) -> None:
        """Raise :class:`~.servers.ServerError` if ``target``'s managed server has died; with
        ``after_failures`` (its requests just failed), also if it dies within
        :data:`DYING_GRACE_S` (vLLM answers HTTP 500 when its engine dies and exits seconds
        later): its death, with its last log lines, says more than the errors."""
        key = self._wrapped.get(target.key, target.key)
        if self.servers is None or not self.servers.manages(key):
            return
        deadline = time.monotonic() + (DYING_GRACE_S if after_failures else 0.0)
        while True:
            self.servers.check_alive_for(key)
            if time.monotonic() >= deadline:
                return
            time.sleep(DEATH_POLL_S)
