"""structured-parity's pure logic on hand-built responses (no server): reading an answer into
its record with its validity faults, comparing two answers field by field, the item's
violations and the aggregate (the same for any order of its items, as a merge of shards
gives them), the request built from a suite prompt, and the views (model output escaped)."""

from __future__ import annotations

import random
from typing import Any

import pytest
from pydantic import ValidationError

from pytest_infercheck.checks.framework.items import RecordedItem, summarize_items
from pytest_infercheck.checks.registry import kind_named
from pytest_infercheck.checks.structured_parity.judge import findings
from pytest_infercheck.checks.structured_parity.present import (
    describe,
    structured_aggregate,
    structured_prompt,
)
from pytest_infercheck.checks.structured_parity.records import (
    RequestFacts,
    StructuredParityAggregate,
    StructuredParityContext,
    StructuredParityPrompt,
)
from pytest_infercheck.checks.structured_parity.spec import (
    StructuredParitySpec,
    StructuredParityThresholds,
)
from pytest_infercheck.checks.structured_parity.summarize import summarize
from pytest_infercheck.conversation import Turn
from pytest_infercheck.records import load_record, plain_data
from pytest_infercheck.structured.call_ids import link_calls
from pytest_infercheck.structured.judge import compare_results, path_result, visible_content
from pytest_infercheck.structured.records import (
    ChatTurn,
    PlacedCall,
    StructuredChoice,
    StructuredRequest,
    StructuredResponse,
    Usage,
)
from pytest_infercheck.structured.request import (
    UnfilledTurn,
    response_schema,
    structured_request,
)
from pytest_infercheck.structured.results import NotAnswered, PathResult
from pytest_infercheck.suites import Prompt
from pytest_infercheck.tools import Tool, ToolCall

INT = {"type": "integer"}
CITY = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
TOOLS = (
    Tool(
        "add",
        {"type": "object", "properties": {"a": INT, "b": INT}, "required": ["a", "b"]},
        "Add two integers.",
    ),
    Tool("get_weather", CITY, "Get the current weather in a city."),
    Tool("get_time", CITY, "Get the local time in a city."),
    Tool("get_date", {"type": "object", "properties": {}}, "Get today's date."),
)
REQUEST = StructuredRequest(
    messages=(ChatTurn("user", "add 12 and 34"),), max_tokens=32, tools=TOOLS
)
ADD = ToolCall("add", {"a": 12, "b": 34})


def choice(
    *calls: ToolCall | tuple[ToolCall, str],
    content: str | None = None,
    reasoning: str | None = None,
    finish: str | None = "tool_calls",
) -> StructuredChoice:
    placed = tuple(
        PlacedCall(c[0], c[1]) if isinstance(c, tuple) else PlacedCall(c, "tool_calls")
        for c in calls
    )
    return StructuredChoice(content, reasoning, placed, finish)


def response(
    path: str, *choices: StructuredChoice, usage: tuple[int | None, int | None] | None = (40, 20)
) -> StructuredResponse:
    return StructuredResponse(
        path,  # type: ignore[arg-type]
        tuple(choices),
        None if usage is None else Usage(*usage),
    )


def result(
    path: str,
    *choices: StructuredChoice,
    usage: tuple[int | None, int | None] | None = (40, 20),
    request: StructuredRequest = REQUEST,
) -> PathResult:
    n = 2 if path == "chat-n2" else 1
    sent = StructuredRequest(
        request.messages,
        request.max_tokens,
        request.tools,
        n=n,
        tool_choice=request.tool_choice,
        response_format=request.response_format,
    )
    return path_result("tiny@llama", path, response(path, *choices, usage=usage), sent)


def texts(path_or_comparison: Any) -> list[str]:
    if isinstance(path_or_comparison, PathResult):
        return [i.text for i in path_or_comparison.invalid]
    return [d.text for d in path_or_comparison.differences]


def fields(comparison: Any) -> list[str]:
    return [d.field for d in comparison.differences]


def compare(ref: PathResult, other: PathResult, same: bool | None = True) -> Any:
    return compare_results(ref, other, "chat", other.path, same_prompt=same)


# -- reading and validity -----------------------------------------------------------------------


def test_a_well_formed_call_is_valid_and_recorded_canonically() -> None:
    r = result("chat", choice(ToolCall.parse("add", '{"b": 34, "a": 12.0}')))
    assert r.status == "answered" and r.invalid == []
    assert r.choices[0].calls[0].arguments == '{"a":12,"b":34}'
    assert (r.prompt_tokens, r.completion_tokens) == (40, 20)


def test_unanswered_paths_are_recorded_with_their_message() -> None:
    lacking = NotAnswered("unsupported", "n: 2 answered 1 choice: the server ignores n")
    refused = path_result("t", "chat-n2", lacking, REQUEST)
    assert (refused.status, refused.message, refused.invalid) == (
        "unsupported",
        "n: 2 answered 1 choice: the server ignores n",
        [],
    )
    bad = path_result("t", "chat-stream", NotAnswered("malformed", "no [DONE]"), REQUEST)
    assert bad.status == "malformed"
    assert texts(bad) == ["malformed: chat-stream: no [DONE]"]
    failed = path_result("t", "chat", NotAnswered("error", "HTTP 500: boom"), REQUEST)
    assert (failed.status, failed.message, failed.invalid) == ("error", "HTTP 500: boom", [])


def test_a_malformed_call_left_in_content_is_a_fault_and_never_a_call() -> None:
    """A ``<tool_call>`` block with its arguments as a string of JSON (a call to the removed
    content_calls, malformed to the one parser, calls_in_text) is named a malformed call and
    differs from the well-formed call."""
    body = '{"name": "add", "arguments": "{\\"a\\": 12, \\"b\\": 34}"}'
    content = f"<tool_call>{body}</tool_call>"
    from pytest_infercheck.structured.records import calls_left_in

    left = StructuredChoice(content, None, calls_left_in(content), "stop")
    r = path_result("t", "chat", response("chat", left), REQUEST)
    assert [i.kind for i in r.invalid] == ["malformed-call"]
    assert texts(r)[0] == (
        "tool_calls: chat: a malformed <tool_call> block (left in content) (not a JSON object "
        f"with a name and object arguments): {body!r}"
    )
    moved = result("chat", choice((ADD, "content"), content=content.replace(body, "x")))
    c = compare(result("chat", choice(ADD)), r)
    assert fields(c) == ["tool_calls", "finish_reason"]
    assert texts(c)[0] == (
        f"tool_calls differ: chat vs chat: call 1 function '' vs 'add': malformed call "
        f'{body!r} vs add({{"a":12,"b":34}})'
    )
    assert moved.choices[0].calls[0].name == "add"


def test_each_validity_fault_names_its_field_and_path() -> None:
    r = result(
        "chat-stream",
        choice(
            ToolCall.parse("add", '{"a": 12, "b": 3'),
            ToolCall("get_news", {"topic": "x"}),
            ToolCall("add", {"a": 12}),
            ToolCall("get_weather", {"city": 7}),
        ),
    )
    assert [i.kind for i in r.invalid] == [
        "arguments-not-json",
        "unknown-function",
        "arguments-schema",
        "arguments-schema",
    ]
    shown = texts(r)
    assert shown[0] == 'tool_calls: chat-stream: add arguments are not JSON: \'{"a": 12, "b": 3\''
    assert shown[1].startswith("tool_calls: chat-stream: call to 'get_news', a function not")
    assert "offered: add, get_weather, get_time, get_date" in shown[1]
    assert shown[2] == (
        'tool_calls: chat-stream: add({"a":12}) violates add\'s parameters schema: '
        "'b' is a required property"
    )
    assert "7 is not of type 'string' (at $.city)" in shown[3]


def test_a_zero_argument_call_is_valid() -> None:
    assert result("chat", choice(ToolCall.parse("get_date", "{}"))).invalid == []
    # ... but an empty arguments text is not JSON (a reader keeps what the server sent)
    assert [i.kind for i in result("chat", choice(ToolCall.parse("get_date", ""))).invalid] == [
        "arguments-not-json"
    ]


def test_finish_reason_tool_calls_needs_a_parsed_call() -> None:
    left = result(
        "chat", choice((ADD, "content"), content='<tool_call>{"name": "add"}</tool_call>')
    )
    assert texts(left) == [
        "finish_reason: chat says 'tool_calls' but the response has no tool_calls "
        "(calls left in content)"
    ]
    assert result("chat", choice((ADD, "content"), finish="stop")).invalid == []


@pytest.mark.parametrize(
    ("tool_choice", "calls", "fault"),
    [
        ("none", (ADD,), 'tool_choice: chat: \'none\' but it called add({"a":12,"b":34})'),
        ("required", (), "tool_choice: chat: 'required' but no tool_calls"),
        (
            {"type": "function", "function": {"name": "get_date"}},
            (ADD,),
            'tool_choice: chat: function \'get_date\' but add({"a":12,"b":34})',
        ),
        ("auto", (), None),
        ("required", (ADD,), None),
    ],
)
def test_tool_choice_is_held_to(
    tool_choice: Any, calls: tuple[ToolCall, ...], fault: str | None
) -> None:
    request = StructuredRequest(REQUEST.messages, 32, TOOLS, tool_choice=tool_choice)
    finish = "tool_calls" if calls else "stop"
    r = result("chat", choice(*calls, finish=finish), request=request)
    assert texts(r) == ([] if fault is None else [fault])


SCHEMA = {
    "type": "object",
    "properties": {"name": {"type": "string"}, "age": {"type": "integer"}},
    "required": ["name", "age"],
}


@pytest.mark.parametrize(
    ("content", "fault"),
    [
        ('{"name": "Ann", "age": 3}', None),
        (
            '{"name": "Ann"}',
            "content: chat: violates the response_format schema: 'age' is a "
            'required property: \'{"name": "Ann"}\'',
        ),
        ('{"name": "Ann", "age": 3', "content: chat: not JSON"),
        (None, "content: chat: not JSON"),
    ],
)
def test_content_is_held_to_response_format(content: str | None, fault: str | None) -> None:
    request = StructuredRequest(REQUEST.messages, 32, response_format=SCHEMA)
    r = result("chat", choice(content=content, finish="stop"), request=request)
    if fault is None:
        assert r.invalid == []
    else:
        assert len(r.invalid) == 1 and r.invalid[0].kind == "response-format"
        assert r.invalid[0].text.startswith(fault)


def test_response_schema_reads_the_openai_shapes() -> None:
    assert response_schema(SCHEMA) == SCHEMA
    wrapped = {"type": "json_schema", "json_schema": {"name": "p", "schema": SCHEMA}}
    assert response_schema(wrapped) == SCHEMA
    assert response_schema({"type": "json_object"}) == {"type": "object"}
    assert response_schema(None) is None


def test_a_choice_count_other_than_n_is_a_fault() -> None:
    r = result("chat-n2", choice(ADD))
    assert texts(r) == ["n: chat-n2 returned 1 choices for n: 2"]


# -- comparing -----------------------------------------------------------------------------------


def test_identical_answers_have_no_difference() -> None:
    ref = result("chat", choice(ADD))
    c = compare(ref, result("chat-stream", choice(ToolCall.parse("add", '{"b":34,"a":12}'))))
    assert c.compared and c.differences == [] and c.notes == []


def test_a_changed_argument_names_tool_calls() -> None:
    ref = result("chat", choice(ADD))
    c = compare(ref, result("chat-stream", choice(ToolCall("add", {"a": 12, "b": 35}))))
    assert texts(c) == [
        'tool_calls differ: chat-stream vs chat: call 1 (add) arguments add({"a":12,"b":35}) '
        'vs add({"a":12,"b":34})'
    ]


def test_another_function_and_a_dropped_call_name_tool_calls() -> None:
    two = choice(ToolCall("get_date", {}), ToolCall("get_time", {"city": "Oslo"}))
    ref = result("chat", two)
    other = compare(
        ref,
        result(
            "chat-stream",
            choice(ToolCall("get_date", {}), ToolCall("get_weather", {"city": "Oslo"})),
        ),
    )
    assert texts(other) == [
        "tool_calls differ: chat-stream vs chat: call 2 function 'get_weather' vs 'get_time': "
        'get_weather({"city":"Oslo"}) vs get_time({"city":"Oslo"})'
    ]
    dropped = compare(ref, result("chat-stream", choice(ToolCall("get_date", {}))))
    assert fields(dropped) == ["tool_calls"]
    assert texts(dropped)[0].startswith("tool_calls differ: chat-stream vs chat: 1 vs 2 calls")


def test_a_call_left_in_content_names_the_place() -> None:
    """The proxy fault: the call moved to content, finish_reason left as it was."""
    ref = result("chat", choice(ADD, content=None))
    moved = result(
        "chat",
        choice(
            (ADD, "content"),
            content='<tool_call>\n{"name": "add", "arguments": {"a": 12, "b": 34}}\n</tool_call>',
        ),
    )
    c = compare_results(ref, moved, "llama chat", "proxy chat", same_prompt=True)
    assert texts(c) == [
        'tool_calls place: proxy chat returned call 1 add({"a":12,"b":34}) in content, llama '
        "chat in tool_calls"
    ]
    assert visible_content(moved.choices[0]) == ""  # the call is compared as a call


def test_nulled_streamed_tool_calls_name_tool_calls_and_finish_reason() -> None:
    """The other proxy fault: streamed ``tool_calls: null`` and ``finish_reason: stop``."""
    ref = result("chat", choice(ADD))
    c = compare(ref, result("chat-stream", choice(finish="stop")))
    assert fields(c) == ["tool_calls", "finish_reason"]
    assert texts(c)[1] == "finish_reason: chat-stream 'stop' vs chat 'tool_calls'"


def test_content_and_reasoning_differences() -> None:
    ref = result("chat", choice(content="The sum is 46.", reasoning="12+34", finish="stop"))
    c = compare(
        ref,
        result("chat-stream", choice(content="The sum is 47.", reasoning="12+34", finish="stop")),
    )
    assert texts(c) == [
        "content differs: chat-stream vs chat (first at character 12): 'The sum is 47.' vs "
        "'The sum is 46.'"
    ]
    left = compare(
        ref, result("messages", choice(content="<think>12+34</think>The sum is 46.", finish="stop"))
    )
    assert fields(left) == ["content", "reasoning_content"]
    assert texts(left)[1] == (
        "reasoning_content split: messages left the reasoning in content, chat returned it "
        "apart: '12+34'"
    )
    # None and "" are the same content
    none = result("chat", choice(ADD, content=None))
    assert compare(none, result("chat-stream", choice(ADD, content=""))).differences == []


def test_usage_rules() -> None:
    ref = result("chat", choice(ADD), usage=(40, 20))
    assert texts(compare(ref, result("chat-stream", choice(ADD), usage=(41, 20)))) == [
        "usage.prompt_tokens: chat-stream 41 vs chat 40 (the same prompt ids)"
    ]
    assert texts(compare(ref, result("chat-stream", choice(ADD), usage=(40, 21)))) == [
        "usage.completion_tokens: chat-stream 21 vs chat 20 with identical outputs"
    ]
    # different outputs: completion tokens are not compared
    other = compare(
        ref, result("chat-stream", choice(ToolCall("add", {"a": 1, "b": 2})), usage=(40, 9))
    )
    assert fields(other) == ["tool_calls"]
    # not reported: a note, not a difference
    quiet = compare(ref, result("chat-stream", choice(ADD), usage=None))
    assert quiet.differences == []
    assert quiet.notes == [
        "usage.prompt_tokens not reported by chat-stream: not compared",
        "usage.completion_tokens not reported by chat-stream: not compared",
    ]
    # across targets whose prompt ids are not known, or differ: noted, not judged
    unknown = compare_results(
        ref,
        result("chat", choice(ADD), usage=(44, 20)),
        "llama chat",
        "vllm chat",
        same_prompt=None,
        prompt_note="prompt ids unknown: tiny@vllm does not say its prompt ids",
    )
    assert unknown.differences == []
    assert unknown.notes == [
        "prompt ids unknown: tiny@vllm does not say its prompt ids",
        "usage.prompt_tokens vllm chat 44 vs llama chat 40: not judged (prompt ids not known "
        "to be the same)",
    ]
    differ = compare_results(
        ref, result("chat", choice(ADD), usage=(44, 25)), "a", "b", same_prompt=False
    )
    assert differ.differences == [] and "prompt ids differ" in differ.notes[0]


def test_n2_choices_must_equal_each_other_and_the_reference() -> None:
    ref = result("chat", choice(ADD), usage=(40, 20))
    same = compare(ref, result("chat-n2", choice(ADD), choice(ADD), usage=(40, 40)))
    assert same.differences == []
    wrong_usage = compare(ref, result("chat-n2", choice(ADD), choice(ADD), usage=(40, 20)))
    assert texts(wrong_usage) == [
        "usage.completion_tokens: chat-n2 20 vs chat 40 (2 x 20) with identical outputs"
    ]
    sampled = compare(
        ref,
        result("chat-n2", choice(ADD), choice(ToolCall("add", {"a": 12, "b": 43})), usage=(40, 40)),
    )
    assert fields(sampled) == ["tool_calls", "n"]
    assert texts(sampled)[0].startswith("tool_calls differ: chat-n2 choice 2 vs chat: call 1")
    assert texts(sampled)[1] == "n: chat-n2 choices 2 and 1 differ at temperature 0 (tool_calls)"


def test_nothing_is_compared_without_both_answers() -> None:
    ref = result("chat", choice(ADD))
    refused = path_result("t", "chat-n2", NotAnswered("unsupported", "only n = 1"), REQUEST)
    c = compare(ref, refused)
    assert not c.compared and c.why_not == "chat-n2 unsupported: only n = 1"


# -- items and the aggregate -----------------------------------------------------------------------


FACTS = RequestFacts("add 12 and 34", 1, ["add"], None, None, 32)


def record(
    prompt_id: str, side: str, others: list[PathResult], target: str | None = None
) -> StructuredParityPrompt:
    ref = result("chat", choice(ADD))
    return StructuredParityPrompt(
        prompt_id=prompt_id,
        target=target or f"tiny@{side}",
        side=side,
        reference_target="tiny@llama",
        request=FACTS,
        results=[ref, *others],
        comparisons=[compare(ref, o) for o in others],
    )


STRICT = StructuredParityThresholds()


def items(thresholds: StructuredParityThresholds = STRICT) -> list[RecordedItem]:
    """Items as a run records them: each record with its violations, as judged under
    ``thresholds``."""
    good = record("tu001", "llama", [result("chat-stream", choice(ADD))])
    nulled = record("tu002", "llama", [result("chat-stream", choice(finish="stop"))])
    refused = record(
        "tu003",
        "llama",
        [path_result("tiny@llama", "chat-n2", NotAnswered("unsupported", "only n = 1"), REQUEST)],
    )
    invalid = record("tu004", "vllm", [result("chat-stream", choice(ToolCall("add", {"a": 1})))])
    out = [
        RecordedItem(
            "prompt",
            name,
            load_record(StructuredParityPrompt, plain_data(r)),
            violations=tuple(item_violations(r, thresholds)),
        )
        for name, r in (
            ("tu001[llama]", good),
            ("tu002[llama]", nulled),
            ("tu003[llama]", refused),
            ("tu004[vllm]", invalid),
        )
    ]
    return [*out, RecordedItem("prompt", "tu005[vllm]", None, "HTTP 500: engine died")]


def item_violations(
    record: StructuredParityPrompt, thresholds: StructuredParityThresholds
) -> list[str]:
    return [v.text for v in findings(record, thresholds)]


CONTEXT = StructuredParityContext("tiny@llama", ["tiny@llama", "tiny@vllm"], ["llama", "vllm"], {})


def test_item_violations_and_allow() -> None:
    nulled = items()[1].record
    strict = item_violations(nulled, StructuredParityThresholds())
    assert strict == [
        'tool_calls differ: chat-stream vs chat: 0 vs 1 calls: [] vs [add({"a":12,"b":34})]',
        "finish_reason: chat-stream 'stop' vs chat 'tool_calls'",
    ]
    lenient = StructuredParityThresholds(allow=["finish_reason"])
    assert item_violations(nulled, lenient) == strict[:1]
    with pytest.raises(ValidationError):
        StructuredParityThresholds(allow=["colour"])  # type: ignore[list-item]


def test_the_aggregate_is_the_same_for_any_order_of_its_items() -> None:
    thresholds = StructuredParityThresholds()
    kind = kind_named("structured-parity")
    assert kind is not None
    summary = summarize_items(kind, items(), thresholds, CONTEXT)
    shuffled = items()
    random.Random(3).shuffle(shuffled)
    again = summarize_items(kind, shuffled, thresholds, CONTEXT)
    assert plain_data(summary.record) == plain_data(again.record)
    assert summary.violations == again.violations
    data: StructuredParityAggregate = summary.record
    assert (data.items, data.passed, data.n_errors) == (5, 2, 1)
    assert data.failed == ["tu002[llama]", "tu004[vllm]", "tu005[vllm]"]
    assert data.differences == {"tool_calls": 2, "finish_reason": 1}
    assert data.invalid == {"arguments-schema": 1}
    assert data.unsupported == {"tiny@llama chat-n2": "only n = 1"}
    assert plain_data(data.paths["chat-stream"]) == {
        "answered": 3,
        "unsupported": 0,
        "failed": 0,
        "compared": 3,
        "differing": 2,
        "not_exercised": 0,
    }
    assert plain_data(data.per_target["vllm"]) == {
        "items": 2,
        "passed": 0,
        "differences": 1,
        "invalid": 1,
        "unsupported": 0,
        "errors": 1,
    }
    assert summary.violations == [
        "1 of 5 items errored: tu005[vllm] (HTTP 500: engine died)",
        "2 of 5 items failed: tu002[llama] (tool_calls differ: chat-stream vs chat: 0 vs 1 "
        'calls: [] vs [add({"a":12,"b":34})]), tu004[vllm] (tool_calls: chat-stream: '
        "add({\"a\":1}) violates add's parameters schema: 'b' is a required property)",
    ]
    props = dict(summary.properties)
    assert props["infercheck_differences_tool_calls"] == 2
    assert props["infercheck_unsupported"] == 1


def test_an_allowed_field_passes_and_is_still_counted() -> None:
    lenient = StructuredParityThresholds(allow=["tool_calls", "finish_reason"])
    data = summarize(items(lenient)[:3], lenient, CONTEXT).record
    assert data.passed == 3 and data.allowed == 2 and data.differences["tool_calls"] == 1


# -- the request ---------------------------------------------------------------------------------


def prompt(**fields: Any) -> Prompt:
    base: dict[str, Any] = dict(
        id="tu001",
        text="add 12 and 34",
        category=None,
        max_tokens=None,
        answer=None,
        answer_kind=None,
        system=None,
        source="suite.jsonl:1",
        tools=TOOLS,
    )
    return Prompt(**{**base, **fields})


def test_a_single_prompt_becomes_one_user_turn_with_its_tools() -> None:
    request = structured_request(prompt(system="Be brief.", tool_choice="auto"), 32)
    assert request.messages == (ChatTurn("system", "Be brief."), ChatTurn("user", "add 12 and 34"))
    assert request.tools == TOOLS and request.tool_choice == "auto"
    assert (request.n, request.temperature, request.max_tokens) == (1, 0.0, 32)


def test_tool_results_answer_the_calls_before_them() -> None:
    turns = (
        Turn("user", "weather and time in Oslo"),
        Turn(
            "assistant",
            None,
            (ToolCall("get_weather", {"city": "Oslo"}), ToolCall("get_time", {"city": "Oslo"})),
        ),
        Turn("tool", '{"time": "12:00"}', name="get_time"),
        Turn("tool", '{"weather": "rain"}', name="get_weather"),
    )
    turns = (turns[0], Turn("assistant", "", turns[1].tool_calls), *turns[2:])
    request = structured_request(prompt(messages=turns), 32)
    assert request.messages[1].tool_calls == turns[1].tool_calls
    assert [(t.role, t.tool_call_id, t.name) for t in request.messages[2:]] == [
        ("tool", None, "get_time"),
        ("tool", None, "get_weather"),
    ]
    # every path's wire shape links each result to the call of its function
    linked = link_calls(request.messages)
    assert linked[1].call_ids == ("call_1_0", "call_1_1")
    assert [t.answers for t in linked[2:]] == ["call_1_1", "call_1_0"]


def test_generate_turns_come_from_filled() -> None:
    turns = (
        Turn("user", "add 12 and 34"),
        Turn("assistant", None),
        Turn("user", "and 1 and 2?"),
    )
    with pytest.raises(UnfilledTurn):
        structured_request(prompt(messages=turns), 32)
    filled = {1: ChatTurn("assistant", None, (ADD,))}
    request = structured_request(prompt(messages=turns), 32, filled=filled)
    assert request.messages[1] == ChatTurn("assistant", None, (ADD,))
    assert structured_request(prompt(messages=turns), 32, upto=1).messages == (
        ChatTurn("user", "add 12 and 34"),
    )


# -- spec and views ----------------------------------------------------------------------------


def test_the_spec_needs_chat_and_distinct_targets() -> None:
    spec = StructuredParitySpec(targets=["t@a", "t@b"], paths=["chat-stream", "chat"])
    assert spec.paths == ["chat", "chat-stream"]
    assert spec.labels() == ["a", "b"]
    with pytest.raises(ValidationError, match="'chat' is the reference"):
        StructuredParitySpec(targets=["t@a"], paths=["chat-stream"])
    with pytest.raises(ValidationError, match="listed twice: t@a"):
        StructuredParitySpec(targets=["t@a", "t@a"])


def test_views_escape_model_output() -> None:
    hostile = "<script>alert(1)</script>"
    ref = result("chat", choice(ToolCall(hostile, {"x": hostile}), content=hostile, finish="stop"))
    other = result("chat-stream", choice(content=hostile + "!", finish="stop"))
    r = StructuredParityPrompt(
        "p<1>",
        "t",
        "t",
        "t",
        RequestFacts(hostile, 1, [hostile], None, None, 8),
        [ref, other],
        [compare(ref, other)],
    )
    html = structured_prompt(plain_data(r))
    assert "<script>" not in html and "&lt;script&gt;" in html
    agg = summarize([RecordedItem("prompt", "p", r)], StructuredParityThresholds(), CONTEXT)
    assert "<script>" not in structured_aggregate(plain_data(agg.record))
    text = describe(r)
    assert "content differs" not in text and "chat-stream vs chat: differs: tool_calls" in text
