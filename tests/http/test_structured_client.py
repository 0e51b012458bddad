"""The structured client against scripted faults a real server will not produce on demand (a
500, a hang, a body that is not JSON, a stream cut short) and Ollama's documented
``/api/chat`` shapes (no Ollama here); the backends' ability probes over HTTP (one minimal
request per path). Real servers: tests/integration/test_structured_servers.py."""

from __future__ import annotations

import json
from typing import Any

import pytest

from pytest_infercheck.backends.http import HttpClient, HttpError, HttpSettings
from pytest_infercheck.backends.ollama import OllamaBackend
from pytest_infercheck.backends.openai_compat import OpenAICompatBackend
from pytest_infercheck.structured.client import ChatServerClient
from pytest_infercheck.structured.records import (
    ChatTurn,
    Inexpressible,
    MalformedResponse,
    PlacedCall,
    RequestFailed,
    StructuredChat,
    StructuredRequest,
    Usage,
)
from pytest_infercheck.tools import Tool, ToolCall

from .fake_server import Reply, Script, fake_server

FAST = {"backoff_s": 0.01, "timeout_s": 2.0, "retries": 1}
WEATHER = Tool(
    "get_weather",
    {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    "Get the current weather in a city.",
)
REQUEST = StructuredRequest(
    messages=(ChatTurn("user", "weather in Oslo"),), max_tokens=16, tools=(WEATHER,)
)
ANSWER = {
    "choices": [
        {
            "index": 0,
            "finish_reason": "tool_calls",
            "message": {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": "c1",
                        "type": "function",
                        "function": {"name": "get_weather", "arguments": '{"city": "Oslo"}'},
                    }
                ],
            },
        }
    ],
    "usage": {"prompt_tokens": 150, "completion_tokens": 20},
}
OSLO = PlacedCall(ToolCall("get_weather", {"city": "Oslo"}), "tool_calls", "c1")


def client(url: str, **settings: Any) -> ChatServerClient:
    http = HttpClient("fake", HttpSettings(base_url=url, **{**FAST, **settings}))  # type: ignore[arg-type]
    return ChatServerClient(http, "m", ("chat", "chat-stream", "chat-n2", "messages"))


def sse(*events: Any, done: bool = True) -> bytes:
    lines = [f"data: {json.dumps(e)}\n\n" for e in events]
    return ("".join(lines) + ("data: [DONE]\n\n" if done else "")).encode()


@pytest.mark.asyncio
async def test_chat_sends_the_request_and_reads_the_call() -> None:
    script = Script([Reply(body=ANSWER)])
    with fake_server(script) as url:
        response = await client(url).structured(REQUEST, "chat")
    assert response.choices[0].calls == (OSLO,) and response.usage == Usage(150, 20)
    (sent,) = script.requests
    assert sent["path"] == "/v1/chat/completions"
    assert sent["json"]["tools"] == [WEATHER.openai()] and sent["json"]["model"] == "m"
    assert sent["json"]["stream"] is False and "n" not in sent["json"]


@pytest.mark.asyncio
async def test_the_stream_is_assembled_and_asks_for_usage() -> None:
    chunks = [
        {
            "choices": [
                {
                    "index": 0,
                    "delta": {
                        "tool_calls": [
                            {
                                "index": 0,
                                "id": "c1",
                                "function": {"name": "get_weather", "arguments": '{"city": '},
                            }
                        ]
                    },
                }
            ]
        },
        {
            "choices": [
                {
                    "index": 0,
                    "delta": {"tool_calls": [{"index": 0, "function": {"arguments": '"Oslo"}'}}]},
                }
            ]
        },
        {"choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}]},
        {"choices": [], "usage": {"prompt_tokens": 150, "completion_tokens": 20}},
    ]
    script = Script([Reply(raw=sse(*chunks))])
    with fake_server(script) as url:
        response = await client(url).structured(REQUEST, "chat-stream")
    assert response.choices[0].calls == (OSLO,) and response.usage == Usage(150, 20)
    sent = script.requests[0]["json"]
    assert sent["stream"] is True and sent["stream_options"] == {"include_usage": True}


@pytest.mark.asyncio
async def test_a_refusal_is_a_failed_request_with_the_servers_message() -> None:
    """A 400 is the server's refusal, kept with its status and message: whether the server
    offers ``n: 2`` at all is its probe's to say, not this request's."""
    refusal = {
        "error": {"code": 400, "message": "n_cmpl must be <= 1", "type": "invalid_request_error"}
    }
    script = Script([Reply(status=400, body=refusal)])
    refused = pytest.raises(RequestFailed, match="chat-n2: HTTP 400: n_cmpl must be <= 1")
    with fake_server(script) as url, refused as caught:
        await client(url).structured(REQUEST, "chat-n2")
    assert (caught.value.status, caught.value.message) == (400, "n_cmpl must be <= 1")
    assert script.requests[0]["json"]["n"] == 2
    assert len(script.requests) == 1  # a refusal is not retried


@pytest.mark.asyncio
async def test_a_server_without_messages_answers_404() -> None:
    script = Script([Reply(status=404, raw=b"Not Found")])
    refused = pytest.raises(RequestFailed, match="messages: HTTP 404: Not Found")
    with fake_server(script) as url, refused:
        await client(url).structured(REQUEST, "messages")
    assert script.requests[0]["path"] == "/v1/messages"


@pytest.mark.asyncio
async def test_a_path_the_client_does_not_have_is_inexpressible_and_not_sent() -> None:
    script = Script([Reply(body=ANSWER)])
    with fake_server(script) as url, pytest.raises(Inexpressible, match="not offered"):
        await client(url).structured(REQUEST, "messages-stream")
    assert script.requests == []


@pytest.mark.asyncio
async def test_a_500_is_a_failed_request() -> None:
    script = Script([Reply(status=500, body={"error": "boom"})])
    with fake_server(script) as url, pytest.raises(RequestFailed, match="HTTP 500") as caught:
        await client(url).structured(REQUEST, "chat")
    assert (caught.value.status, caught.value.message) == (500, "boom")


@pytest.mark.asyncio
async def test_a_hang_times_out_as_an_error() -> None:
    script = Script([Reply(body=ANSWER, delay_s=1.0)])
    with fake_server(script) as url, pytest.raises(HttpError, match="ReadTimeout") as caught:
        await client(url, timeout_s=0.2).structured(REQUEST, "chat")
    assert not isinstance(caught.value, (RequestFailed, MalformedResponse))
    assert caught.value.status is None
    assert len(script.requests) == 2  # retried once, then given up


@pytest.mark.parametrize(
    ("reply", "why"),
    [
        (Reply(raw=b"<html>not json</html>"), "malformed JSON"),
        (Reply(raw=b"  "), "empty body"),
        (Reply(body={"object": "chat.completion"}), "without choices"),
    ],
)
@pytest.mark.asyncio
async def test_a_body_that_is_no_chat_completion_is_malformed(reply: Reply, why: str) -> None:
    with fake_server(Script([reply])) as url, pytest.raises(MalformedResponse, match=why):
        await client(url).structured(REQUEST, "chat")


@pytest.mark.parametrize(
    ("raw", "why"),
    [
        (
            sse(
                {"choices": [{"index": 0, "delta": {"content": "4"}, "finish_reason": "stop"}]},
                done=False,
            ),
            r"\[DONE\]",
        ),
        (sse({"choices": [{"index": 0, "delta": {"content": "4"}}]}), "finish_reason"),
        (b"data: {not json\n\n", "malformed stream event"),
    ],
)
@pytest.mark.asyncio
async def test_a_stream_without_its_end_is_malformed(raw: bytes, why: str) -> None:
    malformed = pytest.raises(MalformedResponse, match=why)
    with fake_server(Script([Reply(raw=raw)])) as url, malformed:
        await client(url).structured(REQUEST, "chat-stream")


@pytest.mark.asyncio
async def test_openai_backend_offers_the_capability() -> None:
    script = Script([Reply(body=ANSWER)])
    with fake_server(script) as url:
        backend = OpenAICompatBackend("fake", HttpSettings(base_url=url, **FAST), model="served")  # type: ignore[arg-type]
        assert isinstance(backend, StructuredChat)
        assert backend.structured_paths() == (
            "chat",
            "chat-stream",
            "chat-n2",
            "messages",
            "messages-stream",
        )
        response = await backend.structured(REQUEST, "chat")
    assert response.choices[0].calls == (OSLO,)
    assert script.requests[0]["json"]["model"] == "served"


TEXT_ANSWER = {
    "choices": [{"index": 0, "finish_reason": "length", "message": {"content": "Hi"}}],
    "usage": {"prompt_tokens": 12, "completion_tokens": 1},
}
TEXT_STREAM = sse(
    {"choices": [{"index": 0, "delta": {"content": "Hi"}, "finish_reason": "length"}]}
)


@pytest.mark.asyncio
async def test_openai_backend_probes_its_paths() -> None:
    """mlx_lm.server's answers to the probe: ``chat`` and ``chat-stream`` answer, ``n: 2``
    answers one choice, ``/v1/messages`` is 404: the probe finds ``chat-n2`` and both
    messages paths lacking, one minimal request each, no tools, one token."""
    script = Script(
        [
            Reply(body=TEXT_ANSWER),
            Reply(raw=TEXT_STREAM),
            Reply(body=TEXT_ANSWER),
            Reply(status=404, raw=b"Not Found"),
            Reply(status=404, raw=b"Not Found"),
        ]
    )
    with fake_server(script) as url:
        backend = OpenAICompatBackend("fake", HttpSettings(base_url=url, **FAST), model="served")  # type: ignore[arg-type]
        abilities = await backend.probe_structured()
    assert abilities.lacking == {
        "structured chat-n2": "n: 2 answered 1 choice: the server ignores n",
        "structured messages": "the probe got HTTP 404: Not Found",
        "structured messages-stream": "the probe got HTTP 404: Not Found",
    }
    assert abilities.offered == {"structured chat", "structured chat-stream"}
    sent = [(r["path"], r["json"].get("n"), r["json"].get("stream")) for r in script.requests]
    assert sent == [
        ("/v1/chat/completions", None, False),
        ("/v1/chat/completions", None, True),
        ("/v1/chat/completions", 2, False),
        ("/v1/messages", None, False),
        ("/v1/messages", None, True),
    ]
    assert all("tools" not in r["json"] for r in script.requests)
    assert all(r["json"]["max_tokens"] == 1 for r in script.requests)


# Ollama's documented /api/chat shapes (docs/api.md: "Chat request (with tools)"; the
# streaming-tools announcement of 2025-05-28: the call arrives whole in one object).
OLLAMA_ANSWER = {
    "model": "qwen3",
    "created_at": "2024-07-22T20:33:28.123648Z",
    "message": {
        "role": "assistant",
        "content": "",
        "tool_calls": [{"function": {"name": "get_weather", "arguments": {"city": "Oslo"}}}],
    },
    "done_reason": "stop",
    "done": True,
    "prompt_eval_count": 122,
    "eval_count": 33,
}


def ollama(url: str) -> OllamaBackend:
    return OllamaBackend("ollama", HttpSettings(base_url=url, **FAST), model="qwen3", chat=True)  # type: ignore[arg-type]


@pytest.mark.asyncio
async def test_ollama_chat_with_tools() -> None:
    script = Script([Reply(body=OLLAMA_ANSWER)])
    history = StructuredRequest(
        messages=(
            ChatTurn("user", "weather in Oslo"),
            ChatTurn("assistant", None, tool_calls=(ToolCall("get_weather", {"city": "Oslo"}),)),
            ChatTurn("tool", '{"temp": 3}', name="get_weather"),
        ),
        max_tokens=16,
        tools=(WEATHER,),
    )
    with fake_server(script) as url:
        backend = ollama(url)
        assert isinstance(backend, StructuredChat)
        assert backend.structured_paths() == ("chat", "chat-stream")
        response = await backend.structured(history, "chat")
    (choice,) = response.choices
    assert choice.calls == (PlacedCall(ToolCall("get_weather", {"city": "Oslo"}), "tool_calls"),)
    assert choice.finish_reason == "stop" and response.usage == Usage(122, 33)
    sent = script.requests[0]
    assert sent["path"] == "/api/chat" and sent["json"]["stream"] is False
    assert sent["json"]["messages"][1]["tool_calls"] == [
        {"function": {"name": "get_weather", "arguments": {"city": "Oslo"}}}
    ]
    assert sent["json"]["messages"][2] == {
        "role": "tool",
        "content": '{"temp": 3}',
        "tool_name": "get_weather",
    }
    assert sent["json"]["options"] == {"temperature": 0.0, "num_predict": 16, "seed": 0}


@pytest.mark.asyncio
async def test_ollama_ndjson_stream() -> None:
    lines = [
        {
            "model": "qwen3",
            "message": {"role": "assistant", "content": "", "thinking": "Oslo"},
            "done": False,
        },
        {**OLLAMA_ANSWER, "done": False, "done_reason": None},
        {
            "model": "qwen3",
            "message": {"role": "assistant", "content": ""},
            "done": True,
            "done_reason": "stop",
            "prompt_eval_count": 122,
            "eval_count": 40,
        },
    ]
    raw = "".join(json.dumps(line) + "\n" for line in lines).encode()
    script = Script([Reply(raw=raw)])
    with fake_server(script) as url:
        response = await ollama(url).structured(REQUEST, "chat-stream")
    (choice,) = response.choices
    assert choice.reasoning == "Oslo" and len(choice.calls) == 1
    assert response.usage == Usage(122, 40)
    assert script.requests[0]["json"]["stream"] is True


@pytest.mark.asyncio
async def test_ollama_probe_sends_chat_paths_only() -> None:
    """Ollama's probe: ``/api/chat`` streamed and not; ``n: 2`` and the messages paths are
    lacking without a request (its client cannot send them)."""
    done = {"model": "qwen3", "message": {"role": "assistant", "content": "Hi"}, "done": True}
    stream = (json.dumps(done) + "\n").encode()
    script = Script([Reply(body=done), Reply(raw=stream)])
    with fake_server(script) as url:
        abilities = await ollama(url).probe_structured()
    assert abilities.offered == {"structured chat", "structured chat-stream"}
    assert set(abilities.lacking) == {
        "structured chat-n2",
        "structured messages",
        "structured messages-stream",
    }
    assert "not offered" in abilities.lacking["structured messages"]
    assert [r["path"] for r in script.requests] == ["/api/chat", "/api/chat"]


@pytest.mark.asyncio
async def test_ollama_stream_cut_before_done_is_malformed() -> None:
    raw = (json.dumps({**OLLAMA_ANSWER, "done": False}) + "\n").encode()
    malformed = pytest.raises(MalformedResponse, match="done: true")
    with fake_server(Script([Reply(raw=raw)])) as url, malformed:
        await ollama(url).structured(REQUEST, "chat-stream")
