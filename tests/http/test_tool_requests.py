"""Tool prompts as the servers that template themselves receive them (OpenAI-compatible chat,
Ollama's documented ``/api/chat``, Anthropic messages) and the calls they answer with, against
the scripted fake server; a prompt without tools is sent exactly as before. Real servers'
templates are compared in tests/integration/test_tool_rendering.py."""

from __future__ import annotations

import json
from typing import Any

import pytest

from pytest_infercheck.backends import GenerationParams
from pytest_infercheck.backends.base import BackendError, Message
from pytest_infercheck.backends.http import HttpSettings
from pytest_infercheck.backends.ollama import OllamaBackend
from pytest_infercheck.backends.openai_compat import (
    OpenAICompatBackend,
    anthropic_messages,
    assemble_chunks,
    delta_calls,
    messages_payload,
    parse_choice,
    parse_message,
)
from pytest_infercheck.tools import Tool, ToolCall

from .fake_server import Reply, Script, chat_answer, fake_server

FAST = {"backoff_s": 0.01, "timeout_s": 2.0}
ADD = Tool(
    "add",
    {
        "type": "object",
        "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
        "required": ["a", "b"],
    },
    "Add two integers.",
)
DATE = Tool("get_date", {"type": "object", "properties": {}}, "Get today's date.")
TOOLS = (ADD, DATE)
OPENAI_TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "add",
            "description": "Add two integers.",
            "parameters": ADD.parameters,
        },
    },
    {
        "type": "function",
        "function": {
            "name": "get_date",
            "description": "Get today's date.",
            "parameters": {"type": "object", "properties": {}},
        },
    },
]
RESULT_TURNS = (
    Message("system", "Use the tools."),
    Message("user", "add 12 and 34, and the date"),
    Message(
        "assistant",
        "",
        (ToolCall("add", {"a": 12, "b": 34}), ToolCall("get_date", {})),
    ),
    Message("tool", '{"result": 46}', name="add"),
    Message("tool", "2026-11-26", name="get_date"),
)
PLAIN_TURNS = (
    Message("system", "s"),
    Message("user", "a"),
    Message("assistant", "x"),
    Message("user", "b"),
)


def openai(url: str, **kwargs: Any) -> OpenAICompatBackend:
    settings = HttpSettings(base_url=url, **FAST)  # type: ignore[arg-type]
    return OpenAICompatBackend("fake", settings, model="m", **kwargs)


def calls_answer(calls: list[dict[str, Any]], content: Any = None) -> dict[str, Any]:
    message = {"role": "assistant", "content": content, "tool_calls": calls}
    return {"choices": [{"index": 0, "message": message, "finish_reason": "tool_calls"}]}


@pytest.mark.asyncio
async def test_openai_chat_sends_tool_turns_tools_and_choice_and_reads_the_calls() -> None:
    call = {
        "id": "x1",
        "type": "function",
        "function": {"name": "add", "arguments": '{"a": 1, "b": 2}'},
    }
    script = Script([Reply(body=calls_answer([call]))])
    with fake_server(script) as url:
        b = openai(url)
        b.no_logprobs = "not asked"
        rendered = await b.render_messages(RESULT_TURNS, False, tools=TOOLS, tool_choice="auto")
        gen = await b.generate(rendered, GenerationParams(8))
        await b.aclose()
    sent = script.requests[-1]["json"]
    assert sent["messages"] == [
        {"role": "system", "content": "Use the tools."},
        {"role": "user", "content": "add 12 and 34, and the date"},
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [
                {
                    "id": "call_0",
                    "type": "function",
                    "function": {"name": "add", "arguments": '{"a": 12, "b": 34}'},
                },
                {
                    "id": "call_1",
                    "type": "function",
                    "function": {"name": "get_date", "arguments": "{}"},
                },
            ],
        },
        {"role": "tool", "tool_call_id": "call_0", "name": "add", "content": '{"result": 46}'},
        {"role": "tool", "tool_call_id": "call_1", "name": "get_date", "content": "2026-11-26"},
    ]
    assert sent["tools"] == OPENAI_TOOLS
    assert sent["tool_choice"] == "auto"
    assert gen.text == "" and gen.finish_reason == "tool_calls"
    assert gen.tool_calls == (ToolCall("add", {"a": 1, "b": 2}),)


@pytest.mark.asyncio
async def test_a_single_turn_prompt_with_tools_and_a_named_choice() -> None:
    named = {"type": "function", "function": {"name": "add"}}
    script = Script([Reply(body=chat_answer("46"))])
    with fake_server(script) as url:
        b = openai(url)
        b.no_logprobs = "not asked"
        turns = (Message("user", "add 12 and 34"),)
        rendered = await b.render_messages(turns, False, tools=TOOLS, tool_choice=named)
        await b.generate(rendered, GenerationParams(8))
        await b.aclose()
    sent = script.requests[-1]["json"]
    assert sent["messages"] == [{"role": "user", "content": "add 12 and 34"}]
    assert (sent["tools"], sent["tool_choice"]) == (OPENAI_TOOLS, named)
    assert rendered.messages is None and rendered.tools == TOOLS


@pytest.mark.asyncio
async def test_a_prompt_without_tools_is_sent_as_before() -> None:
    """No ``tools`` or ``tool_choice`` key, plain messages only: the bytes a text
    conversation sent before tools existed."""
    script = Script([Reply(body=chat_answer("ok"))])
    with fake_server(script) as url:
        b = openai(url)
        b.no_logprobs = "not asked"
        await b.generate(await b.render_messages(PLAIN_TURNS, False), GenerationParams(4))
        await b.generate(await b.render("a", "s", False), GenerationParams(4))
        await b.aclose()
    conversation, single = (r["json"] for r in script.requests[-2:])
    assert conversation == {
        "max_tokens": 4,
        "temperature": 0.0,
        "stream": False,
        "model": "m",
        "messages": [{"role": m.role, "content": m.content} for m in PLAIN_TURNS],
        "chat_template_kwargs": {"enable_thinking": False},
    }
    assert single["messages"] == [
        {"role": "system", "content": "s"},
        {"role": "user", "content": "a"},
    ]
    assert "tools" not in single and "tool_choice" not in single


@pytest.mark.asyncio
async def test_raw_text_refuses_tools_naming_them() -> None:
    b = openai("http://127.0.0.1:9", chat=False)
    with pytest.raises(BackendError, match=r"cannot render a prompt with tools \(add, get_date\)"):
        await b.render_messages((Message("user", "add"),), False, tools=TOOLS)
    await b.aclose()


def test_streamed_tool_call_fragments_are_assembled() -> None:
    """Name in the first fragment, arguments in pieces, two calls by index; a zero-argument
    call streamed as ``""`` is kept, malformed (``""`` is not JSON)."""

    def chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
        return {"choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}

    def fragment(index: int, name: str | None, arguments: str) -> dict[str, Any]:
        function = {"arguments": arguments, **({"name": name} if name else {})}
        return {"index": index, "function": function}

    chunks = [
        chunk({"role": "assistant", "content": ""}),
        chunk({"tool_calls": [{**fragment(0, "add", ""), "id": "c0", "type": "function"}]}),
        chunk({"tool_calls": [fragment(0, None, '{"a": 1')]}),
        chunk({"tool_calls": [fragment(0, None, ', "b": 2}')]}),
        chunk({"tool_calls": [fragment(1, "get_date", "")]}),
        chunk({}, "tool_calls"),
    ]
    gen = assemble_chunks(chunks, chat=True)
    assert gen.finish_reason == "tool_calls" and gen.text == ""
    assert gen.tool_calls == (
        ToolCall("add", {"a": 1, "b": 2}),
        ToolCall("get_date", "", arguments_valid=False),
    )
    assert delta_calls([]) == ()
    assert assemble_chunks([chunk({"content": "hi"}, "stop")], chat=True).tool_calls == ()


def test_chat_answers_keep_every_call_as_sent() -> None:
    bad = {"function": {"name": "add", "arguments": "{a: 1}"}}
    unnamed = {"function": {"arguments": "{}"}}
    gen = parse_choice(calls_answer([bad, unnamed], content="<tool_call>"), chat=True)
    assert gen.tool_calls == (
        ToolCall("add", "{a: 1}", arguments_valid=False),
        ToolCall("", {}),
    )
    assert gen.text == "<tool_call>"
    assert parse_choice(chat_answer("46"), chat=True).tool_calls == ()
    nulled = {"choices": [{"message": {"content": "46", "tool_calls": None}}]}
    assert parse_choice(nulled, chat=True).tool_calls == ()


def test_anthropic_messages_carry_tool_use_and_tool_result_blocks() -> None:
    from pytest_infercheck.backends.base import chat_input

    prompt = chat_input(RESULT_TURNS, False, TOOLS, "required")
    body = messages_payload(prompt, GenerationParams(8), "m")
    assert body["system"] == "Use the tools."
    assert body["messages"] == [
        {"role": "user", "content": "add 12 and 34, and the date"},
        {
            "role": "assistant",
            "content": [
                {"type": "tool_use", "id": "call_0", "name": "add", "input": {"a": 12, "b": 34}},
                {"type": "tool_use", "id": "call_1", "name": "get_date", "input": {}},
            ],
        },
        {
            "role": "user",
            "content": [
                {"type": "tool_result", "tool_use_id": "call_0", "content": '{"result": 46}'},
                {"type": "tool_result", "tool_use_id": "call_1", "content": "2026-11-26"},
            ],
        },
    ]
    assert body["tools"] == [
        {"name": "add", "description": "Add two integers.", "input_schema": ADD.parameters},
        {"name": "get_date", "description": "Get today's date.", "input_schema": DATE.parameters},
    ]
    assert body["tool_choice"] == {"type": "any"}
    named = chat_input(RESULT_TURNS[1:2], False, TOOLS, {"function": {"name": "add"}})
    assert messages_payload(named, GenerationParams(8), None)["tool_choice"] == {
        "type": "tool",
        "name": "add",
    }
    plain = chat_input(PLAIN_TURNS, False)
    assert anthropic_messages(plain) == [
        {"role": m.role, "content": m.content} for m in PLAIN_TURNS[1:]
    ]
    assert "tools" not in messages_payload(plain, GenerationParams(8), None)
    answer = {
        "content": [
            {"type": "text", "text": "Adding."},
            {"type": "tool_use", "id": "t1", "name": "add", "input": {"a": 1, "b": 2}},
        ],
        "stop_reason": "tool_use",
    }
    gen = parse_message(answer)
    assert (gen.text, gen.finish_reason) == ("Adding.", "tool_calls")
    assert gen.tool_calls == (ToolCall("add", {"a": 1, "b": 2}),)


@pytest.mark.asyncio
async def test_ollama_gets_its_documented_tool_shapes_and_no_tool_choice() -> None:
    tags = {"models": [{"name": "qwen3:4b"}]}
    answer = {
        "message": {
            "role": "assistant",
            "content": "",
            "tool_calls": [{"function": {"name": "add", "arguments": {"a": 1, "b": 2}}}],
        },
        "done_reason": "stop",
    }
    script = Script([Reply(body=tags), Reply(body=answer)])
    with fake_server(script) as url:
        b = OllamaBackend("ol", HttpSettings(base_url=url), model="qwen3:4b", chat=True)
        await b.ensure_ready()
        rendered = await b.render_messages(RESULT_TURNS, False, tools=TOOLS, tool_choice="auto")
        gen = await b.generate(rendered, GenerationParams(8))
        await b.aclose()
    sent = script.requests[1]["json"]
    assert sent["messages"][2:] == [
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [
                {"function": {"name": "add", "arguments": {"a": 12, "b": 34}}},
                {"function": {"name": "get_date", "arguments": {}}},
            ],
        },
        {"role": "tool", "content": '{"result": 46}', "tool_name": "add"},
        {"role": "tool", "content": "2026-11-26", "tool_name": "get_date"},
    ]
    assert sent["tools"] == OPENAI_TOOLS and "tool_choice" not in sent
    assert gen.tool_calls == (ToolCall("add", {"a": 1, "b": 2}),)
    assert json.dumps(sent)  # plain JSON all through


@pytest.mark.asyncio
async def test_ollama_without_tools_sends_what_it_sent() -> None:
    tags = {"models": [{"name": "qwen3:4b"}]}
    answer = {"message": {"role": "assistant", "content": "x"}, "done_reason": "stop"}
    script = Script([Reply(body=tags), Reply(body=answer)])
    with fake_server(script) as url:
        b = OllamaBackend("ol", HttpSettings(base_url=url), model="qwen3:4b", chat=True)
        await b.ensure_ready()
        await b.generate(await b.render_messages(PLAIN_TURNS, False), GenerationParams(8))
        await b.aclose()
    sent = script.requests[1]["json"]
    assert sent["messages"] == [{"role": m.role, "content": m.content} for m in PLAIN_TURNS]
    assert "tools" not in sent


@pytest.mark.asyncio
async def test_raw_servers_refuse_tools_saying_chat_true_would_render_them() -> None:
    """llama-server, vLLM and Ollama without ``chat: true`` send raw text: a tool prompt is
    refused before any request, naming the tools and the way out."""
    from pytest_infercheck.backends.llama_server import LlamaServerBackend
    from pytest_infercheck.backends.vllm import VllmBackend

    settings = HttpSettings(base_url="http://127.0.0.1:9", **FAST)  # type: ignore[arg-type]
    backends = [
        (LlamaServerBackend("l", settings, chat=False), "/apply-template renders them"),
        (VllmBackend("v", settings, model="m", chat=False), "/tokenize renders them"),
        (OllamaBackend("o", settings, model="m", chat=False), "/api/chat gets them"),
    ]
    for backend, way in backends:
        with pytest.raises(BackendError, match=rf"tools \(add, get_date\): .*chat: false.*{way}"):
            await backend.render_messages((Message("user", "add"),), False, tools=TOOLS)
        await backend.aclose()
