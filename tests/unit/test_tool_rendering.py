"""Tool prompts on their way to a backend: the typed concrete turn (:class:`Message`), its
OpenAI shape, what a backend's ``render_messages`` is asked (single-turn tool prompts as
their turns, every render keyed by the tools), backends that cannot offer tools, and golden
files that record and replay tool prompts. Real engines' templates:
tests/integration/test_tool_rendering.py."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from pytest_infercheck.backends import BackendError, Generation, GenerationParams, PromptInput
from pytest_infercheck.backends.base import Backend, Message, chat_input, openai_messages
from pytest_infercheck.conversation import Conversation, GeneratedTurn, Turn, concrete, history
from pytest_infercheck.generation_cache import GenerationCache, ResolvedTarget
from pytest_infercheck.golden import GoldenBackend, load_golden, make_entry, make_header
from pytest_infercheck.golden import write_golden as write_golden_file
from pytest_infercheck.golden.file import offer_key
from pytest_infercheck.suites import Prompt
from pytest_infercheck.tools import Tool, ToolCall

ADD = Tool(
    "add",
    {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]},
    "Add.",
)
DATE = Tool("get_date", {"type": "object", "properties": {}}, "Date.")
CALLS = (ToolCall("add", {"a": 1}), ToolCall("get_date", {}))
TURNS = (
    Turn("user", "add 1, then the date"),
    Turn("assistant", "", CALLS),
    Turn("tool", "1", name="add"),
    Turn("tool", "today", name="get_date"),
    Turn("assistant", None),
    Turn("user", "again"),
    Turn("assistant", "", (ToolCall("add", {"a": 2}),)),
    Turn("tool", "2", name="add"),
)


def test_concrete_turns_keep_calls_and_names() -> None:
    messages = concrete(TURNS, {4: "Done."})
    assert messages[1] == Message("assistant", "", CALLS)
    assert messages[2] == Message("tool", "1", name="add")
    assert messages[4] == Message("assistant", "Done.")
    assert Message("user", "x").key() == ("user", "x")  # plain turns keyed as before
    assert messages[1].key() != Message("assistant", "").key()


def test_openai_messages_number_the_calls_and_answer_them_in_order() -> None:
    messages = concrete(TURNS, {4: "Done."})
    wire = openai_messages(messages)
    ids = [m.get("tool_call_id") for m in wire]
    assert ids == [None, None, "call_0", "call_1", None, None, None, "call_2"]
    assert [c["id"] for c in wire[1]["tool_calls"]] == ["call_0", "call_1"]
    assert wire[1]["tool_calls"][0]["function"] == {"name": "add", "arguments": '{"a": 1}'}
    assert wire[6]["tool_calls"][0]["id"] == "call_2" and wire[7]["tool_call_id"] == "call_2"
    assert wire[7] == {"role": "tool", "tool_call_id": "call_2", "name": "add", "content": "2"}
    assert wire[4] == {"role": "assistant", "content": "Done."}
    template = openai_messages(messages, object_arguments=True)
    assert template[1]["tool_calls"][0]["function"]["arguments"] == {"a": 1}
    assert json.loads(json.dumps(template)) == template


def test_prompt_input_keys_tell_tools_apart() -> None:
    turns = (Message("user", "add 1"),)
    plain = chat_input(turns, False)
    offered = chat_input(turns, False, (ADD,))
    chosen = chat_input(turns, False, (ADD,), "required")
    assert plain == PromptInput("add 1", None, True)  # without tools: as it always was
    assert len({plain.key(), offered.key(), chosen.key()}) == 3
    assert offered.key() == chat_input(turns, False, (ADD,)).key()
    assert hash(chosen) == hash(chat_input(turns, False, (ADD,), "required"))


class ToolBackend(Backend):
    """Renders turns and tools to a text; records what it was asked."""

    kind = "tools"

    def __init__(self, name: str) -> None:
        super().__init__(name)
        self.asked: list[tuple[tuple[Message, ...], tuple[Tool, ...], Any]] = []

    async def render(self, user_text: str, system: str | None, thinking: bool) -> PromptInput:
        self.asked.append(((Message("user", user_text),), (), None))
        return PromptInput(f"plain:{user_text}", None, True, system=system)

    async def render_messages(
        self,
        messages: Sequence[Message],
        thinking: bool,
        *,
        tools: Sequence[Tool] = (),
        tool_choice: Any = None,
    ) -> PromptInput:
        self.asked.append((tuple(messages), tuple(tools), tool_choice))
        names = ",".join(t.name for t in tools)
        text = "|".join(f"{m.role}:{m.content}" for m in messages) + f"|tools:{names}"
        return dataclasses.replace(chat_input(messages, thinking, tools, tool_choice), text=text)

    async def generate(self, prompt: PromptInput, params: GenerationParams) -> Generation:
        return Generation("<tool_call>x</tool_call>", None, "stop")


def _prompt(pid: str, **fields: Any) -> Prompt:
    base: dict[str, Any] = {
        "id": pid,
        "text": "add 1",
        "category": None,
        "max_tokens": 4,
        "answer": None,
        "answer_kind": None,
        "system": None,
        "source": f"t.jsonl:{pid}",
    }
    return Prompt(**{**base, **fields})


def test_a_single_turn_tool_prompt_renders_as_its_turns_with_the_tools() -> None:
    backend = ToolBackend("t")
    target = ResolvedTarget("t@x", ("t",), backend)
    plain = _prompt("p1")
    tooled = _prompt("p2", tools=(ADD, DATE), tool_choice="auto", system="Use tools.")
    other = _prompt("p3", tools=(ADD,), system="Use tools.")
    cache = GenerationCache()
    try:
        a = cache.render(target, plain, False)
        b = cache.render(target, tooled, False)
        c = cache.render(target, other, False)
        assert cache.render(target, tooled, False) is b  # cached
    finally:
        cache.close()
    assert a.text == "plain:add 1" and a.tools == ()
    assert b.text == "system:Use tools.|user:add 1|tools:add,get_date"
    assert (b.tools, b.tool_choice, b.system, b.messages) == (
        (ADD, DATE),
        "auto",
        "Use tools.",
        None,
    )
    assert c.text.endswith("|tools:add")  # same text and system, other tools: another render
    assert backend.asked[1] == (
        (Message("system", "Use tools."), Message("user", "add 1")),
        (ADD, DATE),
        "auto",
    )


def test_a_tool_conversation_fills_in_and_renders_with_its_tools() -> None:
    backend = ToolBackend("t")
    target = ResolvedTarget("t@x", ("t",), backend)
    prompt = _prompt("c1", text="again", messages=TURNS, tools=(ADD, DATE))
    cache = GenerationCache()
    try:
        conversation = cache.conversation(target, prompt, False, GenerationParams(4))
    finally:
        cache.close()
    history, final = backend.asked
    assert history[0] == concrete(TURNS[:4], {}) and history[1] == (ADD, DATE)
    assert conversation.messages[4] == Message("assistant", "<tool_call>x</tool_call>")
    assert final[0] == conversation.messages and final[1] == (ADD, DATE)
    assert conversation.final.messages == conversation.messages
    assert conversation.final.text.endswith("tool:2|tools:add,get_date")


def test_render_many_renders_tool_prompts_ahead_with_their_tools() -> None:
    backend = ToolBackend("t")
    backend.concurrency = 4
    target = ResolvedTarget("t@x", ("t",), backend)
    prompts = [_prompt("p1"), _prompt("p2", tools=(ADD,))]
    cache = GenerationCache()
    try:
        cache.render_many(target, prompts, False)
        asked = len(backend.asked)
        rendered = [cache.render(target, p, False) for p in prompts]
    finally:
        cache.close()
    assert asked == 2 and len(backend.asked) == 2  # both rendered ahead, then from the cache
    assert rendered[1].text == "user:add 1|tools:add" and rendered[1].tools == (ADD,)


@pytest.mark.asyncio
async def test_a_backend_that_renders_one_text_refuses_tools() -> None:
    class OneText(ToolBackend):
        render_messages = Backend.render_messages  # type: ignore[assignment]

    backend = OneText("one")
    assert (await backend.render_messages((Message("user", "hi"),), False)).text == "plain:hi"
    with pytest.raises(
        BackendError, match=r"backend 'one' \(tools\) cannot render a prompt with tools \(add\)"
    ):
        await backend.render_messages((Message("user", "hi"),), False, tools=(ADD,))


# -- golden files ----------------------------------------------------------------------------
HEADER = make_header(
    name="tools-v1",
    target="m@local",
    model={"name": "m"},
    engine={"kind": "mlx-lm"},
    tokenizer="fp",
    top_k=5,
)


def test_golden_records_and_replays_tool_prompts(tmp_path: Path) -> None:
    single_turns = (Message("user", "add 1"),)
    single = PromptInput("<t>add 1", (1, 2), True, "fp", tools=(ADD,), tool_choice="required")
    filled = {4: "Done."}
    before = PromptInput("<t>..", (1, 2), True, "fp", messages=history(TURNS, 4, {}))
    before = dataclasses.replace(before, tools=(ADD, DATE))
    final = PromptInput(
        "<t>...", (1, 2, 3), True, "fp", messages=concrete(TURNS, filled), tools=(ADD, DATE)
    )
    conversation = Conversation(
        TURNS,
        (GeneratedTurn(4, before, Generation("Done.", [4], "stop")),),
        concrete(TURNS, filled),
        final,
    )
    served = Generation("", None, "tool_calls", tool_calls=(ToolCall("add", {"a": 1}),))
    entries = [
        make_entry(
            suite="tools",
            prompt_id="p1",
            asked=("add 1", None, False),
            rendered=single,
            params=GenerationParams(4),
            generation=served,
            top=None,
            top_keys="text",
        ),
        make_entry(
            suite="tools",
            prompt_id="c1",
            asked=("again", None, False),
            rendered=final,
            params=GenerationParams(4),
            generation=Generation("ok", [5], "stop"),
            top=None,
            top_keys="id",
            conversation=conversation,
        ),
    ]
    assert entries[0]["prompt"]["tools"] == [ADD.openai()]
    assert entries[0]["prompt"]["tool_choice"] == "required"
    assert entries[0]["output"]["tool_calls"] == [{"name": "add", "arguments": {"a": 1}}]
    calls = [{"name": "add", "arguments": {"a": 1}}, {"name": "get_date", "arguments": {}}]
    assert entries[1]["prompt"]["messages"][1] == [
        "assistant",
        "",
        {"tool_calls": calls, "name": None},
    ]
    assert entries[1]["prompt"]["messages"][2] == ["tool", "1", {"tool_calls": [], "name": "add"}]
    assert entries[1]["input"]["messages"][4] == ["assistant", "Done."]
    path = tmp_path / "g.json"
    write_golden_file(path, HEADER, entries)
    golden = load_golden(path)

    assert golden.asked("add 1", None, False, None, offer_key((ADD,), "required"))
    assert not golden.asked("add 1", None, False)  # without tools: not this prompt
    replayed = golden.render_messages(single_turns, False, (ADD,), "required")
    assert replayed == single
    assert golden.generation(replayed, GenerationParams(4)).tool_calls == served.tool_calls
    with pytest.raises(BackendError, match=r"with tools add \(a turn"):
        golden.render_messages(single_turns, False, (ADD,))  # no tool_choice: not recorded
    assert golden.asked("again", None, False, TURNS, offer_key((ADD, DATE), None))
    assert not golden.asked("again", None, False, TURNS)
    # Through the generation cache, as a comparison's golden baseline fills them in.
    backend = GoldenBackend("golden:tools-v1", golden)
    target = ResolvedTarget("golden:tools-v1", ("golden", str(path)), backend)
    cache = GenerationCache()
    try:
        tool_prompt = _prompt("p1", tools=(ADD,), tool_choice="required")
        assert cache.render(target, tool_prompt, False) == single
        prompt = _prompt("c1", text="again", messages=TURNS, tools=(ADD, DATE))
        replayed_conversation = cache.conversation(target, prompt, False, GenerationParams(4))
        assert replayed_conversation.messages == conversation.messages
        assert replayed_conversation.final == final
        assert [t.generation.text for t in replayed_conversation.generated] == ["Done."]
    finally:
        cache.close()
