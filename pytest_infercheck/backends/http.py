"""The HTTP layer shared by every server backend: one httpx client per event loop, bounded
concurrency, timeouts, and retries with exponential backoff and jitter.

Retried: connection errors, read errors and timeouts, HTTP 429 and 503 (``Retry-After`` is
honoured). Never retried: other 4xx and 5xx, which are answers, not accidents. API keys come
from an environment variable and are only ever put in a request header, never in a message.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import random
from collections.abc import Iterator
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any

import httpx

from .base import BackendError

RETRY_STATUS = frozenset({429, 503})

_UNDER_LOAD: ContextVar[bool] = ContextVar("infercheck_under_load", default=False)


@contextlib.contextmanager
def under_load() -> Iterator[None]:
    """Requests started inside this context (and tasks created in it) go out exactly as the
    caller schedules them: no ``max_concurrency`` gate and no retries, so a load test drives
    the concurrency it asks for and sees every 429/503 as the error it is."""
    token = _UNDER_LOAD.set(True)
    try:
        yield
    finally:
        _UNDER_LOAD.reset(token)


@dataclass(frozen=True)
class HttpSettings:
    """How to talk to one server."""

    base_url: str
    timeout_s: float = 120.0
    max_concurrency: int = 4
    retries: int = 4
    backoff_s: float = 0.5
    api_key_env: str | None = None


class HttpError(BackendError):
    """A request failed for good; ``status`` is the HTTP status when there was one."""

    def __init__(self, message: str, status: int | None = None, body: str = "") -> None:
        super().__init__(message)
        self.status = status
        self.body = body


def _retry_after(response: httpx.Response, fallback: float) -> float:
    value = response.headers.get("retry-after")
    try:
        return min(max(float(value), 0.0), 60.0) if value is not None else fallback
    except ValueError:
        return fallback


class HttpClient:
    """Async JSON client for one server; safe to use from several event loops in turn."""

    def __init__(self, name: str, settings: HttpSettings) -> None:
        self.name = name
        self.settings = settings
        self._clients: dict[asyncio.AbstractEventLoop, tuple[httpx.AsyncClient, Any]] = {}

    def _headers(self) -> dict[str, str]:
        env = self.settings.api_key_env
        if env is None:
            return {}
        key = os.environ.get(env)
        if not key:
            raise BackendError(f"backend {self.name!r}: environment variable {env} is not set")
        return {"Authorization": f"Bearer {key}"}

    def _client(self) -> tuple[httpx.AsyncClient, asyncio.Semaphore]:
        loop = asyncio.get_running_loop()
        if loop not in self._clients:
            client = httpx.AsyncClient(
                base_url=self.settings.base_url,
                timeout=self.settings.timeout_s,
                headers=self._headers(),
            )
            self._clients[loop] = (client, asyncio.Semaphore(self.settings.max_concurrency))
        return self._clients[loop]

    async def request(self, method: str, path: str, payload: Any = None) -> Any:
        """Send one JSON request (retrying accidents) and return the decoded JSON body."""
        client, gate = self._client()
        load = _UNDER_LOAD.get()
        retries = 0 if load else self.settings.retries
        attempt = 0
        while True:
            delay = self.settings.backoff_s * (2**attempt) * (0.5 + random.random())
            try:
                async with contextlib.nullcontext() if load else gate:
                    response = await client.request(method, path, json=payload)
            except (httpx.TransportError, httpx.TimeoutException) as exc:
                if attempt >= retries:
                    raise HttpError(
                        f"backend {self.name!r}: {method} {path} failed after "
                        f"{attempt + 1} attempts: {type(exc).__name__}: {exc}"
                    ) from exc
            else:
                if response.status_code < 400:
                    try:
                        return response.json()
                    except ValueError as exc:
                        raise HttpError(
                            f"backend {self.name!r}: {method} {path} returned malformed JSON: "
                            f"{response.text[:200]!r}",
                            response.status_code,
                            response.text,
                        ) from exc
                if response.status_code not in RETRY_STATUS or attempt >= retries:
                    raise HttpError(
                        f"backend {self.name!r}: {method} {path} -> HTTP "
                        f"{response.status_code}: {response.text[:300]}",
                        response.status_code,
                        response.text,
                    )
                delay = _retry_after(response, delay)
            attempt += 1
            await asyncio.sleep(delay)

    async def aclose(self) -> None:
        """Close the client of the running loop (others die with their loops)."""
        loop = asyncio.get_running_loop()
        entry = self._clients.pop(loop, None)
        if entry is not None:
            await entry[0].aclose()
