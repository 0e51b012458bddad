"""cache-parity's gather facet on a scripted engine: the order of its requests (every
reference before any scenario's request on an engine without an uncached request), what is
decided before any request, and a failed request recorded as such, never as "not
exercised"."""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from pytest_infercheck.backends.base import (
    Capabilities,
    Generation,
    GenerationParams,
    Message,
    PromptInput,
)
from pytest_infercheck.backends.http import HttpError
from pytest_infercheck.checks.framework.plan import ItemPlan
from pytest_infercheck.checks.framework.run import RunContext, SuiteRun
from pytest_infercheck.config import CheckSpec, Settings
from pytest_infercheck.suites import Prompt, Suite


@dataclass
class Engine:
    """An OpenAI-style server with no uncached request: every request goes through its
    cache, answers ``46`` and reports ``cached`` tokens (0 the first time a text is seen);
    ``fail`` maps (text, its n-th request) to an HTTP status."""

    capabilities: Capabilities = field(default_factory=lambda: Capabilities(chat_template=True))
    concurrency: int = 1
    kind: str = "openai"
    name: str = "srv"
    sent: list[str] = field(default_factory=list)
    fail: dict[tuple[str, int], int] = field(default_factory=dict)
    shared: dict[str, int] = field(default_factory=dict)
    """Cached tokens reported on a text's first request (a prefix it shares with others)."""

    async def generate(self, prompt: PromptInput, params: GenerationParams) -> Generation:
        n = self.sent.count(prompt.text)
        self.sent.append(prompt.text)
        status = self.fail.get((prompt.text, n + 1))
        if status is not None:
            raise HttpError(f"backend 'srv': POST /v1/chat/completions -> HTTP {status}", status)
        g = Generation("46", None, "stop", None)
        g.cached_tokens = 5 if n else self.shared.get(prompt.text, 0)
        return g

    def identity(self) -> dict[str, Any]:
        return {"kind": self.kind}


@dataclass
class Cache:
    engine: Engine

    def resolve(self, loaded: Any, target: Any) -> Any:
        return SimpleNamespace(label="q@srv", key=("q", "srv"), backend=self.engine)

    def render(self, target: Any, prompt: Prompt, thinking: bool) -> PromptInput:
        return PromptInput(prompt.text, None, templated=True)

    def render_turns(
        self, target: Any, prompt: Prompt, turns: Sequence[Message], thinking: bool
    ) -> PromptInput:
        return PromptInput(turns[-1].content, None, templated=True)

    def call(self, target: Any, work: Coroutine[Any, Any, Any]) -> Any:
        return asyncio.run(work)


LOADED = SimpleNamespace(
    target=lambda ref, loc: SimpleNamespace(backend="srv", label="q@srv"),
    matrix=SimpleNamespace(backends={"srv": SimpleNamespace(kind="openai")}),
)
PROMPTS = (
    Prompt("p1", "12+34=", None, 4, None, None, None, "s.jsonl:p1"),
    Prompt("p2", "40+35=", None, 4, None, None, None, "s.jsonl:p2"),
)


def suite_run(engine: Engine, scenarios: str = "[shared-prefix, exact-repeat]") -> SuiteRun:
    check = CheckSpec.model_validate(
        {"cache-parity": {"target": "q@srv", "scenarios": scenarios.strip("[]").split(", ")}}
    )
    context = RunContext(
        Cache(engine),  # type: ignore[arg-type]
        LOADED,  # type: ignore[arg-type]
        check,
        0,
        Suite("s", Path("s.jsonl"), PROMPTS),
        Settings(),
    )
    return SuiteRun(check.check_kind, context)


def plan(key: str) -> ItemPlan:
    return ItemPlan(key, "prompt", key)


def test_every_reference_goes_before_any_scenario_and_is_shown_cold() -> None:
    """p1's reference, p2's reference, then p1's scenarios (its sibling ``12+3=4``, itself
    twice), then p2's: no scenario request of the check precedes a reference, and each
    reference was the first sight of its text (0 cached tokens reported)."""
    engine = Engine()
    run = suite_run(engine)
    p1 = run.outcome_of(plan("p1"))
    assert engine.sent == [
        "12+34=",
        "40+35=",
        "12+3=4",
        "12+34=",
        "12+34=",
        "40+3=5",
        "40+35=",
        "40+35=",
    ]
    assert p1.violations == []
    assert p1.data.reference_kind == "first-request"
    assert p1.data.reference_cold == "the reference sent first, 0 cached tokens reported"
    assert "the reference sent first, 0 cached tokens reported" in p1.text
    assert run.outcome_of(plan("p2")).violations == []


def test_what_cannot_be_exercised_is_decided_before_any_request() -> None:
    """One request at a time: concurrent; no uncached request: a single-turn prompt's
    multi-turn (its composed conversation's reference could not be cold). Both said, neither
    failing; their requests never sent."""
    engine = Engine()
    run = suite_run(engine, "[multi-turn, concurrent]")
    outcome = run.outcome_of(plan("p1"))
    assert outcome.violations == []
    assert [(r.scenario, r.exercised) for r in outcome.data.scenarios] == [
        ("multi-turn", False),
        ("concurrent", False),
    ]
    assert "concurrent: not exercised (the backend takes one request at a time)" in outcome.text
    assert "multi-turn: not exercised (a single-turn prompt's later turn needs" in outcome.text
    assert engine.sent == []  # nothing to compare: not even the references


def test_a_failed_priming_request_fails_the_item_not_its_scenario_left_out() -> None:
    """The sibling (shared-prefix's priming request) answered HTTP 500: the scenario is
    failed with the server's answer, the item fails, and the next scenario still runs."""
    engine = Engine(fail={("12+3=4", 1): 500})
    run = suite_run(engine)
    outcome = run.outcome_of(plan("p1"))
    assert outcome.violations == [
        "shared-prefix: the prefix-sharing sibling failed: HTTP 500: backend 'srv': POST "
        "/v1/chat/completions -> HTTP 500"
    ]
    shared, repeat = outcome.data.scenarios
    assert (shared.exercised, shared.match, shared.error) == (True, False, outcome.violations[0])
    assert (repeat.match, repeat.cached_tokens) == (True, 5)
    assert run.aggregate().violations[0].startswith("1 of 2 items failed: p1 (shared-prefix:")


def test_a_failed_reference_fails_its_item_and_sends_none_of_its_scenarios() -> None:
    engine = Engine(fail={("40+35=", 1): 503})
    run = suite_run(engine)
    outcome = run.outcome_of(plan("p2"))
    assert outcome.violations == [
        "the reference: its request failed: HTTP 503: backend 'srv': POST "
        "/v1/chat/completions -> HTTP 503"
    ]
    assert [r.error for r in outcome.data.scenarios] == [
        "not compared: the reference request failed"
    ] * 2
    assert "40+3=5" not in engine.sent  # p2's scenarios were not sent
    assert run.outcome_of(plan("p1")).violations == []


def test_a_server_that_answers_a_reference_from_its_cache_fails_it_as_not_cold() -> None:
    """The server saw p1 before this check (an earlier run): it reports as many cached
    tokens on the reference as on the prompt served whole (sent twice more after the
    scenarios), so the reference is not cold, whatever the scenarios show."""
    engine = Engine(sent=["12+34="])
    outcome = suite_run(engine).outcome_of(plan("p1"))
    assert outcome.violations == [
        "the reference is not cold: the engine reports 5 cached prompt tokens on it, as many "
        "as on its prompt served whole (5)"
    ]
    # seen before, its reference, its two scenario requests, twice more to count it whole
    assert engine.sent.count("12+34=") == 1 + 1 + 2 + 2


def test_a_reference_that_reuses_only_a_prefix_shared_with_other_prompts_is_cold_for_it() -> None:
    """An engine that reuses any prefix two prompts share (mlx_lm.server) reports 2 cached
    tokens on p2's reference, sent before anything of p2: fewer than the 5 it reports on p2
    served whole. The reference is cold for its own prompt; the item says how it knows."""
    engine = Engine(shared={"40+35=": 2})
    run = suite_run(engine)
    outcome = run.outcome_of(plan("p2"))
    assert outcome.violations == []
    said = (
        "the reference sent first, 2 cached tokens reported, fewer than the 5 on its prompt "
        "served whole: only a prefix it shares with prompts sent before it (the engine has no "
        "uncached request)"
    )
    assert outcome.data.reference_cold == said and said in outcome.text
    assert outcome.data.reference_cached_tokens == 2
    # p1 reported 0: cold as it is, not sent again to be counted
    assert engine.sent.count("12+34=") == 3 and engine.sent.count("40+35=") == 5
