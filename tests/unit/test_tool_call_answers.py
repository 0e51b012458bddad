"""Tool-call answers (``answer_kind: tool_call``): the calls of an output, read from its
``<tool_call>`` blocks and from the calls a chat server returned apart, judged with the one
flip taxonomy. Every expected value below was written by hand."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pytest_infercheck.backends.base import Generation, GenerationParams, PromptInput
from pytest_infercheck.backends.http import HttpSettings
from pytest_infercheck.backends.ollama import OllamaBackend
from pytest_infercheck.backends.openai_compat import (
    assemble_chunks,
    delta_calls,
    message_calls,
    parse_choice,
    parse_message,
)
from pytest_infercheck.golden import load_golden, make_entry, make_header, write_golden
from pytest_infercheck.metrics.answers import (
    AnswerKind,
    FlipKind,
    extract_answer,
    judge_answers,
    parse_reference,
    shown_reference,
)
from pytest_infercheck.metrics.consistency import output_text
from pytest_infercheck.metrics.sameness import compare_outputs, same_generation
from pytest_infercheck.tools import (
    MALFORMED,
    ToolCall,
    calls_in_text,
    canonical_calls,
    describe_calls,
    parse_calls,
)

T = "tool_call"
ADD = '[{"arguments":{"a":12,"b":34},"name":"add"}]'
"""The reference ``add(a=12, b=34)`` as suites store it (canonical_calls)."""
TWO = (
    '[{"arguments":{"city":"Oslo"},"name":"get_weather"},'
    '{"arguments":{"city":"Oslo"},"name":"get_time"}]'
)


def block(body: str) -> str:
    """One call as the Hermes / Qwen 2.5 template writes it."""
    return f"<tool_call>\n{body}\n</tool_call>"


ADD_12_34 = block('{"name": "add", "arguments": {"a": 12, "b": 34}}')
ADD_12_35 = block('{"name": "add", "arguments": {"a": 12, "b": 35}}')
ADD_12_36 = block('{"name": "add", "arguments": {"a": 12, "b": 36}}')
WEATHER = block('{"name": "get_weather", "arguments": {"city": "Oslo"}}')
TIME = block('{"name": "get_time", "arguments": {"city": "Oslo"}}')
TIME_BERGEN = block('{"name": "get_time", "arguments": {"city": "Bergen"}}')
BROKEN = block('{"name": "add", "arguments": {"a": 12, "b": 34}')  # a brace short
BROKEN_OTHER = block('{"name": "add", "arguments": {"a": 12 "b": 34}}')  # a comma short


# ------------------------------------------------------------------ judging, by hand

JUDGED: list[tuple[str | None, str, str, FlipKind, str]] = [
    (ADD, ADD_12_34, ADD_12_34, FlipKind.UNCHANGED, "the same call"),
    (ADD, ADD_12_34, ADD_12_35, FlipKind.CORRECT_TO_WRONG, "an argument changed"),
    (ADD, ADD_12_35, ADD_12_34, FlipKind.WRONG_TO_CORRECT, "an argument fixed"),
    (ADD, ADD_12_35, ADD_12_36, FlipKind.WRONG_TO_WRONG, "both wrong, differently"),
    (ADD, ADD_12_35, ADD_12_35, FlipKind.UNCHANGED, "both wrong, alike"),
    (
        ADD,
        ADD_12_34,
        block('{"name": "get_weather", "arguments": {"a": 12, "b": 34}}'),
        FlipKind.CORRECT_TO_WRONG,
        "another function, same arguments",
    ),
    (
        ADD,
        ADD_12_34,
        block('{"arguments": {"b": 34, "a": 12}, "name": "add"}'),
        FlipKind.UNCHANGED,
        "key order is irrelevant",
    ),
    (
        ADD,
        ADD_12_34,
        block('{"name": "add", "arguments": {"a": 12.0, "b": 34}}'),
        FlipKind.UNCHANGED,
        "1 and 1.0 are the same JSON number",
    ),
    (
        ADD,
        ADD_12_34,
        block('{"name": "add", "arguments": {"a": "12", "b": 34}}'),
        FlipKind.CORRECT_TO_WRONG,
        'the string "12" is not the number 12',
    ),
    (
        ADD,
        ADD_12_34,
        block('{"name": "add", "arguments": {"a": 12, "b": 34, "c": 0}}'),
        FlipKind.CORRECT_TO_WRONG,
        "an extra argument",
    ),
    (
        ADD,
        ADD_12_34,
        block('{"name": "add", "arguments": {"a": 12}}'),
        FlipKind.CORRECT_TO_WRONG,
        "a missing argument",
    ),
    (ADD, ADD_12_34, "The sum is 46.", FlipKind.CORRECT_TO_WRONG, "the call is gone"),
    (ADD, "The sum is 46.", ADD_12_34, FlipKind.WRONG_TO_CORRECT, "a call appears"),
    (ADD, "46", "The sum is 46.", FlipKind.UNCHANGED, "no call on either side"),
    (ADD, ADD_12_34, ADD_12_34 + ADD_12_34, FlipKind.CORRECT_TO_WRONG, "an extra call"),
    (ADD, ADD_12_34, BROKEN, FlipKind.CORRECT_TO_WRONG, "a malformed call is wrong"),
    (ADD, BROKEN, ADD_12_34, FlipKind.WRONG_TO_CORRECT, "a malformed call fixed"),
    (ADD, BROKEN, BROKEN, FlipKind.UNCHANGED, "the same malformed text"),
    (ADD, BROKEN, BROKEN_OTHER, FlipKind.WRONG_TO_WRONG, "another malformed text"),
    (ADD, BROKEN, "no call", FlipKind.WRONG_TO_WRONG, "malformed, then no call at all"),
    (TWO, WEATHER + TIME, WEATHER + TIME, FlipKind.UNCHANGED, "two calls"),
    (TWO, WEATHER + TIME, WEATHER + TIME_BERGEN, FlipKind.CORRECT_TO_WRONG, "one of two changed"),
    (TWO, WEATHER + TIME, WEATHER, FlipKind.CORRECT_TO_WRONG, "the second call is missing"),
    (TWO, WEATHER + TIME, TIME + WEATHER, FlipKind.CORRECT_TO_WRONG, "calls are in order"),
    (
        TWO,
        WEATHER + TIME,
        f"Let me check.\n{WEATHER}\nand\n{TIME}\n",
        FlipKind.UNCHANGED,
        "text around and between the blocks is not a call",
    ),
    (
        ADD,
        "<think>I could call add.</think>" + ADD_12_34,
        "<think>" + ADD_12_34 + "</think>no call after thinking",
        FlipKind.CORRECT_TO_WRONG,
        "a call while thinking does not count",
    ),
    (None, ADD_12_34, ADD_12_34, FlipKind.UNCHANGED, "no reference: the same call"),
    (None, ADD_12_34, ADD_12_35, FlipKind.CHANGED, "no reference: an argument changed"),
    (None, BROKEN, BROKEN_OTHER, FlipKind.CHANGED, "no reference: a changed malformed call"),
    (None, BROKEN, "prose", FlipKind.CHANGED, "no reference: malformed vs no call"),
    (None, "prose", "other prose", FlipKind.UNCHANGED, "no reference: no call on either side"),
]


@pytest.mark.parametrize(
    ("reference", "base", "test", "flip", "note"), JUDGED, ids=[j[4] for j in JUDGED]
)
def test_judged_by_hand(
    reference: str | None, base: str, test: str, flip: FlipKind, note: str
) -> None:
    assert judge_answers(T, reference, base, test).flip is flip, note


def test_a_malformed_call_never_equals_a_well_formed_one() -> None:
    broken = extract_answer(BROKEN, T)
    assert broken is not None  # a call was made: it is an answer, not "no answer"
    assert broken != extract_answer(ADD_12_34, T)
    assert broken != parse_reference(ADD, T)
    # No name, and the block's text as a string: no call a reference could equal.
    raw = '{"name": "add", "arguments": {"a": 12, "b": 34}'
    assert broken.value == '[{"arguments":' + json.dumps(raw) + ',"name":""}]'


def test_the_answer_is_read_with_its_arguments() -> None:
    answer = extract_answer(ADD_12_34, T)
    assert answer is not None and answer.kind is AnswerKind.TOOL_CALL
    assert answer.value == ADD
    assert answer.raw == "add(a=12, b=34)"
    assert extract_answer(ADD_12_35, T) != answer


# ------------------------------------------------------------------ calls a server returned apart


def test_server_parsed_calls_are_read_first_then_the_text() -> None:
    parsed = (ToolCall("get_weather", {"city": "Oslo"}),)
    # The server parsed one call out and left the other in its content: both count, in order.
    answer = extract_answer(TIME, T, parsed)
    assert answer is not None and answer.value == TWO
    # The same call from a parsing server and from raw text is the same answer.
    server = (ToolCall.parse("add", '{"b": 34, "a": 12.0}'),)
    judged = judge_answers(T, ADD, ADD_12_34, "", test_calls=server)
    assert judged.flip is FlipKind.UNCHANGED
    changed = (ToolCall.parse("add", '{"a": 12, "b": 35}'),)
    assert judge_answers(T, ADD, "", "", base_calls=server, test_calls=changed).flip is (
        FlipKind.CORRECT_TO_WRONG
    )


def test_server_calls_with_arguments_that_are_not_json_are_malformed() -> None:
    bad = (ToolCall.parse("add", '{"a": 12, "b": 34'),)
    assert not bad[0].well_formed
    assert judge_answers(T, ADD, ADD_12_34, "", test_calls=bad).flip is FlipKind.CORRECT_TO_WRONG
    nan = ToolCall.parse("add", '{"a": NaN, "b": 34}')
    assert not nan.arguments_valid  # NaN is not JSON
    assert not ToolCall.parse("", "{}").well_formed  # no name
    assert not ToolCall.parse("add", "[12, 34]").well_formed  # not an object
    assert not ToolCall.parse("add", '{"a": 1e400}').arguments_valid  # beyond a float


def test_other_kinds_do_not_read_calls() -> None:
    calls = (ToolCall("add", {"a": 1, "b": 2}),)
    answer = extract_answer("The answer is 3", "number", calls)
    assert answer is not None and answer.raw == "3"


# ------------------------------------------------------------------ references


@pytest.mark.parametrize(
    ("reference", "expected"),
    [
        (ADD, ADD),
        ('[{"name": "add", "arguments": {"b": 34, "a": 12}}]', ADD),
        ('{"name": "add", "arguments": {"a": 12.0, "b": 34}}', ADD),  # one call, not a list
        (TWO, TWO),
        ('[{"arguments": {}, "name": "get_date"}]', '[{"arguments":{},"name":"get_date"}]'),
    ],
)
def test_parse_reference(reference: str, expected: str) -> None:
    parsed = parse_reference(reference, T)
    assert parsed is not None and parsed.value == expected


@pytest.mark.parametrize(
    "reference",
    [
        "[]",  # no call: an output with no call has no answer, so it could never match
        '[{"name": "", "arguments": {}}]',
        '[{"name": "add", "arguments": "{\\"a\\": 1}"}]',
        '[{"name": "add"}]',
        '[{"name": "add", "arguments": {}, "id": "call_1"}]',
        '[{"name": 7, "arguments": {}}]',
        '[{"name": "add", "arguments": {"a": NaN}}]',
        ADD_12_34,  # the Hermes text form is an output, not a reference
        "add(a=12, b=34)",
        '[{"name": "add", "arguments": {}}',
    ],
)
def test_parse_reference_rejects(reference: str) -> None:
    assert parse_reference(reference, T) is None
    assert parse_calls(reference) is None


def test_an_output_whose_calls_are_the_reference_is_right() -> None:
    reference = parse_reference(TWO, T)
    calls = parse_calls(TWO)
    assert reference is not None and calls is not None
    text = "".join(block(json.dumps({"name": c.name, "arguments": c.arguments})) for c in calls)
    assert extract_answer(text, T) == reference


def test_shown_reference_is_readable() -> None:
    assert shown_reference(TWO, T) == 'get_weather(city="Oslo"); get_time(city="Oslo")'
    assert shown_reference("1,234", "number") == "1,234"  # other kinds as given
    assert shown_reference(None, T) is None


# ------------------------------------------------------------------ the text parser


def test_calls_in_text() -> None:
    assert calls_in_text("no call here") == ()
    assert calls_in_text(ADD_12_34 + "\n" + TIME) == (
        ToolCall("add", {"a": 12, "b": 34}),
        ToolCall("get_time", {"city": "Oslo"}),
    )
    assert calls_in_text("<tool_call>  \n\t" + '{"name": "get_date", "arguments": {}}' + " ") == (
        ToolCall("get_date", {}),
    )  # unclosed at the end: read to the end
    (broken,) = calls_in_text(BROKEN)
    assert broken.name == MALFORMED and not broken.arguments_valid and not broken.well_formed
    assert broken.arguments == '{"name": "add", "arguments": {"a": 12, "b": 34}'


def test_describe_calls() -> None:
    calls = calls_in_text(ADD_12_34 + block('{"name": "get_date", "arguments": {}}') + BROKEN)
    assert describe_calls(calls) == (
        'add(a=12, b=34); get_date(); malformed call "{\\"name\\": \\"add\\", '
        '\\"arguments\\": {\\"a\\": 12, \\"b\\": 34}"'
    )
    assert describe_calls(()) == "no call"
    assert ToolCall.parse("add", "{a: 1}").readable() == '"add"({a: 1}) (malformed)'


# ------------------------------------------------------------------ what servers return


def test_parse_choice_reads_message_tool_calls() -> None:
    answer = {
        "choices": [
            {
                "message": {
                    "role": "assistant",
                    "content": None,
                    "tool_calls": [
                        {
                            "id": "call_1",
                            "type": "function",
                            "function": {"name": "add", "arguments": '{"a": 12, "b": 34}'},
                        },
                        {
                            "id": "call_2",
                            "type": "function",
                            "function": {"name": "get_date", "arguments": "{}"},
                        },
                    ],
                },
                "finish_reason": "tool_calls",
            }
        ]
    }
    generation = parse_choice(answer, chat=True)
    assert generation.text == ""
    assert generation.tool_calls == (ToolCall("add", {"a": 12, "b": 34}), ToolCall("get_date", {}))
    assert parse_choice({"choices": [{"message": {"content": "hi"}}]}, chat=True).tool_calls == ()


def test_streamed_calls_are_assembled_from_their_fragments() -> None:
    def chunk(delta: dict[str, object], finish: str | None = None) -> dict[str, object]:
        return {"choices": [{"delta": delta, "finish_reason": finish}]}

    chunks = [
        chunk({"role": "assistant", "content": ""}),
        chunk({"tool_calls": [{"index": 0, "id": "c0", "function": {"name": "add"}}]}),
        chunk({"tool_calls": [{"index": 0, "function": {"arguments": '{"a": 1'}}]}),
        chunk({"tool_calls": [{"index": 0, "function": {"arguments": '2, "b": 34}'}}]}),
        chunk({"tool_calls": [{"index": 1, "function": {"name": "get_date", "arguments": ""}}]}),
        chunk({"tool_calls": [{"index": 1, "function": {"arguments": "{}"}}]}),
        chunk({}, "tool_calls"),
        {"choices": [], "usage": {"completion_tokens": 20}},
    ]
    generation = assemble_chunks(chunks, chat=True)
    assert generation.tool_calls == (ToolCall("add", {"a": 12, "b": 34}), ToolCall("get_date", {}))
    assert generation.finish_reason == "tool_calls"


def test_delta_calls_edge_cases() -> None:
    # A zero-argument call streamed as arguments "" (a reported server bug) is malformed.
    (empty,) = delta_calls([{"index": 0, "function": {"name": "get_date", "arguments": ""}}])
    assert not empty.well_formed
    # Entries without an index are calls of their own.
    assert delta_calls(
        [
            {"function": {"name": "get_date", "arguments": "{}"}},
            {"function": {"name": "get_date", "arguments": "{}"}},
        ]
    ) == (ToolCall("get_date", {}), ToolCall("get_date", {}))
    # A fragment holding an object (not JSON text) is taken as the arguments.
    assert delta_calls([{"index": 0, "function": {"name": "add", "arguments": {"a": 1}}}]) == (
        ToolCall("add", {"a": 1}),
    )


def test_message_calls_edge_cases() -> None:
    assert message_calls(None) == ()
    (nameless, unwrapped) = message_calls([{"function": {"arguments": "{}"}}, {"name": "add"}])
    assert nameless.name == MALFORMED and not nameless.well_formed
    assert not unwrapped.well_formed
    # Ollama sends the arguments as an object.
    assert message_calls([{"function": {"name": "add", "arguments": {"a": 1, "b": 2}}}]) == (
        ToolCall("add", {"a": 1, "b": 2}),
    )


def test_anthropic_tool_use_blocks_are_calls() -> None:
    message = {
        "content": [
            {"type": "text", "text": "Adding."},
            {"type": "tool_use", "id": "t1", "name": "add", "input": {"a": 12, "b": 34}},
        ],
        "stop_reason": "tool_use",
    }
    generation = parse_message(message)
    assert generation.text == "Adding."
    assert generation.tool_calls == (ToolCall("add", {"a": 12, "b": 34}),)
    assert judge_answers(
        T, ADD, ADD_12_34, generation.text, test_calls=generation.tool_calls
    ).flip is (FlipKind.UNCHANGED)


def test_ollama_chat_tool_calls_are_read() -> None:
    backend = OllamaBackend("ol", HttpSettings(base_url="http://127.0.0.1:9"), model="m", chat=True)
    answer = {
        "message": {
            "role": "assistant",
            "content": "",
            "tool_calls": [{"function": {"name": "add", "arguments": {"a": 12, "b": 34}}}],
        },
        "done": True,
        "done_reason": "stop",
    }
    generation = backend._generation([answer])
    assert generation.tool_calls == (ToolCall("add", {"a": 12, "b": 34}),)
    assert extract_answer(generation.text, T, generation.tool_calls) == parse_reference(ADD, T)


@pytest.mark.parametrize(
    "calls",
    [(), (ToolCall("add", {"a": 12, "b": 34}), ToolCall("add", '{"a": 1', arguments_valid=False))],
)
def test_golden_files_keep_the_calls_returned_apart(
    tmp_path: Path, calls: tuple[ToolCall, ...]
) -> None:
    rendered = PromptInput("add 12 and 34", None, True)
    generation = Generation("", None, "tool_calls", tool_calls=calls)
    entry = make_entry(
        suite="tool-use",
        prompt_id="tu001",
        asked=("add 12 and 34", None, False),
        rendered=rendered,
        params=GenerationParams(32),
        generation=generation,
        top=None,
        top_keys="text",
    )
    assert ("tool_calls" in entry["output"]) is bool(calls)  # absent when none: files unchanged
    header = make_header(
        name="g", target="t@s", model={"name": "t"}, engine={}, tokenizer=None, top_k=0
    )
    path = tmp_path / "g.json"
    write_golden(path, header, [entry])
    replayed = load_golden(path).generation(rendered, GenerationParams(32))
    assert replayed.tool_calls == calls


# ------------------------------------------------------------------ sameness and emptiness


def test_calls_returned_apart_are_part_of_the_output() -> None:
    add = canonical_calls([ToolCall("add", {"a": 12, "b": 34})])
    other = canonical_calls([ToolCall("add", {"a": 12, "b": 35})])
    same = compare_outputs("", None, "", None, a_calls=add, b_calls=add)
    assert same.same and same.calls_equal is True and same.describe() == "identical"
    changed = compare_outputs("ok", None, "ok", None, a_calls=add, b_calls=other)
    assert not changed.same and changed.calls_equal is False
    assert (changed.first_divergence, changed.divergence_unit) == (2, "char")  # after the text
    assert changed.describe() == "same text, tool calls returned apart differ"
    moved = compare_outputs("", None, ADD_12_34, None, a_calls=add)
    assert moved.describe() == "text differs from character 0; tool calls returned apart differ"
    plain = compare_outputs("x", None, "x", None)
    assert plain.calls_equal is None and "calls_equal" not in plain.to_dict()
    assert same_generation(
        Generation("", None, "tool_calls", tool_calls=calls_in_text(ADD_12_34)),
        Generation("", None, "tool_calls", tool_calls=calls_in_text(ADD_12_35)),
    ).describe() == ("same text, tool calls returned apart differ")


def test_an_output_of_calls_only_is_not_empty() -> None:
    calls = calls_in_text(ADD_12_34)
    assert output_text("", calls) == "add(a=12, b=34)"
    assert output_text("text", calls) == "text"
    assert output_text("", ()) == ""
