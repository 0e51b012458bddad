"""The wire shapes of a structured request: chat completions, Anthropic messages, Ollama's
/api/chat, and the call ids that tie tool results to calls."""

from __future__ import annotations

import json

import pytest

from pytest_infercheck.structured.call_ids import link_calls
from pytest_infercheck.structured.records import ChatTurn, Inexpressible, StructuredRequest
from pytest_infercheck.structured.wire_chat import chat_payload
from pytest_infercheck.structured.wire_messages import messages_payload
from pytest_infercheck.structured.wire_ollama import ollama_payload
from pytest_infercheck.tools import Tool, ToolCall

ADD = Tool(
    "add",
    {
        "type": "object",
        "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
        "required": ["a", "b"],
    },
    "Add two integers.",
)
GET_DATE = Tool("get_date", {"type": "object", "properties": {}}, "Get today's date.")
GET_TIME = Tool(
    "get_time",
    {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    "Get the local time in a city.",
)

AFTER_TWO_CALLS = (
    ChatTurn("system", "be brief"),
    ChatTurn("user", "add 12 and 34, and the time in Oslo"),
    ChatTurn(
        "assistant",
        None,
        tool_calls=(ToolCall("add", {"a": 12, "b": 34}), ToolCall("get_time", {"city": "Oslo"})),
    ),
    ChatTurn("tool", '{"time": "10:00"}', name="get_time"),
    ChatTurn("tool", '{"result": 46}', name="add"),
)


def request(**kw: object) -> StructuredRequest:
    fields: dict[str, object] = {
        "messages": AFTER_TWO_CALLS,
        "max_tokens": 16,
        "tools": (ADD, GET_TIME),
    }
    fields.update(kw)
    return StructuredRequest(**fields)  # type: ignore[arg-type]


def test_results_answer_the_call_of_their_function_in_any_order() -> None:
    linked = link_calls(AFTER_TWO_CALLS)
    assert linked[2].call_ids == ("call_2_0", "call_2_1")
    assert [linked[3].answers, linked[4].answers] == ["call_2_1", "call_2_0"]


def test_a_given_tool_call_id_names_the_call_it_answers() -> None:
    turns = (
        ChatTurn("user", "x"),
        ChatTurn(
            "assistant", None, tool_calls=(ToolCall("get_date", {}), ToolCall("get_date", {}))
        ),
        ChatTurn("tool", "a", tool_call_id="abc"),
        ChatTurn("tool", "b"),
    )
    linked = link_calls(turns)
    assert linked[1].call_ids == ("abc", "call_1_1")
    assert [linked[2].answers, linked[3].answers] == ["abc", "call_1_1"]


def test_a_result_without_its_call_cannot_be_sent() -> None:
    with pytest.raises(ValueError, match=r"message 1 .*answers no call.*'add'"):
        link_calls((ChatTurn("user", "x"), ChatTurn("tool", "46", name="add")))


def test_chat_payload_carries_calls_results_tools_and_sampling() -> None:
    body = chat_payload(request(tool_choice="auto"), "m")
    assert body["model"] == "m"
    assert body["messages"][0] == {"role": "system", "content": "be brief"}
    assistant = body["messages"][2]
    assert assistant["content"] is None
    assert assistant["tool_calls"][0] == {
        "id": "call_2_0",
        "type": "function",
        "function": {"name": "add", "arguments": '{"a": 12, "b": 34}'},
    }
    assert json.loads(assistant["tool_calls"][1]["function"]["arguments"]) == {"city": "Oslo"}
    assert body["messages"][3] == {
        "role": "tool",
        "tool_call_id": "call_2_1",
        "name": "get_time",
        "content": '{"time": "10:00"}',
    }
    assert body["tools"] == [ADD.openai(), GET_TIME.openai()]
    assert body["tool_choice"] == "auto"
    assert (body["max_tokens"], body["temperature"], body["seed"]) == (16, 0.0, 0)
    assert body["stream"] is False and "stream_options" not in body and "n" not in body


def test_chat_payload_stream_n_and_json_schema() -> None:
    schema = {"type": "object", "properties": {"x": {"type": "integer"}}, "required": ["x"]}
    body = chat_payload(
        request(tools=(), response_format=schema, seed=None), None, n=2, stream=True
    )
    assert "model" not in body and "tools" not in body and "seed" not in body
    assert body["n"] == 2
    assert body["stream"] is True and body["stream_options"] == {"include_usage": True}
    assert body["response_format"] == {
        "type": "json_schema",
        "json_schema": {"name": "response", "schema": schema, "strict": True},
    }


def test_messages_payload_system_apart_tool_use_and_results() -> None:
    body = messages_payload(
        request(tool_choice={"type": "function", "function": {"name": "add"}}), "m"
    )
    assert body["system"] == "be brief"
    assert body["max_tokens"] == 16 and body["temperature"] == 0.0
    assert [m["role"] for m in body["messages"]] == ["user", "assistant", "user"]
    assert body["messages"][1]["content"] == [
        {"type": "tool_use", "id": "call_2_0", "name": "add", "input": {"a": 12, "b": 34}},
        {"type": "tool_use", "id": "call_2_1", "name": "get_time", "input": {"city": "Oslo"}},
    ]
    # both results in one user message, each naming its call
    assert body["messages"][2]["content"] == [
        {"type": "tool_result", "tool_use_id": "call_2_1", "content": '{"time": "10:00"}'},
        {"type": "tool_result", "tool_use_id": "call_2_0", "content": '{"result": 46}'},
    ]
    assert body["tools"][0] == {
        "name": "add",
        "description": "Add two integers.",
        "input_schema": dict(ADD.parameters),
    }
    assert body["tool_choice"] == {"type": "tool", "name": "add"}


@pytest.mark.parametrize(
    ("choice", "anthropic"),
    [("auto", {"type": "auto"}), ("required", {"type": "any"}), ("none", {"type": "none"})],
)
def test_messages_tool_choice_names(choice: str, anthropic: dict[str, str]) -> None:
    assert messages_payload(request(tool_choice=choice), None)["tool_choice"] == anthropic


@pytest.mark.parametrize(
    ("kw", "why"),
    [
        ({"n": 2}, "n=2"),
        ({"response_format": {"type": "object"}}, "response_format"),
        ({"tool_choice": "sometimes"}, "tool_choice"),
    ],
)
def test_what_messages_cannot_say_is_unsupported(kw: dict[str, object], why: str) -> None:
    with pytest.raises(Inexpressible, match=why):
        messages_payload(request(**kw), None)


def test_ollama_payload_objects_tool_names_and_options() -> None:
    schema = {"type": "object"}
    body = ollama_payload(request(response_format=schema), "qwen:1b", stream=True)
    assert body["model"] == "qwen:1b" and body["stream"] is True
    assert body["messages"][2]["tool_calls"] == [
        {"function": {"name": "add", "arguments": {"a": 12, "b": 34}}},
        {"function": {"name": "get_time", "arguments": {"city": "Oslo"}}},
    ]
    assert body["messages"][3] == {
        "role": "tool",
        "content": '{"time": "10:00"}',
        "tool_name": "get_time",
    }
    assert body["tools"] == [ADD.openai(), GET_TIME.openai()]
    assert body["format"] == schema
    assert body["options"] == {"temperature": 0.0, "num_predict": 16, "seed": 0}


def test_what_ollama_cannot_say_is_unsupported() -> None:
    with pytest.raises(Inexpressible, match="n=2"):
        ollama_payload(request(n=2), "m")
    with pytest.raises(Inexpressible, match="tool_choice"):
        ollama_payload(request(tool_choice="required"), "m")
