"""Conversations: suite parsing (every error with its line), the fill-in of ``generate`` turns
through the generation cache, the per-turn comparison record, and the bundled ``multi-turn``
suite."""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from pytest_infercheck.backends import Generation, GenerationParams, PromptInput
from pytest_infercheck.backends.base import Backend, BackendError, Message, chat_input
from pytest_infercheck.backends.openai_compat import chat_messages, messages_payload
from pytest_infercheck.checks.comparison.gather_prompt import gather_turns
from pytest_infercheck.checks.comparison.judge import final_turn, item_verdict
from pytest_infercheck.checks.comparison.spec import DiffThresholds
from pytest_infercheck.checks.comparison.turns import first_divergent_turn, judge_turns
from pytest_infercheck.conversation import Turn, concrete, generated_indices, history
from pytest_infercheck.generation_cache import GenerationCache, ResolvedTarget
from pytest_infercheck.suites import SuiteError, derive_prompt_id, load_suite
from tests.unit.comparison_fakes import compare
from tests.unit.comparison_fakes import generation as stopped

SYSTEM = {"role": "system", "content": "be brief"}
USER = {"role": "user", "content": "hi"}
GIVEN = {"role": "assistant", "content": "hello"}
GENERATE = {"role": "assistant", "generate": True}


def write_suite(tmp_path: Path, *records: Any) -> Path:
    path = tmp_path / "conv.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    return path


# -- parsing ---------------------------------------------------------------------------------


def test_a_conversation_line_parses_to_turns(tmp_path: Path) -> None:
    turns = [SYSTEM, USER, GENERATE, {"role": "user", "content": "more"}]
    path = write_suite(tmp_path, {"prompt": "single"}, {"id": "c1", "messages": turns})
    single, conv = load_suite(str(path), tmp_path).prompts
    assert single.messages is None
    assert conv.messages == (
        Turn("system", "be brief"),
        Turn("user", "hi"),
        Turn("assistant", None),
        Turn("user", "more"),
    )
    assert (conv.text, conv.system, conv.source) == ("more", "be brief", f"{path}:2")
    assert generated_indices(conv.messages) == (2,)


def test_a_derived_id_covers_every_turn(tmp_path: Path) -> None:
    a = [USER, GIVEN, {"role": "user", "content": "same last"}]
    b = [USER, GENERATE, {"role": "user", "content": "same last"}]
    path = write_suite(tmp_path, {"messages": a}, {"messages": b})
    first, second = load_suite(str(path), tmp_path).prompts
    payload = json.dumps([["user", "hi"], ["assistant", "hello"], ["user", "same last"]])
    assert first.id == derive_prompt_id(payload)
    assert first.id != second.id  # same last user turn, other history


BAD = [
    ({"messages": []}, "'messages' must be a non-empty list of turns"),
    ({"messages": "hi"}, "'messages' must be a non-empty list of turns"),
    ({"messages": ["hi"]}, "turn 0: expected an object, got a string"),
    ({"messages": [{"role": "user", "text": "x"}]}, "turn 0: unknown key 'text'"),
    ({"messages": [{"role": "bot", "content": "x"}]}, "turn 0: 'role' must be one of"),
    ({"messages": [{"role": "user", "content": " "}]}, "turn 0: 'content' must be a non-empty"),
    ({"messages": [USER, {"role": "user", "generate": True}]}, "turn 1: only an assistant"),
    ({"messages": [USER, {"role": "assistant", "generate": False}]}, "'generate' must be true"),
    (
        {"messages": [USER, {"role": "assistant", "generate": True, "content": "x"}, USER]},
        "turn 1: a 'generate' turn has no 'content'",
    ),
    ({"messages": [USER, USER]}, "turn 1: expected an assistant turn after a user turn, got user"),
    ({"messages": [GIVEN, USER]}, "turn 0: expected a user turn first, got assistant"),
    ({"messages": [USER, SYSTEM]}, "turn 1: a system turn may only be the first turn"),
    ({"messages": [SYSTEM]}, "the conversation has no user turn"),
    ({"messages": [USER, GENERATE]}, "turn 1: the last turn must be a user turn"),
    ({"messages": [USER], "system": "s"}, "'system' is given beside 'messages'"),
    ({"messages": [USER], "prompt": "p"}, "both 'prompt' and 'messages' are given"),
    ({"id": "x"}, "missing required field 'prompt' (or 'messages')"),
]


@pytest.mark.parametrize(("record", "message"), BAD, ids=[m for _, m in BAD])
def test_a_bad_conversation_names_its_line(
    tmp_path: Path, record: dict[str, Any], message: str
) -> None:
    path = write_suite(tmp_path, {"prompt": "fine"}, record)
    with pytest.raises(SuiteError) as caught:
        load_suite(str(path), tmp_path)
    assert str(caught.value).startswith(f"{path}:2: ")
    assert message in str(caught.value)


def test_a_yaml_conversation_names_its_line(tmp_path: Path) -> None:
    path = tmp_path / "conv.yaml"
    path.write_text(
        "- prompt: fine\n"
        "- messages:\n"
        "    - {role: user, content: hi}\n"
        "    - {role: assistant, generate: true}\n",
        encoding="utf-8",
    )
    with pytest.raises(SuiteError, match=rf"^{re.escape(str(path))}:2: .*last turn must be"):
        load_suite(str(path), tmp_path)


# -- pure helpers and the message list sent to servers ---------------------------------------


def test_concrete_and_history_fill_generated_turns() -> None:
    turns = (Turn("user", "a"), Turn("assistant", None), Turn("user", "b"))
    assert history(turns, 1, {}) == (Message("user", "a"),)
    assert concrete(turns, {1: "x"}) == (
        Message("user", "a"),
        Message("assistant", "x"),
        Message("user", "b"),
    )
    with pytest.raises(KeyError):
        concrete(turns, {})


def test_chat_requests_send_every_turn() -> None:
    messages = (
        Message("system", "s"),
        Message("user", "a"),
        Message("assistant", "x"),
        Message("user", "b"),
    )
    prompt = chat_input(messages, thinking=False)
    assert (prompt.text, prompt.system, prompt.messages) == ("b", "s", messages)
    assert chat_messages(prompt) == [{"role": m.role, "content": m.content} for m in messages]
    body = messages_payload(prompt, GenerationParams(4), None)
    assert body["system"] == "s"
    assert [m["role"] for m in body["messages"]] == ["user", "assistant", "user"]
    # a [system, user] list is a single-turn prompt: no messages field, same key as before
    single = chat_input((Message("system", "s"), Message("user", "a")), thinking=False)
    assert single == PromptInput("a", None, True, system="s")


# -- the fill-in ----------------------------------------------------------------------------


class TurnBackend(Backend):
    """Renders a turn list to its text (``role:content|...``); answers each prompt with
    ``answers[number of user turns]``; counts renders and generations."""

    kind = "turns"

    def __init__(self, name: str, answers: dict[int, str]) -> None:
        super().__init__(name)
        self.answers = answers
        self.rendered: list[tuple[Message, ...]] = []
        self.generated = 0

    async def render(self, user_text: str, system: str | None, thinking: bool) -> PromptInput:
        return await self.render_messages([Message("user", user_text)], thinking)

    async def render_messages(
        self, messages: Sequence[Message], thinking: bool, **offer: Any
    ) -> PromptInput:
        self.rendered.append(tuple(messages))
        text = "|".join(f"{m.role}:{m.content}" for m in messages)
        return PromptInput(text, None, True, messages=tuple(messages))

    async def generate(self, prompt: PromptInput, params: GenerationParams) -> Generation:
        self.generated += 1
        users = prompt.text.count("user:")
        return stopped(self.answers[users], None)


def conversation_prompt(tmp_path: Path, turns: list[dict[str, Any]]) -> Any:
    return load_suite(str(write_suite(tmp_path, {"id": "c1", "messages": turns})), tmp_path)


TURNS = [
    SYSTEM,
    {"role": "user", "content": "q1"},
    GENERATE,
    {"role": "user", "content": "q2"},
    GENERATE,
    {"role": "user", "content": "q3"},
]


def test_the_target_fills_in_generate_turns_once(tmp_path: Path) -> None:
    (prompt,) = conversation_prompt(tmp_path, TURNS).prompts
    backend = TurnBackend("b", {1: "a1", 2: "a2", 3: "a3"})
    target = ResolvedTarget("b@x", ("b",), backend)
    cache = GenerationCache()
    try:
        params = GenerationParams(max_tokens=4)
        conv = cache.conversation(target, prompt, False, params)
        again = cache.conversation(target, prompt, False, params)
    finally:
        cache.close()
    assert again is conv
    assert backend.generated == 2  # turns 2 and 4, once each
    assert [t.index for t in conv.generated] == [2, 4]
    assert [t.generation.text for t in conv.generated] == ["a1", "a2"]
    # turn 4 was generated from the history with turn 2 fed back
    assert conv.generated[1].prompt.text == "system:be brief|user:q1|assistant:a1|user:q2"
    assert conv.messages == (
        Message("system", "be brief"),
        Message("user", "q1"),
        Message("assistant", "a1"),
        Message("user", "q2"),
        Message("assistant", "a2"),
        Message("user", "q3"),
    )
    assert conv.final.messages == conv.messages
    assert backend.rendered == [conv.messages[:2], conv.messages[:4], conv.messages]


def test_a_render_error_names_the_prompt(tmp_path: Path) -> None:
    class SingleTurn(TurnBackend):
        """Renders one prompt at a time (the base class's render_messages)."""

        render_messages = Backend.render_messages  # type: ignore[assignment]

        async def render(self, user_text: str, system: str | None, thinking: bool) -> PromptInput:
            return PromptInput(f"user:{user_text}", None, True, system=system)

    (prompt,) = conversation_prompt(tmp_path, TURNS).prompts
    target = ResolvedTarget("b@x", ("b",), SingleTurn("one", {1: "a1"}))
    cache = GenerationCache()
    try:
        with pytest.raises(BackendError, match=r"prompt c1 \(.*conv.jsonl:1\): backend 'one'.*"):
            cache.conversation(target, prompt, False, GenerationParams(4))
        with pytest.raises(ValueError, match="has generate turns"):
            cache.render(target, prompt, False)
    finally:
        cache.close()


# -- the per-turn record ------------------------------------------------------------------------


def test_turns_compare_each_generated_turn_on_the_baselines_history(tmp_path: Path) -> None:
    (prompt,) = conversation_prompt(tmp_path, TURNS).prompts
    base = TurnBackend("base", {1: "a1", 2: "a2", 3: "a3"})
    loop = "aabbccddeeffgghh"  # every other character doubled, 8 pairs: a stutter finding
    test = TurnBackend("test", {1: loop, 2: "a2 but not", 3: "a3"})
    baseline = ResolvedTarget("base@x", ("base",), base)
    other = ResolvedTarget("test@x", ("test",), test)
    cache = GenerationCache()
    params = GenerationParams(max_tokens=4)
    try:
        conv = cache.conversation(baseline, prompt, False, params)
        gathered = gather_turns(cache, baseline, other, prompt, conv, params, False)
        turns, faults, readings = judge_turns(gathered)
    finally:
        cache.close()
    assert faults == []
    # every generated turn's output is read once, both sides: 2 turns x 2 sides
    assert len(readings) == 4
    found = [r.degenerate for r in readings if r.degenerate is not None]
    assert [(d.pattern, d.covered) for d in found] == [("stutter", 16)]
    assert "turn 2" in found[0].text
    assert [(t.index, t.role, t.kind) for t in turns] == [
        (0, "system", "given"),
        (1, "user", "given"),
        (2, "assistant", "generated"),
        (3, "user", "given"),
        (4, "assistant", "generated"),
        (5, "user", "given"),
    ]
    assert (turns[2].base_text, turns[2].test_text, turns[2].same) == ("a1", loop, False)
    # the test side answered turn 4 on the baseline's history (a1 fed back, not its own)
    assert test.rendered[-1] == conv.messages[:4]
    assert (turns[4].test_text, turns[4].same) == ("a2 but not", False)
    assert (turns[4].first_divergence, turns[4].divergence_unit) == (2, "char")
    assert first_divergent_turn(turns) == 2


def test_a_divergent_earlier_turn_fails_expect_identical() -> None:
    same = stopped("46", [2, 3, 0])
    result = compare(_fixed(same), _fixed(same))
    assert result.identical
    from pytest_infercheck.checks.comparison.turns import TurnComparison

    turns = [
        TurnComparison(0, "user", "given", "q1"),
        TurnComparison(1, "assistant", "generated", "a", "b", False, "text differs", 0, "char"),
        TurnComparison(2, "user", "given", "q2"),
        final_turn(3, result),
    ]
    assert [t.same for t in turns] == [None, False, None, True]
    from dataclasses import replace

    record = replace(result, turns=turns, first_divergent_turn=first_divergent_turn(turns))
    assert record.first_divergent_turn == 1
    identical = DiffThresholds()
    assert item_verdict(record, identical) == [
        "turn 1 not identical: text differs (expect: identical)"
    ]
    budget = DiffThresholds(expect="budget", max_kl=1.0)
    assert item_verdict(record, budget) == []  # budget gates judge the final turn only


def _fixed(generation: Generation) -> Any:
    from tests.unit.comparison_fakes import FakeBackend

    return FakeBackend("fixed", generation)


class BrokenTurnBackend(TurnBackend):
    """Answers turn 1 (the first generated turn) with ``broken``; the others as given."""

    def __init__(self, name: str, answers: dict[int, str], broken: Generation) -> None:
        super().__init__(name, answers)
        self.broken = broken

    async def generate(self, prompt: PromptInput, params: GenerationParams) -> Generation:
        if prompt.text.count("user:") == 1:
            self.generated += 1
            return self.broken
        return await super().generate(prompt, params)


@pytest.mark.parametrize(
    ("broken", "named"),
    [
        (
            stopped("", None),
            "empty generation: the test output of turn 2 generated no characters while",
        ),
        (
            stopped("a1", None, chosen_logprobs=[float("nan")]),
            "non-finite logprob in the test output of turn 2",
        ),
    ],
    ids=["empty", "nan"],
)
def test_an_empty_or_non_finite_earlier_turn_fails_the_item_naming_it(
    tmp_path: Path, broken: Generation, named: str
) -> None:
    """Fail closed on an earlier turn as on the final one, whatever the gates: an empty
    output against a non-empty one, and a NaN logprob, are faults of the item naming turn 2
    (here under ``expect: budget`` with no threshold, where nothing else would fail it)."""
    (prompt,) = conversation_prompt(tmp_path, TURNS).prompts
    base = TurnBackend("base", {1: "a1", 2: "a2", 3: "a3"})
    test = BrokenTurnBackend("test", {1: "a1", 2: "a2", 3: "a3"}, broken)
    baseline = ResolvedTarget("base@x", ("base",), base)
    other = ResolvedTarget("test@x", ("test",), test)
    cache = GenerationCache()
    params = GenerationParams(max_tokens=4)
    try:
        conv = cache.conversation(baseline, prompt, False, params)
        gathered = gather_turns(cache, baseline, other, prompt, conv, params, False)
        _, faults, _ = judge_turns(gathered)
    finally:
        cache.close()
    assert len(faults) == 1 and faults[0].text.startswith(named), faults
