"""Each engine kind's items and aggregate on a scripted engine: a faithful one passes, and
every fault the kind can see fails the item and the aggregate, named (a NaN or ``+inf``
logprob, a logprob that does not match its token, an empty generation, a non-finite
similarity), while a ``-inf`` logprob and a position the server did not report do not.

The run objects are the framework's, serving the kinds' own gatherers
(:class:`DeterminismGather`, ...; a kind not yet split into facets: its old run class), given
a stub generation cache and matrix: only the engine is scripted."""

from __future__ import annotations

import asyncio
import math
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from pytest_infercheck.backends.base import Generation, GenerationParams, PromptInput
from pytest_infercheck.checks import parity
from pytest_infercheck.checks.batch_invariance import BatchInvarianceGather, BatchInvariancePrompt
from pytest_infercheck.checks.cache_pollution import HostileRecord
from pytest_infercheck.checks.cache_pollution.gather import CachePollutionGather
from pytest_infercheck.checks.determinism import DeterminismGather, DeterminismPrompt
from pytest_infercheck.checks.framework.plan import ItemPlan
from pytest_infercheck.checks.framework.run import RunContext, SuiteRun
from pytest_infercheck.checks.parity import ParityPrompt
from pytest_infercheck.checks.parity.gather import EndpointGather, StreamGather
from pytest_infercheck.config import CheckSpec, Settings
from pytest_infercheck.records import load_record, plain_data
from pytest_infercheck.suites import Prompt, Suite
from pytest_infercheck.verdict.conduct import Abilities

NAN, INF = math.nan, math.inf
Script = Callable[[str, int], Generation]
"""(prompt text, call number for that text) -> what the engine answers."""


def gen(
    text: str,
    ids: list[int] | None,
    logprobs: list[float] | None = None,
    top: list[dict[Any, float]] | None = None,
    finish: str = "stop",
) -> Generation:
    return Generation(text, ids, finish, logprobs, top)


GOOD = gen("46", [55, 57, 2], [-0.5, -0.25, -0.125])


@dataclass
class Engine:
    """A server whose every answer comes from ``script``; ``after`` answers instead once a
    hostile request was sent."""

    script: Script
    after: Script | None = None
    kind: str = "llama-server"
    batching: str | None = None
    concurrency: int = 4
    calls: dict[str, int] = field(default_factory=dict)
    hostile: bool = False

    def answer(self, prompt: PromptInput, how: str = "") -> Generation:
        n = self.calls[prompt.text + how] = self.calls.get(prompt.text + how, -1) + 1
        script = self.after if self.hostile and self.after is not None else self.script
        return script(prompt.text + how, n)

    async def generate(self, prompt: PromptInput, params: GenerationParams) -> Generation:
        return self.answer(prompt)

    async def generate_batch(
        self, prompts: list[PromptInput], params: GenerationParams
    ) -> list[Generation | BaseException]:
        return [self.answer(p, "#batched") for p in prompts]

    async def generate_stream(self, prompt: PromptInput, params: GenerationParams) -> Generation:
        return self.answer(prompt, "#streamed")

    async def generate_via(
        self, endpoint: str, prompt: PromptInput, params: GenerationParams
    ) -> Generation:
        return self.answer(prompt, f"#{endpoint}")

    async def send_hostile(self, kind: str) -> str:
        self.hostile = True
        return "HTTP 400"

    async def alive(self) -> bool:
        return True

    def identity(self) -> dict[str, Any]:
        return {"kind": self.kind}

    def logprob_unavailable_reason(self) -> str | None:
        return None


@dataclass
class Cache:
    """The generation cache as the kinds use it, without caching."""

    engine: Engine

    def resolve(self, loaded: Any, target: Any) -> Any:
        return SimpleNamespace(label="adder@llama", key=("adder", "llama"), backend=self.engine)

    def render(self, target: Any, prompt: Prompt, thinking: bool) -> PromptInput:
        return PromptInput(prompt.text, None, templated=False)

    def prefetch(self, target: Any, jobs: Any, runs: int = 1) -> dict[Any, Any]:
        return {}

    def generate(
        self, target: Any, rendered: PromptInput, params: GenerationParams, run: int = 0
    ) -> Generation:
        return self.engine.answer(rendered)

    def call(self, target: Any, work: Coroutine[Any, Any, Any]) -> Any:
        return asyncio.run(work)

    def abilities(self, target: Any, topic: str) -> Abilities:
        return Abilities()  # nothing probed: every request is made

    def render_many(self, target: Any, prompts: Any, thinking: bool) -> None:
        return None

    def check_alive(self, target: Any, *, after_failures: bool = False) -> None:
        return None

    def run(self, work: Coroutine[Any, Any, Any]) -> Any:
        return asyncio.run(work)


LOADED = SimpleNamespace(
    target=lambda ref, loc: SimpleNamespace(backend="llama"),
    matrix=SimpleNamespace(backends={"llama": SimpleNamespace(kind="llama-server")}),
)


def prompt(pid: str, text: str) -> Prompt:
    return Prompt(pid, text, None, 4, None, None, None, f"s.jsonl:{pid}")


PROMPTS = (prompt("p1", "12+34="), prompt("p2", "40+35="))


def make_run(run_type: type, entry: dict[str, Any], script: Script, **engine: Any) -> Any:
    """The framework's run of the check ``entry`` (a kind whose gatherer, or old run class,
    is ``run_type``)."""
    check = CheckSpec.model_validate(entry)
    suite = Suite("s", Path("s.jsonl"), PROMPTS)
    context = RunContext(Cache(Engine(script, **engine)), LOADED, check, 0, suite, Settings())  # type: ignore[arg-type]
    gatherer = check.check_kind.gather(context)
    assert isinstance(gatherer, run_type) or gatherer.old.__class__ is run_type
    return SuiteRun(check.check_kind, context)


def outcome(run: Any, key: str, param: str | None = None) -> tuple[list[str], Any]:
    result = run.outcome_of(ItemPlan(key, "prompt", key, param))
    return result.violations, result.data


# -- determinism ---------------------------------------------------------------------------------
DETERMINISM = {"determinism": {"target": "adder@llama", "runs": 3}, "max_logprob_drift": 1e-6}


def test_determinism_passes_a_faithful_engine() -> None:
    run = make_run(DeterminismGather, DETERMINISM, lambda text, n: GOOD)
    assert outcome(run, "p1")[0] == [] and run.aggregate().violations == []


def test_determinism_names_a_nan_logprob_that_max_used_to_hide() -> None:
    # Run 1 of p2 has the same tokens and a NaN at position 1; the old drift was
    # max(-0.25, nan, -0.25) - min(...) = 0.0, so the item passed max_logprob_drift 1e-6.
    def script(text: str, n: int) -> Generation:
        if text == "40+35=" and n == 1:
            return gen("46", [55, 57, 2], [-0.5, NAN, -0.125])
        return GOOD

    run = make_run(DeterminismGather, DETERMINISM, script)
    violations, data = outcome(run, "p2")
    assert violations == [
        "non-finite logprob in run 1 at position 1 (NaN)",
        "max_logprob_drift: logprob drift among runs with identical tokens is not finite "
        "(nan): fails",
    ]
    assert [f.text for f in data.faults] == [violations[0]]
    assert outcome(run, "p1")[0] == []
    assert run.aggregate().violations == [
        "1 of 2 items failed: p2 (non-finite logprob in run 1 at position 1 (NaN))",
        "non-finite logprob in 1 of 2 prompts: p2 (run 1 at position 1)",
    ]
    # the record keeps its faults through JSON
    assert load_record(DeterminismPrompt, plain_data(data)).faults == data.faults


def test_determinism_names_an_empty_run_and_a_logprob_off_its_token() -> None:
    def script(text: str, n: int) -> Generation:
        if text == "12+34=":
            return gen("", [2], [-0.01]) if n == 2 else GOOD
        # p2: token 57's logprob is -0.25 in its own top-k map but -0.75 as the chosen one
        return gen("46", [55, 57, 2], [-0.5, -0.75, -0.1], [{55: -0.5}, {57: -0.25}, {2: -0.1}])

    run = make_run(DeterminismGather, DETERMINISM, script)
    violations, _ = outcome(run, "p1")
    assert violations[0] == "empty generation: run 2 generated no tokens while run 0 generated 2"
    assert "2 distinct outputs in 3 runs (modal share 0.6667)" in violations
    violations, _ = outcome(run, "p2")
    assert violations == [
        f"logprob does not match its token in run {r} at position 1 (position 1: chosen -0.75, "
        "its top-k entry -0.25)"
        for r in range(3)
    ]
    assert run.aggregate().violations == [
        "2 of 2 items failed: p1 (empty generation: run 2 generated no tokens while run "
        "0 generated 2), p2 (logprob does not match its token in run 0 at position 1 "
        "(position 1: chosen -0.75, its top-k entry -0.25))",
        "empty generation in 1 of 2 prompts: p1 (run 2)",
        "logprob does not match its token in 1 of 2 prompts: p2 (run 0 at position 1), "
        "p2 (run 1 at position 1), p2 (run 2 at position 1)",
    ]


def test_determinism_takes_minus_inf_and_unreported_positions() -> None:
    # -inf at position 2 in every run; position 1 not reported by run 0 (NaN, empty map).
    def script(text: str, n: int) -> Generation:
        top: list[dict[Any, float]] = [{55: -0.5}, {} if n == 0 else {57: -0.25}, {2: -INF}]
        return gen("46", [55, 57, 2], [-0.5, NAN if n == 0 else -0.25, -INF], top)

    run = make_run(DeterminismGather, DETERMINISM, script)
    violations, data = outcome(run, "p1")
    assert violations == [] and data.max_logprob_drift == 0.0


def test_determinism_fails_an_item_whose_every_run_failed_whatever_max_error_rate() -> None:
    """Before: with max_error_rate 1.0 every run failing (3/3 <= 1.0) and no output (no
    distinct outputs) passed the item and the aggregate. Nothing was judged: it fails with
    the server's message."""
    from pytest_infercheck.backends.http import HttpError

    def script(text: str, n: int) -> Generation:
        if text == "40+35=":
            body = '{"error": {"code": 500, "message": "boom"}}'
            raise HttpError(f"backend 'llama': POST /completion -> HTTP 500: {body}", 500, body)
        return GOOD

    entry = {**DETERMINISM, "max_error_rate": 1.0}
    run = make_run(DeterminismGather, entry, script)
    violations, data = outcome(run, "p2")
    assert violations == [
        "adder@llama: every run (3 of 3) of p2 failed: HTTP 500: boom",
        "max_logprob_drift: not measured: no two runs with identical tokens (0 distinct "
        "outputs of 0 successful runs)",
    ]
    assert data.errors == 3 and data.error_messages[0].startswith("run 0: backend 'llama'")
    assert outcome(run, "p1")[0] == []
    assert run.aggregate().violations == [f"1 of 2 items failed: p2 ({violations[0]})"]


def test_determinism_fails_a_written_drift_gate_it_cannot_measure() -> None:
    """A server that returns no logprobs: ``max_logprob_drift`` written, the drift is never
    measured. Before, the gate silently never applied (drift None) and the item passed."""
    bare = gen("46", [55, 57, 2])
    run = make_run(DeterminismGather, DETERMINISM, lambda text, n: bare)
    violations, data = outcome(run, "p1")
    assert data.max_logprob_drift is None
    assert violations == [
        "max_logprob_drift: not measured: no logprobs: adder@llama returned no logprobs with "
        "its runs"
    ]
    unwritten = {"determinism": DETERMINISM["determinism"]}
    assert outcome(make_run(DeterminismGather, unwritten, lambda text, n: bare), "p1")[0] == []


def test_determinism_fails_a_drift_gate_over_a_run_that_dropped_its_logprobs() -> None:
    """Run 1 of p1 comes back with no logprobs, the others with theirs: the drift was 0.0
    over the runs that had them, and the item passed; the drift over run 1 is unknown."""

    def script(text: str, n: int) -> Generation:
        return gen("46", [55, 57, 2]) if text == "12+34=" and n == 1 else GOOD

    run = make_run(DeterminismGather, DETERMINISM, script)
    assert outcome(run, "p1")[0] == [
        "max_logprob_drift: not measured: run 1 of 3 successful runs returned no logprobs: "
        "the drift over them is unknown"
    ]
    assert outcome(run, "p2")[0] == []


# -- batch-invariance ----------------------------------------------------------------------------
NEEDLE = {"batch-invariance": {"target": "adder@llama", "trials": 2, "batch_size": 3}}


def needle_script(batched: Generation) -> Script:
    def script(text: str, n: int) -> Generation:
        return batched if text == "12+34=#batched" else GOOD

    return script


def test_batch_invariance_passes_a_faithful_engine() -> None:
    run = make_run(BatchInvarianceGather, NEEDLE, needle_script(GOOD))
    assert outcome(run, "p1")[0] == [] and run.aggregate().violations == []


def test_batch_invariance_names_a_nan_logprob_that_max_used_to_hide() -> None:
    # |diffs| 0, NaN, 0: the old max(0.0, nan, 0.0) was 0.0, within any tolerance.
    run = make_run(
        BatchInvarianceGather, NEEDLE, needle_script(gen("46", [55, 57, 2], [-0.5, NAN, -0.125]))
    )
    violations, record = outcome(run, "p1")
    where = [f"trial {t.trial} (position {t.position} of 3)" for t in record.trials]
    assert violations == [
        line
        for w in where
        for line in (
            f"{w}: non-finite logprob in the batched output at position 1 (NaN)",
            f"{w}: logprobs moved by nan (not finite): fails logprob_tolerance 0.0001",
        )
    ]
    assert run.aggregate().violations == [
        "1 of 2 items failed: p1 (trial 0 (position 0 of 3): non-finite logprob in the "
        "batched output at position 1 (NaN))",
        "non-finite logprob in 1 of 2 prompts: p1 (the batched output at position 1), "
        "p1 (the batched output at position 1)",
    ]
    # JSON has no NaN: the difference reads back as null, the faults as they were
    back = load_record(BatchInvariancePrompt, plain_data(record))
    assert [t.faults for t in back.trials] == [t.faults for t in record.trials]
    assert [t.max_logprob_diff for t in back.trials] == [None, None]


def test_batch_invariance_names_an_empty_batched_output() -> None:
    run = make_run(BatchInvarianceGather, NEEDLE, needle_script(gen("", [2], [-0.01])))
    violations, record = outcome(run, "p1")
    first = f"trial 0 (position {record.trials[0].position} of 3)"
    assert violations[0] == (
        f"{first}: empty generation: the batched output generated no tokens while the output "
        "alone generated 2"
    )
    assert violations[1].startswith(f"{first}: output differs from the prompt alone at 0")


def test_batch_invariance_names_a_fault_of_the_output_alone_once() -> None:
    def script(text: str, n: int) -> Generation:
        if text == "12+34=":
            return gen("46", [55, 57, 2], [-0.5, -0.25, INF])
        return GOOD

    run = make_run(BatchInvarianceGather, NEEDLE, script)
    violations, _ = outcome(run, "p1")
    assert violations[0] == "non-finite logprob in the output alone at position 2 (+inf)"
    assert sum("non-finite" in v for v in violations) == 1


def test_batch_invariance_fails_a_failed_batched_request_with_the_servers_message() -> None:
    from pytest_infercheck.backends.http import HttpError

    def script(text: str, n: int) -> Generation:
        if text == "12+34=#batched":
            body = '{"error": {"code": 503, "message": "busy"}}'
            raise HttpError(f"backend 'llama': POST /completion -> HTTP 503: {body}", 503, body)
        return GOOD

    run = make_run(BatchInvarianceGather, NEEDLE, script)
    violations, record = outcome(run, "p1")
    assert [t.error for t in record.trials] == [
        "HttpError: backend 'llama': POST /completion -> HTTP 503: "
        '{"error": {"code": 503, "message": "busy"}}'
    ] * 2
    # the scripted batch fails as a whole (its needle raised): each of its requests failed
    expected = []
    for t in record.trials:
        where = f"trial {t.trial} (position {t.position} of 3)"
        for i, name in enumerate(t.batch):
            what = "the batched request" if i == t.position else f"companion {name} at position {i}"
            expected.append(f"{where}: {what} failed: HTTP 503: busy")
    assert violations == expected and len(expected) == 6


def test_batch_invariance_fails_a_written_tolerance_over_an_output_without_logprobs() -> None:
    entry = {**NEEDLE, "logprob_tolerance": 0.001}
    run = make_run(BatchInvarianceGather, entry, needle_script(gen("46", [55, 57, 2])))
    violations, record = outcome(run, "p1")
    where = [f"trial {t.trial} (position {t.position} of 3)" for t in record.trials]
    assert violations == [
        f"logprob_tolerance: not measured: {where[0]}'s batched output, {where[1]}'s batched "
        "output returned no logprobs: its difference is unknown"
    ]


def test_batch_invariance_fails_a_written_tolerance_it_cannot_measure() -> None:
    """``logprob_tolerance`` written on a server that returns no logprobs: never measured,
    so it fails; its default is not required of such a server."""
    bare = gen("46", [55, 57, 2])
    entry = {**NEEDLE, "logprob_tolerance": 0.001}
    run = make_run(BatchInvarianceGather, entry, lambda text, n: bare)
    assert outcome(run, "p1")[0] == [
        "logprob_tolerance: not measured: no trial compared logprobs (no logprobs: "
        "adder@llama returned no logprobs)"
    ]
    assert outcome(make_run(BatchInvarianceGather, NEEDLE, lambda text, n: bare), "p1")[0] == []


# -- stream-parity and endpoint-parity -----------------------------------------------------------
STREAM = {"stream-parity": "adder@llama"}
ENDPOINTS = {"endpoint-parity": {"target": "adder@llama", "endpoints": ["completions", "chat"]}}


def streamed(other: Generation) -> Script:
    return lambda text, n: other if text == "12+34=#streamed" else GOOD


def test_stream_parity_passes_a_faithful_engine_and_an_unreported_position() -> None:
    run = make_run(StreamGather, STREAM, streamed(GOOD))
    assert outcome(run, "p1")[0] == []
    gap = gen("46", [55, 57, 2], [-0.5, NAN, -0.125], [{55: -0.5}, {}, {2: -0.125}])
    run = make_run(StreamGather, STREAM, streamed(gap))
    violations, record = outcome(run, "p1")
    assert violations == [] and record.logprob_drift == 0.0
    assert run.aggregate().violations == []


@pytest.mark.parametrize(("value", "label", "drift"), [(INF, "+inf", "inf"), (NAN, "NaN", "nan")])
def test_stream_parity_names_a_non_finite_logprob_it_used_to_skip(
    value: float, label: str, drift: str
) -> None:
    # The old drift skipped every position where a side was not finite.
    run = make_run(StreamGather, STREAM, streamed(gen("46", [55, 57, 2], [value, -0.25, -0.125])))
    violations, record = outcome(run, "p1")
    assert violations == [
        f"non-finite logprob in the streamed output at position 0 ({label})",
        # logprob_tolerance at its default (not written) judges the measured drift
        f"logprob_tolerance: logprob drift with identical tokens is not finite ({drift}): fails",
    ]
    assert run.aggregate().violations == [
        f"1 of 2 items failed: p1 (non-finite logprob in the streamed output at position 0 "
        f"({label}))",
        "non-finite logprob in 1 of 2 items: p1 (the streamed output at position 0)",
    ]
    assert load_record(ParityPrompt, plain_data(record)).faults == record.faults


def test_stream_parity_names_an_empty_streamed_output() -> None:
    run = make_run(StreamGather, STREAM, streamed(gen("", [], [])))
    violations, _ = outcome(run, "p1")
    assert violations[0] == (
        "empty generation: the streamed output generated no tokens while the non-streamed "
        "output generated 2"
    )
    assert violations[1].startswith("the streamed output differs from the non-streamed one")


def test_endpoint_parity_names_an_empty_endpoint_and_a_nan_similarity(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def script(text: str, n: int) -> Generation:
        return gen("" if text.endswith("#chat") else "46", None)

    run = make_run(EndpointGather, ENDPOINTS, script)
    violations, _ = outcome(run, "p1", "chat")
    assert violations == [
        "empty generation: the chat output generated no characters while the completions "
        "output generated 2",
        "chat vs completions: similarity 0 < min_similarity 1",  # the default, 1.0
    ]
    # a similarity that is NaN (here patched in) never passes min_similarity
    monkeypatch.setattr(parity.compare, "similarity", lambda a, b: NAN)
    run = make_run(EndpointGather, ENDPOINTS, lambda text, n: gen("46", None))
    violations, _ = outcome(run, "p1", "chat")
    assert violations == [
        "non-finite similarity of chat vs completions (NaN)",
        "min_similarity: chat vs completions: similarity is not finite (nan): fails",
    ]


# -- cache-pollution -----------------------------------------------------------------------------
POLLUTION = {"cache-pollution": {"target": "adder@llama", "hostile": ["invalid-utf8"]}}


def test_cache_pollution_passes_a_faithful_engine() -> None:
    run = make_run(CachePollutionGather, POLLUTION, lambda text, n: GOOD)
    assert outcome(run, "invalid-utf8")[0] == [] and run.aggregate().violations == []


def test_cache_pollution_names_an_output_that_became_empty() -> None:
    def after(text: str, n: int) -> Generation:
        return gen("", [2], [-0.01]) if text == "12+34=" else GOOD

    run = make_run(CachePollutionGather, POLLUTION, lambda text, n: GOOD, after=after)
    violations, record = outcome(run, "invalid-utf8")
    assert violations == [
        "empty generation: p1 after the invalid-utf8 request generated no tokens while p1 "
        "before it generated 2",
        "1 of 2 reference outputs changed after the invalid-utf8 request: p1",
    ]
    assert isinstance(record, HostileRecord) and [f.fault for f in record.faults] == [
        "empty generation"
    ]
    assert run.aggregate().violations == [
        "1 of 1 items failed: invalid-utf8 (empty generation: p1 after the invalid-utf8 "
        "request generated no tokens while p1 before it generated 2)",
        "reference outputs changed after: invalid-utf8",
        "empty generation in 1 of 1 hostile requests: invalid-utf8 (p1 after the invalid-utf8 "
        "request)",
    ]


def test_cache_pollution_names_non_finite_logprobs_before_and_after() -> None:
    def before(text: str, n: int) -> Generation:
        return gen("46", [55, 57, 2], [-0.5, -0.25, NAN]) if text == "40+35=" else GOOD

    def after(text: str, n: int) -> Generation:
        return gen("46", [55, 57, 2], [NAN, -0.25, -0.125]) if text == "12+34=" else GOOD

    run = make_run(CachePollutionGather, POLLUTION, before, after=after)
    violations, _ = outcome(run, "invalid-utf8")
    assert violations == [
        "non-finite logprob in the output of p2 before any hostile request at position 2 (NaN)",
        "non-finite logprob in the output of p1 after the invalid-utf8 request at position 0 (NaN)",
    ]


# -- reports -------------------------------------------------------------------------------------
def test_the_html_detail_of_each_kind_lists_its_faults() -> None:
    from pytest_infercheck.checks.stress import Output, Reference, level_data
    from pytest_infercheck.report.views import item_detail
    from tests.htmldom import parse

    bad = gen("46", [55, 57, 2], [-0.5, NAN, -0.125])

    def only_p1(how: str) -> Script:
        return lambda text, n: bad if text == f"12+34={how}" else GOOD

    after = {"after": lambda text, n: bad}
    records = [
        ("determinism", "prompt", make_run(DeterminismGather, DETERMINISM, only_p1("")), "p1"),
        (
            "batch-invariance",
            "prompt",
            make_run(BatchInvarianceGather, NEEDLE, only_p1("#batched")),
            "p1",
        ),
        ("stream-parity", "prompt", make_run(StreamGather, STREAM, only_p1("#streamed")), "p1"),
        (
            "cache-pollution",
            "hostile",
            make_run(CachePollutionGather, POLLUTION, only_p1("#"), **after),
            "invalid-utf8",
        ),
    ]
    for kind, role, run, key in records:
        violations, record = outcome(run, key)
        item = {"kind": kind, "role": role, "data": plain_data(record)}
        text = parse(item_detail(item, "failed")).text()
        assert "non-finite logprob in" in text and "(NaN)" in text, kind
        assert any(v.endswith("at position 1 (NaN)") for v in violations), kind
    level = level_data(
        1,
        "m@srv",
        [Output("a", 0.0, math.nan, "")],
        {"a": Reference("46", None)},
        [prompt("a", "a")],
    )
    text = parse(
        item_detail({"kind": "stress", "role": "level", "data": plain_data(level)}, "failed")
    ).text()
    assert "non-finite latency at request 0 (NaN)" in text and "empty generation in 1 of 1" in text
