"""Runs generations and teacher-forced scoring, each computed once per session and worker.

The engine owns the backends (one instance per model, backend and options, shared by every
check and YAML file), a private event loop for the async backend API, and three caches:

- rendered prompts per (target, prompt, thinking): the chat template is applied once;
- generations per (target, prompt input, generation params, run): the baseline of a sweep is
  generated once, not once per test model; ``run`` > 0 forces an independent repeat (the
  sweep's self-check, determinism runs);
- teacher-forced log-probabilities, in a small LRU bounded by bytes, since a (T, V) float32
  matrix of a real model is large.
"""

from __future__ import annotations

import asyncio
from collections import OrderedDict
from collections.abc import Coroutine
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

from .backends import (
    Backend,
    BackendError,
    Generation,
    GenerationParams,
    PromptInput,
    create_backend,
)
from .golden import GoldenBackend, golden_path, load_golden
from .servers import ServerPool, ServerSpec

if TYPE_CHECKING:
    from pathlib import Path

    import numpy as np

    from .config import BackendSpec, LoadedMatrix, Target
    from .suites import Prompt

T = TypeVar("T")

SCORE_CACHE_BYTES = 512 * 1024 * 1024


@dataclass(frozen=True)
class ResolvedTarget:
    """A ``model@backend`` with its live backend; ``key`` identifies it across YAML files."""

    label: str
    key: tuple[Any, ...]
    backend: Backend


def server_spec(spec: BackendSpec, model: str) -> ServerSpec:
    """The managed-server description of a backend with ``serve:``."""
    assert spec.serve is not None
    return ServerSpec(
        command=spec.serve,
        model=model,
        env=tuple(sorted(spec.env.items())),
        health_path=spec.health_path,
        startup_timeout_s=spec.startup_timeout,
    )


class Engine:
    """Session-wide generation service with caching; see the module docstring."""

    def __init__(
        self, servers: ServerPool | None = None, score_cache_bytes: int = SCORE_CACHE_BYTES
    ) -> None:
        self.servers = servers
        self._backends: dict[tuple[Any, ...], Backend] = {}
        self._managed: dict[tuple[Any, ...], tuple[str, ServerSpec]] = {}
        self._renders: dict[tuple[Any, ...], PromptInput] = {}
        self._generations: dict[tuple[Any, ...], Generation] = {}
        self._scores: OrderedDict[tuple[Any, ...], np.ndarray] = OrderedDict()
        self._score_bytes = 0
        self._score_cache_limit = score_cache_bytes
        self._loop: asyncio.AbstractEventLoop | None = None
        self.memo: dict[tuple[Any, ...], Any] = {}
        """Per-check results keyed by the check, so an aggregate item reuses its items' work."""

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
        key = (source, revision, spec.model_dump_json())
        if key not in self._backends:
            url = None
            if spec.serve is not None:
                if self.servers is None:
                    raise BackendError(f"backend {target.backend!r}: no server pool to start it")
                managed = (target.backend, server_spec(spec, source))
                url = self.servers.url_for(*managed)
                self._managed[key] = managed
            backend = create_backend(target.backend, spec, source, revision, url)
            self.run(backend.ensure_ready())
            self._backends[key] = backend
        return ResolvedTarget(target.label, key, self._backends[key])

    def _resolve_golden(self, path: Path, label: str) -> ResolvedTarget:
        key = ("golden", str(path))
        if key not in self._backends:
            self._backends[key] = GoldenBackend(label, load_golden(path))
        return ResolvedTarget(label, key, self._backends[key])

    # -- running coroutines ------------------------------------------------------------------
    def run(self, coro: Coroutine[Any, Any, T]) -> T:
        """Run a backend coroutine on the engine's own loop (items are synchronous)."""
        if self._loop is None or self._loop.is_closed():
            self._loop = asyncio.new_event_loop()
        return self._loop.run_until_complete(coro)

    def call(self, target: ResolvedTarget, coro: Coroutine[Any, Any, T]) -> T:
        """Run ``coro`` for ``target``; a failure of a managed server that has died is
        reported as its death, with the server's last log lines."""
        try:
            return self.run(coro)
        except BackendError:
            managed = self._managed.get(target.key)
            if managed is not None and self.servers is not None:
                self.servers.check_alive(*managed)
            raise

    # -- cached operations ---------------------------------------------------------------------
    def render(self, target: ResolvedTarget, prompt: Prompt, thinking: bool) -> PromptInput:
        key = (target.key, prompt.text, prompt.system, thinking)
        if key not in self._renders:
            rendered = self.call(
                target, target.backend.render(prompt.text, prompt.system, thinking)
            )
            self._renders[key] = rendered
        return self._renders[key]

    def accepts_ids(self, target: ResolvedTarget, prompt: PromptInput) -> bool:
        """Whether ``target`` can take ``prompt``'s token ids as they are (cached)."""
        key = ("accepts", target.key, prompt.key())
        if key not in self.memo:
            self.memo[key] = self.call(target, target.backend.accepts_token_ids(prompt))
        return bool(self.memo[key])

    def generate(
        self,
        target: ResolvedTarget,
        prompt: PromptInput,
        params: GenerationParams,
        run: int = 0,
    ) -> Generation:
        key = (target.key, prompt.key(), params.key(), run)
        if key not in self._generations:
            generation = self.call(target, target.backend.generate(prompt, params))
            self._generations[key] = generation
        return self._generations[key]

    def prefetch(
        self,
        target: ResolvedTarget,
        jobs: list[tuple[PromptInput, GenerationParams]],
        runs: int = 1,
    ) -> dict[tuple[str, tuple[Any, ...], int], BackendError]:
        """Generate ``jobs`` (each as runs ``0 .. runs-1``) concurrently on a concurrent
        backend (bounded by its own ``max_concurrency``), filling the cache; an in-process
        backend is left to generate item by item.

        Returns the jobs that failed with a :class:`BackendError`, keyed by
        ``(prompt.key(), params.key(), run)``, for checks that count errors (determinism);
        others may ignore it: a failed job is not cached, so the item that needs it generates
        it again and fails with the error."""
        if target.backend.concurrency <= 1:
            return {}
        missing = [
            (prompt, params, run)
            for prompt, params in dict.fromkeys(jobs)
            for run in range(runs)
            if (target.key, prompt.key(), params.key(), run) not in self._generations
        ]

        async def gather() -> list[Generation | BaseException]:
            return await asyncio.gather(
                *(target.backend.generate(p, params) for p, params, _ in missing),
                return_exceptions=True,
            )

        failures: dict[tuple[str, tuple[Any, ...], int], BackendError] = {}
        for (prompt, params, run), result in zip(missing, self.run(gather()), strict=True):
            if isinstance(result, Generation):
                self._generations[(target.key, prompt.key(), params.key(), run)] = result
            elif isinstance(result, BackendError):
                failures[(prompt.key(), params.key(), run)] = result
        return failures

    def score(
        self, target: ResolvedTarget, prompt_ids: list[int], continuation_ids: list[int]
    ) -> np.ndarray:
        key = (target.key, tuple(prompt_ids), tuple(continuation_ids))
        cached = self._scores.get(key)
        if cached is not None:
            self._scores.move_to_end(key)
            return cached
        result = self.call(target, target.backend.score(prompt_ids, continuation_ids))
        self._scores[key] = result
        self._score_bytes += result.nbytes
        while self._score_bytes > self._score_cache_limit and len(self._scores) > 1:
            _, evicted = self._scores.popitem(last=False)
            self._score_bytes -= evicted.nbytes
        return result

    def close(self) -> None:
        """Close every backend and the loop."""
        if self._backends:
            for backend in self._backends.values():
                self.run(backend.aclose())
            self._backends.clear()
        if self._loop is not None and not self._loop.is_closed():
            self._loop.close()
