"""What a structured path is and is not excused for: the ability probe's decisions
(:mod:`pytest_infercheck.structured.probe`) on scripted answers, and an item's verdict from
hand-built evidence under the framework's rules (a refused request fails the item naming the
server's message, on the reference side too; a path the probe found lacking is
``unsupported`` and passes; a path that cannot express the request is not exercised)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import pytest

from pytest_infercheck.checks.framework.plan import ItemPlan
from pytest_infercheck.checks.framework.run import item_outcome
from pytest_infercheck.checks.registry import kind_named
from pytest_infercheck.checks.structured_parity.evidence import (
    PathAnswer,
    PromptIds,
    StructuredEvidence,
)
from pytest_infercheck.checks.structured_parity.records import RequestFacts
from pytest_infercheck.checks.structured_parity.spec import StructuredParityThresholds
from pytest_infercheck.structured.probe import PROBE, ability, decide, probe_paths
from pytest_infercheck.structured.records import (
    ChatTurn,
    Inexpressible,
    MalformedResponse,
    PlacedCall,
    RequestFailed,
    StructuredChoice,
    StructuredRequest,
    StructuredResponse,
    Usage,
)
from pytest_infercheck.structured.results import NotAnswered
from pytest_infercheck.tools import Tool, ToolCall
from pytest_infercheck.verdict.conduct import (
    Abilities,
    Conduct,
    RequestFailure,
    not_exercised_before_requests,
)

HI = StructuredChoice("Hi", None, (), "length")


def answer(path: str, n: int = 1) -> StructuredResponse:
    return StructuredResponse(path, (HI,) * n, Usage(9, 1))  # type: ignore[arg-type]


# -- the probe's decisions ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("path", "got", "offered", "verdict", "seen"),
    [
        ("chat", answer("chat"), set(), True, "answered"),
        ("chat-n2", answer("chat-n2", 2), {"chat"}, True, "answered"),
        (
            "chat-n2",
            answer("chat-n2", 1),
            {"chat"},
            False,
            "n: 2 answered 1 choice: the server ignores n",
        ),
        (
            "chat-n2",
            RequestFailed("llama chat-n2", 400, "Field 'n': Value must be between 1 <= value <= 1"),
            {"chat"},
            False,
            "the probe got HTTP 400 where chat answered: Field 'n': Value must be between 1 "
            "<= value <= 1",
        ),
        # the same refusal where chat itself did not answer: not decided (the check's own
        # requests are sent and judged)
        ("chat-n2", RequestFailed("x chat-n2", 400, "bad"), set(), None, None),
        ("messages", RequestFailed("x messages", 404, "Not Found"), {"chat"}, False, None),
        ("messages-stream", RequestFailed("x", 405, "no"), {"chat"}, False, None),
        ("chat", RequestFailed("x chat", 501, "no"), set(), False, None),
        # a 400 on an endpoint itself or on a stream, a 5xx, an unreadable answer: not decided
        ("messages", RequestFailed("x messages", 400, "bad"), {"chat"}, None, None),
        ("chat-stream", RequestFailed("x", 400, "streaming refused"), {"chat"}, None, None),
        ("messages-stream", RequestFailed("x", 422, "no"), {"chat", "messages"}, None, None),
        ("chat-stream", RequestFailed("x", 500, "engine died"), {"chat"}, None, None),
        ("chat-stream", MalformedResponse("no [DONE]"), {"chat"}, None, None),
        ("chat", RequestFailed("x", 503, "busy"), set(), None, None),
        (
            "messages",
            Inexpressible("ollama messages: not offered (offered: chat, chat-stream)"),
            {"chat"},
            False,
            "ollama messages: not offered (offered: chat, chat-stream)",
        ),
    ],
)
def test_what_the_probe_decides(
    path: str, got: object, offered: set[str], verdict: bool | None, seen: str | None
) -> None:
    decided, said = decide(path, got, offered)  # type: ignore[arg-type]
    assert decided is verdict
    if seen is not None:
        assert said == seen


class Scripted:
    """A structured chat whose answer per path is scripted (a function of the request)."""

    def __init__(self, script: Callable[[StructuredRequest, str], StructuredResponse]) -> None:
        self.script = script
        self.asked: list[tuple[str, int]] = []

    def structured_paths(self) -> tuple[str, ...]:
        return ("chat", "chat-stream", "chat-n2", "messages", "messages-stream")

    async def structured(self, request: StructuredRequest, path: str) -> StructuredResponse:
        self.asked.append((path, request.n))
        return self.script(request, path)


def probed(script: Callable[[StructuredRequest, str], StructuredResponse]) -> Abilities:
    chat = Scripted(script)
    abilities = asyncio.run(probe_paths(chat))  # type: ignore[arg-type]
    assert chat.asked == [
        ("chat", 1),
        ("chat-stream", 1),
        ("chat-n2", 2),
        ("messages", 1),
        ("messages-stream", 1),
    ]
    return abilities


def test_one_slot_refuses_n2() -> None:
    """llama-server with one slot: every path answers, ``n: 2`` is refused."""

    def llama(request: StructuredRequest, path: str) -> StructuredResponse:
        if path == "chat-n2":
            raise RequestFailed(f"llama {path}", 400, "Field 'n': Value must be between 1 <= 1")
        return answer(path)

    abilities = probed(llama)
    assert abilities.lacking == {
        "structured chat-n2": "the probe got HTTP 400 where chat answered: Field 'n': Value "
        "must be between 1 <= 1"
    }
    assert abilities.offered == {
        ability(p) for p in ("chat", "chat-stream", "messages", "messages-stream")
    }


def test_no_messages_endpoint_and_n_ignored() -> None:
    """mlx_lm.server: no ``/v1/messages`` (404), one choice for ``n: 2``."""

    def mlx(request: StructuredRequest, path: str) -> StructuredResponse:
        if path.startswith("messages"):
            raise RequestFailed(f"mlx {path}", 404, "Not Found")
        return answer(path)

    abilities = probed(mlx)
    assert abilities.lacking == {
        "structured chat-n2": "n: 2 answered 1 choice: the server ignores n",
        "structured messages": "the probe got HTTP 404: Not Found",
        "structured messages-stream": "the probe got HTTP 404: Not Found",
    }
    assert abilities.unsupported(ability("chat"), "chat") is None


def test_a_server_that_refuses_everything_is_excused_nothing() -> None:
    """Every request answered 400: nothing is found lacking (there is no control that
    answered), so every request the check sends fails."""

    def broken(request: StructuredRequest, path: str) -> StructuredResponse:
        raise RequestFailed(f"x {path}", 400, "tool parser failed to load")

    abilities = probed(broken)
    assert abilities.lacking == {} and abilities.offered == frozenset()


def test_the_probe_sends_no_tools_and_one_token() -> None:
    assert PROBE.tools == () and PROBE.max_tokens == 1 and PROBE.temperature == 0.0
    assert PROBE.messages[-1] == ChatTurn("user", "Say hi.")


# -- an item's verdict from its evidence -------------------------------------------------------

ADD = ToolCall("add", {"a": 12, "b": 34})
TOOLS = (
    Tool(
        "add",
        {
            "type": "object",
            "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
            "required": ["a", "b"],
        },
    ),
)
REQUEST = StructuredRequest((ChatTurn("user", "add 12 and 34"),), 32, TOOLS)
FACTS = RequestFacts("add 12 and 34", 1, ["add"], None, None, 32)
CALLED = StructuredResponse(
    "chat",
    (StructuredChoice(None, None, (PlacedCall(ADD, "tool_calls"),), "tool_calls"),),
    Usage(40, 12),
)


def evidence(
    answers: list[tuple[str, StructuredResponse | NotAnswered]],
    conduct: Conduct,
    reference: StructuredResponse | NotAnswered | None = None,
) -> StructuredEvidence:
    out = StructuredEvidence(
        prompt_id="tu001",
        target="tiny@proxied",
        side="proxied",
        reference_target="tiny@llama",
        reference_side="llama",
        request=REQUEST,
        facts=FACTS,
        answers=[PathAnswer("tiny@proxied", p, a) for p, a in answers],  # type: ignore[arg-type]
        conduct=conduct,
    )
    if reference is not None:
        out.reference_chat = PathAnswer("tiny@llama", "chat", reference)
        out.prompt_ids = PromptIds(True, "same (40 ids)")
    return out


def verdict(e: StructuredEvidence) -> tuple[list[str], str]:
    kind = kind_named("structured-parity")
    assert kind is not None
    thresholds = StructuredParityThresholds()
    plan = ItemPlan("tu001", "prompt", "tu001", "proxied")
    outcome = item_outcome(kind, kind.judge(plan, e, thresholds), e, thresholds)
    return outcome.violations, outcome.text


def test_a_refused_tool_request_fails_the_item_with_the_servers_message() -> None:
    """The bug: a 400 on every tool request used to be recorded ``unsupported`` and pass."""
    refused = RequestFailure("tiny@proxied", "chat", "tools: the tool parser failed", 400)
    stream = RequestFailure("tiny@proxied", "chat-stream", "tools: the tool parser failed", 400)
    e = evidence(
        [
            ("chat", NotAnswered("error", "HTTP 400: tools: the tool parser failed")),
            ("chat-stream", NotAnswered("error", "HTTP 400: tools: the tool parser failed")),
        ],
        Conduct(failures=[refused, stream]),
        reference=CALLED,
    )
    violations, text = verdict(e)
    assert violations == [
        "tiny@proxied: chat failed: HTTP 400: tools: the tool parser failed",
        "tiny@proxied: chat-stream failed: HTTP 400: tools: the tool parser failed",
    ]
    assert "chat       : error: HTTP 400: tools: the tool parser failed" in text


def test_a_failed_reference_fails_the_item_too() -> None:
    failed = RequestFailure("tiny@llama (the reference)", "chat", "engine died", 500)
    e = evidence([("chat", CALLED)], Conduct(failures=[failed]), NotAnswered("error", "x"))
    violations, _ = verdict(e)
    assert violations == ["tiny@llama (the reference): chat failed: HTTP 500: engine died"]


def test_a_probed_lacking_path_is_unsupported_and_passes_saying_so() -> None:
    lacking = Abilities(
        lacking={"structured chat-n2": "n: 2 answered 1 choice: the server ignores n"}
    )
    unsupported = lacking.unsupported("structured chat-n2", "chat-n2")
    assert unsupported is not None
    skipped = not_exercised_before_requests(
        "messages", "messages: the messages API has no response_format"
    )
    e = evidence(
        [
            ("chat", CALLED),
            ("chat-n2", NotAnswered("unsupported", unsupported.evidence)),
            ("messages", NotAnswered("not exercised", skipped.reason)),
        ],
        Conduct(unsupported=[unsupported], not_exercised=[skipped]),
    )
    violations, text = verdict(e)
    assert violations == []
    assert (
        "chat-n2: unsupported (structured chat-n2 not offered: n: 2 answered 1 choice: the "
        "server ignores n)" in text
    )
    assert "messages: not exercised (messages: the messages API has no response_format)" in text
