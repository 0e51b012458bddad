"""The faulty proxy's structured faults on scripted answers (a real server's are in
tests/integration/test_structured_parity_servers.py): a non-streamed answer's calls moved
into content, a stream's ``tool_calls`` nulled and its ``finish_reason`` made ``stop``, every
request offering tools refused."""

from __future__ import annotations

import json
from typing import Any

import httpx

from tests.faulty_proxy import TOOLS_REFUSED, Fault, FaultyProxy
from tests.http.fake_server import Reply, Script, fake_server

CALL = {
    "id": "c1",
    "type": "function",
    "function": {"name": "add", "arguments": '{"a": 12, "b": 34}'},
}
ANSWER = {
    "choices": [
        {
            "index": 0,
            "message": {"role": "assistant", "content": None, "tool_calls": [CALL]},
            "finish_reason": "tool_calls",
        }
    ]
}
MESSAGE = {
    "type": "message",
    "role": "assistant",
    "content": [{"type": "tool_use", "id": "t1", "name": "add", "input": {"a": 12, "b": 34}}],
    "stop_reason": "tool_use",
}
CHUNKS = [
    {"choices": [{"index": 0, "delta": {"role": "assistant"}, "finish_reason": None}]},
    {
        "choices": [
            {
                "index": 0,
                "delta": {"tool_calls": [{"index": 0, **CALL}]},
                "finish_reason": None,
            }
        ]
    },
    {"choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}]},
]
TEXT = '<tool_call>\n{"name": "add", "arguments": {"a": 12, "b": 34}}\n</tool_call>'


def sse(chunks: list[Any]) -> bytes:
    return b"".join(b"data: " + json.dumps(c).encode() + b"\n\n" for c in chunks) + (
        b"data: [DONE]\n\n"
    )


def test_calls_moved_into_content_keep_their_finish_reason() -> None:
    script = Script([Reply(body=ANSWER), Reply(body=MESSAGE)])
    with fake_server(script) as url, FaultyProxy(url, Fault(calls_to_content=True)) as proxy:
        chat = httpx.post(f"{proxy.url}/v1/chat/completions", json={}).json()
        message = httpx.post(f"{proxy.url}/v1/messages", json={}).json()
    assert chat["choices"][0]["message"] == {"role": "assistant", "content": TEXT}
    assert chat["choices"][0]["finish_reason"] == "tool_calls"
    assert message["content"] == [{"type": "text", "text": TEXT}]
    assert message["stop_reason"] == "tool_use"
    assert proxy.altered == 2


def test_streamed_tool_calls_nulled_and_stop() -> None:
    headers = {"content-type": "text/event-stream"}
    script = Script([Reply(raw=sse(CHUNKS), headers=headers), Reply(body=ANSWER)])
    fault = Fault(null_stream_tool_calls=True)
    with fake_server(script) as url, FaultyProxy(url, fault) as proxy:
        with httpx.stream("POST", f"{proxy.url}/v1/chat/completions", json={}) as response:
            lines = [line for line in response.iter_lines() if line.startswith("data: {")]
        whole = httpx.post(f"{proxy.url}/v1/chat/completions", json={}).json()
    events = [json.loads(line[6:]) for line in lines]
    assert events[1]["choices"][0]["delta"] == {"tool_calls": None}
    assert events[2]["choices"][0]["finish_reason"] == "stop"
    assert whole == ANSWER  # non-streamed answers pass
    assert proxy.altered == 1


def test_requests_offering_tools_are_refused_and_others_pass() -> None:
    script = Script([Reply(body=ANSWER)])
    tool = {"type": "function", "function": {"name": "add", "parameters": {}}}
    with fake_server(script) as url, FaultyProxy(url, Fault(refuse_tools=True)) as proxy:
        refused = httpx.post(f"{proxy.url}/v1/chat/completions", json={"tools": [tool]})
        messages = httpx.post(f"{proxy.url}/v1/messages", json={"tools": [tool]})
        plain = httpx.post(f"{proxy.url}/v1/chat/completions", json={"tools": []})
    assert refused.status_code == messages.status_code == 400
    assert refused.json()["error"]["message"] == TOOLS_REFUSED
    assert plain.status_code == 200 and plain.json() == ANSWER
    assert len(script.requests) == 1  # the refused ones never reached the server
    assert proxy.altered == 2
