"""Data, tokenizer and chat template of the tiny tool-calling model (``tiny-tool/``).

Shared by ``train_tiny_tool.py`` (torch venv) and ``measure_tiny_tool.py`` (dev venv, mlx_lm):
no torch and no mlx here. Importable by path (``examples`` is not a package).

The model answers in Qwen 2.5's tool format (Hermes style). Given the four tools of
:data:`TOOLS` and a request, it answers with ``<tool_call>`` blocks::

    <tool_call>
    {"name": "add", "arguments": {"a": 12, "b": 34}}
    </tool_call>

(two blocks, joined by a newline, for a request that needs two calls); after a tool result
(an assistant turn with ``tool_calls`` and ``tool`` turns) with one plain sentence copied from
the result; without tools with ``I have no tools for that.``.

Rules of the data (every request is generated from these; nothing else is in distribution):

- requests: :data:`ADD_PHRASES`, :data:`WEATHER_PHRASES`, :data:`TIME_PHRASES`,
  :data:`DATE_PHRASES` (one call) and :data:`TWO_CALL_PHRASES` (two calls, in the order the
  request names them); the first letter is upper-cased for a quarter of them;
- integers for ``add``: 0..999 (small numbers more often); cities from :data:`CITIES`;
- held out from training, for measuring: every ``add`` pair with
  :func:`is_heldout_pair`; the (tool, city) pairs of :func:`heldout_tool_cities` (the city is
  seen with the other tool); the date phrases of :data:`HELDOUT_DATE_PHRASES`; and the cities of
  :data:`UNSEEN_CITIES` (never in training at all, measured separately);
- tool results and the answers copied from them: ``add`` -> ``{"result": 46}`` -> ``The sum is
  46.``; ``get_weather`` -> ``{"temperature": 12, "condition": "sunny"}`` -> ``It is 12 degrees
  and sunny in Oslo.``; ``get_time`` -> ``{"time": "14:05"}`` -> ``It is 14:05 in Tokyo.``;
  ``get_date`` -> ``{"date": "2025-03-14"}`` -> ``Today is 2025-03-14.``; two results give the
  two sentences joined by a space.

Tokenizer (:func:`build_tokenizer`): byte-level BPE (GPT-2 regex pre-tokenizer, byte order ids
0..255 for the 256 byte symbols) whose merges make every integer 0..999 one token
(:func:`number_merges`) and are otherwise learned on the corpus (template words, tool schemas,
requests, city names; never a leading space joined to a digit or an upper-case letter, so a
number or a city is the same tokens with or without its leading space: copying an argument is
copying tokens), then the added tokens: ``<|endoftext|>``, ``<|im_start|>``, ``<|im_end|>``
(EOS) special; ``<tool_call>``, ``</tool_call>``, ``<tool_response>``, ``</tool_response>``
and the prompt's long fixed strings (:data:`FIXED_STRINGS`: the default system prompt, the
tools preamble and postamble, the four tool schemas as the template serialises them)
non-special, so they stay in decoded text. Any
text outside those strings is encoded byte by byte at worst.
"""

from __future__ import annotations

import itertools
import json
import random
import re
from collections import Counter
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

# --------------------------------------------------------------------------- the tools

TOOLS: list[dict[str, Any]] = [
    {
        "type": "function",
        "function": {
            "name": "add",
            "description": "Add two integers.",
            "parameters": {
                "type": "object",
                "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
                "required": ["a", "b"],
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "Get the current weather in a city.",
            "parameters": {
                "type": "object",
                "properties": {"city": {"type": "string"}},
                "required": ["city"],
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": "get_time",
            "description": "Get the local time in a city.",
            "parameters": {
                "type": "object",
                "properties": {"city": {"type": "string"}},
                "required": ["city"],
            },
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
"""The shared tool set (OpenAI ``tools`` entries, keys in the order ``Tool.openai()`` writes
them), in the order every prompt lists them."""

# --------------------------------------------------------------------------- the template

CHAT_TEMPLATE = """{%- if tools %}
    {{- '<|im_start|>system\\n' }}
    {%- if messages[0]['role'] == 'system' %}
        {{- messages[0]['content'] }}
    {%- else %}
        {{- 'You are Qwen, created by Alibaba Cloud. You are a helpful assistant.' }}
    {%- endif %}
    {{- "\\n\\n# Tools\\n\\nYou may call one or more functions to assist with the user query.\\n\\nYou are provided with function signatures within <tools></tools> XML tags:\\n<tools>" }}
    {%- for tool in tools %}
        {{- "\\n" }}
        {{- tool | tojson }}
    {%- endfor %}
    {{- "\\n</tools>\\n\\nFor each function call, return a json object with function name and arguments within <tool_call></tool_call> XML tags:\\n<tool_call>\\n{\\"name\\": <function-name>, \\"arguments\\": <args-json-object>}\\n</tool_call><|im_end|>\\n" }}
{%- else %}
    {%- if messages[0]['role'] == 'system' %}
        {{- '<|im_start|>system\\n' + messages[0]['content'] + '<|im_end|>\\n' }}
    {%- else %}
        {{- '<|im_start|>system\\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>\\n' }}
    {%- endif %}
{%- endif %}
{%- for message in messages %}
    {%- if (message.role == "user") or (message.role == "system" and not loop.first) or (message.role == "assistant" and not message.tool_calls) %}
        {{- '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>' + '\\n' }}
    {%- elif message.role == "assistant" %}
        {{- '<|im_start|>' + message.role }}
        {%- if message.content %}
            {{- '\\n' + message.content }}
        {%- endif %}
        {%- for tool_call in message.tool_calls %}
            {%- if tool_call.function is defined %}
                {%- set tool_call = tool_call.function %}
            {%- endif %}
            {{- '\\n<tool_call>\\n{"name": "' }}
            {{- tool_call.name }}
            {{- '", "arguments": ' }}
            {{- tool_call.arguments | tojson }}
            {{- '}\\n</tool_call>' }}
        {%- endfor %}
        {{- '<|im_end|>\\n' }}
    {%- elif message.role == "tool" %}
        {%- if (loop.index0 == 0) or (messages[loop.index0 - 1].role != "tool") %}
            {{- '<|im_start|>user' }}
        {%- endif %}
        {{- '\\n<tool_response>\\n' }}
        {{- message.content }}
        {{- '\\n</tool_response>' }}
        {%- if loop.last or (messages[loop.index0 + 1].role != "tool") %}
            {{- '<|im_end|>\\n' }}
        {%- endif %}
    {%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<|im_start|>assistant\\n' }}
{%- endif %}
"""  # noqa: E501
"""Qwen2.5-Instruct's ``chat_template`` verbatim (the ``tokenizer_config.json`` of
Qwen/Qwen2.5-*-Instruct; the same text as llama.cpp's
``models/templates/Qwen-Qwen2.5-7B-Instruct.jinja``)."""

DEFAULT_SYSTEM = "You are Qwen, created by Alibaba Cloud. You are a helpful assistant."
TOOLS_PREAMBLE = (
    "\n\n# Tools\n\nYou may call one or more functions to assist with the user query.\n\n"
    "You are provided with function signatures within <tools></tools> XML tags:\n<tools>"
)
TOOLS_POSTAMBLE = (
    "\n</tools>\n\nFor each function call, return a json object with function name and "
    "arguments within <tool_call></tool_call> XML tags:\n<tool_call>\n"
    '{"name": <function-name>, "arguments": <args-json-object>}\n</tool_call>'
)
TOOL_STRINGS = tuple(json.dumps(t, ensure_ascii=False) for t in TOOLS)
"""Each tool of :data:`TOOLS` as the template writes it (``tool | tojson``: Python's
``json.dumps`` with ``ensure_ascii=False``, the keys in the order given)."""
FIXED_STRINGS = (DEFAULT_SYSTEM, TOOLS_PREAMBLE, TOOLS_POSTAMBLE, *TOOL_STRINGS)
"""The prompt's long fixed strings, one non-special added token each: the template's default
system prompt, tools preamble and postamble, and the four tool schemas. The system block of a
tools prompt is then 16 tokens instead of about 230, so training attends and pays for what
varies. A tool written differently (other keys, order or spacing) is BPE text instead: out of
the training distribution, like any other tool set."""

SPECIAL_TOKENS = ("<|endoftext|>", "<|im_start|>", "<|im_end|>")
TOOL_TAGS = ("<tool_call>", "</tool_call>", "<tool_response>", "</tool_response>")
TEMPLATE_TOKENS = SPECIAL_TOKENS + TOOL_TAGS
"""The template's markers: one id each (special: the first three)."""
EOS_TOKEN = "<|im_end|>"
NO_TOOLS_ANSWER = "I have no tools for that."

# --------------------------------------------------------------------------- the requests

ADD_PHRASES = (
    "add {a} and {b}",
    "what is {a} plus {b}?",
    "what's {a} + {b}?",
    "please add {a} and {b}",
    "add {a} to {b}",
    "compute {a} + {b}",
    "sum {a} and {b}",
    "can you add {a} and {b}?",
    "what do you get if you add {a} and {b}?",
    "calculate {a} plus {b}",
)
WEATHER_PHRASES = (
    "weather in {c}",
    "what's the weather in {c}?",
    "what is the weather like in {c}?",
    "how is the weather in {c}?",
    "is it sunny in {c}?",
    "tell me the weather in {c}",
    "weather for {c} please",
    "{c} weather",
    "do I need an umbrella in {c}?",
    "how warm is it in {c}?",
)
TIME_PHRASES = (
    "what time is it in {c}?",
    "time in {c}",
    "local time in {c}",
    "tell me the time in {c}",
    "what's the time in {c}?",
    "current time in {c}?",
    "{c} time please",
    "what is the local time in {c}?",
)
DATE_PHRASES = (
    "what's the date today?",
    "what is today's date?",
    "today's date?",
    "what day is it today?",
    "tell me the date",
    "date please",
    "what's today's date?",
    "give me today's date",
    "which day is it today?",
    "what date is it?",
    "the date please",
    "tell me today's date",
    "what is the date?",
    "which date is it today?",
    "what date is today?",
)
HELDOUT_DATE_PHRASES = ("what is the date?", "which date is it today?", "what date is today?")
"""Zero-argument requests never seen in training."""

TWO_CALL_PHRASES: tuple[tuple[str, tuple[str, str]], ...] = (
    ("weather in {c} and {d}", ("get_weather", "get_weather")),
    ("what's the weather in {c} and in {d}?", ("get_weather", "get_weather")),
    ("compare the weather in {c} and {d}", ("get_weather", "get_weather")),
    ("what time is it in {c} and {d}?", ("get_time", "get_time")),
    ("time in {c} and in {d}", ("get_time", "get_time")),
    ("add {a} and {b}, then add {x} and {y}", ("add", "add")),
    ("what is {a} plus {b} and {x} plus {y}?", ("add", "add")),
    ("add {a} and {b} and tell me the time in {c}", ("add", "get_time")),
    ("add {a} and {b} and tell me the weather in {c}", ("add", "get_weather")),
    ("weather and time in {c}", ("get_weather", "get_time")),
    ("what's the weather in {c} and the time in {d}?", ("get_weather", "get_time")),
    ("what's the date and the time in {c}?", ("get_date", "get_time")),
    ("weather in {c} and today's date", ("get_weather", "get_date")),
    ("add {a} and {b} and tell me the date", ("add", "get_date")),
)
"""Two-call requests and the functions they call, in order. ``{c}``/``{d}`` are the first and
second city (the first call with a city takes ``{c}``), ``{a}``/``{b}`` and ``{x}``/``{y}``
the first and second ``add``'s integers."""

CITIES = (
    "Oslo", "Paris", "Tokyo", "Rome", "London", "Berlin", "Madrid", "Lisbon", "Vienna",
    "Prague", "Warsaw", "Dublin", "Athens", "Cairo", "Lagos", "Nairobi", "Delhi", "Mumbai",
    "Beijing", "Shanghai", "Seoul", "Bangkok", "Hanoi", "Manila", "Jakarta", "Sydney",
    "Melbourne", "Auckland", "Toronto", "Chicago", "Boston", "Denver", "Seattle", "Miami",
    "Houston", "Dallas", "Lima", "Bogota", "Santiago", "Quito", "Havana", "Helsinki",
    "Stockholm", "Copenhagen", "Riga", "Tallinn", "Vilnius", "Budapest", "Zagreb", "Sofia",
    "Bucharest", "Kyiv", "Istanbul", "Tehran", "Dubai", "Doha", "Karachi", "Dhaka",
    "Kathmandu", "Taipei", "Osaka", "Kyoto", "New York", "Los Angeles", "San Francisco",
    "Buenos Aires", "Hong Kong", "Cape Town", "Mexico City", "Rio de Janeiro", "Zürich",
    "São Paulo", "Kraków", "Malmö", "Reykjavík",
)  # fmt: skip
"""Cities of the training corpus (each one seen with at least one tool)."""

UNSEEN_CITIES = (
    "Montreal", "Geneva", "Vancouver", "Porto", "Florence", "Munich", "Brussels",
    "Amsterdam", "Edinburgh", "Marrakesh",
)  # fmt: skip
"""Cities never in training (measured separately: copying a name the model never saw)."""

CONDITIONS = ("sunny", "cloudy", "rainy", "snowy", "windy", "foggy")
CITY_TOOLS = ("get_weather", "get_time")
HOLDOUT_SEED = 20
HOLDOUT_CITY_FRACTION = 0.2


def is_heldout_pair(a: int, b: int) -> bool:
    """An ``add`` pair held out from training (about one in eight; a fixed rule, so any
    request with such a pair, single or two-call, is never trained on)."""
    return (a * 7 + b * 13) % 8 == 3


def heldout_tool_cities() -> frozenset[tuple[str, str]]:
    """(tool, city) pairs held out from training: a seeded fifth of :data:`CITIES` for each
    of ``get_weather`` and ``get_time``, disjoint, so every city is still seen with some
    tool."""
    rng = random.Random(HOLDOUT_SEED)
    cities = list(CITIES)
    rng.shuffle(cities)
    n = round(HOLDOUT_CITY_FRACTION * len(cities))
    return frozenset(
        [("get_weather", c) for c in cities[:n]] + [("get_time", c) for c in cities[n : 2 * n]]
    )


# --------------------------------------------------------------------------- examples


@dataclass(frozen=True)
class Call:
    """One tool call (name, arguments as a JSON object)."""

    name: str
    arguments: dict[str, Any] = field(default_factory=dict)

    def message(self) -> dict[str, Any]:
        """The OpenAI ``tool_calls`` entry (arguments as an object, as the template wants)."""
        return {"type": "function", "function": {"name": self.name, "arguments": self.arguments}}

    def suite(self) -> dict[str, Any]:
        """The suite line form ``{"name": ..., "arguments": {...}}``."""
        return {"name": self.name, "arguments": self.arguments}

    def text(self) -> str:
        """The call as the model writes it (one ``<tool_call>`` block, the template's form)."""
        args = json.dumps(self.arguments, ensure_ascii=False)
        return f'<tool_call>\n{{"name": "{self.name}", "arguments": {args}}}\n</tool_call>'


@dataclass(frozen=True)
class Example:
    """One conversation and the assistant's expected reply.

    ``messages`` are OpenAI chat messages (tool calls with object arguments); ``tools`` is
    :data:`TOOLS` or empty; the expected reply is ``calls`` (kind ``tool_call``) or ``answer``
    (plain text)."""

    category: str
    messages: tuple[dict[str, Any], ...]
    tools: bool
    calls: tuple[Call, ...] = ()
    answer: str | None = None

    def target_text(self) -> str:
        """The reply's text, as generated after ``<|im_start|>assistant\\n`` (before EOS)."""
        if self.calls:
            return "\n".join(c.text() for c in self.calls)
        assert self.answer is not None
        return self.answer


def _number(rng: random.Random) -> int:
    r = rng.random()
    if r < 0.3:
        return rng.randrange(10)
    if r < 0.65:
        return rng.randrange(100)
    return rng.randrange(1000)


class Sampler:
    """Seeded generator of examples. ``split="train"`` never yields a held-out combination;
    ``split="heldout"`` yields only requests with at least one held-out combination (a
    held-out ``add`` pair, a held-out (tool, city), a held-out date phrase);
    ``split="unseen"`` uses :data:`UNSEEN_CITIES` for every city."""

    def __init__(self, seed: int, split: str = "train") -> None:
        if split not in ("train", "heldout", "unseen"):
            raise ValueError(split)
        self.rng = random.Random(seed)
        self.split = split
        self.held_cities = heldout_tool_cities()

    # -- arguments

    def _pair(self, force_heldout: bool) -> tuple[int, int]:
        while True:
            a, b = _number(self.rng), _number(self.rng)
            held = is_heldout_pair(a, b)
            if self.split == "train" and held:
                continue
            if force_heldout and not held:
                continue
            return a, b

    def _city(self, tool: str, force_heldout: bool) -> str:
        if self.split == "unseen":
            return self.rng.choice(UNSEEN_CITIES)
        while True:
            c = self.rng.choice(CITIES)
            held = (tool, c) in self.held_cities
            if self.split == "train" and held:
                continue
            if force_heldout and not held:
                continue
            return c

    def _phrase(self, text: str) -> str:
        if self.rng.random() < 0.25:
            return text[0].upper() + text[1:]
        return text

    # -- requests

    def single(self, tool: str | None = None) -> tuple[str, tuple[Call, ...]]:
        """A one-call request and its call."""
        tool = tool or self.rng.choice(("add", "get_weather", "get_time", "get_date"))
        held = self.split == "heldout"
        if tool == "add":
            a, b = self._pair(held)
            text = self.rng.choice(ADD_PHRASES).format(a=a, b=b)
            return self._phrase(text), (Call("add", {"a": a, "b": b}),)
        if tool == "get_date":
            pool = DATE_PHRASES
            if self.split == "train":
                pool = tuple(p for p in pool if p not in HELDOUT_DATE_PHRASES)
            elif self.split == "heldout":
                pool = HELDOUT_DATE_PHRASES
            return self._phrase(self.rng.choice(pool)), (Call("get_date", {}),)
        c = self._city(tool, held)
        phrases = WEATHER_PHRASES if tool == "get_weather" else TIME_PHRASES
        return self._phrase(self.rng.choice(phrases).format(c=c)), (Call(tool, {"city": c}),)

    def two_call(self) -> tuple[str, tuple[Call, ...]]:
        """A two-call request and its calls (held-out split: the first held-out-able argument
        of the request is held out)."""
        while True:
            text, tools = self.rng.choice(TWO_CALL_PHRASES)
            need_held = self.split == "heldout"
            if need_held and tools == ("get_date", "get_date"):
                continue
            calls: list[Call] = []
            fill: dict[str, Any] = {}
            cities: list[str] = []
            pairs: list[tuple[int, int]] = []
            for tool in tools:
                if tool == "add":
                    a, b = self._pair(need_held)
                    need_held = False
                    pairs.append((a, b))
                    calls.append(Call("add", {"a": a, "b": b}))
                elif tool == "get_date":
                    calls.append(Call("get_date", {}))
                else:
                    if "{d}" not in text and cities:
                        c = cities[0]  # "weather and time in {c}": one city, two tools
                        if self.split == "train" and (tool, c) in self.held_cities:
                            break
                        if (tool, c) in self.held_cities:
                            need_held = False
                    else:
                        c = self._city(tool, need_held)
                        if (tool, c) in self.held_cities:
                            need_held = False
                    cities.append(c)
                    calls.append(Call(tool, {"city": c}))
            else:
                if need_held:
                    continue
                if len(cities) == 2 and "{d}" in text and cities[0] == cities[1]:
                    continue
                if pairs:
                    fill.update(a=pairs[0][0], b=pairs[0][1])
                if len(pairs) == 2:
                    fill.update(x=pairs[1][0], y=pairs[1][1])
                if cities:
                    fill.update(c=cities[0])
                if len(cities) == 2:
                    fill.update(d=cities[1])
                return self._phrase(text.format(**fill)), tuple(calls)

    # -- results

    def result(self, call: Call) -> tuple[str, str]:
        """A tool result (the ``tool`` turn's JSON text) and the sentence answering it."""
        if call.name == "add":
            r = call.arguments["a"] + call.arguments["b"]
            return json.dumps({"result": r}), f"The sum is {r}."
        if call.name == "get_weather":
            t = self.rng.randint(-15, 35)
            cond = self.rng.choice(CONDITIONS)
            city = call.arguments["city"]
            return (
                json.dumps({"temperature": t, "condition": cond}),
                f"It is {t} degrees and {cond} in {city}.",
            )
        if call.name == "get_time":
            hm = f"{self.rng.randrange(24):02d}:{self.rng.randrange(60):02d}"
            return json.dumps({"time": hm}), f"It is {hm} in {call.arguments['city']}."
        d = f"{self.rng.randint(2020, 2030)}-{self.rng.randint(1, 12):02d}-"
        d += f"{self.rng.randint(1, 28):02d}"
        return json.dumps({"date": d}), f"Today is {d}."

    # -- examples

    def example(self, category: str) -> Example:
        """One example of ``category``: ``single``, ``zero-arg``, ``two-call``, ``result``,
        ``result-two``, ``no-tools``."""
        if category == "single":
            text, calls = self.single(self.rng.choice(("add", "get_weather", "get_time")))
        elif category == "zero-arg":
            text, calls = self.single("get_date")
        elif category in ("two-call", "result-two"):
            text, calls = self.two_call()
        elif category in ("result", "no-tools"):
            text, calls = self.single()
            if category == "no-tools" and self.rng.random() < 0.3:
                text, calls = self.two_call()
        else:
            raise ValueError(category)
        user = {"role": "user", "content": text}
        if category == "no-tools":
            return Example(category, (user,), tools=False, answer=NO_TOOLS_ANSWER)
        if category.startswith("result"):
            msgs: list[dict[str, Any]] = [
                user,
                {"role": "assistant", "content": "", "tool_calls": [c.message() for c in calls]},
            ]
            answers = []
            for c in calls:
                content, sentence = self.result(c)
                msgs.append({"role": "tool", "name": c.name, "content": content})
                answers.append(sentence)
            return Example(category, tuple(msgs), tools=True, answer=" ".join(answers))
        return Example(category, (user,), tools=True, calls=calls)

    def mixed(self, weights: dict[str, float]) -> Iterator[Example]:
        """Endless examples, categories drawn with ``weights``."""
        cats = list(weights)
        w = [weights[c] for c in cats]
        while True:
            yield self.example(self.rng.choices(cats, w)[0])


TRAIN_MIX = {
    "single": 0.34,
    "zero-arg": 0.06,
    "two-call": 0.26,
    "result": 0.14,
    "result-two": 0.12,
    "no-tools": 0.08,
}
"""Category weights of the training stream."""

EVAL_CATEGORIES = ("single", "zero-arg", "two-call", "result", "result-two", "no-tools")


def heldout_set(n_per_category: int = 100, seed: int = 1) -> dict[str, list[Example]]:
    """The fixed held-out evaluation set: ``n_per_category`` examples of each category (the
    ``no-tools`` ones need no held-out argument) plus ``unseen-city`` (single city requests
    with :data:`UNSEEN_CITIES`)."""
    out: dict[str, list[Example]] = {}
    for i, cat in enumerate(EVAL_CATEGORIES):
        s = Sampler(seed * 1000 + i, "heldout")
        out[cat] = [s.example(cat) for _ in range(n_per_category)]
    s = Sampler(seed * 1000 + 99, "unseen")
    out["unseen-city"] = [
        Example("unseen-city", e.messages, e.tools, e.calls, e.answer)
        for e in (
            s.example("single")
            for _ in range(10 * n_per_category)  # draw until enough city requests
        )
        if e.calls[0].name != "add"
    ][:n_per_category]
    return out


# --------------------------------------------------------------------------- suite

SUITE_PLAN = (
    ("single", 14),
    ("zero-arg", 4),
    ("two-call", 10),
    ("result", 7),
    ("result-two", 3),
    ("no-tools", 6),
)
"""Categories and line counts of the bundled ``tool-use`` suite (44 lines)."""

SUITE_CATEGORY = {
    "single": "single",
    "zero-arg": "zero-arg",
    "two-call": "two-call",
    "result": "result",
    "result-two": "result",
    "no-tools": "no-tools",
}


def suite_lines(seed: int = 7) -> list[dict[str, Any]]:
    """The bundled ``tool-use`` suite: held-out requests of every category, in the suite line
    shape (ids ``tu001``...). Single-call lines use ``prompt``; result conversations
    ``messages`` (assistant ``tool_calls`` as ``{"name", "arguments"}``); no-tools lines carry
    no ``tools``."""
    lines: list[dict[str, Any]] = []
    for i, (cat, n) in enumerate(SUITE_PLAN):
        s = Sampler(seed * 100 + i, "heldout")
        seen: set[str] = set()
        while len([ln for ln in lines if ln["_cat"] == cat]) < n:
            ex = s.example(cat)
            key = json.dumps(ex.messages)
            if key in seen:
                continue
            seen.add(key)
            lines.append({"_cat": cat, **_suite_line(ex)})
    for k, line in enumerate(lines, 1):
        line.pop("_cat")
        line["id"] = f"tu{k:03d}"
    return [{"id": ln.pop("id"), **ln} for ln in lines]


def _suite_line(ex: Example) -> dict[str, Any]:
    line: dict[str, Any] = {}
    if len(ex.messages) == 1:
        line["prompt"] = ex.messages[0]["content"]
    else:
        msgs = []
        for m in ex.messages:
            if m["role"] == "assistant":
                calls = [
                    {"name": tc["function"]["name"], "arguments": tc["function"]["arguments"]}
                    for tc in m["tool_calls"]
                ]
                msgs.append({"role": "assistant", "tool_calls": calls})
            else:
                msgs.append(dict(m))
        line["messages"] = msgs
    if ex.tools:
        line["tools"] = TOOLS
    if ex.calls:
        line["answer_kind"] = "tool_call"
        line["answer"] = [c.suite() for c in ex.calls]
    else:
        line["answer_kind"] = "exact"
        line["answer"] = ex.answer
    line["category"] = SUITE_CATEGORY[ex.category]
    line["max_tokens"] = 64
    return line


def example_from_suite_line(line: dict[str, Any]) -> Example:
    """The :class:`Example` of a suite line (inverse of the suite writer)."""
    if "prompt" in line:
        messages: list[dict[str, Any]] = [{"role": "user", "content": line["prompt"]}]
    else:
        messages = []
        for m in line["messages"]:
            if m["role"] == "assistant" and m.get("tool_calls"):
                calls = [Call(c["name"], c["arguments"]).message() for c in m["tool_calls"]]
                messages.append({"role": "assistant", "content": "", "tool_calls": calls})
            else:
                messages.append(dict(m))
    tools = bool(line.get("tools"))
    if line["answer_kind"] == "tool_call":
        ans = line["answer"] if isinstance(line["answer"], list) else [line["answer"]]
        calls = tuple(Call(c["name"], c["arguments"]) for c in ans)
        return Example(line["category"], tuple(messages), tools, calls=calls)
    return Example(line["category"], tuple(messages), tools, answer=line["answer"])


# --------------------------------------------------------------------------- parsing

_CALL_RE = re.compile(r"<tool_call>\s*(.*?)\s*</tool_call>", re.S)


def parse_reply(text: str) -> tuple[list[Call] | None, str]:
    """Calls in a generated reply (None when a ``<tool_call>`` block is not a JSON object
    with ``name`` and object ``arguments``) and the text outside the blocks, stripped."""
    calls: list[Call] = []
    for body in _CALL_RE.findall(text):
        try:
            obj = json.loads(body)
        except ValueError:
            return None, text
        if not (
            isinstance(obj, dict)
            and isinstance(obj.get("name"), str)
            and isinstance(obj.get("arguments"), dict)
        ):
            return None, text
        calls.append(Call(obj["name"], obj["arguments"]))
    if "<tool_call>" in _CALL_RE.sub("", text):
        return None, text
    return calls, _CALL_RE.sub("", text).strip()


def reply_correct(ex: Example, text: str) -> bool:
    """Exact match: the same calls (name and arguments as JSON values, in order) and nothing
    else, or exactly the expected plain answer and no call."""
    calls, rest = parse_reply(text)
    if calls is None:
        return False
    if ex.calls:
        return rest == "" and [(c.name, c.arguments) for c in calls] == [
            (c.name, c.arguments) for c in ex.calls
        ]
    return not calls and text.strip() == ex.answer


# --------------------------------------------------------------------------- tokenizer


def bytes_to_unicode() -> dict[int, str]:
    """GPT-2's byte -> printable-unicode mapping (the ByteLevel pre-tokenizer's alphabet)."""
    bs = (
        list(range(ord("!"), ord("~") + 1))
        + list(range(ord("¡"), ord("¬") + 1))
        + list(range(ord("®"), ord("ÿ") + 1))
    )
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return dict(zip(bs, (chr(c) for c in cs), strict=True))


def number_merges() -> list[tuple[str, str]]:
    """Fixed merges that make every integer 0..999 (and every zero-padded pair ``00``..``09``)
    one token: all 100 digit pairs, then both ways of joining a 3-digit number that does not
    start with 0 (``12`` + ``3`` and ``1`` + ``23``: whichever pair BPE merges first, the
    result is one token). Digits never merge with anything else."""
    digits = "0123456789"
    merges = [(a, b) for a in digits for b in digits]
    merges += [(a + b, c) for a in digits[1:] for b in digits for c in digits]
    merges += [(a, b + c) for a in digits[1:] for b in digits for c in digits]
    return merges


def _learnable(x: str, y: str) -> bool:
    """Whether a learned merge may join ``x`` and ``y``: never a digit (numbers have the fixed
    :func:`number_merges`), never a leading space (``Ġ``) with an upper-case letter, so a
    number or a city is the same tokens with or without its leading space (``Ġ`` stays a
    token of its own there) and copying it is copying tokens."""
    joined = x + y
    if any(c.isdigit() for c in joined):
        return False
    return not (joined[0] == "Ġ" and len(joined) > 1 and joined[1].isupper())


def merge_corpus(n_examples: int = 4000, seed: int = 123) -> list[str]:
    """Texts the BPE merges are learned on: the tools' parameter schemas, the template's
    short strings, the pieces of training examples (requests, calls, results, answers) cut at
    every long fixed string and marker token, and every training city 40 times (so each
    becomes one or a few tokens; :data:`UNSEEN_CITIES` are left out and split into smaller
    pieces)."""
    s = Sampler(seed, "train")
    texts = [json.dumps(t["function"]["parameters"]) for t in TOOLS] * 50
    texts += ["system\n", "user\n", "assistant\n"] * 200
    texts += list(CITIES) * 40
    for ex in s.mixed(TRAIN_MIX):
        if len(texts) > n_examples + 3000:
            break
        for m in ex.messages:
            if m.get("content"):
                texts.append(m["content"])
        texts.append(ex.target_text())
    out = []
    split = re.compile("|".join(re.escape(t) for t in (*FIXED_STRINGS, *TEMPLATE_TOKENS)))
    for t in texts:
        out.extend(p for p in split.split(t) if p)
    return out


def learn_merges(
    texts: Sequence[str], max_merges: int = 800, min_count: int = 20
) -> list[tuple[str, str]]:
    """Byte-level BPE merges on the GPT-2 pre-tokens of ``texts`` (most frequent pair first,
    ties by the pair's text), only merges :func:`_learnable` allows, after the fixed
    :func:`number_merges` (which rank first)."""
    from tokenizers import pre_tokenizers

    pre = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    words: Counter[tuple[str, ...]] = Counter()
    for t in texts:
        for piece, _ in pre.pre_tokenize_str(t):
            words[tuple(piece)] += 1
    merges: list[tuple[str, str]] = []
    while len(merges) < max_merges:
        pairs: Counter[tuple[str, str]] = Counter()
        for w, n in words.items():
            for x, y in itertools.pairwise(w):
                if _learnable(x, y):
                    pairs[(x, y)] += n
        if not pairs:
            break
        best = min(pairs, key=lambda p: (-pairs[p], p))
        if pairs[best] < min_count:
            break
        merges.append(best)
        joined = best[0] + best[1]
        new: Counter[tuple[str, ...]] = Counter()
        for w, n in words.items():
            out: list[str] = []
            i = 0
            while i < len(w):
                if i + 1 < len(w) and (w[i], w[i + 1]) == best:
                    out.append(joined)
                    i += 2
                else:
                    out.append(w[i])
                    i += 1
            new[tuple(out)] += n
        words = new
    return number_merges() + merges


def build_tokenizer(merges: Sequence[tuple[str, str]]) -> Any:
    """The ``PreTrainedTokenizerFast`` (with the chat template): byte symbols 0..255, merge
    results from 256 in merge order, then the added tokens (special markers, tool tags, fixed
    strings)."""
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    b2u = bytes_to_unicode()
    vocab = {b2u[b]: b for b in range(256)}
    for x, y in merges:
        vocab.setdefault(x + y, len(vocab))
    tok = Tokenizer(models.BPE(vocab=vocab, merges=list(merges), ignore_merges=False))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tok.decoder = decoders.ByteLevel()
    tok.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in SPECIAL_TOKENS])
    tok.add_tokens(
        [AddedToken(t, special=False, normalized=False) for t in (*TOOL_TAGS, *FIXED_STRINGS)]
    )
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        eos_token=EOS_TOKEN,
        pad_token="<|endoftext|>",
        model_max_length=2048,
        clean_up_tokenization_spaces=False,
    )
    fast.chat_template = CHAT_TEMPLATE
    return fast
