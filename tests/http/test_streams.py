"""Streams against faults a real server will not produce on demand: a 503 before the stream
starts (retried), and a stream cut off mid-way (an error, never a silently short answer)."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager

import pytest

from pytest_infercheck.backends import GenerationParams
from pytest_infercheck.backends.base import PromptInput
from pytest_infercheck.backends.http import HttpError, HttpSettings
from pytest_infercheck.backends.openai_compat import LogprobNegotiation, OpenAICompatBackend

from .fake_server import Reply, Script, fake_server

FAST = {"backoff_s": 0.01, "timeout_s": 2.0}
PROMPT = PromptInput("12+34=", None, templated=False)


def sse(*texts: str) -> bytes:
    events = [f'data: {{"choices": [{{"text": "{t}", "finish_reason": null}}]}}\n\n' for t in texts]
    return ("".join(events) + "data: [DONE]\n\n").encode()


def backend(url: str) -> OpenAICompatBackend:
    """A raw-completions backend whose logprobs are already negotiated (none), so the fakes
    script the stream alone."""
    settings = HttpSettings(base_url=url, **FAST)  # type: ignore[arg-type]
    b = OpenAICompatBackend("fake", settings, model="m", chat=False)
    b.negotiated[False] = LogprobNegotiation("completions", None)
    return b


@pytest.mark.asyncio
async def test_stream_is_retried_on_503_before_it_starts() -> None:
    script = Script([Reply(status=503, body={"error": "busy"}), Reply(raw=sse("4", "6"))])
    with fake_server(script) as url:
        b = backend(url)
        generation = await b.generate_stream(PROMPT, GenerationParams(8))
        await b.aclose()
    assert generation.text == "46"
    assert len(script.requests) == 2 and script.requests[1]["json"]["stream"] is True


@contextmanager
def cut_stream() -> Iterator[str]:
    """A server that announces a chunked SSE stream, sends one event and closes."""
    listener = socket.create_server(("127.0.0.1", 0))

    def serve() -> None:
        connection, _ = listener.accept()
        with connection:
            connection.recv(65536)
            event = sse("4")[: sse("4").index(b"data: [DONE]")]
            connection.sendall(
                b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n"
                b"transfer-encoding: chunked\r\n\r\n"
                + f"{len(event):x}\r\n".encode()
                + event
                + b"\r\n"
            )

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{listener.getsockname()[1]}"
    finally:
        listener.close()
        thread.join(timeout=5)


@pytest.mark.asyncio
async def test_a_stream_cut_mid_way_is_an_error() -> None:
    with cut_stream() as url:
        b = backend(url)
        with pytest.raises(HttpError, match="the stream broke"):
            await b.generate_stream(PROMPT, GenerationParams(8))
        await b.aclose()


@pytest.mark.asyncio
async def test_a_stream_asks_for_its_usage_and_reads_the_final_usage_chunk() -> None:
    """``stream_options.include_usage``: the final chunk (no choices) carries the counts, so
    request-conformance judges a streamed answer's usage as a whole one's."""
    usage = b'data: {"choices": [], "usage": {"prompt_tokens": 7, "completion_tokens": 2}}\n\n'
    body = sse("4", "6").replace(b"data: [DONE]", usage + b"data: [DONE]")
    script = Script([Reply(raw=body)])
    with fake_server(script) as url:
        b = backend(url)
        generation = await b.generate_stream(PROMPT, GenerationParams(8))
        await b.aclose()
    assert script.requests[0]["json"]["stream_options"] == {"include_usage": True}
    assert (generation.text, generation.prompt_tokens, generation.completion_tokens) == ("46", 7, 2)
