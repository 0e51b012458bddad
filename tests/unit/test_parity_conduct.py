"""How stream-parity's, endpoint-parity's and tokenization's requests went, judged by the
framework's rules on a scripted server: a path the probe found lacking is ``unsupported``
(the item compares nothing and says so), a refused (4xx) or failed (5xx) request fails the
item with the server's words, on the reference side too; and the probe's classification of
a path (:mod:`pytest_infercheck.backends.endpoint_probe`)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from pytest_infercheck.backends.base import BackendError, Generation, GenerationParams, PromptInput
from pytest_infercheck.backends.endpoint_probe import classify, probe_generation_paths, union
from pytest_infercheck.backends.http import HttpError
from pytest_infercheck.checks.framework.plan import ItemPlan
from pytest_infercheck.checks.framework.run import RunContext, SuiteRun
from pytest_infercheck.config import CheckSpec, Settings
from pytest_infercheck.suites import Prompt, Suite
from pytest_infercheck.verdict.conduct import Abilities

GOOD = Generation("46", [55, 57, 2], "stop", [-0.5, -0.25, -0.125])
REFUSED = HttpError("backend 'llama': POST /x -> HTTP 400", 400, '{"error": {"message": "no"}}')
FAILED = HttpError("backend 'llama': POST /x -> HTTP 500", 500, "upstream crashed")


@dataclass
class Server:
    """A server whose every answer is ``answer(how, prompt text)``: a generation, or an
    exception it raises (``how``: ``generate``, ``stream``, an endpoint)."""

    answer: Callable[[str, str], Generation | BaseException]
    kind: str = "llama-server"
    concurrency: int = 4
    asked: list[str] = field(default_factory=list)

    def _reply(self, how: str, prompt: PromptInput) -> Generation:
        self.asked.append(f"{how}:{prompt.text}")
        got = self.answer(how, prompt.text)
        if isinstance(got, BaseException):
            raise got
        return got

    async def generate(self, prompt: PromptInput, params: GenerationParams) -> Generation:
        return self._reply("generate", prompt)

    async def generate_stream(self, prompt: PromptInput, params: GenerationParams) -> Generation:
        return self._reply("stream", prompt)

    async def generate_via(
        self, endpoint: str, prompt: PromptInput, params: GenerationParams
    ) -> Generation:
        return self._reply(endpoint, prompt)

    def identity(self) -> dict[str, Any]:
        return {"kind": self.kind}

    def logprob_unavailable_reason(self) -> str | None:
        return None


@dataclass
class Cache:
    """The generation cache as the kinds use it: no caching, ``abilities`` as given."""

    server: Server
    probed: Abilities = field(default_factory=Abilities)

    def resolve(self, loaded: Any, target: Any) -> Any:
        return SimpleNamespace(label="adder@llama", key=("adder", "llama"), backend=self.server)

    def abilities(self, target: Any, topic: str) -> Abilities:
        return self.probed

    def render(self, target: Any, prompt: Prompt, thinking: bool) -> PromptInput:
        return PromptInput(prompt.text, None, templated=False)

    def render_many(self, target: Any, prompts: Any, thinking: bool) -> None:
        return None

    def prefetch(self, target: Any, jobs: Any, runs: int = 1) -> dict[Any, Any]:
        return {}

    def generate(self, target: Any, rendered: PromptInput, params: GenerationParams) -> Generation:
        return asyncio.run(self.server.generate(rendered, params))

    def call(self, target: Any, work: Coroutine[Any, Any, Any]) -> Any:
        return asyncio.run(work)

    def check_alive(self, target: Any, *, after_failures: bool = False) -> None:
        return None


LOADED = SimpleNamespace(
    target=lambda ref, loc: SimpleNamespace(backend="llama", label="adder@llama", model="adder"),
    matrix=SimpleNamespace(backends={"llama": SimpleNamespace(kind="llama-server")}),
)
PROMPTS = (
    Prompt("p1", "12+34=", None, 4, None, None, None, "s.jsonl:1"),
    Prompt("p2", "40+35=", None, 4, None, None, None, "s.jsonl:2"),
)


def run_of(entry: dict[str, Any], server: Server, probed: Abilities | None = None) -> SuiteRun:
    check = CheckSpec.model_validate(entry)
    suite = Suite("s", Path("s.jsonl"), PROMPTS)
    context = RunContext(Cache(server, probed or Abilities()), LOADED, check, 0, suite, Settings())  # type: ignore[arg-type]
    return SuiteRun(check.check_kind, context)


STREAM = {"stream-parity": "adder@llama"}
ENDPOINTS = {"endpoint-parity": {"target": "adder@llama", "endpoints": ["completions", "chat"]}}


def test_a_refused_stream_fails_its_item_with_the_servers_words() -> None:
    server = Server(lambda how, text: REFUSED if how == "stream" and text == "12+34=" else GOOD)
    run = run_of(STREAM, server)
    p1 = run.outcome_of(ItemPlan("p1", "prompt", "p1"))
    assert p1.violations == ["adder@llama: the streamed request failed: HTTP 400: no"]
    assert p1.role == "incomplete" and p1.data.failures == p1.violations
    assert run.outcome_of(ItemPlan("p2", "prompt", "p2")).violations == []
    assert run.aggregate().violations == [
        "1 of 2 items failed: p1 (adder@llama: the streamed request failed: HTTP 400: no)"
    ]


def test_a_failed_reference_fails_the_item_on_the_reference_side() -> None:
    server = Server(lambda how, text: FAILED if how == "generate" else GOOD)
    run = run_of(STREAM, server)
    p1 = run.outcome_of(ItemPlan("p1", "prompt", "p1"))
    assert p1.violations == [
        "adder@llama: the non-streamed request failed: HTTP 500: upstream crashed"
    ]
    # ... and the streamed request was made anyway (nothing is skipped after an error)
    assert "stream:12+34=" in server.asked


def test_streaming_the_probe_found_lacking_is_unsupported_and_not_requested() -> None:
    probed = Abilities(frozenset({"chat-endpoint"}), {"streaming": "a streamed request: HTTP 404"})
    server = Server(lambda how, text: GOOD)
    run = run_of(STREAM, server, probed)
    p1 = run.outcome_of(ItemPlan("p1", "prompt", "p1"))
    assert p1.violations == [] and p1.role == "incomplete"
    assert p1.data.unsupported == [
        "the streamed request: unsupported (streaming not offered: a streamed request: HTTP 404)"
    ]
    assert p1.data.unsupported[0] in p1.text
    assert not any(a.startswith("stream:") for a in server.asked)
    aggregate = run.aggregate()
    assert aggregate.violations == [] and aggregate.data.unsupported == ["p1", "p2"]


def test_an_endpoint_the_probe_found_lacking_and_one_that_fails() -> None:
    entry = {
        "endpoint-parity": {
            "target": "adder@llama",
            "endpoints": ["completions", "chat", "messages"],
        }
    }
    probed = Abilities(frozenset({"chat-endpoint"}), {"messages-endpoint": "GET: 404"})
    server = Server(lambda how, text: FAILED if how == "chat" and text == "40+35=" else GOOD)
    run = run_of(entry, server, probed)
    messages = run.outcome_of(ItemPlan("p1", "prompt", "p1", "messages"))
    assert messages.violations == [] and messages.data.unsupported == [
        "the messages endpoint: unsupported (messages-endpoint not offered: GET: 404)"
    ]
    assert run.outcome_of(ItemPlan("p1", "prompt", "p1", "chat")).violations == []
    chat = run.outcome_of(ItemPlan("p2", "prompt", "p2", "chat"))
    assert chat.violations == [
        "adder@llama: the chat endpoint's request failed: HTTP 500: upstream crashed"
    ]
    aggregate = run.aggregate()
    assert aggregate.data.endpoints["messages"].unsupported == 2
    assert aggregate.data.endpoints["chat"].failed == 1
    assert not any(a.startswith("messages:") for a in server.asked)


def test_a_failed_reference_endpoint_fails_every_item_of_its_prompt() -> None:
    entry = {
        "endpoint-parity": {
            "target": "adder@llama",
            "endpoints": ["completions", "chat", "messages"],
        }
    }
    server = Server(
        lambda how, text: REFUSED if how == "completions" and text == "12+34=" else GOOD
    )
    run = run_of(entry, server)
    said = "adder@llama: the completions endpoint's request failed: HTTP 400: no"
    for other in ("chat", "messages"):
        assert run.outcome_of(ItemPlan("p1", "prompt", "p1", other)).violations == [said]
        assert run.outcome_of(ItemPlan("p2", "prompt", "p2", other)).violations == []


# -- the probe ---------------------------------------------------------------------------------


def not_found() -> HttpError:
    return HttpError("backend 'x': POST /v1/messages -> HTTP 404", 404, "Not Found")


def test_a_path_is_lacking_only_on_404_405_501_beside_a_path_that_answered() -> None:
    found = classify(
        {
            "chat-endpoint": ("the chat endpoint", GOOD),
            "messages-endpoint": ("the messages endpoint", not_found()),
            "streaming": ("a streamed request", REFUSED),  # a refusal: not probed
            "completions-endpoint": ("the completions endpoint", BackendError("no client")),
        }
    )
    assert found.offered == frozenset({"chat-endpoint"})
    assert found.lacking == {"messages-endpoint": "the messages endpoint: HTTP 404: Not Found"}
    assert found.unsupported("streaming", "x") is None
    # nothing answered (a wrong model name, a broken gateway): nothing is lacking
    alone = classify({"messages-endpoint": ("the messages endpoint", not_found())})
    assert alone == Abilities()
    assert union(found, Abilities(lacking={"tokenize-endpoint": "404"})).lacking == {
        "messages-endpoint": "the messages endpoint: HTTP 404: Not Found",
        "tokenize-endpoint": "404",
    }


@pytest.mark.asyncio
async def test_the_probe_sends_one_minimal_request_per_path() -> None:
    server = Server(lambda how, text: not_found() if how == "messages" else GOOD)
    found = await probe_generation_paths(server)  # type: ignore[arg-type]
    assert sorted(server.asked) == ["chat:Hi", "completions:Hi", "messages:Hi", "stream:Hi"]
    assert found.offered == frozenset({"completions-endpoint", "chat-endpoint", "streaming"})
    assert list(found.lacking) == ["messages-endpoint"]


# -- a written logprob_tolerance known unmeasurable from the matrix ---------------------------
MATRIX = """\
models: {{adder: {{path: ./adder}}}}
backends: {{srv: {{kind: {kind}, url: 'http://127.0.0.1:9'{options}}}}}
suites: [addition]
checks:
  - stream-parity: adder@srv
    logprob_tolerance: 0.001
"""


@pytest.mark.parametrize(
    ("kind", "options", "why"),
    [
        ("vllm-mlx", "", "backend 'srv' (vllm-mlx) returns no logprobs"),
        ("openai", ", logprobs: false", "backend 'srv' has logprobs: false"),
        ("openai", "", None),
    ],
)
def test_stream_parity_says_which_written_gate_the_matrix_makes_unmeasurable(
    tmp_path: Path, kind: str, options: str, why: str | None
) -> None:
    from pytest_infercheck.checks.parity.spec import stream_unmeasurable
    from pytest_infercheck.config import load_matrix

    path = tmp_path / "infercheck.yaml"
    path.write_text(MATRIX.format(kind=kind, options=options))
    loaded = load_matrix(path)
    found = stream_unmeasurable(loaded, loaded.matrix.checks[0], 0)
    expected = {} if why is None else {"logprob_tolerance": f"not measured on any item: {why}"}
    assert found == expected


def test_the_views_of_an_item_that_compared_nothing_escape_the_servers_words() -> None:
    from pytest_infercheck.checks.parity import ParityIncomplete
    from pytest_infercheck.checks.tokenization import TokenizationIncomplete
    from pytest_infercheck.records import plain_data
    from pytest_infercheck.report.views import item_detail
    from tests.htmldom import parse

    said = "adder@llama: the streamed request failed: HTTP 400: <b>no</b>"
    records = [
        (
            "stream-parity",
            ParityIncomplete("s01", "adder@llama", "non-streamed", "streamed", [said]),
        ),
        ("tokenization", TokenizationIncomplete("p1", "adder@local", "adder@llama", [said])),
    ]
    for kind, record in records:
        html = item_detail({"kind": kind, "role": "incomplete", "data": plain_data(record)})
        assert "<b>" not in html and "&lt;b&gt;no&lt;/b&gt;" in html
        assert said in parse(html).text()
