"""Suite lines with tools: ``tools``, ``tool_choice``, ``response_format``, ``tool_call``
answers and conversations with tool calls and results (parsing, every error naming its
``file:line`` and the field, turn, tool or call at fault)."""

from __future__ import annotations

import copy
import json
import re
from pathlib import Path
from typing import Any

import pytest

from pytest_infercheck.conversation import Turn
from pytest_infercheck.suites import SuiteError, derive_prompt_id, load_suite
from pytest_infercheck.tools import Tool, ToolCall, canonical_calls, schema_problem
from tests.structured_fakes import TOOLS

ADD = {"name": "add", "arguments": {"a": 12, "b": 34}}
USER = {"role": "user", "content": "add 12 and 34"}
CALLS = {"role": "assistant", "tool_calls": [ADD]}
RESULT = {"role": "tool", "name": "add", "content": '{"result": 46}'}
SINGLE = {"prompt": "add 12 and 34", "tools": TOOLS}


def write_suite(tmp_path: Path, *records: Any) -> Path:
    path = tmp_path / "tools.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    return path


def load_one(tmp_path: Path, record: dict[str, Any]) -> Any:
    return load_suite(str(write_suite(tmp_path, record)), tmp_path).prompts[0]


# -- what parses -----------------------------------------------------------------------------


def test_a_single_request_with_tools_and_a_reference_call(tmp_path: Path) -> None:
    prompt = load_one(
        tmp_path, {"id": "tu001", **SINGLE, "answer_kind": "tool_call", "answer": [ADD]}
    )
    assert [t.name for t in prompt.tools] == ["add", "get_weather", "get_time", "get_date"]
    assert prompt.tools[0] == Tool("add", TOOLS[0]["function"]["parameters"], "Add two integers.")
    assert [t.openai() for t in prompt.tools] == TOOLS  # sent as written
    assert prompt.answer_kind == "tool_call"
    assert prompt.answer == canonical_calls([ToolCall("add", {"a": 12, "b": 34})])
    assert prompt.answer == '[{"arguments":{"a":12,"b":34},"name":"add"}]'
    assert (prompt.tool_choice, prompt.response_format, prompt.messages) == (None, None, None)


def test_one_call_object_is_a_list_of_one_and_arguments_compare_as_json(
    tmp_path: Path,
) -> None:
    """``{"b": 34.0, "a": 12}`` is the call ``add(a=12, b=34)``; two calls keep their order."""
    one = load_one(
        tmp_path,
        {
            **SINGLE,
            "answer_kind": "tool_call",
            "answer": {"name": "add", "arguments": {"b": 34.0, "a": 12}},
        },
    )
    assert one.answer == canonical_calls([ToolCall("add", {"a": 12, "b": 34})])
    two = load_one(
        tmp_path,
        {
            "prompt": "weather and time in Oslo",
            "tools": TOOLS,
            "answer_kind": "tool_call",
            "answer": [
                {"name": "get_weather", "arguments": {"city": "Oslo"}},
                {"name": "get_time", "arguments": {"city": "Oslo"}},
                {"name": "get_date", "arguments": {}},
            ],
        },
    )
    assert json.loads(two.answer) == [
        {"arguments": {"city": "Oslo"}, "name": "get_weather"},
        {"arguments": {"city": "Oslo"}, "name": "get_time"},
        {"arguments": {}, "name": "get_date"},
    ]


def test_a_conversation_with_a_tool_result_ends_with_the_result(tmp_path: Path) -> None:
    prompt = load_one(
        tmp_path,
        {
            "id": "tr1",
            "messages": [USER, CALLS, RESULT],
            "tools": TOOLS,
            "answer_kind": "exact",
            "answer": "The sum is 46.",
        },
    )
    assert prompt.messages == (
        Turn("user", "add 12 and 34"),
        Turn("assistant", "", (ToolCall("add", {"a": 12, "b": 34}),)),
        Turn("tool", '{"result": 46}', name="add"),
    )
    assert prompt.text == "add 12 and 34"  # the last user turn's
    assert prompt.answer == "The sum is 46."


def test_two_calls_two_results_then_the_conversation_goes_on(tmp_path: Path) -> None:
    """Content beside the calls, one result per call in order, an assistant turn answering
    the results (given or generated), a user turn, and calls again."""
    weather = {"name": "get_weather", "arguments": {"city": "Oslo"}}
    time = {"name": "get_time", "arguments": {"city": "Oslo"}}
    prompt = load_one(
        tmp_path,
        {
            "messages": [
                {"role": "system", "content": "Use the tools."},
                {"role": "user", "content": "weather and time in Oslo"},
                {"role": "assistant", "content": "Looking.", "tool_calls": [weather, time]},
                {"role": "tool", "name": "get_weather", "content": "sunny"},
                {"role": "tool", "name": "get_time", "content": "12:00"},
                {"role": "assistant", "generate": True},
                {"role": "user", "content": "and the date?"},
                {"role": "assistant", "tool_calls": [{"name": "get_date", "arguments": {}}]},
                {"role": "tool", "name": "get_date", "content": "2026-11-26"},
            ],
            "tools": TOOLS,
            "tool_choice": "auto",
        },
    )
    assert prompt.messages[2].content == "Looking."
    assert [c.name for c in prompt.messages[2].tool_calls] == ["get_weather", "get_time"]
    assert prompt.messages[5] == Turn("assistant", None)
    assert (prompt.system, prompt.text, prompt.tool_choice) == (
        "Use the tools.",
        "and the date?",
        "auto",
    )


def test_tool_choice_forms_and_a_response_format(tmp_path: Path) -> None:
    named = {"type": "function", "function": {"name": "add"}}
    for choice in ("auto", "none", "required", named):
        assert load_one(tmp_path, {**SINGLE, "tool_choice": choice}).tool_choice == choice
    schema = {
        "type": "object",
        "properties": {"sum": {"type": "number", "minimum": 0.5}},
        "required": ["sum"],
    }
    prompt = load_one(tmp_path, {"prompt": "json please", "response_format": schema})
    assert prompt.response_format == schema
    assert isinstance(prompt.response_format["properties"]["sum"]["minimum"], float)


def test_derived_ids_cover_the_tools_and_keep_plain_prompts_ids(tmp_path: Path) -> None:
    """The same text with and without tools are two prompts (two ids); a prompt and a
    conversation without tools keep the ids they had."""
    path = write_suite(
        tmp_path,
        {"prompt": "add 12 and 34"},
        SINGLE,
        {**SINGLE, "tool_choice": "required"},
        {"messages": [USER, CALLS, RESULT], "tools": TOOLS},
        {"messages": [USER, {"role": "assistant", "content": "46"}, USER]},
    )
    plain, tools, required, result, conversation = load_suite(str(path), tmp_path).prompts
    assert plain.id == derive_prompt_id("add 12 and 34")
    assert len({plain.id, tools.id, required.id, result.id}) == 4
    payload = [["user", "add 12 and 34"], ["assistant", "46"], ["user", "add 12 and 34"]]
    assert conversation.id == derive_prompt_id(json.dumps(payload))


def test_prompts_with_tools_hash(tmp_path: Path) -> None:
    """Checks key and deduplicate prompts (``dict.fromkeys``): dict-valued fields are compared
    but not hashed."""
    path = write_suite(
        tmp_path,
        {"id": "a", **SINGLE, "tool_choice": {"type": "function", "function": {"name": "add"}}},
        {"id": "b", "messages": [USER, CALLS, RESULT], "tools": TOOLS},
        {"id": "c", "prompt": "x", "response_format": {"type": "object"}},
    )
    prompts = load_suite(str(path), tmp_path).prompts
    assert len(dict.fromkeys(prompts)) == 3
    assert len({hash(p) for p in prompts}) == 3


def test_the_yaml_form(tmp_path: Path) -> None:
    path = tmp_path / "tools.yaml"
    path.write_text(
        "- id: y1\n"
        "  prompt: add 12 and 34\n"
        "  tools:\n"
        "    - type: function\n"
        "      function:\n"
        "        name: add\n"
        "        parameters: {type: object, properties: {a: {type: integer}}}\n"
        "  answer_kind: tool_call\n"
        "  answer: {name: add, arguments: {a: 15.0}}\n",
        encoding="utf-8",
    )
    (prompt,) = load_suite(str(path), tmp_path).prompts
    assert prompt.answer == '[{"arguments":{"a":15},"name":"add"}]'


# -- every error names file:line and what is at fault ----------------------------------------


def _with(record: dict[str, Any], *path: Any, value: Any) -> dict[str, Any]:
    """A deep copy of ``record`` with the item at ``path`` set to ``value`` (deleted when
    ``value`` is ``...``)."""
    out = copy.deepcopy(record)
    node = out
    for key in path[:-1]:
        node = node[key]
    if value is ...:
        del node[path[-1]]
    else:
        node[path[-1]] = value
    return out


WITH_TOOLS = {"prompt": "add 12 and 34", "tools": TOOLS}
ANSWERED = {**WITH_TOOLS, "answer_kind": "tool_call", "answer": [ADD]}
CONVERSATION = {"messages": [USER, CALLS, RESULT], "tools": TOOLS}

BAD = [
    # tools
    ({"prompt": "p", "tools": []}, "field 'tools': expected a non-empty list"),
    ({"prompt": "p", "tools": {"add": 1}}, "field 'tools': expected a non-empty list"),
    (_with(WITH_TOOLS, "tools", 1, value="add"), "field 'tools': tools[1]: expected"),
    (
        _with(WITH_TOOLS, "tools", 0, "strict", value=True),
        'field \'tools\': tools[0]: expected {"type": "function", "function": {...}}, got '
        "keys ['function', 'strict', 'type']",
    ),
    (
        _with(WITH_TOOLS, "tools", 0, "type", value="code_interpreter"),
        "field 'tools': tools[0]: 'type' must be 'function', got \"code_interpreter\"",
    ),
    (_with(WITH_TOOLS, "tools", 0, "function", value="add"), "'function' must be an object"),
    (
        _with(WITH_TOOLS, "tools", 2, "function", "strict", value=True),
        "field 'tools': tools[2]: unknown key 'strict' in 'function'",
    ),
    (
        _with(WITH_TOOLS, "tools", 0, "function", "name", value="add two"),
        "field 'tools': tools[0]: 'name' must be 1-64 letters, digits, '_' or '-', got \"add two\"",
    ),
    (_with(WITH_TOOLS, "tools", 0, "function", "name", value=...), "tools[0]: 'name' must be"),
    (
        _with(WITH_TOOLS, "tools", 3, "function", "name", value="get_time"),
        "field 'tools': tools[3] (get_time): the name is offered twice",
    ),
    (
        _with(WITH_TOOLS, "tools", 1, "function", "description", value=3),
        "tools[1] (get_weather): 'description' must be a string",
    ),
    (
        _with(WITH_TOOLS, "tools", 3, "function", "parameters", value=...),
        "field 'tools': tools[3] (get_date): missing 'parameters'",
    ),
    (
        _with(WITH_TOOLS, "tools", 0, "function", "parameters", value={"type": "string"}),
        "tools[0] (add): 'parameters' must be a JSON schema with type 'object'",
    ),
    (
        _with(WITH_TOOLS, "tools", 0, "function", "parameters", "required", value="a"),
        "tools[0] (add): 'parameters' is not a valid JSON schema: 'a' is not of type 'array' "
        "(at $.required)",
    ),
    (
        _with(WITH_TOOLS, "tools", 0, "function", "parameters", "properties", "a", value=5),
        "tools[0] (add): 'parameters' is not a valid JSON schema",
    ),
    # tool_choice
    ({"prompt": "p", "tool_choice": "auto"}, "'tool_choice' is given without 'tools'"),
    ({**WITH_TOOLS, "tool_choice": "always"}, "field 'tool_choice': expected one of auto, none"),
    (
        {**WITH_TOOLS, "tool_choice": {"type": "function", "name": "add"}},
        "field 'tool_choice': expected one of",
    ),
    (
        {**WITH_TOOLS, "tool_choice": {"type": "function", "function": {"name": "mul"}}},
        "field 'tool_choice': names 'mul', which is not an offered tool (offered: add, "
        "get_weather, get_time, get_date)",
    ),
    (
        {**ANSWERED, "tool_choice": "none"},
        "field 'answer': a 'tool_call' answer, but tool_choice is 'none'",
    ),
    (
        {**ANSWERED, "tool_choice": {"type": "function", "function": {"name": "get_date"}}},
        "field 'answer': calls 'add', but tool_choice names 'get_date'",
    ),
    # response_format
    ({"prompt": "p", "response_format": "json"}, "field 'response_format': a JSON schema must"),
    ({"prompt": "p", "response_format": True}, "field 'response_format': a JSON schema must"),
    (
        {"prompt": "p", "response_format": {"type": "json_schema", "json_schema": {}}},
        "field 'response_format': give the JSON schema itself, not OpenAI's",
    ),
    (
        {"prompt": "p", "response_format": {"type": "json_object"}},
        "field 'response_format': give the JSON schema itself",
    ),
    (
        {"prompt": "p", "response_format": {"type": "objekt"}},
        "field 'response_format': not a valid JSON schema: 'objekt' is not valid under any of "
        "the given schemas (at $.type)",
    ),
    (
        {"prompt": "p", "response_format": {"properties": {"x": {"minimum": "1"}}}},
        "field 'response_format': not a valid JSON schema: '1' is not of type 'number' "
        "(at $.properties.x.minimum)",
    ),
    # the tool_call answer
    (
        {"prompt": "p", "answer_kind": "tool_call"},
        "answer_kind 'tool_call' needs 'tools'",
    ),
    (
        {"prompt": "p", "answer_kind": "tool_call", "answer": ADD},
        "answer_kind 'tool_call' needs 'tools'",
    ),
    (
        {**WITH_TOOLS, "answer_kind": "tool_call", "answer": "add(12, 34)"},
        "field 'answer': a 'tool_call' answer is one call",
    ),
    (
        {**WITH_TOOLS, "answer_kind": "exact", "answer": [ADD]},
        "field 'answer': an object or list is a 'tool_call' answer, but answer_kind is 'exact'",
    ),
    ({**WITH_TOOLS, "answer": [ADD]}, "'answer' is given without 'answer_kind'"),
    ({**ANSWERED, "answer": []}, "field 'answer': expected at least one call"),
    (
        {**ANSWERED, "answer": [ADD, "get_date"]},
        'field \'answer\': call 1: a call is {"name": ..., "arguments": {...}} (both keys, '
        "no others), got a string",
    ),
    (
        {**ANSWERED, "answer": {"name": "get_date"}},
        'field \'answer\': call 0: a call is {"name": ..., "arguments": {...}} (both keys, '
        "no others), got keys ['name']",
    ),
    (
        {**ANSWERED, "answer": {"function": "add", "arguments": {}}},
        "got keys ['arguments', 'function']",
    ),
    ({**ANSWERED, "answer": {"name": "", "arguments": {}}}, "call 0: 'name' must be a non-empty"),
    (
        {**ANSWERED, "answer": {"name": "add", "arguments": '{"a": 1, "b": 2}'}},
        "field 'answer': call 0 (add): 'arguments' must be an object (of the tool's "
        "parameters), got a string",
    ),
    (
        {**ANSWERED, "answer": [ADD, {"name": "mul", "arguments": {}}]},
        "field 'answer': call 1 calls 'mul', which is not an offered tool (offered: add, "
        "get_weather, get_time, get_date)",
    ),
    (
        {**ANSWERED, "answer": {"name": "add", "arguments": {"a": 12}}},
        "field 'answer': call 0 (add): arguments {\"a\":12} do not follow its parameters: "
        "'b' is a required property",
    ),
    (
        {**ANSWERED, "answer": {"name": "add", "arguments": {"a": 12, "b": "34"}}},
        'field \'answer\': call 0 (add): arguments {"a":12,"b":"34"} do not follow its '
        "parameters: '34' is not of type 'integer' (at $.b)",
    ),
    (
        {**ANSWERED, "answer": {"name": "add", "arguments": {"a": 12, "b": 34.5}}},
        "(at $.b)",
    ),
    # conversations
    (
        _with(CONVERSATION, "messages", 1, "tool_calls", value=[]),
        "field 'messages': turn 1: 'tool_calls' must be a non-empty list of calls",
    ),
    (
        _with(CONVERSATION, "messages", 1, "tool_calls", value=ADD),
        "turn 1: 'tool_calls' must be a non-empty list of calls",
    ),
    (
        _with(CONVERSATION, "messages", 1, "tool_calls", 0, value={"name": "add"}),
        "field 'messages': turn 1: call 0: a call is",
    ),
    (
        _with(CONVERSATION, "messages", 1, "tool_calls", 0, "arguments", value=[12, 34]),
        "field 'messages': turn 1: call 0 (add): 'arguments' must be an object",
    ),
    (
        _with(CONVERSATION, "messages", 1, "content", value=None),
        "turn 1: 'content' beside 'tool_calls' must be a string",
    ),
    (
        _with(CONVERSATION, "messages", 0, "tool_calls", value=[ADD]),
        "field 'messages': turn 0: only an assistant turn can have 'tool_calls'",
    ),
    (
        _with(
            CONVERSATION,
            "messages",
            1,
            value={"role": "assistant", "generate": True, "tool_calls": [ADD]},
        ),
        "turn 1: a 'generate' turn has no 'tool_calls'",
    ),
    (
        _with(CONVERSATION, "messages", 0, "name", value="add"),
        "field 'messages': turn 0: only a tool turn has a 'name'",
    ),
    (
        _with(CONVERSATION, "messages", 2, "name", value=...),
        "field 'messages': turn 2: a tool turn needs 'name'",
    ),
    (
        _with(CONVERSATION, "messages", 2, "content", value=""),
        "field 'messages': turn 2: 'content' must be a non-empty string",
    ),
    (
        _with(CONVERSATION, "messages", 2, "name", value="get_date"),
        "field 'messages': turn 2: the tool turn answers call 0 of turn 1, add, but names "
        "'get_date'",
    ),
    (
        _with(CONVERSATION, "messages", 2, value={"role": "user", "content": "well?"}),
        "field 'messages': turn 2: expected a tool turn (the result of call 0 of turn 1, add), "
        "got user",
    ),
    (
        _with(CONVERSATION, "messages", 2, value=...),
        "field 'messages': turn 1: call 0 (add) has no tool turn with its result after it",
    ),
    (
        _with(CONVERSATION, "messages", value=[USER, CALLS, RESULT, RESULT]),
        "field 'messages': turn 3: a tool turn must follow an assistant turn with 'tool_calls'",
    ),
    (
        _with(
            CONVERSATION, "messages", value=[USER, {"role": "assistant", "generate": True}, RESULT]
        ),
        "turn 2: a tool turn must follow an assistant turn with 'tool_calls'",
    ),
    (
        _with(CONVERSATION, "messages", value=[RESULT]),
        "field 'messages': turn 0: a tool turn must follow an assistant turn with 'tool_calls'",
    ),
    (
        _with(CONVERSATION, "messages", value=[USER, CALLS, RESULT, USER]),
        "field 'messages': turn 3: expected an assistant turn after a tool turn, got user",
    ),
    (
        _with(
            CONVERSATION,
            "messages",
            value=[USER, CALLS, RESULT, {"role": "assistant", "content": "46"}],
        ),
        "turn 3: the last turn must be a user turn or a tool result",
    ),
    (
        _with(
            _with(CONVERSATION, "messages", 1, "tool_calls", 0, "name", value="mul"),
            "messages",
            2,
            "name",
            value="mul",
        ),
        "field 'messages': turn 1: call 0 calls 'mul', which is not an offered tool",
    ),
    (
        _with(
            CONVERSATION,
            "messages",
            value=[USER, {"role": "assistant", "content": "46"}, {**RESULT, "name": "mul"}],
        ),
        "field 'messages': turn 2: a tool turn must follow an assistant turn",
    ),
    (
        _with(CONVERSATION, "messages", 1, "tool_calls", 0, "arguments", value={"a": 1, "c": 2}),
        'field \'messages\': turn 1: call 0 (add): arguments {"a":1,"c":2} do not follow its '
        "parameters: 'b' is a required property",
    ),
    (
        _with(CONVERSATION, "tools", value=...),
        "field 'messages': turn 1: calls tools, but the prompt offers none (give 'tools')",
    ),
    (
        {**CONVERSATION, "tools": TOOLS[1:]},
        "field 'messages': turn 1: call 0 calls 'add', which is not an offered tool (offered: "
        "get_weather, get_time, get_date)",
    ),
]


@pytest.mark.parametrize(("record", "message"), BAD, ids=[m for _, m in BAD])
def test_a_bad_line_names_its_line_and_what_is_at_fault(
    tmp_path: Path, record: dict[str, Any], message: str
) -> None:
    path = write_suite(tmp_path, {"prompt": "fine"}, record)
    with pytest.raises(SuiteError) as caught:
        load_suite(str(path), tmp_path)
    assert str(caught.value).startswith(f"{path}:2: "), caught.value
    assert message in str(caught.value), caught.value


def test_a_bad_yaml_tool_line_names_its_line(tmp_path: Path) -> None:
    path = tmp_path / "tools.yaml"
    path.write_text(
        "- prompt: fine\n"
        "- prompt: add\n"
        "  tools: [{type: function, function: {name: add, parameters: {type: object}}}]\n"
        "  answer_kind: tool_call\n"
        "  answer: {name: sub, arguments: {}}\n",
        encoding="utf-8",
    )
    with pytest.raises(SuiteError, match=rf"^{re.escape(str(path))}:2: .*'sub'"):
        load_suite(str(path), tmp_path)


def test_schema_problem_refuses_what_is_not_a_schema() -> None:
    assert schema_problem({"type": "object", "properties": {}}) is None
    assert schema_problem({"$schema": "http://json-schema.org/draft-07/schema#"}) is None
    assert "not a valid JSON schema" in str(
        schema_problem({"$schema": "http://json-schema.org/draft-04/schema#", "minimum": "x"})
    )
    assert "must be an object" in str(schema_problem([]))


# -- the bundled tool-use suite --------------------------------------------------------------


def test_the_bundled_tool_use_suite_loads() -> None:
    """At least 40 requests (the issue's floor) over the shared tool set: single calls, calls
    of the zero-argument tool, two calls, answers after a tool result, and requests without
    tools; every reference call is canonical and names an offered tool."""
    suite = load_suite("tool-use", Path.cwd())
    prompts = suite.prompts
    assert len(prompts) >= 40
    assert len({p.id for p in prompts}) == len(prompts)
    shared = [
        Tool(t["function"]["name"], t["function"]["parameters"], t["function"]["description"])
        for t in TOOLS
    ]
    for prompt in prompts:
        assert prompt.tools in ((), tuple(shared)), prompt.id
        if prompt.answer_kind == "tool_call":
            assert prompt.answer is not None and prompt.tools, prompt.id
            calls = json.loads(prompt.answer)
            assert prompt.answer == canonical_calls(
                [ToolCall(c["name"], c["arguments"]) for c in calls]
            )
    calls = {
        p.id: json.loads(p.answer) for p in prompts if p.answer_kind == "tool_call" and p.answer
    }
    assert any(len(c) == 2 for c in calls.values())  # two calls
    assert any({"name": "get_date", "arguments": {}} in c for c in calls.values())  # no args
    results = [p for p in prompts if p.messages is not None and p.messages[-1].role == "tool"]
    assert results and all(p.tools for p in results)
    assert all(
        any(t.tool_calls for t in p.messages or ()) for p in results
    )  # each result answers a call in its history
    assert any(not p.tools for p in prompts)  # without tools: answered plainly
