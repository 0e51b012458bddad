"""The committed tiny tool model (``examples/models/tiny-tool``): its tokenizer is what its
card states and what ``tiny_tool_data`` builds, and its greedy answers through mlx-lm on the
bundled ``tool-use`` suite are the ones measured for the card (39 of 44 exact).

The answers are pinned whole: a change of weights, tokenizer, chat template or suite, or of
mlx-lm's greedy decoding, shows here first, before the integration tests that compare engines
on this model (their expectations rest on these outputs)."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[2]
MODELS = REPO / "examples" / "models"
MODEL = MODELS / "tiny-tool"
SUITE = REPO / "suites" / "tool-use.jsonl"

ENDOFTEXT, IM_START, IM_END = 1761, 1762, 1763
TOOL_CALL, TOOL_CALL_END, TOOL_RESPONSE, TOOL_RESPONSE_END = 1764, 1765, 1766, 1767
SYSTEM_PROMPT, TOOLS_PREAMBLE, TOOLS_POSTAMBLE = 1768, 1769, 1770
TOOL_SCHEMAS = (1771, 1772, 1773, 1774)  # add, get_weather, get_time, get_date
NEWLINE, SYSTEM_WORD = 10, 1359


def _import(name: str) -> ModuleType:
    """A module of ``examples/models`` (not a package) by path; its siblings importable."""
    if str(MODELS) not in sys.path:
        sys.path.insert(0, str(MODELS))
    spec = importlib.util.spec_from_file_location(name, MODELS / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault(name, module)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def data() -> ModuleType:
    return _import("tiny_tool_data")


@pytest.fixture(scope="module")
def loaded() -> tuple[Any, Any]:
    mlx_lm = pytest.importorskip("mlx_lm")
    model, tokenizer = mlx_lm.load(str(MODEL))
    return model, tokenizer


@pytest.fixture(scope="module")
def tokenizer(loaded: tuple[Any, Any]) -> Any:
    return loaded[1]


def encode(tokenizer: Any, text: str) -> list[int]:
    return list(tokenizer.encode(text, add_special_tokens=False))


# -- the tokenizer ---------------------------------------------------------------------------


def test_every_integer_below_1000_is_one_token(tokenizer: Any) -> None:
    ids = {n: encode(tokenizer, str(n)) for n in range(1000)}
    assert {n: i for n, i in ids.items() if len(i) != 1} == {}
    assert len({i[0] for i in ids.values()}) == 1000  # a token each, none shared


def test_a_leading_space_is_its_own_token_before_a_digit_or_a_capital(tokenizer: Any) -> None:
    """So an argument is the same tokens in the request and in the call: copying is easy."""
    pieces = tokenizer.convert_ids_to_tokens(encode(tokenizer, "add 12"))
    assert pieces == ["add", "Ġ", "12"]
    for word in ("12", "634", "Oslo", "Rio de Janeiro"):
        assert encode(tokenizer, " " + word)[1:] == encode(tokenizer, word), word
        assert encode(tokenizer, " " + word)[0] == encode(tokenizer, " ")[0], word


def test_the_added_tokens_have_the_ids_of_the_card(tokenizer: Any, data: ModuleType) -> None:
    ids = tokenizer.convert_tokens_to_ids(
        [*data.TEMPLATE_TOKENS, *data.FIXED_STRINGS[:3], *data.TOOL_STRINGS]
    )
    assert ids == [
        ENDOFTEXT,
        IM_START,
        IM_END,
        TOOL_CALL,
        TOOL_CALL_END,
        TOOL_RESPONSE,
        TOOL_RESPONSE_END,
        SYSTEM_PROMPT,
        TOOLS_PREAMBLE,
        TOOLS_POSTAMBLE,
        *TOOL_SCHEMAS,
    ]
    assert len(tokenizer) == 1775 and set(tokenizer.eos_token_ids) == {IM_END, ENDOFTEXT}
    assert ENDOFTEXT not in encode(tokenizer, "add 12 and 34")  # no BOS is added


def test_the_system_blocks_are_16_tokens_with_tools_and_6_without(
    tokenizer: Any, data: ModuleType
) -> None:
    """The template writes the tool schemas exactly as the added tokens hold them."""
    user = [{"role": "user", "content": "add 12 and 34"}]
    blocks = {}
    for tools in (data.TOOLS, None):
        text = tokenizer.apply_chat_template(
            user, tools=tools, add_generation_prompt=True, tokenize=False
        )
        ids = encode(tokenizer, text)
        blocks[tools is not None] = ids[: ids.index(IM_END) + 2]
    schemas = [tid for schema in TOOL_SCHEMAS for tid in (NEWLINE, schema)]
    head = [IM_START, SYSTEM_WORD, NEWLINE, SYSTEM_PROMPT]
    assert blocks[True] == [*head, TOOLS_PREAMBLE, *schemas, TOOLS_POSTAMBLE, IM_END, NEWLINE]
    assert blocks[False] == [*head, IM_END, NEWLINE]
    assert (len(blocks[True]), len(blocks[False])) == (16, 6)


def test_the_committed_tokenizer_is_what_tiny_tool_data_builds(data: ModuleType) -> None:
    committed = json.loads((MODEL / "tokenizer.json").read_text(encoding="utf-8"))
    merges = data.learn_merges(data.merge_corpus())
    built = json.loads(data.build_tokenizer(merges).backend_tokenizer.to_str())
    assert built["model"]["merges"] == committed["model"]["merges"]
    assert built["model"]["vocab"] == committed["model"]["vocab"]
    assert [t["content"] for t in built["added_tokens"]] == [
        t["content"] for t in committed["added_tokens"]
    ]


# -- the answers -----------------------------------------------------------------------------

WRONG_ON_THE_SUITE = {
    "tu001": '{"name": "add", "arguments": {"a": 748, "b": 0}}',  # What is 429 plus 0?
    "tu010": '{"name": "add", "arguments": {"a": 7, "b": 671}}',  # what's 7 + 634?
    "tu024": (  # add 7 and 154, then add 922 and 93
        '{"name": "add", "arguments": {"a": 7, "b": 154}}',
        '{"name": "add", "arguments": {"a": 906, "b": 93}}',
    ),
    "tu025": (  # what is 27 plus 6 and 643 plus 599?
        '{"name": "add", "arguments": {"a": 27, "b": 6}}',
        '{"name": "add", "arguments": {"a": 643, "b": 5}}',
    ),
    "tu038": "The sum is 91. It is 21:14 in Quito.",  # the result says 13:14
}
"""The five suite lines the model gets wrong (greedy, mlx-lm, bf16), as measured for its
card: four ``add`` arguments and one copied time."""


def calls_text(*calls: str) -> str:
    return "\n".join(f"<tool_call>\n{call}\n</tool_call>" for call in calls)


@pytest.fixture(scope="module")
def suite_replies(loaded: tuple[Any, Any], data: ModuleType) -> dict[str, tuple[Any, str]]:
    """Each suite line's example and the model's greedy reply (at most 96 tokens)."""
    measure = _import("measure_tiny_tool")
    model, tokenizer = loaded
    replies = {}
    for prompt_id, example in measure.load_suite(SUITE):
        ids = measure.prompt_ids(tokenizer, example)
        replies[prompt_id] = (example, measure.greedy_reply(model, tokenizer, ids, 96))
    return replies


def test_the_suite_is_answered_39_of_44_exactly(
    suite_replies: dict[str, tuple[Any, str]], data: ModuleType
) -> None:
    assert len(suite_replies) == 44
    wrong = {pid for pid, (ex, reply) in suite_replies.items() if not data.reply_correct(ex, reply)}
    assert sorted(wrong) == sorted(WRONG_ON_THE_SUITE)
    for prompt_id, got in WRONG_ON_THE_SUITE.items():
        calls = (got,) if isinstance(got, str) and got.startswith("{") else got
        expected = got if isinstance(got, str) and not got.startswith("{") else calls_text(*calls)
        assert suite_replies[prompt_id][1] == expected, prompt_id


def test_the_answers_of_each_category(suite_replies: dict[str, tuple[Any, str]]) -> None:
    """One line of each category, the reply written out by hand."""
    replies = {
        ex.messages[0]["content"]: reply
        for ex, reply in suite_replies.values()
        if len(ex.messages) == 1 and ex.tools
    }
    weather = '{"name": "get_weather", "arguments": {"city": "Mumbai"}}'
    assert replies["is it sunny in Mumbai?"] == calls_text(weather)
    assert replies["Sum 2 and 33"] == calls_text('{"name": "add", "arguments": {"a": 2, "b": 33}}')
    assert replies["what date is today?"] == calls_text('{"name": "get_date", "arguments": {}}')
    assert replies["time in Hanoi and in Kyoto"] == calls_text(
        '{"name": "get_time", "arguments": {"city": "Hanoi"}}',
        '{"name": "get_time", "arguments": {"city": "Kyoto"}}',
    )
    no_tools = [reply for ex, reply in suite_replies.values() if not ex.tools]
    assert no_tools == ["I have no tools for that."] * 6
    results = [
        (ex.messages[-1]["content"], reply)
        for ex, reply in suite_replies.values()
        if ex.category == "result" and len(ex.messages) == 3
    ]
    sums = [
        (json.loads(result)["result"], reply) for result, reply in results if "result" in result
    ]
    assert sums and all(reply == f"The sum is {value}." for value, reply in sums), sums
