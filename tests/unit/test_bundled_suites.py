"""Sanity checks of the bundled prompt suites (suites/*.jsonl)."""

from __future__ import annotations

import contextlib
import io
import json
import re
from decimal import Decimal, InvalidOperation
from pathlib import Path
from typing import Any

import pytest

from pytest_infercheck.metrics.answers import answers_equal, extract_answer, parse_reference
from pytest_infercheck.suites import (
    ANSWER_KINDS,
    Prompt,
    Suite,
    bundled_suite_names,
    load_suite,
)

EXPECTED = {
    "reasoning": "r",
    "adversarial-numerics": "an",
    "code": "c",
    "long-context": "lc",
    "quant-sensitive": "qs",
    "determinism": "d",
    "tokenizer-edge": "te",
}
MAX_TOKENS = {"tokenizer-edge": (8, 64)}
"""Budget range per suite where it is not the default 64..512 (tokenizer-edge: the input is
the point, a few generated tokens are enough)."""
ANSWERED = ("reasoning", "adversarial-numerics", "quant-sensitive")
TIMES = "\N{MULTIPLICATION SIGN}"  # products in the suites read "a <TIMES> b"
# How each kind of checkable prompt ends: a final "Answer:" line where the extractor looks for
# one, a bare reply for `exact` (compared as the whole reply), a lone object for `json`.
INSTRUCTIONS = {
    "number": "(just the number: no units, no thousands separators).",
    "boolean": "`Answer: yes` or `Answer: no`.",
    "choice": "`Answer: <letter>`.",
    "exact": "and nothing else: no explanation, no quotes, no code fences.",
    "json": "Reply with only the JSON object on a single line: no code fences, no explanation.",
}


def load(name: str) -> Suite:
    return load_suite(name, Path.cwd())


def as_decimal(text: str) -> Decimal:
    return Decimal(text.strip().replace(",", ""))


def answered(name: str) -> list[Prompt]:
    return [p for p in load(name).prompts if p.answer is not None]


def test_all_expected_suites_are_bundled() -> None:
    assert set(EXPECTED) <= set(bundled_suite_names())


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_suite_shape(name: str) -> None:
    suite = load(name)
    assert suite.name == name
    assert len(suite.prompts) >= 50
    ids = [p.id for p in suite.prompts]
    assert len(ids) == len(set(ids))
    id_re = re.compile(rf"^{EXPECTED[name]}\d{{3}}$")
    for prompt in suite.prompts:
        assert id_re.match(prompt.id), prompt.id
        assert prompt.category, prompt.id
        assert prompt.category == prompt.category.strip().lower(), prompt.id
        assert prompt.max_tokens is not None, prompt.id
        low, high = MAX_TOKENS.get(name, (64, 512))
        assert low <= prompt.max_tokens <= high, prompt.id
        assert prompt.text.strip(), prompt.id
        assert prompt.answer_kind is None or prompt.answer_kind in ANSWER_KINDS
        if prompt.answer is not None:
            assert prompt.answer == prompt.answer.strip(), prompt.id
            assert prompt.text.endswith(INSTRUCTIONS[prompt.answer_kind or ""]), prompt.id


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_ids_are_in_file_order(name: str) -> None:
    ids = [p.id for p in load(name).prompts]
    prefix = EXPECTED[name]
    assert ids == [f"{prefix}{i:03d}" for i in range(1, len(ids) + 1)]


@pytest.mark.parametrize("name", ANSWERED)
def test_answer_coverage(name: str) -> None:
    suite = load(name)
    assert len(answered(name)) / len(suite.prompts) >= 0.6


def test_long_context_prompts_are_long_and_checkable() -> None:
    for prompt in load("long-context").prompts:
        assert 1500 <= len(prompt.text) <= 4000, (prompt.id, len(prompt.text))
        assert prompt.answer is not None, prompt.id
        assert prompt.answer_kind in {"number", "exact", "boolean"}, prompt.id


TOKENIZER_EDGES = {
    "CJK": lambda t: any("\u4e00" <= c <= "\u9fff" or "\u3040" <= c <= "\u30ff" for c in t),
    "Arabic": lambda t: any("\u0600" <= c <= "\u06ff" for c in t),
    "Devanagari": lambda t: any("\u0900" <= c <= "\u097f" for c in t),
    "Thai": lambda t: any("\u0e00" <= c <= "\u0e7f" for c in t),
    "emoji ZWJ sequence": lambda t: "\u200d" in t,
    "skin tone modifier": lambda t: any("\U0001f3fb" <= c <= "\U0001f3ff" for c in t),
    "decomposed e + U+0301": lambda t: "e\u0301" in t,
    "digit run of 30+": lambda t: re.search(r"\d{30}", t) is not None,
    "whitespace run of 8+": lambda t: re.search(r"[ \t]{8}", t) is not None,
    "tab": lambda t: "\t" in t,
    "word of 40+ letters": lambda t: re.search(r"[^\W\d_]{40}", t) is not None,
}
SPELLED_SPECIAL_TOKENS = (
    "<|im_start|>",
    "<|endoftext|>",
    "<s>",
    "</s>",
    "<|begin_of_text|>",
    "<think>",
)


@pytest.mark.parametrize("edge", sorted(TOKENIZER_EDGES))
def test_tokenizer_edge_covers(edge: str) -> None:
    """Every edge the suite exists for is in at least one of its prompts."""
    assert [p.id for p in load("tokenizer-edge").prompts if TOKENIZER_EDGES[edge](p.text)]


@pytest.mark.parametrize("token", SPELLED_SPECIAL_TOKENS)
def test_tokenizer_edge_spells_special_tokens(token: str) -> None:
    assert [p.id for p in load("tokenizer-edge").prompts if token in p.text]


def test_determinism_prompts_invite_long_generations() -> None:
    suite = load("determinism")
    for prompt in suite.prompts:
        assert prompt.max_tokens is not None and prompt.max_tokens >= 128, prompt.id
    open_ended = [p for p in suite.prompts if p.answer is None]
    assert len(open_ended) > len(suite.prompts) / 2
    assert len(open_ended) < len(suite.prompts)


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_references_are_well_formed(name: str) -> None:
    for prompt in answered(name):
        answer = prompt.answer
        assert answer is not None
        if prompt.answer_kind == "number":
            try:
                value = as_decimal(answer)
            except InvalidOperation:
                pytest.fail(f"{prompt.id}: {answer!r} is not a number")
            assert value.is_finite(), prompt.id
            assert "," not in answer, f"{prompt.id}: prompts ask for no thousands separators"
        elif prompt.answer_kind == "boolean":
            assert answer in {"yes", "no"}, prompt.id
        elif prompt.answer_kind == "choice":
            assert re.fullmatch("[A-D]", answer), prompt.id
            for letter in "ABCD":
                assert f"\n{letter}) " in prompt.text, f"{prompt.id} lacks option {letter}"
        elif prompt.answer_kind == "json":
            assert isinstance(json.loads(answer), dict), prompt.id


# --------------------------------------------------------------------------------------------
# Recompute machine-checkable references from the prompt text.

COMPUTE_RE = re.compile(rf"^Compute (\d+(?: [{TIMES}+] \d+)+) exactly\.")
REVERSE_RE = re.compile(r'^Reverse the string "(.*)" character by character\.')
LETTER_RE = re.compile(r"^How many times does the letter '(.)' appear in the word \"(\w+)\"\?")
DIGIT_RE = re.compile(r"^How many times does the digit (\d) appear in (\d+)\?")
BINOP_RE = re.compile(rf"^What is (-?\d+(?:\.\d+)?) ([-+{TIMES}]) \(?(-?\d+(?:\.\d+)?)\)?\?")
TRACE_RE = re.compile(r"^What does this Python 3 program print\?\n\n```python\n(.*?)```", re.S)


def evaluate(expression: str) -> int:
    """Evaluate a chain of non-negative integers joined by one operator (times or plus)."""
    if TIMES in expression:
        result = 1
        for factor in expression.split(f" {TIMES} "):
            result *= int(factor)
        return result
    return sum(int(term) for term in expression.split(" + "))


def all_prompts() -> list[Prompt]:
    return [p for name in EXPECTED for p in load(name).prompts]


def test_compute_references_are_correct() -> None:
    checked = 0
    for prompt in all_prompts():
        match = COMPUTE_RE.match(prompt.text)
        if match:
            assert prompt.answer_kind == "number"
            assert prompt.answer == str(evaluate(match.group(1))), prompt.id
            checked += 1
    assert checked >= 15


def test_binary_operation_references_are_correct() -> None:
    checked = 0
    for prompt in all_prompts():
        match = BINOP_RE.match(prompt.text)
        if match and prompt.answer is not None:
            a, op, b = Decimal(match.group(1)), match.group(2), Decimal(match.group(3))
            expected = {"+": a + b, "-": a - b, TIMES: a * b}[op]
            assert as_decimal(prompt.answer) == expected, prompt.id
            checked += 1
    assert checked >= 8


def test_string_references_are_correct() -> None:
    checked = 0
    for prompt in all_prompts():
        if match := REVERSE_RE.match(prompt.text):
            assert prompt.answer == match.group(1)[::-1], prompt.id
            checked += 1
        elif (match := LETTER_RE.match(prompt.text)) or (match := DIGIT_RE.match(prompt.text)):
            assert prompt.answer == str(match.group(2).count(match.group(1))), prompt.id
            checked += 1
    assert checked >= 12


def test_code_trace_references_match_real_output() -> None:
    checked = 0
    for prompt in load("code").prompts:
        match = TRACE_RE.match(prompt.text)
        if not match:
            continue
        buffer = io.StringIO()
        with contextlib.redirect_stdout(buffer):
            exec(compile(match.group(1), f"<{prompt.id}>", "exec"), {"__name__": "__main__"})
        assert prompt.answer == buffer.getvalue().strip(), prompt.id
        checked += 1
    assert checked >= 20


def test_some_hand_written_references() -> None:
    """Spot-check references whose prompts do not follow a parseable pattern."""
    expected: list[tuple[str, str, str, int | Decimal]] = [
        ("reasoning", "r001", "14 trays of bread rolls", 14 * 36 - 417 - 38),
        ("reasoning", "r012", "compounded once a year", Decimal("1157.63")),  # 1157.625 half-up
        ("reasoning", "r035", "starts at 22:45", (24 * 60 - (22 * 60 + 45)) + 6 * 60 + 10),
        ("reasoning", "r052", "from 1 to 200", 200 * 201 // 2),
        ("adversarial-numerics", "an043", "17.5% of 2480", Decimal("0.175") * 2480),
        ("adversarial-numerics", "an033", "2 to the power 64", 2**64),
        ("quant-sensitive", "qs035", "100 degrees Celsius", Decimal("373.15")),
        ("determinism", "d048", "multiplication table of 7", 7 * sum(range(1, 13))),
    ]
    prompts = {(name, p.id): p for name in EXPECTED for p in load(name).prompts}
    for name, prompt_id, snippet, value in expected:
        prompt = prompts[name, prompt_id]
        assert snippet in prompt.text, prompt_id
        assert prompt.answer is not None, prompt_id
        assert as_decimal(prompt.answer) == Decimal(value), prompt_id


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_ideal_replies_match_references(name: str) -> None:
    """An ideal reply in the requested format is scored correct by the answer extractor."""
    for prompt in answered(name):
        assert prompt.answer is not None and prompt.answer_kind is not None
        reference = parse_reference(prompt.answer, prompt.answer_kind)
        assert reference is not None, f"{prompt.id}: reference {prompt.answer!r} does not parse"
        if prompt.answer_kind in {"exact", "json"}:
            reply = prompt.answer
        else:
            reply = f"Working: 12 + 30 = 42, so 7 is not it.\n\nAnswer: {prompt.answer}"
        extracted = extract_answer(reply, prompt.answer_kind)
        assert answers_equal(extracted, reference), (prompt.id, extracted, reference)


# The multi-turn suite: conversations (``messages``), not single prompts.

MULTI_TURN_MAX_TOKENS = 1500
"""Every conversation, with each generated turn and the final answer at its ``max_tokens``,
fits a small-context test server."""
CHUNKED_PREFILL = 512


def test_multi_turn_shape() -> None:
    suite = load("multi-turn")
    assert len(suite.prompts) >= 30
    assert [p.id for p in suite.prompts] == [f"mt{i:03d}" for i in range(1, len(suite.prompts) + 1)]
    for prompt in suite.prompts:
        assert prompt.messages is not None, prompt.id
        assert 3 <= len(prompt.messages) <= 6, prompt.id
        assert prompt.messages[0].role == "system", prompt.id
        assert prompt.category and prompt.max_tokens, prompt.id
        if prompt.answer is not None:
            assert prompt.text.endswith(INSTRUCTIONS[prompt.answer_kind or ""]), prompt.id
    assert sum(any(t.content is None for t in p.messages or ()) for p in suite.prompts) >= 10
    assert sum(p.answer is not None for p in suite.prompts) >= 10


def test_multi_turn_references_are_computed_from_the_turns() -> None:
    """Recompute each answer from the conversation's own text."""
    checked = 0
    for prompt in load("multi-turn").prompts:
        turns = [t.content or "" for t in prompt.messages or ()]
        text = "\n".join(turns)
        if m := re.search(r"Let x = (\d+) \+ (\d+)\..*multiply x by (\d+)", text, re.S):
            a, b, c = map(int, m.groups())
            expected = str((a + b) * c)
        elif m := re.search(r"What is (\d+) \+ (\d+)\?.*minus (\d+)\?", text, re.S):
            a, b, minus = map(int, m.groups())
            expected = str(a + b - minus)
        elif prompt.category == "long-table":
            rows = [r.split(",") for r in turns[1].splitlines() if re.match(r"\d\d,", r)]
            expected = str(sum(int(r[2]) for r in rows if int(r[0]) <= 5))
        elif m := re.search(r"Remember the word '(\w+)'", text):
            expected = m.group(1)[::-1]
        else:
            continue
        assert prompt.answer == expected, prompt.id
        checked += 1
    assert checked >= 22  # all but the yes/no facts


def test_multi_turn_token_lengths(realistic_qwen2: Any) -> None:
    """On the realistic Qwen2 tokenizer (its chat template): some conversations cross a
    chunked-prefill size, and every one, with its generated turns and answer at their
    ``max_tokens``, stays within :data:`MULTI_TURN_MAX_TOKENS`."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(realistic_qwen2.path))
    longest, crossing = 0, 0
    for prompt in load("multi-turn").prompts:
        turns = prompt.messages or ()
        messages = [{"role": t.role, "content": t.content or ""} for t in turns]
        text = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
        given = len(tokenizer.encode(text, add_special_tokens=False))
        generated = sum(t.content is None for t in turns) + 1
        bound = given + generated * (prompt.max_tokens or 0)
        crossing += given > CHUNKED_PREFILL
        longest = max(longest, bound)
        assert bound <= MULTI_TURN_MAX_TOKENS, (prompt.id, bound)
    assert crossing >= 5
    assert longest > CHUNKED_PREFILL
