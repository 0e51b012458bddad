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
from pathlib import Path
from typing import Any

import pytest

from tests.htmldom import parse

from ..structured_fakes import TOOLS
from .test_html_report import report_parts

ADD = {"name": "add", "arguments": {"a": 12, "b": 34}}
WEATHER = {"name": "get_weather", "arguments": {"city": "Oslo"}}
TOOL_SCHEMAS = TOOLS[:2]
"""``add`` and ``get_weather`` of the shared tool set."""


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
    result.assert_outcomes(failed=3, passed=1)  # t1, t3 and the aggregate naming them; t2
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
    lines = out.splitlines()
    row = lines[lines.index("compare(m.a-vs-m.b) tools:") + 1]
    assert row.split()[:2] == ["m@b", "2/3"] and " 2/3 (" in row  # failed of prompts, flips


# ------------------------------------------------------------------ the real tiny tool model


def hermes_calls(text: str) -> list[Any]:
    """The calls of a raw output, read independently of the plugin's parser (for the
    check below): each ``<tool_call>`` body as JSON, or the body's text when it is not a call
    of an object ``arguments``."""
    calls: list[Any] = []
    for part in text.split("<tool_call>")[1:]:
        body = part.split("</tool_call>")[0].strip()
        try:
            doc = json.loads(body)
        except ValueError:
            calls.append(body)
            continue
        ok = isinstance(doc, dict) and isinstance(doc.get("name"), str) and doc["name"]
        ok = ok and isinstance(doc.get("arguments"), dict)
        calls.append([doc["name"], doc["arguments"]] if ok else body)
    return calls


@pytest.fixture(scope="session")
def tool_levels(tiny_tool: Path) -> dict[str, Path]:
    """The tiny tool model and its 2-bit quantization (mlx_lm.convert, group size 32)."""
    from conftest import MODELS_CACHE, _make_models_module, tool_cache_key

    made = _make_models_module().make_variants(
        MODELS_CACHE / "tool-levels" / tool_cache_key(), bits=(2,), source=tiny_tool
    )
    return {"bf16": made["bf16"], "q2": made["q2"]}


def test_tool_model_flips_under_quantization(
    pytester: pytest.Pytester, tool_levels: dict[str, Path]
) -> None:
    """The real tiny tool model in-process, bf16 against its 2-bit quantization, on the
    bundled suite's one-call and zero-argument requests: every item's flip is what an
    independent reading of its two outputs says, and exactly the items whose call went from
    right to wrong fail, each naming it."""
    bundled = Path(__file__).parents[2] / "suites" / "tool-use.jsonl"
    lines = [json.loads(line) for line in bundled.read_text().splitlines()]
    chosen = [d for d in lines if d.get("category") in ("single", "zero-arg")][:12]
    pytester.makefile(".jsonl", tools="\n".join(json.dumps(d) for d in chosen))
    pytester.makefile(
        ".yaml",
        infercheck=f"models:\n  bf16: {{path: '{tool_levels['bf16']}'}}\n"
        f"  q2: {{path: '{tool_levels['q2']}', quantization: 2bit}}\n"
        "suites: [tools.jsonl]\nchecks:\n"
        "  - compare: {baseline: bf16, test: q2}\n    flips: {max_rate: 0.99}\n",
    )
    result = pytester.runpytest_subprocess("-q", "--infercheck-results=r.json")
    items = json.loads((pytester.path / "r.json").read_text())["items"]
    by_id = {d["id"]: d for d in chosen}
    flips: dict[str, int] = {}
    for item in items:
        if item["role"] != "prompt":
            continue
        data = item["data"]
        expected = [[c["name"], c["arguments"]] for c in by_id[item["name"]]["answer"]]
        base, test = hermes_calls(data["base_text"]), hermes_calls(data["test_text"])
        right = (base == expected, test == expected)
        flip = {
            (True, True): "unchanged",
            (True, False): "correct_to_wrong",
            (False, True): "wrong_to_correct",
        }.get(right, "unchanged" if base == test else "wrong_to_wrong")
        assert data["flip"] == flip, (item["name"], data["base_text"], data["test_text"])
        assert (item["outcome"] == "failed") is (flip == "correct_to_wrong"), item["name"]
        if flip == "correct_to_wrong":
            assert "answer flip correct_to_wrong" in item["longrepr"]
        if base and not isinstance(base[0], str):  # a well-formed first call, shown readably
            assert data["base_answer"].startswith(f"{base[0][0]}(")
        flips[flip] = flips.get(flip, 0) + 1
    assert sum(flips.values()) == len(chosen)
    # Two bits wreck a model of a million parameters: some call goes wrong.
    assert flips.get("correct_to_wrong", 0) >= 1, flips
    assert result.parseoutcomes()["failed"] == flips["correct_to_wrong"] + 1  # and the aggregate
