"""The HTTP layer shared by every server backend: one httpx client per event loop, bounded
concurrency, timeouts, and retries with exponential backoff and jitter.

Retried: connection errors, read errors and timeouts, HTTP 429 and 503 (``Retry-After`` is
honoured), except on a managed server that has died (asked before each retry, see
:func:`liveness_check`). Never retried: other 4xx and 5xx, which are answers, not
accidents. A stream is retried only until its first byte; afterwards a broken stream is an
error. API keys come from an environment variable and are only ever put in a request
header, never in a message.

Streams: :meth:`HttpClient.stream` yields the decoded JSON events of a server-sent-events
response (``data:`` lines, ending at ``[DONE]``) or of an NDJSON one (Ollama).
:meth:`HttpClient.send_once` and :meth:`HttpClient.drop_after_first_event` send one
unretried request and report what happened, for hostile requests and liveness probes.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import random
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextvars import ContextVar
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

import httpcore  # noqa: F401  (loaded with httpx: see below)
import httpx

from .base import BackendError

# httpx imports httpcore lazily, at its first transport, and keeps a process-wide map of
# httpcore's exception classes to its own (``httpx._transports.default.HTTPCORE_EXC_MAP``),
# filled at the first request. A test run that unloads the modules a test imported (pytest's
# ``pytester`` does, at teardown) would then unload httpcore alone, when its first request
# was made inside such a test: the httpcore imported again afterwards raises classes that
# map no longer knows, and a timeout or a refused connection escapes as a raw
# ``httpcore.ReadTimeout`` instead of the ``HttpError`` that names it. Importing httpcore
# with httpx keeps the two together, loaded and unloaded at once.

if TYPE_CHECKING:
    from .spec import ServedSpec

RETRY_STATUS = frozenset({429, 503})
T = TypeVar("T")
DONE = object()
"""What :func:`parse_event_line` returns for the ``[DONE]`` line that ends an SSE stream."""

_UNDER_LOAD: ContextVar[bool] = ContextVar("infercheck_under_load", default=False)
_LIVENESS: ContextVar[Callable[[], None] | None] = ContextVar("infercheck_liveness", default=None)


@dataclass(frozen=True)
class Exchange:
    """One request and its answer, as a recorder sees it (:func:`record_exchanges`): no
    headers (the API key travels only there), ``api_key_env`` names where the key comes from."""

    backend: str
    method: str
    url: str
    request: Any
    status: int | None
    response: Any
    """The decoded JSON body, a stream's decoded events, or the text of an error's body."""
    api_key_env: str | None


_RECORDER: ContextVar[Callable[[Exchange], None] | None] = ContextVar(
    "infercheck_recorder", default=None
)


def record_exchanges(note: Callable[[Exchange], None]) -> Callable[[], None]:
    """From now on, in this context and the tasks created in it, every request of every
    :class:`HttpClient` that gets an answer (or an error status) is handed to ``note``
    (opt-in: ``--infercheck-repro``). Returns the function that stops recording."""
    token = _RECORDER.set(note)
    return lambda: _RECORDER.reset(token)


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


def is_under_load() -> bool:
    """Whether the caller runs inside :func:`under_load` (a load test's requests)."""
    return _UNDER_LOAD.get()


@contextlib.contextmanager
def liveness_check(check: Callable[[], None]) -> Iterator[None]:
    """Requests started inside this context call ``check()`` after a connection error or
    timeout, before any retry: it raises (a :class:`BackendError` naming the dead server,
    its exit code and log) when the server is gone, so a dead server is not retried."""
    token = _LIVENESS.set(check)
    try:
        yield
    finally:
        _LIVENESS.reset(token)


def error_message(body: str) -> str:
    """A server's error message from its error body (OpenAI ``{"error": {"message"}}``,
    ``{"error": "..."}``, ``{"detail": ...}``), else the body; at most 200 characters."""
    try:
        doc = json.loads(body)
    except ValueError:
        doc = None
    if isinstance(doc, dict):
        error = doc.get("error", doc.get("detail", doc.get("message")))
        if isinstance(error, dict):
            error = error.get("message", error)
        if error is not None:
            body = str(error)
    return body.strip()[:200]


@dataclass(frozen=True)
class HttpSettings:
    """How to talk to one server."""

    base_url: str
    timeout_s: float = 120.0
    max_concurrency: int = 4
    retries: int = 4
    backoff_s: float = 0.5
    api_key_env: str | None = None

    @classmethod
    def of(cls, spec: ServedSpec, url: str | None) -> HttpSettings:
        """The settings of a server backend's entry: at ``url`` (where a managed server was
        started), else at the entry's ``url``."""
        base_url = url or spec.url
        assert base_url is not None
        return cls(
            base_url=base_url.rstrip("/"),
            timeout_s=spec.timeout,
            max_concurrency=spec.max_concurrency,
            retries=spec.retries,
            api_key_env=spec.api_key_env,
        )


class _ErrorStatus(Exception):
    """An answer with an HTTP error status, inside :meth:`HttpClient._retrying`."""

    def __init__(self, response: httpx.Response, body: str) -> None:
        super().__init__(response.status_code)
        self.response = response
        self.body = body


class HttpError(BackendError):
    """A request failed for good; ``status`` is the HTTP status when there was one."""

    def __init__(self, message: str, status: int | None = None, body: str = "") -> None:
        super().__init__(message)
        self.status = status
        self.body = body


class Unreachable(HttpError):
    """A server that could not be reached: the connection was refused or failed, or the
    server did not answer in time. The message names the URL asked and what to look at."""


def unreachable(name: str, url: str, label: str, tries: int, exc: Exception, timeout: float) -> str:
    """``backend 'llama': cannot connect to http://127.0.0.1:9/health (GET /health, 1
    attempt: ConnectError: ...): is the server running and listening at
    http://127.0.0.1:9?``; a timeout: no answer within the ``timeout``."""
    attempts = f"{tries} attempt" + ("" if tries == 1 else "s")
    base = url.split("/", 3)
    root = "/".join(base[:3]) if len(base) >= 3 else url
    cause = f"{type(exc).__name__}: {exc}".rstrip(": ")
    if isinstance(exc, httpx.TimeoutException) and not isinstance(exc, httpx.ConnectTimeout):
        return (
            f"backend {name!r}: no answer from {url} within {timeout:g}s ({label}, {attempts}: "
            f"{cause}): is the server up and not stuck, or does it need a longer 'timeout'?"
        )
    return (
        f"backend {name!r}: cannot connect to {url} ({label}, {attempts}: {cause}): is the "
        f"server running and listening at {root}?"
    )


class MalformedEvent(HttpError):
    """A line of a stream that should carry JSON and does not."""


def _retry_after(response: httpx.Response, fallback: float) -> float:
    value = response.headers.get("retry-after")
    try:
        return min(max(float(value), 0.0), 60.0) if value is not None else fallback
    except ValueError:
        return fallback


def parse_event_line(line: str, *, sse: bool = True) -> Any:
    """The JSON payload of one line of a stream, ``None`` for a line that carries none (blank
    lines, ``event:``/``id:``/``:`` comment lines of SSE), :data:`DONE` for ``data: [DONE]``.

    SSE: only ``data:`` lines carry payloads (the ``event:`` name is repeated in the JSON by
    every server this plugin speaks to). NDJSON: every non-blank line is one JSON document.
    """
    line = line.strip()
    if not line:
        return None
    if sse:
        if not line.startswith("data:"):
            return None
        line = line[len("data:") :].strip()
        if line == "[DONE]":
            return DONE
    try:
        return json.loads(line)
    except ValueError as exc:
        raise MalformedEvent(f"malformed stream event: {line[:200]!r}") from exc


class HttpClient:
    """Async JSON client for one server; safe to use from several event loops in turn."""

    def __init__(self, name: str, settings: HttpSettings) -> None:
        self.name = name
        self.settings = settings
        self._clients: dict[asyncio.AbstractEventLoop, tuple[httpx.AsyncClient, Any]] = {}
        self.post_fields: dict[str, Any] = {}
        """Fields added to every JSON object POSTed to one of :attr:`post_paths` that does
        not set them itself (llama-server's per-request ``lora`` scales)."""
        self.post_paths: frozenset[str] = frozenset()

    def _with_fields(self, path: str, payload: Any) -> Any:
        """``payload`` with :attr:`post_fields` (those it does not set) when POSTed to
        ``path``: every generation request of the backend carries them, probes included."""
        if not self.post_fields or path not in self.post_paths or not isinstance(payload, dict):
            return payload
        return {**self.post_fields, **payload}

    def _headers(self) -> dict[str, str]:
        env = self.settings.api_key_env
        if env is None:
            return {}
        key = os.environ.get(env)
        if not key:
            raise BackendError(f"backend {self.name!r}: environment variable {env} is not set")
        return {"Authorization": f"Bearer {key}"}

    def _note(self, method: str, path: str, payload: Any, status: int | None, body: Any) -> None:
        note = _RECORDER.get()
        if note is not None:
            url = self.settings.base_url + path
            env = self.settings.api_key_env
            note(Exchange(self.name, method, url, payload, status, body, env))

    def _client(self) -> tuple[httpx.AsyncClient, asyncio.Semaphore]:
        loop = asyncio.get_running_loop()
        if loop not in self._clients:
            client = httpx.AsyncClient(
                base_url=self.settings.base_url,
                timeout=self.settings.timeout_s,
                headers=self._headers(),
                # The client follows no redirects, so a plain-HTTP base URL never does TLS:
                # loading the CA bundle (about 20 ms per client) is skipped for it.
                verify=not self.settings.base_url.lower().startswith("http:"),
            )
            self._clients[loop] = (client, asyncio.Semaphore(self.settings.max_concurrency))
        return self._clients[loop]

    def _slot(self, gate: asyncio.Semaphore) -> contextlib.AbstractAsyncContextManager[Any]:
        """A place among the ``max_concurrency`` requests in flight (none under load)."""
        return contextlib.nullcontext() if _UNDER_LOAD.get() else gate

    async def _retrying(self, label: str, attempt: Callable[[], Awaitable[T]], path: str = "") -> T:
        """``attempt()`` until it succeeds: connection errors, read errors and timeouts, and
        HTTP 429/503 (raised by ``attempt`` as :class:`_ErrorStatus`) are retried with
        exponential backoff and jitter (``Retry-After`` honoured), at most ``retries`` times
        (never under load); any other error status is raised at once as :class:`HttpError`."""
        retries = 0 if _UNDER_LOAD.get() else self.settings.retries
        tries = 0
        while True:
            delay = self.settings.backoff_s * (2**tries) * (0.5 + random.random())
            try:
                return await attempt()
            except (httpx.TransportError, httpx.TimeoutException) as exc:
                check = _LIVENESS.get()
                if check is not None:
                    check()
                if tries >= retries:
                    url = self.settings.base_url + path
                    raise Unreachable(
                        unreachable(self.name, url, label, tries + 1, exc, self.settings.timeout_s)
                    ) from exc
            except _ErrorStatus as error:
                status = error.response.status_code
                if status not in RETRY_STATUS or tries >= retries:
                    raise HttpError(
                        f"backend {self.name!r}: {label} -> HTTP {status}: {error.body[:300]}",
                        status,
                        error.body,
                    ) from None
                delay = _retry_after(error.response, delay)
            tries += 1
            await asyncio.sleep(delay)

    async def request(self, method: str, path: str, payload: Any = None) -> Any:
        """Send one JSON request (retrying accidents) and return the decoded JSON body."""
        client, gate = self._client()
        if method == "POST":
            payload = self._with_fields(path, payload)

        async def attempt() -> httpx.Response:
            async with self._slot(gate):
                response = await client.request(method, path, json=payload)
            if response.status_code >= 400:
                raise _ErrorStatus(response, response.text)
            return response

        try:
            response = await self._retrying(f"{method} {path}", attempt, path)
        except HttpError as exc:
            self._note(method, path, payload, exc.status, exc.body)
            raise
        if not response.content.strip():
            raise HttpError(
                f"backend {self.name!r}: {method} {path} returned HTTP "
                f"{response.status_code} with an empty body",
                response.status_code,
                response.text,
            )
        try:
            answer = response.json()
        except ValueError as exc:
            raise HttpError(
                f"backend {self.name!r}: {method} {path} returned malformed JSON: "
                f"{response.text[:200]!r}",
                response.status_code,
                response.text,
            ) from exc
        self._note(method, path, payload, response.status_code, answer)
        return answer

    async def stream(
        self, path: str, payload: Any, *, sse: bool = True, mark_done: bool = False
    ) -> AsyncIterator[Any]:
        """POST ``payload`` and yield the decoded events of the streamed answer, in order;
        with ``mark_done``, an SSE stream's ``data: [DONE]`` is yielded too, as :data:`DONE`
        (a reader that must tell a complete stream from one that merely stopped).

        Connection errors, 429 and 503 are retried as in :meth:`request` until the first line
        of the answer has arrived; an error status is raised as :class:`HttpError`, as is a
        stream that breaks after it started, and a line that is not JSON
        (:class:`MalformedEvent`).
        """
        client, gate = self._client()
        payload = self._with_fields(path, payload)

        async def attempt() -> tuple[contextlib.AsyncExitStack, str | None, AsyncIterator[str]]:
            held = contextlib.AsyncExitStack()  # the concurrency slot and the open response
            try:
                await held.enter_async_context(self._slot(gate))
                response = await held.enter_async_context(client.stream("POST", path, json=payload))
                if response.status_code >= 400:
                    body = (await response.aread()).decode("utf-8", "replace")
                    raise _ErrorStatus(response, body)
                lines = response.aiter_lines()
                first = await anext(lines, None)
            except BaseException:
                await held.aclose()
                raise
            return held, first, lines

        try:
            held, first, lines = await self._retrying(f"POST {path} (stream)", attempt, path)
        except HttpError as exc:
            self._note("POST", path, payload, exc.status, exc.body)
            raise
        events: list[Any] = []
        async with held:
            if first is None:
                return
            line = first
            try:
                while True:
                    event = parse_event_line(line, sse=sse)
                    if event is DONE:
                        if mark_done:
                            yield DONE
                        break
                    if event is not None:
                        events.append(event)
                        yield event
                    line = await anext(lines)
            except StopAsyncIteration:
                pass
            except (httpx.TransportError, httpx.TimeoutException) as exc:
                raise HttpError(
                    f"backend {self.name!r}: POST {path}: the stream broke: "
                    f"{type(exc).__name__}: {exc}"
                ) from exc
        self._note("POST", path, payload, 200, events)

    async def send_once(
        self,
        method: str,
        path: str,
        *,
        payload: Any = None,
        content: bytes | None = None,
        timeout_s: float | None = None,
    ) -> tuple[int, str]:
        """One attempt, no retries, no concurrency gate: ``(status, body)`` whatever the
        status. ``content`` is sent as raw JSON bytes (which may be malformed on purpose).
        A connection failure raises :class:`HttpError`."""
        client, _ = self._client()
        if method == "POST":
            payload = self._with_fields(path, payload)
        headers = {"Content-Type": "application/json"} if content is not None else None
        try:
            response = await client.request(
                method,
                path,
                json=payload if content is None else None,
                content=content,
                headers=headers,
                timeout=timeout_s if timeout_s is not None else self.settings.timeout_s,
            )
        except (httpx.TransportError, httpx.TimeoutException) as exc:
            raise HttpError(
                f"backend {self.name!r}: {method} {path}: {type(exc).__name__}: {exc}"
            ) from exc
        return response.status_code, response.text

    async def drop_after_first_event(self, path: str, payload: Any) -> str:
        """Start a streamed POST, read until its first non-blank line, then close the
        connection mid-stream, as a client that goes away does. Returns what was seen."""
        client, _ = self._client()
        payload = self._with_fields(path, payload)
        try:
            async with client.stream("POST", path, json=payload) as response:
                if response.status_code >= 400:
                    body = (await response.aread()).decode("utf-8", "replace")
                    return f"HTTP {response.status_code} before streaming: {body[:120]}"
                async for line in response.aiter_lines():
                    if line.strip():
                        return f"HTTP {response.status_code}, closed after the first event"
                return f"HTTP {response.status_code}, the stream ended with no event"
        except (httpx.TransportError, httpx.TimeoutException) as exc:
            raise HttpError(
                f"backend {self.name!r}: POST {path}: {type(exc).__name__}: {exc}"
            ) from exc

    async def aclose(self) -> None:
        """Close the client of the running loop (others die with their loops)."""
        loop = asyncio.get_running_loop()
        entry = self._clients.pop(loop, None)
        if entry is not None:
            await entry[0].aclose()
