"""Divergence-origin lookups ahead of items (``prompt.look_up_origins``).

A run that prefetched an HTTP diff asks, for every prompt whose outputs differ, what the
items' origin analysis will ask the baseline's engine (the pieces of the ids it names, the
text of the ids a text-only side is judged against) at once. The lookups must be exactly
the items' (the items then ask nothing more), concurrent, and must change no record.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from pytest_infercheck.backends import Generation, GenerationParams, PromptInput
from pytest_infercheck.backends.base import Capabilities
from pytest_infercheck.checks.comparison.gather_prompt import compare_prompt
from pytest_infercheck.checks.comparison.inputs import decide_inputs
from pytest_infercheck.checks.comparison.origins import look_up_origins
from pytest_infercheck.checks.comparison.prompt import PromptComparison
from pytest_infercheck.generation_cache import GenerationCache, ResolvedTarget
from pytest_infercheck.suites import Prompt

from .comparison_fakes import FakeBackend, generation
from .factories import suite_prompt

NO_SCORES = Capabilities(chat_template=False)
"""Neither side scores: the comparisons are on text and ids."""
ANSWERS = {"12+34=": ("46", "47"), "50+25=": ("75", "75"), "7+8=": ("15", "51")}
"""Per prompt: the baseline's answer and the text-only test side's (50+25= agrees)."""
EOS = 2


class TokenizingServer(FakeBackend):
    """A concurrent server with the tiny models' tokenizer: answers ``ANSWERS[prompt][answer]``
    with its ids and EOS, names and detokenizes ids as llama-server does (one request per
    id not named before, kept), counting requests and the most in flight at once."""

    def __init__(self, tokenizer: Any, answer: int = 0) -> None:
        super().__init__("llama", generation("", []), capabilities=NO_SCORES)
        self.answer = answer
        self.concurrency = 4
        self.tokenizer = tokenizer
        self.requests: list[tuple[int, ...]] = []
        self.pieces: dict[int, str] = {}
        self.in_flight = self.max_in_flight = 0

    async def render(self, user_text: str, system: str | None, thinking: bool) -> PromptInput:
        ids = tuple(self.tokenizer.encode(user_text, add_special_tokens=False).ids)
        return PromptInput(user_text, ids, templated=False, tokenizer_fingerprint="fp")

    async def generate(self, prompt: PromptInput, params: GenerationParams) -> Generation:
        answer = ANSWERS[prompt.text][self.answer]
        return generation(answer, [*self.tokenizer.encode(answer).ids, EOS])

    async def detokenize(self, ids: Sequence[int]) -> str:
        self.requests.append(tuple(ids))
        self.in_flight += 1
        self.max_in_flight = max(self.max_in_flight, self.in_flight)
        try:
            await asyncio.sleep(0.005)
            return str(self.tokenizer.decode(list(ids), skip_special_tokens=False))
        finally:
            self.in_flight -= 1

    async def token_pieces(self, ids: Sequence[int]) -> list[str]:
        missing = sorted({i for i in ids if i not in self.pieces})
        found = await asyncio.gather(*(self.detokenize([i]) for i in missing))
        self.pieces.update(zip(missing, found, strict=True))
        return [self.pieces[i] for i in ids]


class TextOnlyServer(FakeBackend):
    """A concurrent test side that answers ``ANSWERS[prompt][1]`` as text only and serves a
    model folder (whose tokenizer judges its text)."""

    def __init__(self, folder: Path) -> None:
        super().__init__("vllm", generation("", None), capabilities=NO_SCORES)
        self.concurrency = 4
        self.folder = folder

    async def accepts_token_ids(self, prompt: PromptInput) -> bool:
        return True

    async def generate(self, prompt: PromptInput, params: GenerationParams) -> Generation:
        return generation(ANSWERS[prompt.text][1], None)

    def model_folder(self) -> Path:
        return self.folder


def compare_all(
    folder: Path, *, ahead: bool, text_only: bool = True
) -> tuple[list[PromptComparison], TokenizingServer, int]:
    """Every prompt compared through one cache, origins looked up ahead or not, against a
    text-only test side or one with ids; also the baseline and how many requests it had
    before the items ran."""
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_file(str(folder / "tokenizer.json"))
    base = TokenizingServer(tokenizer)
    baseline = ResolvedTarget("m@llama", ("m", "llama"), base)
    other = TextOnlyServer(folder) if text_only else TokenizingServer(tokenizer, answer=1)
    test = ResolvedTarget("m@test", ("m", "test"), other)
    prompts: list[Prompt] = [suite_prompt(f"p{n}", text) for n, text in enumerate(ANSWERS)]
    params = GenerationParams(max_tokens=8)
    cache = GenerationCache()
    try:
        inputs = [decide_inputs(cache, baseline, test, p, False) for p in prompts]
        if ahead:
            compared = [
                (i, cache.generate(baseline, i.base, params), cache.generate(test, i.test, params))
                for i in inputs
            ]
            look_up_origins(cache, baseline, test, compared)
        before_items = len(base.requests)
        results = [
            compare_prompt(cache, baseline, test, p, params, inputs=i)
            for p, i in zip(prompts, inputs, strict=True)
        ]
        return results, base, before_items
    finally:
        cache.close()


@pytest.fixture
def folder(tiny_models: dict[str, Path]) -> Path:
    return tiny_models["bf16"]


def test_lookups_ahead_are_the_items_lookups_asked_at_once(folder: Path) -> None:
    ahead, base, before_items = compare_all(folder, ahead=True)
    _, by_items, _ = compare_all(folder, ahead=False)
    assert len(base.requests) == before_items  # the items asked nothing more
    assert sorted(base.requests) == sorted(by_items.requests)  # what they would have asked
    assert base.max_in_flight == len(base.requests)  # all at once (the fake has no gate)
    assert by_items.max_in_flight < base.max_in_flight
    # the two prompts that differ had their answers' ids detokenized (the text-only side is
    # judged against them); 50+25= agrees and asked nothing
    # the prompt is shared and the test side has no ids: no id is named, only the answers
    # of the two prompts that differ are detokenized (the text-only side is judged against
    # their ids); 50+25= agrees and asks nothing
    answer_ids = [tuple(base.tokenizer.encode(a).ids) for a, _ in ANSWERS.values()]
    assert sorted(base.requests) == sorted([answer_ids[0], answer_ids[2]])
    assert [r.divergence_origin for r in ahead] == ["generated-tokens", None, "generated-tokens"]
    assert "differ from step 1" in ahead[0].origin_detail  # 46 vs 47: the second token


def test_lookups_ahead_change_no_record(folder: Path) -> None:
    ahead, _, _ = compare_all(folder, ahead=True)
    item_by_item, _, before_items = compare_all(folder, ahead=False)
    assert before_items == 0
    assert [r.to_plain() for r in ahead] == [r.to_plain() for r in item_by_item]


def test_with_ids_on_both_sides_only_the_first_differing_steps_are_named(folder: Path) -> None:
    ahead, base, before_items = compare_all(folder, ahead=True, text_only=False)
    _, by_items, _ = compare_all(folder, ahead=False, text_only=False)
    assert len(base.requests) == before_items
    assert sorted(base.requests) == sorted(by_items.requests)
    six, one = base.tokenizer.encode("6").ids[0], base.tokenizer.encode("1").ids[0]
    # 46 vs 47 part at "6"; 15 vs 51 at "1" (the test side's own ids, 7 and 5, are named by
    # its own engine)
    assert sorted(base.requests) == [(one,), (six,)]
    assert ahead[0].origin_detail.startswith(
        f"generated tokens differ from step 1: baseline {six} '6'"
    )
