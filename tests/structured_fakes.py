"""A scripted structured-chat backend for plugin tests of ``structured-parity`` without a
server: what a faithful server would answer to the shared tool set's requests, through every
path, and one behaviour per fault the check must name. Real servers are held to the same
check in ``tests/integration/test_structured_parity_servers.py``; this fake only shows the
plugin's wiring (config, items, aggregate, reports) on answers chosen exactly.

The backends named in a matrix pick the behaviour (the conftest hook
:func:`pytest_infercheck_wrap_backend` wraps any backend whose ``backends:`` name is one of
:data:`BEHAVIOURS`; the wrapped engine is never asked anything):

- ``faithful``: every path answers the same; ``chat-n2`` two identical choices;
- ``oneslot``: as ``faithful``, but ``chat-n2`` is refused, HTTP 400 (llama-server with one
  slot): its probe finds it lacking;
- ``ignoresn``: as ``faithful``, but ``chat-n2`` answers one choice (vllm-mlx): its probe
  finds it lacking;
- ``refusestools``: every request with tools is refused, HTTP 400 (a broken tool parser):
  its probe (no tools) finds every path offered, so each refusal fails its item;
- ``nulls``: ``chat-stream`` loses its calls (``tool_calls: null``) and says ``stop``;
- ``moves``: every path leaves its calls in ``content`` (``finish_reason`` kept);
- ``broken``: ``chat-stream`` fails with a server error;
- ``hostile``: as ``faithful``, its content a script tag (reports must escape it).

A request's answer: after a tool result, ``The result is <result>.``; with a
``response_format``, a JSON object that follows the bundled schema; with tools, the call its
user turn asks for (``add A and B``, ``weather in CITY``, ``date``), else ``Hello.``.
"""

from __future__ import annotations

import json
import re
from typing import Any

from pytest_infercheck.backends import Backend, BackendError, PromptInput
from pytest_infercheck.backends.capabilities import STRUCTURED
from pytest_infercheck.structured.probe import probe_paths
from pytest_infercheck.structured.records import (
    PlacedCall,
    RequestFailed,
    StructuredChoice,
    StructuredRequest,
    StructuredResponse,
    Usage,
)
from pytest_infercheck.tools import ToolCall
from pytest_infercheck.verdict.conduct import Abilities


def _tool(name: str, description: str, parameters: dict[str, Any]) -> dict[str, Any]:
    return {
        "type": "function",
        "function": {"name": name, "description": description, "parameters": parameters},
    }


CITY = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
TOOLS = [
    _tool(
        "add",
        "Add two integers.",
        {
            "type": "object",
            "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
            "required": ["a", "b"],
        },
    ),
    _tool("get_weather", "Get the current weather in a city.", CITY),
    _tool("get_time", "Get the local time in a city.", CITY),
    _tool("get_date", "Get today's date.", {"type": "object", "properties": {}}),
]
"""The shared tool set (OpenAI ``tools`` entries)."""
PERSON = {
    "type": "object",
    "properties": {"name": {"type": "string"}, "age": {"type": "integer"}},
    "required": ["name", "age"],
    "additionalProperties": False,
}
"""A ``response_format`` schema."""
SUITE = [
    {"id": "tu001", "prompt": "add 12 and 34", "tools": TOOLS, "max_tokens": 32},
    {"id": "tu002", "prompt": "weather in Oslo", "tools": TOOLS, "max_tokens": 32},
    {"id": "tu003", "prompt": "date", "tools": TOOLS, "max_tokens": 32},
    {
        "id": "tu004",
        "messages": [
            {"role": "user", "content": "add 12 and 34"},
            {"role": "assistant", "tool_calls": [{"name": "add", "arguments": {"a": 12, "b": 34}}]},
            {"role": "tool", "name": "add", "content": '{"result": 46}'},
        ],
        "tools": TOOLS,
        "max_tokens": 32,
    },
    {"id": "tu005", "prompt": "say hello", "max_tokens": 32},
    {"id": "js001", "prompt": "a person as JSON", "response_format": PERSON, "max_tokens": 32},
]
"""A small suite of the shared tool set's shapes: single calls (a zero-argument one too), a
tool result, no tools, constrained JSON."""


def suite_jsonl(lines: list[dict[str, Any]] = SUITE) -> str:
    return "\n".join(json.dumps(line) for line in lines)


BEHAVIOURS = (
    "faithful",
    "oneslot",
    "ignoresn",
    "refusestools",
    "nulls",
    "moves",
    "broken",
    "hostile",
)
PATHS = ("chat", "chat-stream", "chat-n2", "messages", "messages-stream")
HOSTILE = "<script>alert('x')</script>"


def answer(request: StructuredRequest) -> StructuredChoice:
    """What a faithful server answers (see the module docstring)."""
    last = request.messages[-1]
    if last.role == "tool":
        return StructuredChoice(f"The result is {last.content}.", None, (), "stop")
    if request.response_format is not None:
        return StructuredChoice(json.dumps({"name": "Ann", "age": 3}), None, (), "stop")
    text = last.content or ""
    call: ToolCall | None = None
    if request.tools:
        if m := re.fullmatch(r"add (\d+) and (\d+)", text):
            call = ToolCall("add", {"a": int(m[1]), "b": int(m[2])})
        elif m := re.fullmatch(r"weather in (\w+)", text):
            call = ToolCall("get_weather", {"city": m[1]})
        elif text == "date":
            call = ToolCall("get_date", {})
    if call is None:
        return StructuredChoice("Hello.", None, (), "stop")
    return StructuredChoice(None, None, (PlacedCall(call, "tool_calls", "call_0"),), "tool_calls")


def moved(choice: StructuredChoice) -> StructuredChoice:
    """``choice`` with its calls left in content as Hermes text."""
    if not choice.calls:
        return choice
    text = "".join(
        "<tool_call>\n"
        + json.dumps({"name": c.call.name, "arguments": c.call.arguments})
        + "\n</tool_call>"
        for c in choice.calls
    )
    calls = tuple(PlacedCall(c.call, "content") for c in choice.calls)
    return StructuredChoice(text, choice.reasoning, calls, choice.finish_reason)


class ScriptedChat(Backend):
    """A :class:`~pytest_infercheck.structured.records.StructuredChat` backend answering from
    the script, with ``behaviour``; it renders any conversation as ten ids per turn."""

    def __init__(self, inner: Backend, behaviour: str) -> None:
        super().__init__(inner.name)
        self.inner = inner
        self.behaviour = behaviour
        self.kind = inner.kind
        self.capabilities = inner.capabilities
        self.concurrency = 1
        self.requests: list[tuple[str, StructuredRequest]] = []

    async def render(self, user_text: str, system: str | None, thinking: bool) -> Any:
        return await self.inner.render(user_text, system, thinking)

    async def generate(self, prompt: Any, params: Any) -> Any:
        raise BackendError("the scripted chat answers structured requests only")

    def identity(self) -> dict[str, Any]:
        return {"kind": "scripted", "behaviour": self.behaviour}

    async def aclose(self) -> None:
        return None

    def structured_paths(self) -> tuple[str, ...]:
        return PATHS

    async def probe_abilities(self, topic: str) -> Abilities:
        """The structured probe of a real server (one minimal request per path)."""
        if topic != STRUCTURED:
            return Abilities()
        return await probe_paths(self)  # type: ignore[arg-type]

    async def render_messages(
        self, messages: Any, thinking: bool, *, tools: Any = (), tool_choice: Any = None
    ) -> PromptInput:
        """Ten ids per turn (both scripted targets render alike)."""
        ids = tuple(range(10 * len(messages)))
        return PromptInput(" ".join(m.content for m in messages), ids, templated=True)

    async def structured(self, request: StructuredRequest, path: str) -> StructuredResponse:
        self.requests.append((path, request))
        choice = answer(request)
        if self.behaviour == "hostile" and choice.content and request.response_format is None:
            choice = StructuredChoice(HOSTILE, None, choice.calls, choice.finish_reason)
        notes: tuple[str, ...] = ()
        label = f"{self.behaviour} {path}"
        if self.behaviour == "oneslot" and path == "chat-n2":
            raise RequestFailed(label, 400, "only n = 1 is supported")
        if self.behaviour == "refusestools" and request.tools:
            raise RequestFailed(label, 400, "tools: the tool parser failed to load")
        if self.behaviour == "broken" and path == "chat-stream":
            raise RequestFailed(label, 500, "the engine is gone")
        if self.behaviour == "nulls" and path == "chat-stream" and choice.calls:
            choice = StructuredChoice(None, None, (), "stop")
            notes = ("a delta had tool_calls: null",)
        if self.behaviour == "moves":
            choice = moved(choice)
        n = 2 if path == "chat-n2" and self.behaviour != "ignoresn" else 1
        usage = Usage(10 * len(request.messages), 5 * n)
        return StructuredResponse(path, (choice,) * n, usage, notes)  # type: ignore[arg-type]


def pytest_infercheck_wrap_backend(backend: Backend, name: str, spec: Any) -> Backend | None:
    """The plugin hook: a backend named after a behaviour answers from the script."""
    return ScriptedChat(backend, name) if name in BEHAVIOURS else None
