"""Tool-call answers in a comparison, end to end through pytester.

Two OpenAI-compatible fake servers stand for two chat engines whose tool parser returns the
calls apart from the text (``message.tool_calls``), as vLLM, llama-server and mlx_lm.server
do; the test side changes one call's argument, leaves another call unparsed in its content
(the same call, so no flip), and writes an argument that is model output an HTML report must
escape. A fake server is used because no real server here returns a chosen wrong call on
demand; the real tiny tool model's own flips are measured in-process by
``test_tool_model_sweep``.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from tests.htmldom import parse

from .test_html_report import report_parts

ADD = {"name": "add", "arguments": {"a": 12, "b": 34}}
WEATHER = {"name": "get_weather", "arguments": {"city": "Oslo"}}
TOOL_SCHEMAS = [
    {
        "type": "function",
        "function": {
            "name": "add",
            "description": "Add two integers.",
            "parameters": {
                "type": "object",
                "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
                "required": ["a", "b"],
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "Get the current weather in a city.",
            "parameters": {
                "type": "object",
                "properties": {"city": {"type": "string"}},
                "required": ["city"],
            },
        },
    },
]


def suite_line(prompt_id: str, prompt: str, answer: dict[str, Any]) -> str:
    return json.dumps(
        {
            "id": prompt_id,
            "prompt": prompt,
            "tools": TOOL_SCHEMAS,
            "answer_kind": "tool_call",
            "answer": answer,
            "max_tokens": 32,
        }
    )


def parsed(name: str, arguments: dict[str, Any]) -> dict[str, Any]:
    """A chat completion whose server parsed one call out of the output."""
    call = {
        "id": "call_0",
        "type": "function",
        "function": {"name": name, "arguments": json.dumps(arguments)},
    }
    message = {"role": "assistant", "content": None, "tool_calls": [call]}
    return {"choices": [{"index": 0, "message": message, "finish_reason": "tool_calls"}]}


def unparsed(text: str) -> dict[str, Any]:
    """A chat completion whose server left the call in its content."""
    message = {"role": "assistant", "content": text}
    return {"choices": [{"index": 0, "message": message, "finish_reason": "stop"}]}


@contextmanager
def chat_server(answer: Callable[[str], dict[str, Any]]) -> Iterator[str]:
    """A chat server answering each request by its last user message; yields its URL."""

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            length = int(self.headers.get("content-length") or 0)
            body = json.loads(self.rfile.read(length) or b"{}")
            user = [m["content"] for m in body.get("messages", []) if m["role"] == "user"]
            data = json.dumps(answer(user[-1] if user else "")).encode()
            self.send_response(200)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        do_GET = do_POST

        def log_message(self, format: str, *args: Any) -> None:
            return

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def baseline_answer(user: str) -> dict[str, Any]:
    if user == "add 12 and 34":
        return parsed("add", {"a": 12, "b": 34})
    return parsed("get_weather", {"city": "Oslo"})


def changed_answer(user: str) -> dict[str, Any]:
    if user == "add 12 and 34":
        return parsed("add", {"b": 35, "a": 12})  # one argument changed
    if user == "weather in Oslo":
        # The same call, left in the content unparsed (and its keys in another order).
        return unparsed('<tool_call>\n{"arguments": {"city": "Oslo"}, "name": "get_weather"}\n')
    return parsed("get_weather", {"city": "<script>alert(1)</script>"})


def test_a_changed_call_is_a_flip_named_on_its_item(pytester: pytest.Pytester) -> None:
    pytester.makefile(
        ".jsonl",
        tools="\n".join(
            [
                suite_line("t1", "add 12 and 34", ADD),
                suite_line("t2", "weather in Oslo", WEATHER),
                suite_line("t3", "what is the weather like in Oslo", WEATHER),
            ]
        ),
    )
    with chat_server(baseline_answer) as base_url, chat_server(changed_answer) as test_url:
        pytester.makefile(
            ".yaml",
            infercheck="models:\n  m: {path: tool-model}\n"
            "backends:\n"
            f"  a: {{kind: openai, url: '{base_url}', logprobs: false}}\n"
            f"  b: {{kind: openai, url: '{test_url}', logprobs: false}}\n"
            "suites: [tools.jsonl]\nchecks:\n"
            "  - compare: {baseline: m@a, test: m@b}\n"
            "    flips: {max_rate: 0.99}\n",
        )
        result = pytester.runpytest_subprocess("-rA", "--html=report.html")
    out = result.stdout.str()
    check = "infercheck.yaml::compare(m.a-vs-m.b)::tools"
    # The changed argument: a flip from right to wrong, named, with the calls readable.
    result.assert_outcomes(failed=2, passed=2)  # t1, t3; t2 and the aggregate
    assert f"FAILED {check}::t1 - answer flip correct_" in out, out
    assert (
        "answers (tool_call): reference 'add(a=12, b=34)', baseline 'add(a=12, b=34)', "
        "test 'add(b=35, a=12)' -> correct_to_wrong"
    ) in out
    assert (
        "tool calls returned apart from the text: baseline add(a=12, b=34), test add(b=35, a=12)"
    ) in out
    assert "(same text, tool calls returned apart differ; " in out
    # The same call left in the content: no flip (and not an empty generation).
    assert f"PASSED {check}::t2" in out, out
    assert "empty generation" not in out
    # Another argument, which is model output: a flip, and escaped in the HTML report.
    assert f"FAILED {check}::t3 - answer flip correct_" in out
    _, tests = report_parts(pytester.path / "report.html")
    (t3,) = [test for nodeid, (test, *_) in tests.items() if nodeid.endswith("::t3")]
    detail = parse("".join(extra["content"] for extra in t3["extras"]))
    assert not detail.all("script")  # the argument is text in the page, never an element
    cells = [td.text() for table in detail.all("table") for td in table.all("td")]
    shown = 'get_weather(city="<script>alert(1)</script>")'
    assert ["tool_call", 'get_weather(city="Oslo")', 'get_weather(city="Oslo")', shown] == (
        cells[cells.index("tool_call") : cells.index("tool_call") + 4]
    )
    (apart,) = [t for t in detail.all("table") if "tool calls returned apart" in t.text()]
    rows = [[td.text() for td in tr.all("td")] for tr in apart.one("tbody").all("tr")]
    assert rows == [["baseline: m@a", 'get_weather(city="Oslo")'], ["test: m@b", shown]]
    (row,) = [line for line in out.splitlines() if line.startswith("compare(m.a-vs-m.b)  tools")]
    assert row.split()[3:5] == ["3", "2"] and " 2/3 (" in row  # prompts, failed, flips
